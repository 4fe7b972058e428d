"""The `video` suite: which frame decoder, and which access pattern, gets N frames fastest without changing them.

`videoqa bench video [--videos FILE ...]`; without files it times the sample clips shipped with videoqa (short and
long) and two long clips it generates. For each file and frame count (8, 32, 64) it times every path that can
sample the frames: PyAV seeking to the keyframe before each frame (`pyav seek`), PyAV decoding in order
(`pyav sequential`), decord's `get_batch` (it seeks itself), and torchcodec where it loads. A path is correct when it
returns the same frame indices as PyAV's sequential decode (the reference: every frame decoded, in order) and
pixels within `PIXEL_TOLERANCE` of it. It also times the content sampler's scan (every frame decoded to a
thumbnail) against the uniform sampler. Times are the best of `repeats` runs (wall clock, warm file cache).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import av
import numpy as np

from ..errors import VideoQAError
from ..measure import best_of
from ..model import packaged_path
from ..video import sample_frames
from ..video.changes import scan_changes
from ..video.clip import Clip
from ..video.decord_backend import _sample_decord
from ..video.pyav import _sample_pyav

FRAME_COUNTS = (8, 32, 64)
PIXEL_TOLERANCE = 8  # grey levels: decord converts YUV to RGB with other rounding than PyAV's swscale call
DEFAULT_PATH = "pyav seek"  # what sample_frames(backend="auto") runs first (videoqa/video/sample.py)


def _torchcodec_sampler() -> tuple[Callable[[Path, int], Clip] | None, str]:
    """torchcodec's sampler, or None and why it cannot run here (it links the system's FFmpeg libraries)."""
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception as e:  # noqa: BLE001 - not installed, or its FFmpeg libraries are missing
        # torchcodec 0.17's wheel installs but loads only against FFmpeg's shared libraries, which this machine
        # lacks (PyAV bundles its own): it stays out of the table until it imports.
        return None, f"torchcodec not usable: {str(e).splitlines()[0][:120] or type(e).__name__}"

    def sample(path: Path, n: int) -> Clip:
        reference = _sample_pyav(path, n, allow_seek=False)  # same indices: only the decode is timed against it
        batch = VideoDecoder(str(path), seek_mode="exact").get_frames_at(reference.indices)
        frames = batch.data.permute(0, 2, 3, 1).numpy()
        return Clip(frames=frames, indices=reference.indices, timestamps=reference.timestamps,
                    info=reference.info, backend="torchcodec")

    return sample, "torchcodec loaded"


def paths_to_time() -> tuple[dict[str, Callable[[Path, int], Clip]], str]:
    """The sampling paths (name -> (file, frames) -> Clip) and a line saying whether torchcodec runs."""
    paths = {
        "pyav seek": partial(_sample_pyav, allow_seek=True),
        "pyav sequential": partial(_sample_pyav, allow_seek=False),
        "decord": _sample_decord,
    }
    torchcodec, note = _torchcodec_sampler()
    if torchcodec is not None:
        paths["torchcodec"] = torchcodec
    return paths, note


def _error(e: Exception, path: Path) -> str:
    if isinstance(e, VideoQAError):
        return str(e).removeprefix(f"{path}: ")
    return f"{type(e).__name__}: {e}".splitlines()[0]


def benchmark_paths(files: list[str | Path], counts=FRAME_COUNTS, repeats: int = 3) -> tuple[list[dict], str]:
    """One row per (file, frames, path): time, whether its frames equal the reference's, and the largest pixel
    difference. A path that cannot read a file gets `error` set and no time."""
    paths, note = paths_to_time()
    rows = []
    for path in map(Path, files):
        for n in counts:
            reference = _sample_pyav(path, n, allow_seek=False)
            for name, fn in paths.items():
                row = {"file": path.name, "n": n, "path": name, "frames": reference.info.total_frames,
                       "size": f"{reference.info.width}x{reference.info.height}", "ms": None, "same": None,
                       "diff": None, "error": ""}
                try:
                    seconds, clip = best_of(repeats, partial(fn, path, n))
                except Exception as e:  # noqa: BLE001 - a benchmark reports a failing path instead of stopping
                    row["error"] = _error(e, path)
                    rows.append(row)
                    continue
                row["ms"] = 1000 * seconds
                same_shape = clip.frames.shape == reference.frames.shape and clip.indices == reference.indices
                diff = (int(np.abs(clip.frames.astype(np.int16) - reference.frames.astype(np.int16)).max())
                        if same_shape else None)
                row["diff"] = diff
                row["same"] = same_shape and diff <= PIXEL_TOLERANCE
                rows.append(row)
    return rows, note


def fastest_correct(rows: list[dict]) -> Counter:
    """How many (file, frames) cases each path wins among the paths that returned the reference's frames."""
    wins: Counter = Counter()
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["same"]:
            cases.setdefault((r["file"], r["n"]), []).append(r)
    for group in cases.values():
        wins[min(group, key=lambda r: r["ms"])["path"]] += 1
    return wins


