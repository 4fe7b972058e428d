"""Heatmaps: the frame as the model saw it, and the kept patches drawn where the tokens came from."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import VideoLlavaVideoProcessor

from videoqa.heatmap import (
    DROP_BASE,
    DROP_GAIN,
    HATCH,
    KEPT_OUTLINE,
    MIN_DISPLAY,
    model_view,
    render_heatmaps,
    score_scale_css,
)
from videoqa.pruning import KeptTokens, VisualLayout


def smooth_frames(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """Natural-ish frames (gradients + noise) so resampling differences would show."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], axis=-1)
    frames = base[None] + rng.normal(0, 25, size=(n, h, w, 3))
    return frames.clip(0, 255).astype(np.uint8)


def processor_pixels(vp: VideoLlavaVideoProcessor, frames: np.ndarray) -> np.ndarray:
    """Run the real video processor and undo its normalisation -> (N, H, W, 3) in 0..255."""
    out = vp(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"][0]  # N, 3, H, W
    mean = torch.tensor(vp.image_mean).view(1, 3, 1, 1)
    std = torch.tensor(vp.image_std).view(1, 3, 1, 1)
    return ((out * std + mean) * 255).permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize(
    "shortest,crop,hw",
    [
        (224, 224, (120, 160)),  # the real model's config; landscape upscaled
        (224, 224, (360, 202)),  # portrait, downscaled with antialias
        (64, 64, (48, 80)),  # the tiny model
        (64, 56, (100, 90)),  # crop smaller than the resized frame
    ],
)
def test_model_view_matches_the_processor(shortest, crop, hw):
    vp = VideoLlavaVideoProcessor(size={"shortest_edge": shortest}, crop_size={"height": crop, "width": crop})
    frames = smooth_frames(3, *hw)
    ours = model_view(frames, vp.size, vp.crop_size)
    theirs = processor_pixels(vp, frames)
    assert ours.shape == (3, crop, crop, 3) and ours.dtype == np.uint8
    # identical pixels up to float rounding of the normalise/un-normalise round trip
    assert np.abs(ours.astype(np.float64) - theirs).max() < 0.01


def test_model_view_crops_the_centre():
    # no resize needed (short edge already 64): the view is exactly the central 64 columns
    frames = smooth_frames(2, 64, 100)
    view = model_view(frames, {"shortest_edge": 64}, {"height": 64, "width": 64})
    np.testing.assert_array_equal(view, frames[:, :, 18:82])


def test_model_view_rejects_wrong_shapes():
    with pytest.raises(ValueError):
        model_view(np.zeros((4, 32, 32), np.uint8), {"shortest_edge": 32}, {"height": 32, "width": 32})


def fake_clip(n_frames: int, side: int, value: int = 200):
    frames = np.full((n_frames, side, side, 3), value, dtype=np.uint8)
    return SimpleNamespace(frames=frames, timestamps=[0.5 * (i + 1) for i in range(n_frames)])


SIZE, CROP = {"shortest_edge": 32}, {"height": 32, "width": 32}


def test_kept_patches_bright_dropped_greyed_summary_token_in_caption():
    layout = VisualLayout(n_frames=2, grid=4, has_cls=True)  # 17 tokens per frame
    # frame 0: CLS (0), patch (0,0) -> 1, patch (3,2) -> 1 + 14 = 15; frame 1: patch (1,1) -> 17 + 1 + 5
    kept = KeptTokens(method="fastv", layer=2, n_visual=34, kept=[0, 1, 15, 23], layout=layout)
    out = render_heatmaps(fake_clip(2, 32), kept, SIZE, CROP)
    assert len(out) == 2
    img0, cap0 = out[0]
    img1, cap1 = out[1]
    assert isinstance(img0, Image.Image)
    scale = math.ceil(MIN_DISPLAY / 32)  # small frames are upscaled for display
    assert scale > 1
    assert img0.size == (32 * scale, 32 * scale)
    a0, a1 = np.asarray(img0), np.asarray(img1)
    cell = 8 * scale  # 32 px / grid 4 = 8 px per patch before upscaling

    def at(a, r, c):  # the most common colour of cell (r, c): its fill, not its hatching or outline
        px = a[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell].reshape(-1, 3)
        values, counts = np.unique(px, axis=0, return_counts=True)
        return tuple(int(v) for v in values[counts.argmax()])

    grey = int(DROP_BASE + DROP_GAIN * 200)
    assert at(a0, 0, 0) == (200,) * 3 and at(a0, 3, 2) == (200,) * 3
    assert at(a0, 0, 1) == (grey,) * 3 and at(a0, 2, 3) == (grey,) * 3
    assert at(a1, 1, 1) == (200,) * 3 and at(a1, 0, 0) == (grey,) * 3
    # exactly the kept cells keep the frame's colour; the dropped ones are hatched
    assert (a0[:, :, 0] == 200).sum() + (a0 == KEPT_OUTLINE).all(-1).sum() == 2 * cell * cell
    assert (a1 == HATCH).all(-1).sum() > 0
    assert cap0 == "#1 · 0.50 s · kept 2/16 + summary"
    assert cap1 == "#2 · 1.00 s · kept 1/16"


def test_kept_and_dropped_differ_on_a_black_frame():
    """Dimming a black patch leaves it black: dropped patches must be told apart by more than brightness."""
    layout = VisualLayout(n_frames=1, grid=4, has_cls=True)
    kept = KeptTokens(method="fastv", layer=2, n_visual=17, kept=[0, 6], layout=layout)  # patch (1, 1)
    ((img, _),) = render_heatmaps(fake_clip(1, 32, value=0), kept, SIZE, CROP)
    a = np.asarray(img).astype(int)
    cell = 8 * math.ceil(MIN_DISPLAY / 32)
    kept_cell = a[cell + 4:2 * cell - 4, cell + 4:2 * cell - 4]  # inside the outline
    dropped_cell = a[3 * cell:4 * cell, 3 * cell:4 * cell]
    assert kept_cell.max() == 0
    assert dropped_cell.mean() > 40 and (dropped_cell == HATCH).all(-1).any()
    # the kept patch is outlined on every side that borders a dropped one
    middle = cell + cell // 2
    assert (a[cell, middle] == KEPT_OUTLINE).all() and (a[2 * cell - 1, middle] == KEPT_OUTLINE).all()


def test_score_scale_is_the_colour_map_low_to_high():
    css = score_scale_css()
    assert css.startswith("linear-gradient(to right, #000004") and css.endswith("#fcffa4)")  # inferno's ends


def test_everything_kept_is_the_model_view():
    layout = VisualLayout(n_frames=3, grid=8, has_cls=True)
    frames = smooth_frames(3, 48, 80)
    clip = SimpleNamespace(frames=frames, timestamps=[0.0, 1.0, 2.0])
    kept = KeptTokens(
        method="none", layer=None, n_visual=layout.n_tokens, kept=list(range(layout.n_tokens)), layout=layout
    )
    size, crop = {"shortest_edge": 64}, {"height": 64, "width": 64}
    out = render_heatmaps(clip, kept, size, crop)
    view = model_view(frames, size, crop)
    for (img, cap), v in zip(out, view, strict=True):
        expected = Image.fromarray(v).resize((256, 256), Image.Resampling.NEAREST)  # 64 px, scale 4
        np.testing.assert_array_equal(np.asarray(img), np.asarray(expected))
        assert cap.endswith("kept 64/64 + summary")


def test_images_without_cls():
    layout = VisualLayout(n_frames=1, grid=4, has_cls=False)
    kept = KeptTokens(method="random", layer=0, n_visual=16, kept=[5], layout=layout)
    ((img, cap),) = render_heatmaps(fake_clip(1, 32), kept, SIZE, CROP)
    assert cap == "#1 · 0.50 s · kept 1/16"  # no summary token to report
    a = np.asarray(img)
    cell = 8 * math.ceil(MIN_DISPLAY / 32)
    assert (a[:, :, 0] == 200).sum() + (a == KEPT_OUTLINE).all(-1).sum() == cell**2  # only patch (1, 1)


def test_score_colour_map_orders_cells_and_outlines_kept():
    layout = VisualLayout(n_frames=1, grid=4, has_cls=True)
    scores = [99.0] + [float(i) for i in range(16)]  # CLS score must not skew the patch colours
    kept = KeptTokens(method="fastv", layer=2, n_visual=17, kept=[0, 16], layout=layout, scores=scores)
    black = SimpleNamespace(frames=np.zeros((1, 32, 32, 3), np.uint8), timestamps=[0.0])
    ((img, _),) = render_heatmaps(black, kept, SIZE, CROP, show_scores=True)
    a = np.asarray(img).astype(int)
    cell = 8 * math.ceil(MIN_DISPLAY / 32)
    lum = [a[r * cell + cell // 2, c * cell + cell // 2].sum() for r in range(4) for c in range(4)]
    assert lum == sorted(lum) and lum[-1] > lum[0] + 300  # inferno: brighter for higher scores
    assert tuple(a[3 * cell, 3 * cell]) == KEPT_OUTLINE  # kept patch (3, 3) outlined
    assert tuple(a[0, 0]) != KEPT_OUTLINE


def test_mismatched_inputs_raise():
    layout = VisualLayout(n_frames=2, grid=4)
    kept = KeptTokens(method="fastv", layer=2, n_visual=34, kept=[0], layout=layout, scores=[1.0] * 5)
    with pytest.raises(ValueError, match="frames"):
        render_heatmaps(fake_clip(3, 32), kept, SIZE, CROP)
    with pytest.raises(ValueError, match="scores"):
        render_heatmaps(fake_clip(2, 32), kept, SIZE, CROP, show_scores=True)
