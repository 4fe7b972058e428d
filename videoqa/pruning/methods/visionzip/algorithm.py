"""VisionZip (arXiv 2412.04467, CVPR 2025; official code dvlab-research/VisionZip), per frame, before the LLM.

Per image the official code keeps (1) "dominant" tokens: the [CLS] token and the patches the [CLS] attends to
most at the feature layer (attention summed over heads), and (2) "contextual" tokens: of the remaining patches
(in their original order) every `step`-th one, step = max(1, remaining // n_contextual), the first
n_contextual of those, is a target; every other remaining patch joins the target its metric is most
cosine-similar to, and a target's feature becomes target + mean(its joiners) (a target nobody joins stays as
it is). Its settings keep 54 + 10, 108 + 20 or 162 + 30 of 576 tokens: 10 in 64 are contextual.

Here, per frame of the clip with the frame's share of `keep` (split as VisPruner's). Adaptations:
- The metric is the tower's feature-layer output (the official code uses that layer's keys, mean over heads,
  which `EncodedVideo` does not carry), and the merge is done on the LLM-space features (the official code
  merges the tower's hidden states and projects after; the projector is not linear in every family).
- A tower without [CLS] ranks by the mean attention each token receives (what `cls_attention` then holds)
  and keeps no [CLS]; the dominant tokens are then all patches.
- The kept tokens stay in their original order (the official code puts the contextual ones after the
  dominant ones of each image); positions are renumbered, as there.
- Attention ties resolve by position (stable sort: the earlier patch first); the official `topk` leaves them
  to the kernel. Similarity ties go to the first target (`argmax`), as the official code.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import check_shapes, frame_budgets


def contextual_count(frame_budget: int, contextual_share: float) -> int:
    """Contextual tokens in a frame's budget: int(budget * share) (10 of 64 at the official share)."""
    return int(frame_budget * contextual_share)


@torch.no_grad()
def select_visionzip(attention: Tensor, metric: Tensor, features: Tensor, keep: int, layout: VisualLayout,
                     contextual_share: float) -> tuple[list[int], Tensor, list[list[int]], dict]:
    """Kept visual-span indices (ascending), their features [n, d] (targets merged), what each absorbed, details.

    attention [F, T]: [CLS] -> token attention (or the mean received attention); metric [F, T, m]: the features
    similarity is measured on; features [F, T, d]: what the LLM sees."""
    check_shapes(layout, keep, attention, metric, features)
    t, first = layout.tokens_per_frame, int(layout.has_cls)
    flat = features.reshape(-1, features.shape[-1])
    kept, rows, absorbed = [], [], []
    dominant, contextual = [], []
    for f, budget in enumerate(frame_budgets(keep, layout.n_frames)):
        if budget == 0:
            continue
        n_ctx = min(contextual_count(budget, contextual_share), budget - first)
        n_dom = budget - first - n_ctx
        order = torch.sort(attention[f, first:].float(), descending=True, stable=True).indices + first
        dom = order[:n_dom].sort().values
        rest = order[n_dom:].sort().values  # remaining patches, original order
        groups = {int(i) + f * t: [] for i in ([0] if first else []) + dom.tolist()}
        feats = {i: flat[i] for i in groups}
        dominant += [i + f * t for i in dom.tolist()]
        if n_ctx > 0:
            m = torch.nn.functional.normalize(metric[f, rest].float(), dim=-1)
            step = max(1, rest.numel() // n_ctx)
            is_target = torch.zeros(rest.numel(), dtype=torch.bool)
            is_target[torch.arange(0, rest.numel(), step)[:n_ctx]] = True
            targets, others = rest[is_target], rest[~is_target]
            choice = (m[~is_target] @ m[is_target].T).argmax(dim=1)
            for j, target in enumerate(targets.tolist()):
                members = others[choice == j]
                gi = target + f * t
                feats[gi] = flat[gi]
                if members.numel():
                    feats[gi] = flat[gi] + flat[members + f * t].float().mean(dim=0).to(flat.dtype)
                groups[gi] = sorted((members + f * t).tolist())
                contextual.append(gi)
        for i in sorted(groups):
            kept.append(i)
            rows.append(feats[i])
            absorbed.append(groups[i])
    visual = torch.stack(rows) if rows else flat[:0]
    details = {"dominant": dominant, "contextual": contextual, "contextual_share": contextual_share,
               "cls": [f * t for f, b in enumerate(frame_budgets(keep, layout.n_frames)) if first and b > 0]}
    return kept, visual, absorbed, details
