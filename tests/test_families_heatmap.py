"""Heatmaps of today's layouts: a frame shows exactly the kept cells of its token grid; Qwen's two frames of a
pair show the same cells and say that they share them; LLaVA-OneVision's newline is a summary token."""

from __future__ import annotations

import numpy as np

from videoqa.heatmap import KEPT_OUTLINE, render_groups
from videoqa.pruning import VisualLayout


def frames(n: int, size: int = 112) -> np.ndarray:
    return np.full((n, size, size, 3), 200, dtype=np.uint8)


def kept_cells(image, rows: int, cols: int) -> np.ndarray:
    """Which cells of a rendered frame keep the frame's own colour at their centre (dropped ones are grey)."""
    a = np.asarray(image)
    h, w = a.shape[:2]
    centres = [[a[int((r + 0.5) * h / rows), int((c + 0.5) * w / cols)] for c in range(cols)] for r in range(rows)]
    return np.array([[tuple(p) == (200, 200, 200) for p in row] for row in centres])


def test_qwen_pairs_share_their_cells_and_say_so():
    layout = VisualLayout(n_frames=2, grid=4, has_cls=False, frames_per_token=2)
    kept = [0, 5, 10, 15, 16 + 3]  # a diagonal in pair 1, one cell in pair 2
    out = render_groups(frames(4), layout, kept, (112, 112))
    assert len(out) == 4
    for f, (image, caption) in enumerate(out):
        cells = kept_cells(image, 4, 4)
        expected = np.eye(4, dtype=bool) if f < 2 else np.zeros((4, 4), bool)
        if f >= 2:
            expected[0, 3] = True
        assert (cells == expected).all(), f
        partner = f + 2 if f % 2 == 0 else f
        assert f"tokens shared with #{partner}" in caption
    assert "kept 4/16" in out[0][1] and "kept 1/16" in out[3][1]


def test_onevision_newline_is_a_summary_token():
    layout = VisualLayout(n_frames=2, grid=4, has_cls=False, summary=1)
    with_newline = render_groups(frames(2), layout, [0, 32], (56, 56))
    without = render_groups(frames(2), layout, [0], (56, 56))
    assert with_newline[0][1].endswith("+ newline (summary)") and "newline" not in without[0][1]
    assert "shared" not in with_newline[0][1]
    assert (np.asarray(with_newline[0][0]) == KEPT_OUTLINE).all(-1).any()  # the kept cell is outlined
