"""Test clips whose frames carry their own index, plus crafted bad files.

Each frame shows a red strip on top (to catch RGB/BGR swaps) and, below it, ``NBITS`` vertical bars:
bar ``j`` is bright when bit ``j`` of the frame index is set. Bars are wide and either near-black or
near-white, so the index survives lossy codecs, chroma subsampling, GIF palettes and odd sizes, and
``read_index`` recovers it from a decoded RGB frame.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

NBITS = 10  # indices up to 1023
BRIGHT, DARK = 235, 20

# name -> (file suffix, container format, encoder, pixel format). Every encoder here exists in the
# PyAV wheel's FFmpeg (checked with av.codecs_available); GIF needs a palette format.
FORMATS: dict[str, tuple[str, str, str, str]] = {
    "mp4-h264": (".mp4", "mp4", "libx264", "yuv420p"),
    "mp4-mpeg4": (".mp4", "mp4", "mpeg4", "yuv420p"),
    "avi-mpeg4": (".avi", "avi", "mpeg4", "yuv420p"),
    "mkv-h264": (".mkv", "matroska", "libx264", "yuv420p"),
    "webm-vp8": (".webm", "webm", "libvpx", "yuv420p"),
    "webm-vp9": (".webm", "webm", "libvpx-vp9", "yuv420p"),
    "mov-h264": (".mov", "mov", "libx264", "yuv420p"),
    "gif": (".gif", "gif", "gif", "rgb8"),
}


def pattern(index: int, width: int, height: int) -> np.ndarray:
    """The RGB frame (H, W, 3) uint8 that encodes ``index``."""
    if not 0 <= index < 2**NBITS:
        raise ValueError(f"index {index} does not fit in {NBITS} bits")
    img = np.full((height, width, 3), DARK, np.uint8)
    top = height // 4
    img[:top] = (220, 20, 20)
    for j in range(NBITS):
        if (index >> j) & 1:
            x0, x1 = j * width // NBITS, (j + 1) * width // NBITS
            img[top:, x0:x1] = BRIGHT
    return img


def read_index(frame: np.ndarray) -> int:
    """Decode the index from a (possibly lossy) RGB frame made by ``pattern``."""
    height, width = frame.shape[:2]
    top = height // 4
    body = frame[top + (height - top) // 4 : height - (height - top) // 4].astype(np.float32).mean(axis=2)
    index = 0
    for j in range(NBITS):
        x0, x1 = j * width // NBITS, (j + 1) * width // NBITS
        pad = (x1 - x0) // 4
        if body[:, x0 + pad : x1 - pad].mean() > (BRIGHT + DARK) / 2:
            index |= 1 << j
    return index


def is_rgb(frame: np.ndarray) -> bool:
    """True when the top strip reads as red (R high, B low), i.e. channels are in RGB order."""
    strip = frame[: max(1, frame.shape[0] // 8)].reshape(-1, 3).astype(np.float32).mean(axis=0)
    return bool(strip[0] > 150 and strip[2] < 80)


def write_clip(
    path: str | Path,
    n_frames: int = 30,
    size: tuple[int, int] = (64, 48),
    fps: int = 10,
    fmt: str = "mp4-h264",
    gop: int | None = None,
    pts_ms: list[int] | None = None,
    faststart: bool = False,
) -> Path:
    """Write a clip of ``n_frames`` pattern frames. ``size`` is (width, height).

    ``pts_ms`` gives each frame's presentation time in milliseconds (variable frame rate); otherwise
    frames are evenly spaced at ``fps``. ``gop`` sets the keyframe interval; ``faststart`` puts the mp4
    index (moov) before the data, which is what makes a truncated file keep a too-large frame count.
    """
    path = Path(path)
    _, container_fmt, codec, pix_fmt = FORMATS[fmt]
    width, height = size
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format=container_fmt, options=options) as out:
        if pts_ms is None:
            stream = out.add_stream(codec, rate=fps)
        else:
            stream = out.add_stream(codec, rate=1000 // max(1, min(np.diff(pts_ms), default=100)))
            stream.codec_context.time_base = Fraction(1, 1000)
            stream.time_base = Fraction(1, 1000)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if gop is not None:
            stream.codec_context.gop_size = gop
            if codec == "libx264":
                stream.options = {"keyint": str(gop), "min-keyint": str(gop), "scenecut": "0"}
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(pattern(i, width, height), format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_empty(path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(b"")
    return path


def write_text(path: str | Path) -> Path:
    """A text file, typically named ``.mp4``."""
    path = Path(path)
    path.write_text("this is not a video, just some text pretending to be one\n" * 20)
    return path


def write_audio_only(path: str | Path, seconds: float = 1.0) -> Path:
    """An mp4 (m4a) holding one AAC audio stream and no video."""
    path = Path(path)
    rate = 16000
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("aac", rate=rate)
        stream.layout = "mono"
        t = np.arange(int(rate * seconds)) / rate
        samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _mdat_offset(data: bytes) -> int:
    """Byte offset where the payload of the top-level mp4 ``mdat`` box starts."""
    pos = 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[pos + 8 : pos + 16])[0], 16
        if kind == b"mdat":
            return pos + header
        pos += size
    raise ValueError("no mdat box")


def write_truncated(path: str | Path, keep_fraction: float | None = None, n_frames: int = 40) -> Path:
    """A faststart mp4 cut short. Its header still lists every frame.

    ``keep_fraction=None`` cuts right after the start of the media data, so no frame can be decoded;
    otherwise that fraction of the media data is kept and the first frames still decode.
    """
    path = Path(path)
    write_clip(path, n_frames=n_frames, size=(64, 48), fmt="mp4-h264", faststart=True)
    data = path.read_bytes()
    start = _mdat_offset(data)
    cut = start + 16 if keep_fraction is None else start + int((len(data) - start) * keep_fraction)
    path.write_bytes(data[:cut])
    return path


def write_headless(path: str | Path) -> Path:
    """An ordinary mp4 (index at the end) cut in half: the container header is gone, so it cannot open."""
    path = Path(path)
    write_clip(path, n_frames=20, size=(64, 48), fmt="mp4-h264")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _patch_all(data: bytearray, marker: bytes, offset: int, value: bytes) -> int:
    """Overwrite ``value`` at ``offset`` bytes after the payload start of each chunk named ``marker``."""
    count, pos = 0, data.find(marker)
    while pos >= 0:
        start = pos + 8  # 4-byte id + 4-byte size
        data[start + offset : start + offset + len(value)] = value
        count += 1
        pos = data.find(marker, pos + 1)
    return count


def write_avi_wrong_count(path: str | Path, n_frames: int = 20, claimed: int = 500) -> Path:
    """An AVI whose headers claim ``claimed`` frames while it holds ``n_frames``."""
    path = Path(path)
    write_clip(path, n_frames=n_frames, size=(64, 48), fmt="avi-mpeg4")
    data = bytearray(path.read_bytes())
    value = struct.pack("<I", claimed)
    # avih.dwTotalFrames is the 5th DWORD; strh.dwLength the 9th (after fccType, fccHandler, flags,
    # priority+language, initial frames, scale, rate, start).
    assert _patch_all(data, b"avih", 16, value) == 1
    pos = data.find(b"strh")
    data[pos + 8 + 32 : pos + 8 + 36] = value
    path.write_bytes(bytes(data))
    return path


def write_unknown_codec(path: str | Path) -> Path:
    """An AVI whose video FourCC names no codec FFmpeg knows (the stream is there, no decoder is)."""
    path = Path(path)
    write_clip(path, n_frames=5, size=(64, 48), fmt="avi-mpeg4")
    data = path.read_bytes()
    # mpeg4 in AVI is tagged FMP4 in both strh.fccHandler and strf.biCompression.
    path.write_bytes(data.replace(b"FMP4", b"QQZZ"))
    return path
