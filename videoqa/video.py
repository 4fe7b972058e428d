"""Frame sampling: N frames spread uniformly over a whole clip, as Video-LLaVA was trained.

Indices are ``np.linspace(0, n - 1, N, dtype=int)`` — the original Video-LLaVA code — so the first and last
frames are always included and the float positions are floored (not rounded). Sampling is uniform in
frame index, not in time; on a variable-frame-rate clip the timestamps show the uneven spacing.

Two backends decode the frames:

* ``"pyav"`` (the default for ``"auto"``): one cheap demux pass (packets only, no decoding) counts the
  frames and finds the keyframes; then frames are decoded in order and only the sampled ones are
  converted to RGB and kept. Where the stream has several keyframes, the decoder seeks to the keyframe
  before each sampled frame instead of decoding the gap, and checks each kept frame by its pts. If the
  decoder yields a different number of frames than the container announced (broken header, truncated
  tail), the indices are recomputed from the real count and, if needed, a second pass fetches them.
  PyAV handles every container FFmpeg reads, GIF included, and never holds more than N frames in memory.
* ``"decord"``: seeks per frame. It is unmaintained, cannot read GIF or truncated files, fails on some
  narrow frames (48 px wide), and trusts header metadata, so it only runs on files PyAV has already
  opened and counted, in a watchdog thread so a hang becomes an error, and its frame count must match
  the demuxed count. Speed is on par with PyAV (`videoqa bench video`), so PyAV is default.

``backend="auto"`` tries PyAV, then decord when PyAV fails on a valid file (an unexpected FFmpeg error,
an unstable frame count). An explicit backend runs only that backend. Input problems (missing, empty,
not a video, no video stream, unknown codec, no decodable frame) raise ``VideoError`` at once and are
never handed to decord: both decode with FFmpeg, and corrupt input is where decord crashes.

``sampler="content"`` (videoqa/change_sampler.py) keeps every other uniform frame and moves the rest to where
the video changes, found by a first pass that decodes every frame into small grey thumbnails; a clip without
change gets exactly the uniform frames. ``Clip.sampler`` says which sampler chose the frames.

Clips shorter than N frames repeat frames so N are always returned (e.g. 3 frames, N=8 gives indices
``[0, 0, 0, 0, 1, 1, 1, 2]``); ``Clip.distinct_frames`` says how many different frames there are.

``Clip.warnings`` says what the file could not give, so an answer is never silently built on less than it
seems: frames the file declares but that could not be read (its header's video duration against what the
demuxer reached) or decoded (fewer frames than packets), the number of distinct frames left when that made
them fewer than asked, and single-frame inputs (a picture, a 1-frame GIF). A clip that is short but whole
is not warned about: repeating its frames is what the original sampler does.

Frames are returned as a player shows them: the container's display matrix (a phone's portrait clip is
stored landscape with "turn 90 degrees") is applied, in multiples of 90 degrees (other angles are rounded
to the nearest one; mirroring is not applied). ``Clip.rotation`` is the angle, counter-clockwise as FFmpeg
reports it. decord applies some matrices itself, garbles others and ignores Matroska's, so rotated clips
are always decoded by PyAV. ``VideoInfo.width``/``height`` stay the stored size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple

import av
import numpy as np

from videoqa.change_sampler import MAX_THUMBS, SCAN_FPS, THUMB_SIZE, ChangeScan, content_indices
from videoqa.errors import InputError, VideoError
from videoqa.measure import call_with_timeout

BACKENDS = ("auto", "pyav", "decord")
SAMPLERS = ("uniform", "content")  # content: videoqa/change_sampler.py
DECORD_TIMEOUT_S = 60.0  # a decord call longer than this is treated as hung


@dataclass
class VideoInfo:
    path: str
    duration_s: float
    fps: float  # average rate: (frames - 1) / (last pts - first pts) when pts are known
    total_frames: int
    width: int
    height: int
    codec: str
    container: str


@dataclass
class Clip:
    frames: np.ndarray  # (N, H, W, 3) uint8 RGB
    indices: list[int]  # frame number (0-based, presentation order) of each returned frame
    timestamps: list[float]  # seconds from the first frame, from each frame's pts when known
    info: VideoInfo
    backend: str  # "pyav" or "decord": the one that produced the frames
    rotation: int = 0  # degrees the frames were turned counter-clockwise for display (FFmpeg's convention)
    warnings: list[str] = field(default_factory=list)  # what the file could not give (see module docstring)
    sampler: str = "uniform"  # how the frames were chosen: "uniform" or "content" (see sample_frames)

    @property
    def distinct_frames(self) -> int:
        """How many different frames of the file the sampled frames are (repeats counted once)."""
        return len(set(self.indices))

    def to_dict(self) -> dict:
        """JSON-able summary (no pixel data)."""
        return {
            "indices": list(self.indices),
            "timestamps": [round(t, 6) for t in self.timestamps],
            "backend": self.backend,
            "sampler": self.sampler,
            "frame_shape": list(self.frames.shape),
            "distinct_frames": self.distinct_frames,
            "rotation": self.rotation,
            "warnings": list(self.warnings),
            "info": asdict(self.info),
        }


class _BackendFailed(Exception):
    """A valid video that this backend could not decode; the other backend may still manage."""


def frame_indices(total_frames: int, num_frames: int) -> list[int]:
    """Frame numbers to sample: ``np.linspace(0, total_frames - 1, num_frames, dtype=int)``.

    Floors like the original Video-LLaVA code. With fewer frames than ``num_frames`` some repeat.
    """
    if total_frames < 1:
        raise ValueError(f"total_frames must be >= 1, got {total_frames}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    return [int(i) for i in np.linspace(0, total_frames - 1, num_frames, dtype=int)]


# ---------------------------------------------------------------------------------------------------------
# Opening and scanning (PyAV, no decoding)


@dataclass
class _Scan:
    """What one demux pass over the video stream tells us."""

    pts: list[int]  # sorted presentation pts of every frame packet; empty when some pts are missing
    key_pts: list[int]  # sorted pts of keyframe packets
    packets: int  # packets carrying frame data
    end_pts: int | None  # pts just after the last frame


def _looks_like_text(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(4096)
    # no NUL bytes and (nearly) valid UTF-8; a cut multi-byte character at the end is tolerated
    return b"\x00" not in head and head.decode("utf-8", errors="replace").count("\ufffd") <= 1


def check_file(path: str | Path) -> None:
    """A VideoError unless `path` is a non-empty regular file: what can be said before decoding (or before a
    model is loaded to answer about it)."""
    path = Path(path)
    if not path.exists():
        raise VideoError(path, "file not found")
    if not path.is_file():
        raise VideoError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise VideoError(path, "empty file (0 bytes)")


def _open(path: Path) -> av.container.InputContainer:
    """Open ``path`` for reading, turning every failure into a one-line VideoError."""
    check_file(path)
    try:
        return av.open(str(path), "r")
    except PermissionError as e:
        raise VideoError(path, "permission denied") from e
    except av.FFmpegError as e:
        if _looks_like_text(path):
            raise VideoError(path, "not a video file (it contains text)") from e
        raise VideoError(path, f"not a video file or unsupported/corrupt container ({e.strerror})") from e


def _video_stream(container: av.container.InputContainer, path: Path) -> av.video.stream.VideoStream:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise VideoError(path, f"no video stream (streams: {', '.join(kinds)})")
    stream = container.streams.video[0]
    if stream.codec_context is None or not stream.codec_context.name:
        raise VideoError(path, "unsupported video codec (FFmpeg has no decoder for it)")
    return stream


def _scan(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> _Scan:
    """Demux (not decode) the video stream: count frame packets, collect their pts and the keyframes."""
    pts: list[int | None] = []
    keys: list[int] = []
    end_pts = None
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or packet.is_discard:
                continue
            pts.append(packet.pts)
            if packet.pts is not None:
                if packet.is_keyframe:
                    keys.append(packet.pts)
                end = packet.pts + (packet.duration or 0)
                end_pts = end if end_pts is None else max(end_pts, end)
    except av.FFmpegError:
        pass  # unreadable data from here on: what was read is what the file holds
    known = [p for p in pts if p is not None]
    full = len(known) == len(pts)
    return _Scan(pts=sorted(known) if full else [], key_pts=sorted(keys), packets=len(pts), end_pts=end_pts)


def _container_name(container: av.container.InputContainer, path: Path) -> str:
    # FFmpeg names demuxers by family ("mov,mp4,m4a,..."): report the member the file claims to be.
    names = container.format.name.split(",")
    suffix = path.suffix.lower().lstrip(".")
    aliases = {"mkv": "matroska"}
    return suffix if suffix in names or aliases.get(suffix) in names else names[0]


def _estimate_count(stream: av.video.stream.VideoStream, scan: _Scan) -> int:
    # Packets are what the file really holds; a header count below it is trusted (GIF demuxing yields
    # a trailing packet that decodes to nothing), one above it is not (truncated file, bad AVI header).
    header = stream.frames or 0
    return min(header, scan.packets) if header > 0 else scan.packets


def _read_duration(stream: av.video.stream.VideoStream, scan: _Scan) -> float | None:
    """Seconds of video the demuxer reached: first pts to the end of the last frame (None: pts unknown)."""
    tb = float(stream.time_base) if stream.time_base else 0.0
    if scan.pts and scan.end_pts is not None and tb and scan.end_pts > scan.pts[0]:
        return (scan.end_pts - scan.pts[0]) * tb
    return None


def _declared_duration(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> float | None:
    """Seconds of video the file's header declares, from the video stream's own duration only (a
    container's duration also covers its audio)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    # Matroska/WebM keep a per-track duration as a tag, e.g. "00:00:04.800000000"
    match = re.fullmatch(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)", stream.metadata.get("DURATION", ""))
    if match:
        return int(match[1]) * 3600 + int(match[2]) * 60 + float(match[3])
    if container.duration and len(container.streams) == 1:
        return container.duration / av.time_base
    return None


def _make_info(path: Path, container, stream, scan: _Scan, total: int) -> VideoInfo:
    tb = float(stream.time_base) if stream.time_base else 0.0
    fps = 0.0
    if len(scan.pts) > 1 and scan.pts[-1] > scan.pts[0] and tb:
        fps = (len(scan.pts) - 1) / ((scan.pts[-1] - scan.pts[0]) * tb)
    elif stream.average_rate:
        fps = float(stream.average_rate)
    elif stream.guessed_rate:
        fps = float(stream.guessed_rate)
    read = _read_duration(stream, scan)
    if read is not None:
        duration = read
    elif stream.duration and tb:
        duration = stream.duration * tb
    elif container.duration:
        duration = container.duration / av.time_base
    else:
        duration = total / fps if fps else 0.0
    ctx = stream.codec_context
    return VideoInfo(
        path=str(path),
        duration_s=float(duration),
        fps=float(fps),
        total_frames=int(total),
        width=int(ctx.width),
        height=int(ctx.height),
        codec=ctx.name,
        container=_container_name(container, path),
    )


def probe_video(path: str | Path) -> VideoInfo:
    """Metadata without decoding: one demux pass counts frame packets (headers can be wrong or absent).

    ``total_frames`` is the demuxed count (capped by the header count when that is smaller); the exact
    number of decodable frames is in ``sample_frames(...).info.total_frames``.
    """
    path = Path(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        scan = _scan(container, stream)
        return _make_info(path, container, stream, scan, _estimate_count(stream, scan))


# ---------------------------------------------------------------------------------------------------------
# PyAV backend


def _frames(container, stream):
    """Decoded frames in presentation order, skipping packets the decoder rejects (corrupt data)."""
    packets = container.demux(stream)
    while True:
        try:
            packet = next(packets)
        except StopIteration:
            return
        except av.FFmpegError:
            break  # unreadable from here: flush what the decoder holds and stop
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


def _upright(frame: av.VideoFrame) -> _Frame:
    """The frame in RGB as a player shows it. FFmpeg attaches the container's display matrix to every
    decoded frame; `frame.rotation` is its counter-clockwise angle, the direction np.rot90 turns."""
    quarters = round(frame.rotation / 90)
    rgb = frame.to_ndarray(format="rgb24")
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


def _decode_in_order(path: Path, wanted: set[int]) -> tuple[dict[int, _Frame], int]:
    """Decode every frame, keeping RGB copies of the ``wanted`` ones. Returns (kept, frames decoded)."""
    kept: dict[int, _Frame] = {}
    count = 0
    container, stream = _open_stream(path)
    with container:
        for frame in _frames(container, stream):
            if count in wanted:
                kept[count] = _upright(frame)
            count += 1
    return kept, count


def _decode_seeking(path: Path, scan: _Scan, wanted: list[int]) -> dict[int, _Frame] | None:
    """Fetch the wanted frames by pts, seeking to a keyframe whenever that skips decoding.

    Returns None when any wanted frame does not come out of the decoder with its demuxed pts (then the
    caller decodes in order instead).
    """
    kept: dict[int, _Frame] = {}
    container, stream = _open_stream(path)
    with container:
        frames = _frames(container, stream)
        position = scan.pts[0]  # pts the decoder will reach without seeking
        for index in sorted(set(wanted)):
            target = scan.pts[index]
            key = scan.key_pts[int(np.searchsorted(scan.key_pts, target, side="right")) - 1]
            if key > position:
                container.seek(key, stream=stream, backward=True, any_frame=False)
                frames = _frames(container, stream)
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
            kept[index] = _upright(frame)
    return kept


Pick = Callable[[int, int], list[int]]  # (frames in the file, frames wanted) -> frame numbers, ascending


def _sample_pyav(path: Path, num_frames: int, allow_seek: bool = True, pick: Pick = frame_indices) -> Clip:
    with _open(path) as container:
        stream = _video_stream(container, path)
        scan = _scan(container, stream)
        estimate = _estimate_count(stream, scan)
        info = _make_info(path, container, stream, scan, estimate)
        declared, read = _declared_duration(container, stream), _read_duration(stream, scan)
        tb = float(stream.time_base) if stream.time_base else 0.0
        # Seeking identifies frames by their demuxed pts, so only use it when that list is trustworthy.
        can_seek = (
            allow_seek
            and len(scan.key_pts) > 1
            and len(scan.pts) == scan.packets
            and len(set(scan.pts)) == len(scan.pts)
            and (stream.frames or 0) in (0, scan.packets)
        )
    if estimate == 0:
        raise VideoError(path, "no video frames in the file (truncated or corrupt)")

    kept = None
    total = estimate
    decoded = None  # frames the decoder gave, when every frame was decoded
    if can_seek:
        wanted = pick(total, num_frames)
        kept = _decode_seeking(path, scan, wanted)
    if kept is None:
        wanted = pick(estimate, num_frames)
        kept, total = _decode_in_order(path, set(wanted))
        decoded = total
        if total == 0:
            # Both backends decode with FFmpeg: if it yields nothing, decord cannot do better (and
            # corrupt input is where decord crashes), so this is final.
            raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
        if total != estimate:
            wanted = pick(total, num_frames)
            if not set(wanted) <= kept.keys():
                kept, recount = _decode_in_order(path, set(wanted))
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
    loss = _loss(declared, read, _longest_gap(tb, scan), info.fps, estimate, decoded)
    return Clip(frames=frames, indices=wanted, timestamps=timestamps, info=info, backend="pyav",
                rotation=kept[wanted[0]].rotation, warnings=_warnings(loss, total, wanted))


def _longest_gap(tb: float, scan: _Scan) -> tuple[float, float] | None:
    """(where, how long) in seconds of a stretch without frames far longer than the clip's usual frame
    gap — what a demuxer leaves when it skips damaged data and resyncs — or None."""
    if len(scan.pts) < 3 or not tb:
        return None
    gaps = np.diff(scan.pts) * tb
    i = int(np.argmax(gaps))
    # variable frame rate spaces frames unevenly, but not by 20 times the median and a whole second
    if gaps[i] > max(1.0, 20 * float(np.median(gaps))):
        return (scan.pts[i] - scan.pts[0]) * tb, float(gaps[i])
    return None


def _loss(declared: float | None, read: float | None, gap: tuple[float, float] | None, fps: float,
          packets: int, decoded: int | None) -> str | None:
    """Why frames of the file are missing from what was decoded, or None. `decoded` is None when not every
    frame was decoded (the seeking path)."""
    # tolerance: headers round, and a last frame's duration may be missing
    if declared and read is not None and declared - read > max(0.1 * declared, 2 / fps if fps else 0.0):
        return (f"the file declares {declared:.1f} s of video but only {read:.1f} s could be read "
                "(truncated or corrupt data)")
    if gap is not None:
        return f"no frames for {gap[1]:.1f} s after {gap[0]:.1f} s (corrupt data skipped)"
    if decoded is not None and decoded < packets:
        return f"{packets - decoded} of {packets} frames could not be decoded (corrupt data)"
    return None


def _warnings(loss: str | None, frames_in_file: int, wanted: list[int]) -> list[str]:
    """The clip's warnings: frames lost, with the distinct frames left when that made them fewer than asked;
    or a single image. A short clip read whole is no warning."""
    distinct, asked = len(set(wanted)), len(wanted)
    if loss is not None:
        if distinct < asked:
            return [loss, f"only {distinct} distinct frame{'s' if distinct > 1 else ''} for the {asked} asked: "
                          "frames repeat"]
        return [loss]
    if frames_in_file == 1:
        what = "a single image, not a video"
        return [what if asked == 1 else f"{what}: all {asked} frames are the same picture"]
    return []


# ---------------------------------------------------------------------------------------------------------
# decord backend


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
                   pick: Pick = frame_indices) -> Clip:
    # PyAV vets the file first: decord never sees anything FFmpeg cannot open as a video.
    with _open(path) as container:
        stream = _video_stream(container, path)
        scan = _scan(container, stream)
        accepted = {scan.packets, stream.frames or 0} - {0}
        info = _make_info(path, container, stream, scan, _estimate_count(stream, scan))
        declared, read = _declared_duration(container, stream), _read_duration(stream, scan)
        gap = _longest_gap(float(stream.time_base or 0), scan)
    if info.total_frames == 0:
        raise VideoError(path, "no video frames in the file (truncated or corrupt)")
    rotation = _first_rotation(path)
    if rotation is None:  # corrupt input is where decord crashes: never hand it over
        raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
    if rotation:  # decord turns some display matrices itself, garbles others (90 degrees), ignores Matroska's
        return _sample_pyav(path, num_frames, pick=pick)
    try:
        import decord
    except ImportError as e:
        raise _BackendFailed("decord is not installed") from e

    def work():
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=0)
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
        warnings=_warnings(_loss(declared, read, gap, info.fps, count, None), count, wanted),
    )


