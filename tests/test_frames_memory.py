"""Decoded frames are never held at source resolution; the clip cache is keyed by content and bounded in bytes;
the adaptive plan counts the frames it will hold (issue 37, finding 4)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers import clipgen

from videoqa.clip_cache import CLIP_CACHE_BYTES, frames_bytes
from videoqa.pruning import PruneConfig
from videoqa.video import probe_video, sample_frames
from videoqa.video.clip import DECODE_EDGE, decode_size


def _area_downscale(frames: np.ndarray, factor: int) -> np.ndarray:
    """Plain block averaging: the independent reference for swscale's AREA scaling by a whole factor."""
    n, h, w, c = frames.shape
    blocks = frames.reshape(n, h // factor, factor, w // factor, factor, c).astype(np.float64)
    return blocks.mean(axis=(2, 4))


@pytest.mark.parametrize("backend", ["pyav", "decord"])
def test_frames_are_scaled_as_decoded_to_the_bound(tmp_path, backend):
    if backend == "decord":
        pytest.importorskip("decord")
    path = clipgen.write_clip(tmp_path / "c.mp4", n_frames=6, size=(320, 240))
    full = sample_frames(path, 3, backend=backend, max_edge=None).frames
    small = sample_frames(path, 3, backend=backend, max_edge=60).frames
    assert full.shape == (3, 240, 320, 3) and small.shape == (3, 60, 80, 3)
    # the same picture, smaller (scaled from the decoder's planes, so a few grey levels off a plain average)
    assert np.abs(small - _area_downscale(full, 4)).mean() < 6


def test_the_default_bound_applies_and_rotation_is_kept(tmp_path):
    wide = clipgen.write_clip(tmp_path / "wide.mp4", n_frames=3, size=(1000, 500))
    assert sample_frames(wide, 2).frames.shape == (2, DECODE_EDGE, 2 * DECODE_EDGE, 3)
    portrait = clipgen.write_rotated(tmp_path / "p.mp4", 90, size=(48, 64))
    upright = sample_frames(portrait, 2, max_edge=None).frames
    smaller = sample_frames(portrait, 2, max_edge=24).frames
    assert upright.shape[1:3] == (64, 48) and smaller.shape[1:3] == (32, 24)  # turned, then as tall as shown


def test_decode_size_keeps_the_aspect_and_never_enlarges():
    assert decode_size(7680, 4320, 448) == (796, 448)
    assert decode_size(4320, 7680, 448) == (448, 796)
    assert decode_size(320, 240, 448) == (320, 240) and decode_size(320, 240, None) == (320, 240)


def test_the_clip_cache_is_keyed_by_content_and_bounded_in_bytes(tiny_qa, tmp_path):
    (tmp_path / "upload-1").mkdir()
    first = clipgen.write_clip(tmp_path / "upload-1" / "clip.mp4", n_frames=10)
    again = tmp_path / "upload-2.mp4"
    shutil.copy(first, again)  # the web page: the same file uploaded again, another temporary path
    tiny_qa._clips.clear()
    a, _ = tiny_qa.sample(first, 4)
    b, _ = tiny_qa.sample(again, 4)
    assert b is a and len(tiny_qa._clips) == 1
    assert tiny_qa._clips.max_bytes == CLIP_CACHE_BYTES
    tiny_qa._clips.max_bytes = a.frames.nbytes + 1  # room for one clip
    other = clipgen.write_clip(tmp_path / "other.mp4", n_frames=12)
    tiny_qa.sample(other, 4)
    assert len(tiny_qa._clips) == 1 and tiny_qa._clips.nbytes() <= tiny_qa._clips.max_bytes
    tiny_qa._clips.max_bytes = CLIP_CACHE_BYTES


def test_the_adaptive_plan_counts_the_frames_it_will_hold(tiny_qa, tmp_path):
    path = clipgen.write_clip(tmp_path / "c.mp4", n_frames=40, size=(640, 480))
    info = probe_video(path)
    free = 10 << 30
    tiny_qa.free_memory = lambda _device: free
    cfg = PruneConfig(method="fastv", r="auto").validate(tiny_qa.dims.n_layers)
    frames = tiny_qa.plan(info.duration_s, 0, cfg, None, 8, free).frames
    w, h = (640, 480) if DECODE_EDGE >= 480 else (round(640 * DECODE_EDGE / 480 / 2) * 2, DECODE_EDGE)
    held = frames * w * h * 3
    assert held == frames_bytes(640, 480, tiny_qa.decode_edge, frames)
    assert tiny_qa._free_after_frames(path, info, cfg, None, 8) == free - held