def total_ms(rows: list[dict]) -> dict[str, float]:
    """Each path's summed time over the (file, frames) cases where every path returned the reference's frames."""
    by_case: dict[tuple, list[dict]] = {}
    for r in rows:
        by_case.setdefault((r["file"], r["n"]), []).append(r)
    totals: dict[str, float] = {}
    for group in by_case.values():
        if all(r["same"] for r in group):
            for r in group:
                totals[r["path"]] = totals.get(r["path"], 0.0) + r["ms"]
    return totals


def benchmark_scan(files: list[str | Path], n: int = 8, repeats: int = 3) -> list[dict]:
    """Per file: the uniform sampler's time, the content sampler's, and the change scan's alone."""
    rows = []
    for path in map(Path, files):
        row = {"file": path.name, "uniform_ms": None, "content_ms": None, "scan_ms": None, "error": ""}
        try:
            row["uniform_ms"] = 1000 * best_of(repeats, partial(sample_frames, path, n))[0]
            row["content_ms"] = 1000 * best_of(repeats, partial(sample_frames, path, n, sampler="content"))[0]
            row["scan_ms"] = 1000 * best_of(repeats, partial(scan_changes, path))[0]
        except Exception as e:  # noqa: BLE001
            row["error"] = _error(e, path)
        rows.append(row)
    return rows


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(header: list[str], lines: list[list[str]]) -> str:
    """Plain-text columns."""
    lines = [header, *lines]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def format_paths(rows: list[dict]) -> str:
    return table(["file", "N", "path", "frames", "size", "ms", "same frames", "max px diff", "error"],
                 [[r["file"], str(r["n"]), r["path"], str(r["frames"]), r["size"], _fmt(r["ms"], ".1f"),
                   "-" if r["same"] is None else ("yes" if r["same"] else "NO"), _fmt(r["diff"], "d"),
                   r["error"][:60]] for r in rows])


def format_scan(rows: list[dict]) -> str:
    def ratio(r):
        return None if r["content_ms"] is None else r["content_ms"] / r["uniform_ms"]

    return table(["file", "uniform ms", "content ms", "scan ms", "content / uniform", "error"],
                 [[r["file"], _fmt(r["uniform_ms"], ".1f"), _fmt(r["content_ms"], ".1f"), _fmt(r["scan_ms"], ".1f"),
                   _fmt(ratio(r), ".1f"), r["error"][:60]] for r in rows])


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
    """The sample clips shipped with videoqa (short and long) and two long generated 640x360 clips: 60 s of H.264
    with a keyframe every 250 frames (x264's default) and 30 s of VP9 with one every 60."""
    paths = sorted(packaged_path("clips").glob("*.mp4")) + sorted(packaged_path("clips_long").glob("*.mp4"))
    paths.append(write_bench_clip(folder / "gen_h264_gop250_1800f.mp4", 1800, (640, 360), "libx264", gop=250))
    paths.append(write_bench_clip(folder / "gen_vp9_gop60_900f.webm", 900, (640, 360), "libvpx-vp9", gop=60))
    return paths


def run_video(videos: list[str] | None = None, repeats: int = 3, counts=FRAME_COUNTS) -> str:
    """The suite's tables and its verdict: `videos`, or the default clips."""
    with tempfile.TemporaryDirectory(prefix="videoqa-bench-") as tmp:
        files = videos or default_paths(Path(tmp))
        rows, note = benchmark_paths(files, counts, repeats)
        scan = benchmark_scan(files, repeats=repeats)
    wins = fastest_correct(rows)
    cases = len({(r["file"], r["n"]) for r in rows})
    totals = total_ms(rows)
    best = min(totals, key=totals.get) if totals else "-"
    wrong = sorted({r["path"] for r in rows if r["same"] is False})
    verdict = [f"Fastest correct path per case: {', '.join(f'{p} {w} of {cases}' for p, w in wins.most_common())}.",
               "Total ms over the cases every correct path read: "
               + ", ".join(f"{p} {t:.0f}" for p, t in sorted(totals.items(), key=lambda kv: kv[1])) + ".",
               f"Default (--backend auto): {DEFAULT_PATH}"
               + (" = the fastest correct path in total." if best == DEFAULT_PATH
                  else f"; the fastest correct path in total here is {best}."),
               "Paths whose frames differ from the reference somewhere: " + (", ".join(wrong) or "none") + ".",
               note + "."]
    return (f"Frame sampling paths ({'/'.join(map(str, counts))} frames; reference: PyAV decoding in order):\n"
            + format_paths(rows) + "\n\nContent sampler vs uniform (8 frames):\n" + format_scan(scan) + "\n\n"
            + "\n".join(verdict))