# ---------------------------------------------------------------------------------------------------------
# Public entry point


def _first_rotation(path: Path) -> int | None:
    """The display rotation of the first decodable frame (None: FFmpeg decodes no frame at all)."""
    container, stream = _open_stream(path)
    with container:
        frame = next(_frames(container, stream), None)
        return None if frame is None else frame.rotation


def _run_backend(name: str, path: Path, num_frames: int, pick: Pick = frame_indices) -> Clip:
    """One backend, no fallback. Raises VideoError (bad input) or _BackendFailed (could not decode)."""
    try:
        if name == "pyav":
            return _sample_pyav(path, num_frames, pick=pick)
        return _sample_decord(path, num_frames, pick=pick)
    except (VideoError, _BackendFailed):
        raise
    except av.FFmpegError as e:  # anything FFmpeg raised that the paths above did not expect
        raise _BackendFailed(f"{name} decoding failed ({e.strerror or type(e).__name__})") from e
    except (ValueError, RuntimeError, OSError) as e:  # e.g. a frame format PyAV cannot convert
        raise _BackendFailed(f"{name} decoding failed ({type(e).__name__}: {e})") from e


def scan_changes(path: str | Path, thumbs_per_s: float = SCAN_FPS, size: int = THUMB_SIZE,
                 max_thumbs: int = MAX_THUMBS) -> ChangeScan:
    """Decode every frame with PyAV and keep a ``size`` x ``size`` grey thumbnail of every step-th one, the
    step chosen for about ``thumbs_per_s`` thumbnails a second of video and doubled whenever more than
    ``max_thumbs`` would be held. Raises VideoError for an unusable file."""
    path = Path(path)
    container, stream = _open_stream(path)
    with container:
        rate = float(stream.average_rate or stream.guessed_rate or 0) or thumbs_per_s
        step = max(1, round(rate / thumbs_per_s))
        thumbs, indices, count = [], [], 0
        try:
            for frame in _frames(container, stream):
                if count % step == 0:
                    thumbs.append(frame.to_ndarray(width=size, height=size, format="gray"))
                    indices.append(count)
                    if len(thumbs) > max_thumbs:
                        thumbs, indices, step = thumbs[::2], indices[::2], 2 * step
                count += 1
        except (av.FFmpegError, ValueError) as e:  # e.g. a frame format swscale cannot convert
            raise VideoError(path, f"could not scan the frames for changes ({e})") from e
    if count == 0:
        raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
    return ChangeScan(np.asarray(indices), np.stack(thumbs).astype(np.float32), count, rate / step)


