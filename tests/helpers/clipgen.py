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
    rotation: int = 0,
    turn: int = 0,
) -> Path:
    """Write a clip of ``n_frames`` pattern frames. ``size`` is (width, height) as the pattern is drawn.

    ``pts_ms`` gives each frame's presentation time in milliseconds (variable frame rate); otherwise
    frames are evenly spaced at ``fps``. ``gop`` sets the keyframe interval; ``faststart`` puts the mp4
    index (moov) before the data, which is what makes a truncated file keep a too-large frame count.
    ``turn`` stores every frame turned counter-clockwise by that many degrees (a multiple of 90), and
    ``rotation`` writes a display matrix (counter-clockwise degrees, FFmpeg's convention) to the container:
    ``rotation=d, turn=-d`` is a clip that a player shows upright.
    """
    path = Path(path)
    _, container_fmt, codec, pix_fmt = FORMATS[fmt]
    k = turn // 90
    width, height = size if k % 2 == 0 else size[::-1]
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format=container_fmt, options=options) as out:
        if pts_ms is None:
            stream = out.add_stream(codec, rate=fps)
        else:
            stream = out.add_stream(codec, rate=1000 // max(1, min(np.diff(pts_ms), default=100)))
            stream.codec_context.time_base = Fraction(1, 1000)
            stream.time_base = Fraction(1, 1000)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if rotation:
            stream.set_display_rotation(rotation)
        if gop is not None:
            stream.codec_context.gop_size = gop
            if codec == "libx264":
                stream.options = {"keyint": str(gop), "min-keyint": str(gop), "scenecut": "0"}
        for i in range(n_frames):
            image = np.ascontiguousarray(np.rot90(pattern(i, *size), k))  # np.rot90 turns counter-clockwise
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_event_clip(path: str | Path) -> Path:
    """A 30-40 s synthetic scene (videoqa.synth.long) with a brief event that 8 uniform frames miss: the
    content sampler moves frames onto it, so its frame times differ from uniform ones."""
    from videoqa.synth import long, short

    seed = 0
    while True:
        scene = long.make_scene(np.random.default_rng([25, seed]), f"event{seed}")
        if 30 <= scene.duration_s <= 40 and not long.resolved(scene, 8):
            return short.write_mp4(long.render(scene), path, fps=scene.fps)
        seed += 1


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


def write_rotated(path: str | Path, degrees: int, fmt: str = "mp4-h264", n_frames: int = 12,
                  size: tuple[int, int] = (64, 48), gop: int | None = None) -> Path:
    """A clip stored turned by ``-degrees`` with a display matrix saying "turn it by ``degrees``" (both
    counter-clockwise), as a phone writes a portrait video: a player shows the pattern upright, ``size``."""
    return write_clip(path, n_frames=n_frames, size=size, fmt=fmt, gop=gop, rotation=degrees, turn=-degrees)


def _find_box(data: bytes, path: list[bytes], start: int = 0, end: int | None = None) -> int:
    """Offset of the box at ``path`` (e.g. moov/trak/tkhd), searching nested mp4 boxes."""
    end = len(data) if end is None else end
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == path[0]:
            return pos if len(path) == 1 else _find_box(data, path[1:], pos + 8, pos + size)
        pos += size
    raise ValueError(f"no {path[0]!r} box")


def write_phone_portrait(path: str | Path, n_frames: int = 12, size: tuple[int, int] = (48, 64)) -> Path:
    """A portrait clip as a phone stores it, made without FFmpeg's rotation helpers: landscape frames (the
    portrait pattern turned 90 degrees counter-clockwise) and the track header (tkhd) matrix of ISO/IEC
    14496-12 for "turn 90 degrees clockwise to display" — a=0, b=1, c=-1, d=0 (x' = -y + tx, y' = x) —
    the bytes a phone held upright writes. A player shows ``size`` (width, height) upright."""
    path = write_clip(path, n_frames=n_frames, size=size, fmt="mp4-h264", turn=90)
    data = bytearray(path.read_bytes())
    tkhd = _find_box(data, [b"moov", b"trak", b"tkhd"])
    version = data[tkhd + 8]
    matrix_at = tkhd + 8 + 4 + (32 if version == 1 else 20) + 16  # after times, ids, reserved, layer, volume
    one, w_one = 1 << 16, 1 << 30  # 16.16 and 2.30 fixed point
    stored_height = size[0]  # the stored frame is the portrait turned: its height is the portrait's width
    matrix = [0, one, 0, -one, 0, 0, stored_height * one, 0, w_one]
    data[matrix_at : matrix_at + 36] = struct.pack(">9i", *matrix)
    path.write_bytes(bytes(data))
    return path


def write_corrupt(path: str | Path, fmt: str = "mkv-h264", n_frames: int = 48, size: tuple[int, int] = (320, 240),
                  after_packets: int = 1, fraction: float | None = None, garbage: int = 2048) -> Path:
    """A clip with ``garbage`` bytes of seeded noise written over it, starting right after the data of its
    first ``after_packets`` frames, or at ``fraction`` of the file. Right after the first frame of an mkv
    (the middle of a small file) the demuxer cannot resync: one frame is readable while the header still
    declares the whole clip; further in, a Matroska demuxer skips to the next cluster and an mp4 decoder
    rejects the damaged frames."""
    path = write_clip(path, n_frames=n_frames, size=size, fmt=fmt)
    data = bytearray(path.read_bytes())
    if fraction is None:
        with av.open(str(path)) as container:
            packets = [p for p in container.demux(video=0) if p.size]
        start = packets[after_packets - 1].pos + packets[after_packets - 1].size
    else:
        start = int(len(data) * fraction)
    data[start : start + garbage] = np.random.default_rng(0).integers(0, 256, garbage, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def write_png(path: str | Path, size: tuple[int, int] = (64, 48), index: int = 5) -> Path:
    """One PNG image of the pattern, whatever ``path``'s suffix (e.g. a picture renamed ``.mp4``)."""
    path = Path(path)
    with av.open(str(path), "w", format="image2", options={"update": "1"}) as out:
        stream = out.add_stream("png", rate=1)
        stream.width, stream.height, stream.pix_fmt = *size, "rgb24"
        for packet in stream.encode(av.VideoFrame.from_ndarray(pattern(index, *size), format="rgb24")):
            out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
