"""Heatmaps of token-merging methods: patches merged into a kept token are shaded apart from dropped ones."""

from types import SimpleNamespace

import numpy as np

from videoqa.heatmap import DROP_BASE, DROP_GAIN, MERGED_MIX, MERGED_TINT, render_heatmaps
from videoqa.pruning import KeptTokens, VisualLayout

SIZE, CROP = {"shortest_edge": 32}, {"height": 32, "width": 32}
LAYOUT = VisualLayout(n_frames=2, grid=4, has_cls=True)  # 17 tokens per frame: CLS, then 16 patches
GREY = 200


def clip():
    frames = np.full((2, 32, 32, 3), GREY, dtype=np.uint8)
    return SimpleNamespace(frames=frames, timestamps=[0.5, 1.0])


def cell(img, row: int, col: int) -> np.ndarray:
    """The fill of grid cell (row, col) of a 4x4 grid on a square image: its most common colour (not the
    hatching of a dropped patch or the outline of a kept one)."""
    step = img.size[0] // 4
    px = np.asarray(img)[row * step:(row + 1) * step, col * step:(col + 1) * step].reshape(-1, 3)
    values, counts = np.unique(px, axis=0, return_counts=True)
    return values[counts.argmax()].astype(float)


def kept_tokens(absorbed=None, **details) -> KeptTokens:
    # frame 0: CLS (0), patch (0,0) = 1, patch (3,2) = 15; frame 1: patch (1,1) = 17 + 1 + 5 = 23
    return KeptTokens(method="fastvid", layer=0, n_visual=34, kept=[0, 1, 15, 23], layout=LAYOUT, details=details,
                      absorbed=absorbed)


# What the pipeline records: one list per kept token, in kept order. 17 is frame 1's CLS (no cell to tint);
# 15 is kept itself, so it is shown as kept.
ABSORBED = [[], [2, 3], [], [24, 17, 15]]


def test_merged_patches_are_tinted_dropped_ones_greyed():
    kept = kept_tokens(absorbed=ABSORBED)
    assert kept.merged_dropped() == [2, 3, 17, 24]
    (img0, cap0), (img1, cap1) = render_heatmaps(clip(), kept, SIZE, CROP)
    tinted = (1 - MERGED_MIX) * GREY + MERGED_MIX * np.asarray(MERGED_TINT, float)
    np.testing.assert_allclose(cell(img0, 0, 0), [GREY] * 3, atol=1)  # kept
    np.testing.assert_allclose(cell(img0, 0, 1), tinted, atol=1)  # index 2: merged into 1
    np.testing.assert_allclose(cell(img0, 0, 2), tinted, atol=1)  # index 3
    np.testing.assert_allclose(cell(img0, 1, 0), [DROP_BASE + DROP_GAIN * GREY] * 3, atol=1)  # dropped, not merged
    np.testing.assert_allclose(cell(img0, 3, 2), [GREY] * 3, atol=1)  # 15: kept, though also "absorbed"
    np.testing.assert_allclose(cell(img1, 1, 1), [GREY] * 3, atol=1)  # 23 kept
    np.testing.assert_allclose(cell(img1, 1, 2), tinted, atol=1)  # 24 merged into 23
    assert cap0 == "#1 · 0.50 s · kept 2/16 + summary · 2 merged"
    assert cap1 == "#2 · 1.00 s · kept 1/16 · 1 merged"


def test_without_merges_nothing_changes():
    plain = render_heatmaps(clip(), kept_tokens(), SIZE, CROP)
    unrelated = render_heatmaps(clip(), kept_tokens(important=[1, 15]), SIZE, CROP)  # VisPruner-style details
    for (a, ca), (b, cb) in zip(plain, unrelated, strict=True):
        assert ca == cb and "merged" not in ca
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
