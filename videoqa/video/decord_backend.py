"""The decord backend: only on files PyAV has opened and counted, in a watchdog thread, and only when its
frame count matches the demuxed one (see the package docstring)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from videoqa.errors import VideoError
from videoqa.measure import call_with_timeout
from videoqa.video.clip import DECODE_EDGE, Clip, Pick, _loss, _warnings, decode_size, frame_indices
from videoqa.video.probe import _BackendFailed, _probe
from videoqa.video.pyav import _first_rotation, _sample_pyav

DECORD_TIMEOUT_S = 60.0  # a decord call longer than this is treated as hung


def _run_with_timeout(fn, timeout_s: float):
    """``fn()`` under `measure.call_with_timeout`; a hang or a decord error becomes _BackendFailed (so the
    caller falls back to PyAV instead of hanging or showing decord's traceback)."""
    try:
        return call_with_timeout(fn, timeout_s, name="decord-sample")
    except TimeoutError:
        raise _BackendFailed(f"decord did not finish within {timeout_s:.0f} s") from None
    except Exception as e:  # noqa: BLE001 - any decord failure is reported as the backend failing
        lines = str(e).strip().splitlines() or [type(e).__name__]
        # decord prefixes messages with "[hh:mm:ss] /source/file.cc:123: "; keep only the message
        message = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", lines[0])
        raise _BackendFailed(f"decord failed: {message}") from e


def _sample_decord(path: Path, num_frames: int, timeout_s: float = DECORD_TIMEOUT_S,
                   pick: Pick = frame_indices, max_edge: int | None = DECODE_EDGE) -> Clip:
    # PyAV vets the file first: decord never sees anything FFmpeg cannot open as a video.
    probed = _probe(path)
    accepted = {probed.scan.packets, probed.header_frames} - {0}
    info = probed.info
    if info.total_frames == 0:
        raise VideoError(path, "no video frames in the file (truncated or corrupt)")
    rotation = _first_rotation(path)
    if rotation is None:  # corrupt input is where decord crashes: never hand it over
        raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
    if rotation:  # decord turns some display matrices itself, garbles others (90 degrees), ignores Matroska's
        return _sample_pyav(path, num_frames, pick=pick, max_edge=max_edge)
    try:
        import decord
    except ImportError as e:
        raise _BackendFailed("decord is not installed") from e

    def work():
        width, height = decode_size(info.width, info.height, max_edge)
        scaled = {} if (width, height) == (info.width, info.height) else {"width": width, "height": height}
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=0, **scaled)
        count = len(reader)
        if count not in accepted:
            return count, None, None
        wanted = pick(count, num_frames)
        frames = reader.get_batch(wanted).asnumpy()
        times = reader.get_frame_timestamp(wanted)[:, 0]
        return count, frames, times

    count, frames, times = _run_with_timeout(work, timeout_s)
    if frames is None:
        raise _BackendFailed(f"decord counts {count} frames, the container holds {sorted(accepted)}")
    wanted = pick(count, num_frames)
    info.total_frames = count
    return Clip(
        frames=np.ascontiguousarray(frames, dtype=np.uint8),
        indices=wanted,
        timestamps=[float(t) for t in times],
        info=info,
        backend="decord",
        warnings=_warnings(_loss(probed.declared, probed.read, probed.gap, info.fps, count, None), count, wanted),
    )

