"""Opening a file and one demux pass over its video stream (no decoding): the clear errors for unusable input,
the frame count, the durations the header declares and the demuxer reaches, and VideoInfo (``probe_video``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from videoqa.errors import Cancelled, VideoError

# The demux pass reads every packet of the file (a 20-minute 1080p clip: 30,000 packets, ~1 s; a 10-hour one
# half a minute), so it is a long step too: every TICK_PACKETS packets it calls its `tick`, which may stop it
# by raising (Stop, a time budget).
TICK_PACKETS = 64
Tick = Callable[[int], None]  # called with the packets read so far; raises to stop the pass


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



class _BackendFailed(Exception):
    """A valid video that this backend could not decode; the other backend may still manage."""



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


def cancel_tick(cancel: Callable[[], bool] | None) -> Tick | None:
    """A demux pass's `tick` that raises Cancelled when `cancel()` says so (None: no check)."""
    if cancel is None:
        return None

    def tick(packets: int) -> None:
        if cancel():
            raise Cancelled("reading the file's index")
    return tick


def _scan(container: av.container.InputContainer, stream: av.video.stream.VideoStream,
          tick: Tick | None = None) -> _Scan:
    """Demux (not decode) the video stream: count frame packets, collect their pts and the keyframes.
    `tick(packets read)` runs before the first packet and every TICK_PACKETS packets after; what it raises
    stops the pass."""
    pts: list[int | None] = []
    keys: list[int] = []
    end_pts = None
    try:
        for read, packet in enumerate(container.demux(stream)):
            if tick is not None and read % TICK_PACKETS == 0:
                tick(read)
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


def probe_video(path: str | Path, cancel: Callable[[], bool] | None = None) -> VideoInfo:
    """Metadata without decoding: one demux pass counts frame packets (headers can be wrong or absent).

    ``total_frames`` is the demuxed count (capped by the header count when that is smaller); the exact
    number of decodable frames is in ``sample_frames(...).info.total_frames``. ``cancel`` is asked every
    TICK_PACKETS packets: True stops the pass with Cancelled.
    """
    path = Path(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        scan = _scan(container, stream, cancel_tick(cancel))
        return _make_info(path, container, stream, scan, _estimate_count(stream, scan))



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


@dataclass
class _Probed:
    """What both backends start from: one demux pass's findings (no decoding)."""

    info: VideoInfo  # total_frames: the demuxed estimate (_estimate_count)
    scan: _Scan
    header_frames: int  # frames the stream header announces (0: none)
    tb: float  # the stream's time base in seconds (0.0: unknown)
    declared: float | None  # seconds of video the header declares (_declared_duration)
    read: float | None  # seconds of video the demuxer reached (_read_duration)
    gap: tuple[float, float] | None  # the longest stretch without frames, if abnormal (_longest_gap)


def _probe(path: Path, tick: Tick | None = None) -> _Probed:
    """One demux pass's findings; `tick`: see `_scan`."""
    with _open(path) as container:
        stream = _video_stream(container, path)
        scan = _scan(container, stream, tick)
        tb = float(stream.time_base) if stream.time_base else 0.0
        info = _make_info(path, container, stream, scan, _estimate_count(stream, scan))
        return _Probed(info, scan, stream.frames or 0, tb, _declared_duration(container, stream),
                       _read_duration(stream, scan), _longest_gap(tb, scan))


def _pts_name_frames(probed: _Probed) -> bool:
    """Whether the demuxed pts name every frame: one distinct pts per packet, as many packets as the header
    says (when it says), so frame k of a full decode is the one whose pts is ``probed.scan.pts[k]``."""
    scan = probed.scan
    return (bool(scan.pts) and len(scan.pts) == scan.packets and len(set(scan.pts)) == len(scan.pts)
            and probed.header_frames in (0, scan.packets))
