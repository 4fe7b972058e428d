"""PyramidDrop's rank-and-drop, as a client of the in-LLM hook (pruning/hook.py).

Published (LLaVA-1.5/NeXT-7B, 32 layers): drops before layers 8, 16 and 24, keeping 50%, 25% and 12.5% of the
image tokens (λ = 0.5). At each drop the official code runs the next layer's own query and key projections on the
hidden states (`attention_rows_here`: that layer's attention, before it runs), takes the last instruction token's
row, softmax, mean over heads, and keeps the top int(n_image * λ^stage) image tokens, with n_image the count before
the first drop (its `int` truncation, not rounding, so the counts match it).

Our R is the share of the visual tokens gone after the last stage, so λ = (1-R)^(1/(stages-1)); R = 0.875 with
four stages is the published schedule. Stage layers are published for 32 layers and scaled to the model's depth
(`scaled_layers`). Kept tokens keep their original RoPE positions: the official code renumbers them and shifts
the decoded token's position per stage, which our decoder (one position per token for every layer) cannot do.
Ties in the ranking break by index (stable sort), so identical inputs keep identical tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...hook import LayerKeep, LayerView, scaled_layers


class PyramidDropPlan:
    """Drop at the stage boundaries of one prefill. Remembers each sample's visual count at the first drop (the
    counts of later stages are shares of it); make one plan per prefill."""

    def __init__(self, stage_layer: int, stages: int, r: float | list[float]):
        self.stage_layer, self.stages, self.r = stage_layer, stages, r
        self.layers = (1,)  # layers below the first drop could be cached, but layer 1 is the earliest it may be
        self._first: list[int] | None = None

    def layers_for(self, n_layers: int) -> tuple[int, ...]:
        return scaled_layers(tuple(s * self.stage_layer for s in range(1, self.stages)), n_layers, low=1)

    def at_layer(self, view: LayerView) -> LayerKeep:
        stage = self.layers_for(view.n_layers).index(view.layer) + 1
        if stage == 1:
            self._first = view.n_visual
        rows = torch.tensor([view.hidden.shape[1] - 1], device=view.hidden.device)  # the last instruction token
        weights = view.attention_rows_here(rows)[:, 0]  # [B, n]
        kept, scores = [], []
        for s in range(weights.shape[0]):
            score = weights[s, view.visual_mask[s]]
            n_keep = min(len(score), stage_keep(self._first[s], view.r[s], self.stages, stage))
            kept.append(top_k_sorted(score, n_keep))
            scores.append(score)
        return LayerKeep(kept, scores)


def stage_lambda(r: float, stages: int) -> float:
    """The share each drop keeps so that the last of `stages - 1` drops leaves 1 - r."""
    return (1.0 - r) ** (1.0 / (stages - 1))


def stage_keep(n_first: int, r: float, stages: int, stage: int) -> int:
    """Tokens kept after drop `stage` (1-based) of `n_first`: int(n_first * λ^stage), as the official code, and
    at least one (1e-9 keeps a root like 0.125^(1/3) = 0.4999... from truncating a whole count away)."""
    return max(1, int(n_first * stage_lambda(r, stages) ** stage + 1e-9)) if n_first else 0


def top_k_sorted(score: Tensor, k: int) -> Tensor:
    """Ascending indices of the k best scores (ties: the lower index first)."""
    order = torch.sort(score.float(), descending=True, stable=True).indices
    return torch.sort(order[:k]).values

