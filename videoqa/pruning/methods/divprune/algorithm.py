"""DivPrune (arXiv 2503.02175, CVPR 2025; official code vbdi/divprune), before the LLM.

Max-min diversity, greedy (the paper's Eq. 3): with d(i, j) = 1 - cos(x_i, x_j) on the projected visual tokens,
the first token is the one whose nearest other token is farthest (the second-smallest entry of its column,
the smallest being its own 0); each next token is the one whose distance to the chosen set (its minimum
distance to a chosen token) is largest. `argmax` takes the first of equal scores, as the official code.

Here the whole clip is one set (the official code prunes the visual tokens of one input together), with the
[CLS] rule of VisPruner (a frame's [CLS] kept while its frame's share of `keep` is >= 1, counting against it):
the greedy choice runs over the patches for the rest. Chosen tokens are ruled out explicitly; the official
code relies on their distance to themselves being 0, which picks a chosen token again only among exact
duplicates (then it keeps fewer distinct tokens than asked). The running minimum is kept incrementally, which
is the official min over the chosen rows without recomputing it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import check_shapes, cls_and_patch_budgets


def max_min_diverse(x: Tensor, n_pick: int) -> list[int]:
    """Rows of x [N, D] chosen greedily for max-min cosine distance, in the order chosen."""
    n = x.shape[0]
    n_pick = min(n_pick, n)
    if n_pick <= 0:
        return []
    normed = torch.nn.functional.normalize(x.float(), dim=-1)
    dist = 1.0 - normed @ normed.T
    if n == 1:
        return [0]
    first = int(dist.topk(2, dim=0, largest=False).values[1].argmax())
    chosen = [first]
    nearest = dist[first].clone()
    nearest[first] = -float("inf")
    for _ in range(n_pick - 1):
        nxt = int(nearest.argmax())
        chosen.append(nxt)
        nearest = torch.minimum(nearest, dist[nxt])
        nearest[nxt] = -float("inf")
    return chosen


@torch.no_grad()
def select_divprune(features: Tensor, keep: int, layout: VisualLayout) -> tuple[list[int], dict]:
    """Kept visual-span indices (ascending) and details; features [F, T, d]: the projected tokens."""
    check_shapes(layout, keep, features)
    t, first = layout.tokens_per_frame, int(layout.has_cls)
    cls, patch_budgets = cls_and_patch_budgets(layout, keep)
    patches = torch.arange(layout.n_tokens).view(layout.n_frames, t)[:, first:].flatten()
    flat = features.reshape(layout.n_tokens, -1)
    order = max_min_diverse(flat[patches], sum(patch_budgets))
    diverse = patches[torch.as_tensor(order, dtype=torch.long)].tolist()
    return sorted(cls + diverse), {"cls": cls, "diverse_in_order": diverse[:64]}
