"""Previews the browser can play for every accepted format, example thumbnails, the cache sweep."""

from __future__ import annotations

import json
import os
import time

import av
import pytest
from helpers.clipgen import FORMATS, read_index, write_clip
from videoqa.ui.app import DEFAULT_SAMPLES
from videoqa.ui.media import DEFAULT_QUESTION, list_examples, preview, sweep_cache

from videoqa.video import probe_video

N_FRAMES = 12


def decoded_indices(path) -> list[int]:
    with av.open(str(path)) as f:
        return [read_index(frame.to_ndarray(format="rgb24")) for frame in f.decode(video=0)]


@pytest.mark.parametrize("fmt", ["mp4-h264", "webm-vp8", "webm-vp9"])
def test_browser_playable_clips_are_shown_as_they_are(fmt, tmp_path):
    clip = write_clip(tmp_path / f"clip{FORMATS[fmt][0]}", n_frames=N_FRAMES, size=(96, 64), fmt=fmt)
    info = probe_video(clip)
    assert preview(clip, info.container, info.codec, tmp_path / "work") == clip


@pytest.mark.parametrize("fmt", ["gif", "avi-mpeg4", "mkv-h264", "mov-h264", "mp4-mpeg4"])
def test_other_clips_get_an_h264_copy_with_every_frame_in_order(fmt, tmp_path):
    clip = write_clip(tmp_path / f"clip{FORMATS[fmt][0]}", n_frames=N_FRAMES, size=(96, 64), fmt=fmt)
    info = probe_video(clip)
    out = preview(clip, info.container, info.codec, tmp_path / "work")
    assert out != clip and out.suffix == ".mp4"
    copy = probe_video(out)
    assert (copy.container, copy.codec, copy.width, copy.height) == ("mp4", "h264", 96, 64)
    assert decoded_indices(out) == list(range(N_FRAMES))  # same frames, same order
    mtime = out.stat().st_mtime_ns
    assert preview(clip, info.container, info.codec, tmp_path / "work") == out  # made once
    assert out.stat().st_mtime_ns == mtime


def test_unreadable_clip_has_no_preview(tmp_path):
    bad = tmp_path / "bad.avi"
    bad.write_bytes(b"RIFF" + b"\0" * 400)
    assert preview(bad, "avi", "mpeg4", tmp_path / "work") is None
    assert list((tmp_path / "work" / "previews").iterdir()) == []  # no partial file left behind


def test_examples_come_with_their_suggested_questions(tmp_path):
    examples = list_examples(DEFAULT_SAMPLES, tmp_path)
    expected = json.loads((DEFAULT_SAMPLES / "questions.json").read_text())
    clips = sorted({e["video"] for e in expected})
    assert [(e.clip.name, e.question) for e in examples] == [
        (e["video"], e["question"]) for c in clips for e in expected if e["video"] == c]
    assert all(e.poster.is_file() and e.poster.is_relative_to(tmp_path) for e in examples)


def test_a_clip_without_questions_gets_a_generic_one(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    write_clip(samples / "a.mp4", n_frames=6)
    (samples / "notes.txt").write_text("not a clip")
    examples = list_examples(samples, tmp_path / "work")
    assert [(e.clip.name, e.question) for e in examples] == [("a.mp4", DEFAULT_QUESTION)]
    assert list_examples(tmp_path / "missing", tmp_path / "work") == []


def test_sweep_keeps_the_files_the_page_always_shows(tmp_path):
    old, kept = tmp_path / "old.png", tmp_path / "poster.png"
    for p in (old, kept):
        p.write_bytes(b"x")
        past = time.time() - 7200
        os.utime(p, (past, past))
    fresh = tmp_path / "heatmap.png"  # on screen now
    fresh.write_bytes(b"x")
    assert sweep_cache(tmp_path, max_age_s=3600, keep=frozenset({str(kept)})) == 1
    assert not old.exists() and kept.exists() and fresh.exists()
