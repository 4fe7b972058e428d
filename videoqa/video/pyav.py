"""The PyAV backend: decode in order, or seek to the keyframe before each wanted frame; frames turned upright
as the display matrix says (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import av
import numpy as np

from videoqa.errors import Cancelled, VideoError
from videoqa.video.clip import DECODE_EDGE, Clip, Pick, _loss, _warnings, decode_size, frame_indices
from videoqa.video.probe import (
    _BackendFailed,
    _open,
    _probe,
    _Probed,
    _pts_name_frames,
    _Scan,
    _video_stream,
    cancel_tick,
)


def _frames(container, stream, cancel: Callable[[], bool] | None = None,
            before: Callable[[av.Packet], None] | None = None):
    """Decoded frames in presentation order, skipping packets the decoder rejects (corrupt data). `cancel`
    is asked before each packet: True stops decoding (raises Cancelled); `before(packet)` runs just before a
    packet is sent to the decoder."""
    packets = container.demux(stream)
    while True:
        if cancel is not None and cancel():
            raise Cancelled("decoding frames")
        try:
            packet = next(packets)
        except StopIteration:
            return
        except av.FFmpegError:
            break  # unreadable from here: flush what the decoder holds and stop
        if before is not None:
            before(packet)
        try:
            yield from packet.decode()
        except av.FFmpegError:
            continue
    try:
        yield from stream.codec_context.decode(None)
    except av.FFmpegError:
        pass


class _Frame(NamedTuple):
    rgb: np.ndarray  # (H, W, 3) uint8, turned as the display matrix says
    pts: int | None
    rotation: int  # counter-clockwise degrees it was turned: -180, -90, 0, 90 or 180


def _upright(frame: av.VideoFrame, max_edge: int | None = DECODE_EDGE) -> _Frame:
    """The frame in RGB as a player shows it, its shorter side at most `max_edge` (clip.DECODE_EDGE). FFmpeg
    attaches the container's display matrix to every decoded frame; `frame.rotation` is its counter-clockwise
    angle, the direction np.rot90 turns."""
    quarters = round(frame.rotation / 90)
    width, height = decode_size(frame.width, frame.height, max_edge)
    if (width, height) == (frame.width, frame.height):
        rgb = frame.to_ndarray(format="rgb24")
    else:  # scaled by swscale straight from the decoder's planes: no full-size RGB copy is ever made
        rgb = frame.to_ndarray(format="rgb24", width=width, height=height, interpolation="AREA")
    return _Frame(np.rot90(rgb, quarters) if quarters % 4 else rgb, frame.pts, quarters * 90)


def _open_stream(path: Path):
    container = _open(path)
    try:
        stream = _video_stream(container, path)
    except VideoError:
        container.close()
        raise
    stream.thread_type = "AUTO"  # slice + frame threads: FFmpeg picks what the codec supports
    return container, stream


def _decode_in_order(path: Path, wanted: set[int], cancel: Callable[[], bool] | None = None,
                     max_edge: int | None = DECODE_EDGE) -> tuple[dict[int, _Frame], int]:
    """Decode every frame, keeping RGB copies of the ``wanted`` ones. Returns (kept, frames decoded)."""
    kept: dict[int, _Frame] = {}
    count = 0
    container, stream = _open_stream(path)
    with container:
        for frame in _frames(container, stream, cancel):
            if count in wanted:
                kept[count] = _upright(frame, max_edge)
            count += 1
    return kept, count


def _decode_seeking(path: Path, scan: _Scan, wanted: list[int], cancel: Callable[[], bool] | None = None,
                    max_edge: int | None = DECODE_EDGE) -> dict[int, _Frame] | None:
    """Fetch the wanted frames by pts, seeking to a keyframe whenever that skips decoding.

    Returns None when any wanted frame does not come out of the decoder with its demuxed pts (then the
    caller decodes in order instead).
    """
    kept: dict[int, _Frame] = {}
    container, stream = _open_stream(path)
    with container:
        frames = _frames(container, stream, cancel)
        position = scan.pts[0]  # pts the decoder will reach without seeking
        for index in sorted(set(wanted)):
            target = scan.pts[index]
            key = scan.key_pts[int(np.searchsorted(scan.key_pts, target, side="right")) - 1]
            if key > position:
                container.seek(key, stream=stream, backward=True, any_frame=False)
                frames = _frames(container, stream, cancel)
            for frame in frames:
                if frame.pts is None:
                    return None
                position = frame.pts
                if frame.pts >= target:
                    break
            else:
                return None
            if position != target:
                return None
            kept[index] = _upright(frame, max_edge)
    return kept


def _sample_pyav(path: Path, num_frames: int, allow_seek: bool = True, pick: Pick = frame_indices,
                 cancel: Callable[[], bool] | None = None, max_edge: int | None = DECODE_EDGE,
                 probed: _Probed | None = None) -> Clip:
    """`probed`: the file's demux pass when the caller has made it (else made here, asking `cancel`)."""
    probed = probed or _probe(path, cancel_tick(cancel))
    scan, info, tb = probed.scan, replace(probed.info), probed.tb  # info is the clip's: a copy to fill in
    estimate = info.total_frames
    # Seeking identifies frames by their demuxed pts, so only use it when that list is trustworthy.
    can_seek = allow_seek and len(scan.key_pts) > 1 and _pts_name_frames(probed)
    if estimate == 0:
        raise VideoError(path, "no video frames in the file (truncated or corrupt)")

    kept = None
    total = estimate
    decoded = None  # frames the decoder gave, when every frame was decoded
    if can_seek:
        wanted = pick(total, num_frames)
        kept = _decode_seeking(path, scan, wanted, cancel, max_edge)
    if kept is None:
        wanted = pick(estimate, num_frames)
        kept, total = _decode_in_order(path, set(wanted), cancel, max_edge)
        decoded = total
        if total == 0:
            # Both backends decode with FFmpeg: if it yields nothing, decord cannot do better (and
            # corrupt input is where decord crashes), so this is final.
            raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
        if total != estimate:
            wanted = pick(total, num_frames)
            if not set(wanted) <= kept.keys():
                kept, recount = _decode_in_order(path, set(wanted), cancel, max_edge)
                if recount != total or not set(wanted) <= kept.keys():
                    raise _BackendFailed(f"decoder yields {total} frames, then {recount}: unstable stream")

    info.total_frames = total
    first = scan.pts[0] if scan.pts else (kept[0].pts if 0 in kept else None)
    timestamps = []
    for i in wanted:
        pts = kept[i].pts
        if pts is not None and first is not None and tb:
            timestamps.append((pts - first) * tb)
        else:
            timestamps.append(i / info.fps if info.fps else 0.0)
    frames = np.stack([kept[i].rgb for i in wanted])
    loss = _loss(probed.declared, probed.read, probed.gap, info.fps, estimate, decoded)
    return Clip(frames=frames, indices=wanted, timestamps=timestamps, info=info, backend="pyav",
                rotation=kept[wanted[0]].rotation, warnings=_warnings(loss, total, wanted))



def _first_rotation(path: Path) -> int | None:
    """The display rotation of the first decodable frame (None: FFmpeg decodes no frame at all)."""
    container, stream = _open_stream(path)
    with container:
        frame = next(_frames(container, stream), None)
        return None if frame is None else frame.rotation

