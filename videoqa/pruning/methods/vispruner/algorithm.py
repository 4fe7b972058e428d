"""VisPruner for video (arXiv 2412.01818; official code Theia-4869/VisPruner), pruning before the LLM.

Per frame: keep the tokens the vision tower's [CLS] attends to most ("important"), then, from the rest,
keep a set of "diverse" tokens by repeatedly dropping near-duplicates (cosine similarity). The LLM then
sees only the kept tokens, in their original order, with contiguous positions — any attention kernel works.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import frame_budgets

# The official code drops at most this many near-duplicates per matching round; small rounds let the
# similarity scores be recomputed as the residual set shrinks.
DROP_PER_ROUND = 8


def _diverse(residual: Tensor, normed: Tensor, n_keep: int) -> Tensor:
    """The official near-duplicate removal: until `n_keep` remain, split the residual tokens (ordered by
    attention, highest first) alternately into sets a and b and drop up to DROP_PER_ROUND tokens of a
    whose best cosine match in b is highest. `residual` holds indices into `normed` (unit-norm rows)."""
    if n_keep <= 0:
        return residual[:0]
    while True:
        n = residual.numel()
        drop = min(DROP_PER_ROUND, n - n_keep)
        if drop <= 0:
            return residual
        a, b = residual[0::2], residual[1::2]
        if b.numel() == 0:  # one token left and none to keep: nothing to compare against
            return residual[:n_keep]
        best = (normed[a] @ normed[b].T).max(dim=-1).values  # [len(a)]
        # Stable sort: equal scores resolve by position, so the result is deterministic.
        order = torch.sort(best, descending=True, stable=True).indices
        residual = torch.cat([a[order[drop:]], b])


def select_vispruner(
    cls_attn: Tensor, features: Tensor, keep: int, important_ratio: float, layout: VisualLayout
) -> tuple[list[int], dict]:
    """Choose `keep` visual tokens; returns sorted visual-span indices and details for KeptTokens.

    cls_attn [F, T]: [CLS]→token attention at the feature layer (with no CLS, the mean attention each token
    receives); features [F, T, D]: the tower's features at that layer (cosine similarity is computed on them).

    Budget split — equal per frame: frame f gets keep // F tokens, and the keep % F leftover tokens go to
    frames spread evenly over the clip. Per frame, as the official code does per image: softmax-normalised
    [CLS] rows are not comparable across frames (a frame with one salient object concentrates its mass,
    a cluttered one spreads it), and a global top-k would starve whole stretches of the video, which
    temporal questions need.

    CLS — each frame's CLS (index 0 when layout.has_cls) is kept whenever the frame's budget is >= 1 and
    counts against that budget: it is the frame's only global summary and Video-LLaVA always saw it, while
    its entry in the [CLS] row is self-attention and says nothing about its importance relative to patches.
    Patches then split the rest: int(b·r) important (top attention, as the official code rounds) and the
    remainder diverse, chosen from the non-important patches by near-duplicate removal.
    """
    f, t = cls_attn.shape
    if (f, t) != (layout.n_frames, layout.tokens_per_frame) or features.shape[:2] != (f, t):
        raise ValueError(f"cls_attn {tuple(cls_attn.shape)} / features {tuple(features.shape)} do not match "
                         f"the layout ({layout.n_frames} frames x {layout.tokens_per_frame} tokens)")
    if not 0 <= keep <= layout.n_tokens:
        raise ValueError(f"keep must be in [0, {layout.n_tokens}], got {keep}")
    if not 0.0 <= important_ratio <= 1.0:
        raise ValueError(f"important_ratio must be in [0, 1], got {important_ratio}")

    first = int(layout.has_cls)  # index of the first patch token in a frame
    normed = torch.nn.functional.normalize(features.float(), dim=-1)
    budgets = frame_budgets(keep, f)
    cls_kept, important, diverse = [], [], []
    for frame, budget in enumerate(budgets):
        offset = frame * t
        if layout.has_cls and budget > 0:
            cls_kept.append(offset)
            budget -= 1
        n_imp = int(budget * important_ratio)
        # Patches ordered by attention, highest first; stable so ties keep the earlier patch.
        order = torch.sort(cls_attn[frame, first:].float(), descending=True, stable=True).indices + first
        residual = _diverse(order[n_imp:], normed[frame], budget - n_imp)
        important += (order[:n_imp] + offset).tolist()
        diverse += (residual + offset).tolist()

    kept = sorted(cls_kept + important + diverse)
    details = {
        "budget_split": "per_frame",
        "frame_budgets": budgets,
        "important_ratio": important_ratio,
        "cls": cls_kept,
        "important": sorted(important),
        "diverse": sorted(diverse),
    }
    return kept, details
