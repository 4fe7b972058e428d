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

from collections.abc import Mapping
from typing import Any

import torch

from ...hook import LayerKeep, LayerView, scaled_layers
from ...shared import stage_keep, top_k_sorted


class PyramidDropPlan:
    """Drop at the stage boundaries of one prefill. Remembers each sample's visual count at the first drop (the
    counts of later stages are shares of it); make one plan per prefill."""

    def __init__(self, stage_layer: int, stages: int, r: float | list[float]):
        self.stage_layer, self.stages, self.r = stage_layer, stages, r
        self.layers = (1,)  # layers below the first drop could be cached, but layer 1 is the earliest it may be
        self._first: list[int] | None = None

    @classmethod
    def from_options(cls, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None) -> PyramidDropPlan:
        return cls(params["pd_layer"], params["pd_stages"], rs)

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
            n_keep = min(len(score), stage_keep(self._first[s], view.r[s], stage, self.stages - 1))
            kept.append(top_k_sorted(score, n_keep))
            scores.append(score)
        return LayerKeep(kept, scores)

