"""Files the chat shows besides answers: a playable preview of any accepted clip, example thumbnails
with their suggested questions, and the sweep of old files."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".gif")
# (container, codec) pairs every current browser plays in a <video>; anything else gets an H.264 copy
PLAYABLE = {("mp4", "h264"), ("webm", "vp8"), ("webm", "vp9"), ("webm", "av1")}
PREVIEW_MAX_S = 120  # a preview longer than this is cut (the answer still uses the whole clip)
PREVIEW_MAX_SIDE = 640
DEFAULT_QUESTION = "What is happening in this video?"


@dataclass(frozen=True)
class Example:
    clip: Path
    question: str
    poster: Path  # a frame from the middle of the clip


def list_samples(samples_dir: str | Path | None) -> list[Path]:
    """Example clips in `samples_dir` (sorted); empty when the folder does not exist."""
    if samples_dir is None or not Path(samples_dir).is_dir():
        return []
    return sorted(p for p in Path(samples_dir).iterdir() if p.suffix.lower() in VIDEO_EXTENSIONS)


def list_examples(samples_dir: str | Path | None, work_dir: Path) -> list[Example]:
    """One example per suggested question in `samples_dir/questions.json` (a clip without any gets a
    generic question), each with a poster frame written under `work_dir`."""
    clips = list_samples(samples_dir)
    questions: dict[str, list[str]] = {}
    qfile = Path(samples_dir or ".") / "questions.json"
    if clips and qfile.is_file():
        for item in json.loads(qfile.read_text()):
            questions.setdefault(item["video"], []).append(item["question"])
    examples = []
    for clip in clips:
        poster = write_poster(clip, work_dir)
        if poster is None:
            continue  # an unreadable sample is not offered
        examples += [Example(clip, q, poster) for q in questions.get(clip.name) or [DEFAULT_QUESTION]]
    return examples


def write_poster(clip: Path, work_dir: Path, height: int = 96) -> Path | None:
    from videoqa.errors import VideoQAError
    from videoqa.video import sample_frames

    try:
        frame = sample_frames(clip, 3).frames[1]
    except VideoQAError:
        return None
    img = Image.fromarray(frame)
    img = img.resize((max(1, round(img.width * height / img.height)), height), Image.Resampling.BICUBIC)
    out = work_dir / "posters" / f"{_key(clip)}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out


def preview(path: str | Path, container: str, codec: str, work_dir: Path) -> Path | None:
    """A file the browser can play showing the clip: the clip itself when it already plays, otherwise an
    H.264 mp4 copy (made once per file version). None when no frame could be read."""
    path = Path(path)
    if (container, codec) in PLAYABLE:
        return path
    out = work_dir / "previews" / f"{_key(path)}.mp4"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".part.mp4")
        try:
            made = transcode(path, partial)
        except (av.FFmpegError, OSError, IndexError):  # no video stream, or unreadable: no preview
            made = False
        if not made:
            partial.unlink(missing_ok=True)
            return None
        partial.replace(out)
    return out


def transcode(src: Path, dst: Path, max_s: float = PREVIEW_MAX_S, max_side: int = PREVIEW_MAX_SIDE) -> bool:
    """Re-encode the first `max_s` seconds of `src` as H.264 (yuv420p, even size, fast start); False when
    nothing could be decoded."""
    n = 0
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options={"movflags": "faststart"}) as out:
        vin = inp.streams.video[0]
        rate = vin.average_rate or vin.guessed_rate or Fraction(10)
        rate = Fraction(rate).limit_denominator(1001) if 1 <= rate <= 60 else Fraction(10)
        w, h = _fit(vin.codec_context.width, vin.codec_context.height, max_side)
        vout = out.add_stream("libx264", rate=rate, options={"preset": "veryfast", "crf": "26"})
        vout.width, vout.height, vout.pix_fmt = w, h, "yuv420p"
        try:
            for frame in inp.decode(vin):
                if n >= max_s * rate:
                    break
                rgb = frame.to_ndarray(format="rgb24")
                new = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
                new = new.reformat(width=w, height=h, format="yuv420p")
                new.pts, new.time_base = n, 1 / rate
                for packet in vout.encode(new):
                    out.mux(packet)
                n += 1
        except av.FFmpegError:
            pass  # keep what decoded before the damage
        for packet in vout.encode():
            out.mux(packet)
    return n > 0


def _fit(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height, 1))
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


def _key(path: Path) -> str:
    st = path.stat()
    text = f"{path.resolve()}|{st.st_mtime_ns}|{st.st_size}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def sweep_cache(cache_dir: str | Path, max_age_s: float, keep: frozenset[str] = frozenset()) -> int:
    """Delete files older than `max_age_s` under `cache_dir` (ours alone) except those in `keep` (the
    example thumbnails the page always shows); returns how many.

    Gradio deletes the uploads it tracks (delete_cache), but not the gallery images it saves while
    streaming, so a server left running all day would otherwise keep every heatmap ever shown.
    """
    now, removed = time.time(), 0
    for path in Path(cache_dir).rglob("*"):
        try:
            if path.is_file() and now - path.stat().st_mtime > max_age_s and str(path) not in keep:
                path.unlink()
                removed += 1
        except OSError:  # deleted meanwhile by Gradio's own sweep
            continue
    return removed