def _content_pick(changes: ChangeScan, total: int, num_frames: int) -> list[int]:
    """The content sampler's frames; uniform ones when the backend counts other frames than the scan did."""
    uniform = frame_indices(total, num_frames)
    return content_indices(changes, uniform) if total == changes.n_frames else uniform


def sample_frames(path: str | Path, num_frames: int = 8, backend: str = "auto", sampler: str = "uniform") -> Clip:
    """Sample ``num_frames`` frames over the whole clip (see module docstring).

    ``backend``: "auto" (PyAV, then decord if PyAV cannot decode the file), "pyav" or "decord" (that one
    only). ``sampler``: "uniform" (Video-LLaVA's evenly spaced frames) or "content" (half of them uniform,
    the rest moved to where the video changes, from a low-resolution pass over every frame; see
    videoqa/change_sampler.py). ``Clip.sampler`` says which chose the frames: a content request on a file
    whose decoders disagree on the frame count falls back to uniform, with a warning. Raises VideoError for
    any unusable file, InputError for bad arguments.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown video backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if sampler not in SAMPLERS:
        raise InputError(f"unknown frame sampler {sampler!r} (choose from {', '.join(SAMPLERS)})")
    if not isinstance(num_frames, int) or num_frames < 1:
        raise InputError(f"num_frames must be a positive integer, got {num_frames!r}")
    path = Path(path)
    pick: Pick = frame_indices
    if sampler == "content":
        changes = scan_changes(path)
        pick = partial(_content_pick, changes)
    order = ["pyav", "decord"] if backend == "auto" else [backend]
    failures = []
    for name in order:
        try:
            clip = _run_backend(name, path, num_frames, pick)
        except _BackendFailed as e:
            failures.append(str(e)[:160])
            continue
        if sampler == "content":
            if clip.info.total_frames == changes.n_frames:
                clip.sampler = "content"
            else:
                clip.warnings.append(f"frames chosen uniformly: the change scan decoded {changes.n_frames} frames, "
                                     f"{clip.backend} {clip.info.total_frames}")
        return clip
    raise VideoError(path, "; ".join(failures))
