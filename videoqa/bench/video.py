"""The `video` suite: frame-sampling backends (PyAV, decord), sampling N frames vs decoding every frame.

`videoqa bench video [--videos FILE ...]`; without files it times the sample clips shipped with videoqa
and two larger clips it generates. Times are the best of `repeats` runs (wall clock, warm file cache).
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import av
import numpy as np

from ..errors import VideoQAError
from ..measure import best_of
from ..model import packaged_path
from ..video import DECORD_TIMEOUT_S, sample_frames
from ..video.decord_backend import _run_with_timeout


def _decode_all_pyav(path: Path) -> int:
    """Decode and convert every frame to RGB (what loading the whole video would cost), keeping none."""
    count = 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            frame.to_ndarray(format="rgb24")
            count += 1
    return count


def _decode_all_decord(path: Path) -> int:
    import decord

    def work():
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=0)
        for i in range(len(reader)):
            reader[i].asnumpy()  # sequential access: decord decodes forward without seeking
        return len(reader)

    return _run_with_timeout(work, DECORD_TIMEOUT_S)


def benchmark_backends(paths: list[str | Path], num_frames: int = 8, repeats: int = 3) -> list[dict]:
    """One row per (file, backend): sample time, decode-everything time, and whether the sampled
    indices match PyAV's. A backend that cannot read a file gets ``error`` set and no times."""
    rows = []
    for path in map(Path, paths):
        reference = None
        for backend in ("pyav", "decord"):
            row = {
                "file": path.name,
                "backend": backend,
                "frames": None,
                "size": "",
                "sample_ms": None,
                "decode_all_ms": None,
                "speedup": None,
                "same_indices": None,
                "error": "",
            }
            try:
                clip = sample_frames(path, num_frames, backend=backend)
                row["frames"] = clip.info.total_frames
                row["size"] = f"{clip.info.width}x{clip.info.height}"
                row["sample_ms"] = 1000 * best_of(repeats, partial(sample_frames, path, num_frames, backend))[0]
                decode_all = _decode_all_pyav if backend == "pyav" else _decode_all_decord
                row["decode_all_ms"] = 1000 * best_of(repeats, partial(decode_all, path))[0]
                row["speedup"] = row["decode_all_ms"] / row["sample_ms"]
                if backend == "pyav":
                    reference = clip.indices
                row["same_indices"] = reference is not None and clip.indices == reference
            except VideoQAError as e:
                row["error"] = str(e).removeprefix(f"{path}: ")
            except Exception as e:  # noqa: BLE001 - a benchmark reports a failing backend instead of stopping
                row["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
            rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """Plain-text table of ``benchmark_backends`` rows."""
    header = ["file", "backend", "frames", "size", "sample ms", "decode-all ms", "x faster", "same idx", "error"]
    lines = [header]
    for r in rows:

        def fmt(v, spec):
            return "-" if v is None else format(v, spec)

        lines.append(
            [
                r["file"],
                r["backend"],
                fmt(r["frames"], "d"),
                r["size"],
                fmt(r["sample_ms"], ".1f"),
                fmt(r["decode_all_ms"], ".1f"),
                fmt(r["speedup"], ".1f"),
                "-" if r["same_indices"] is None else ("yes" if r["same_indices"] else "NO"),
                r["error"][:70],
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_bench_clip(
    path: str | Path, n_frames: int, size: tuple[int, int], codec: str, gop: int, fps: int = 30
) -> Path:
    """A clip with moving, textured content (so the codec does real work). ``size`` is (width, height)."""
    path = Path(path)
    width, height = size
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 256, (height, width * 2, 3), dtype=np.uint8)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        for i in range(n_frames):
            shift = (4 * i) % width
            image = np.ascontiguousarray(texture[:, shift : shift + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def default_paths(folder: Path) -> list[Path]:
    """The sample clips shipped with videoqa and two generated 640x360 clips written into `folder`."""
    paths = sorted(packaged_path("clips").glob("*.mp4"))
    paths.append(write_bench_clip(folder / "gen_h264_gop30_600f.mp4", 600, (640, 360), "libx264", gop=30))
    paths.append(write_bench_clip(folder / "gen_vp9_gop60_300f.webm", 300, (640, 360), "libvpx-vp9", gop=60))
    return paths


def run_video(videos: list[str] | None = None, num_frames: int = 8, repeats: int = 3) -> str:
    """The suite's table: `videos`, or the default clips."""
    with tempfile.TemporaryDirectory(prefix="videoqa-bench-") as tmp:
        rows = benchmark_backends(videos or default_paths(Path(tmp)), num_frames=num_frames, repeats=repeats)
    return f"Frame sampling backends ({num_frames} frames vs decoding every frame):\n" + format_table(rows)
