"""The pooling baseline: average-pool each frame's patch grid to the grid nearest the frame's budget.

A frame whose share of `keep` leaves b patches (the [CLS] rule of VisPruner: a frame's [CLS] is kept and
counted against its share) is pooled to s x s cells, s = round(sqrt(b)) clamped to [1, grid] (a frame of
rows x cols patches, as Qwen-VL's, to sr x sc with the frame's aspect: sr = round(sqrt(b*rows/cols))) — the plain
downsampling LLaVA-Video and LLaVA-OneVision apply to video frames, with adaptive average pooling
(torch's adaptive_avg_pool2d: cell i spans rows floor(i*G/s) to ceil((i+1)*G/s)). Rounding to the nearest
grid may keep a few tokens more or fewer than `keep`: s*s - b per frame.

Each pooled cell is reported as its centre patch, with the cell's other patches as what it absorbed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import check_shapes, cls_and_patch_budgets


def pooled_side(patch_budget: int, grid: int, other: int | None = None) -> int:
    """The side of the pooled grid along an axis of `grid` patches (the other axis: `other`, default square):
    the cell count nearest `patch_budget` with the frame's aspect (0 for no budget)."""
    if patch_budget <= 0:
        return 0
    other = other or grid
    return max(1, min(grid, round(math.sqrt(patch_budget * grid / other))))


def _cells(grid: int, side: int) -> list[range]:
    return [range(i * grid // side, -(-(i + 1) * grid // side)) for i in range(side)]


@torch.no_grad()
def select_pool(features: Tensor, keep: int, layout: VisualLayout) -> tuple[list[int], Tensor, list[list[int]], dict]:
    """Kept visual-span indices (ascending: the cells' centres and the kept [CLS]), their features, what each
    absorbed, details."""
    check_shapes(layout, keep, features)
    t, g, w, first = layout.tokens_per_frame, layout.grid, layout.n_cols, int(layout.has_cls)
    cls, patch_budgets = cls_and_patch_budgets(layout, keep)
    kept, rows, absorbed, sides = [], [], [], []
    for f, b in enumerate(patch_budgets):
        side, side_w = pooled_side(b, g, w), pooled_side(b, w, g)
        sides.append(side if w == g else (side, side_w))
        if f * t in cls:
            kept.append(f * t)
            rows.append(features[f, 0])
            absorbed.append([])
        if side == 0:
            continue
        grid = features[f, first:].reshape(g, w, -1).permute(2, 0, 1)  # [d, rows, cols]
        pooled = torch.nn.functional.adaptive_avg_pool2d(grid.float(), (side, side_w)).permute(1, 2, 0)  # [sr, sc, d]
        for i, rr in enumerate(_cells(g, side)):
            for j, cc in enumerate(_cells(w, side_w)):
                members = [f * t + first + r * w + c for r in rr for c in cc]
                centre = f * t + first + rr[(len(rr) - 1) // 2] * w + cc[(len(cc) - 1) // 2]
                kept.append(centre)
                rows.append(pooled[i, j].to(features.dtype))
                absorbed.append([m for m in members if m != centre])
    order = sorted(range(len(kept)), key=kept.__getitem__)
    visual = torch.stack([rows[i] for i in order]) if rows else features.reshape(-1, features.shape[-1])[:0]
    return [kept[i] for i in order], visual, [absorbed[i] for i in order], {"cls": cls, "sides": sides}
