"""SparseVLM's text-guided sparsification with token recycling, as a client of the in-LLM hook (pruning/hook.py).

From the official Video-LLaVA code (Gumpest/SparseVLMs, videollava/model/language_model):
- raters, once, on the embeddings (layer 0): M = softmax over the text tokens of V Tᵀ (V: visual embeddings, T:
  every token after the visual span), averaged over the visual tokens; the text tokens above its mean rate;
- after each rating layer (published 2, 6, 15 of 32; scaled to the model's depth) the layer's attention from the
  raters, mean over heads and raters, scores the visual tokens present; the best are kept;
- recycling: of the deleted tokens, the best-scored int(0.3 n_deleted) + 1 are clustered by density peaks
  (k-nearest-neighbour density, k = the cluster count int(m / 10) + 1: shared.dpc_clusters), and each cluster's
  mean (over the layer's output hidden states) becomes one token placed after the kept visual tokens, in the
  order of their centres (the official code orders them by centre score).

How many stay: the official Video-LLaVA code keeps as many as the rank of the raters' attention matrix and its
LLaVA code follows a token list tuned per budget; here each rating keeps int(n_first * λ^stage) (λ = (1-R)^(1/3),
n_first the visual count at the first rating), so the last rating leaves 1-R of the tokens, plus the recycled
ones. The official code breaks density ties (k-nearest densities tie for mutual nearest neighbours) with 1e-6
uniform noise; we break them (and ranking ties) by index, so answers are reproducible. Positions: kept tokens
keep theirs; a recycled token takes its cluster centre's (the official code renumbers, which our decoder's single
position per token cannot follow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...hook import LayerKeep, LayerView, scaled_layers
from ...shared import dpc_clusters, stage_keep, top_k_sorted

PUBLISHED = (2, 6, 15)  # rating layers of the 32-layer LLaVA/Video-LLaVA-7B


class SparseVLMPlan:
    """Rate at layer 0, prune after each rating layer. Keeps the raters and the first visual counts between its
    layers; make one plan per prefill."""

    def __init__(self, first_layer: int, r: float | list[float], recycle: float = 0.3):
        self.first_layer, self.r, self.recycle = first_layer, r, recycle
        self.layers = (0,)  # the raters are read from the embeddings
        self._raters: list[Tensor] = []  # per sample: rater distances from the sequence end (pruning keeps them)
        self._first: list[int] | None = None

    @classmethod
    def from_options(cls, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None) -> SparseVLMPlan:
        return cls(params["sv_layer"], rs, params["recycle"])

    def rating_layers(self, n_layers: int) -> tuple[int, ...]:
        published = (self.first_layer, *(p for p in PUBLISHED[1:] if p > self.first_layer))
        return tuple(k for k in scaled_layers(published, n_layers) if k + 1 < n_layers)

    def layers_for(self, n_layers: int) -> tuple[int, ...]:
        return (0, *(k + 1 for k in self.rating_layers(n_layers)))

    def at_layer(self, view: LayerView) -> LayerKeep | None:
        n = view.hidden.shape[1]
        if view.layer == 0:
            self._raters = [n - rater_positions(view.hidden[s], view.visual_mask[s], view.key_mask[s])
                            for s in range(view.hidden.shape[0])]
            return None
        stage = self.layers_for(view.n_layers).index(view.layer)
        if stage == 1:
            self._first = view.n_visual
        rows = torch.unique(torch.cat(self._raters))
        rows = (n - rows).sort().values  # positions now
        weights = view.attention_rows(rows)  # [B, q, n]: the rating layer's attention
        kept, scores, added, positions, index, absorbed = [], [], [], [], [], []
        for s in range(weights.shape[0]):
            vis = view.visual_mask[s].nonzero().squeeze(-1)
            mine = torch.isin(rows, n - self._raters[s])
            score = weights[s][mine][:, vis].mean(0)
            n_keep = min(len(vis), stage_keep(self._first[s], view.r[s], stage, 3))
            keep = top_k_sorted(score, n_keep)
            kept.append(keep)
            scores.append(score)
            deleted = torch.ones(len(vis), dtype=torch.bool, device=vis.device)
            deleted[keep] = False
            deleted = deleted.nonzero().squeeze(-1)
            merged, members = recycle(view.hidden[s, vis], score, deleted, self.recycle)
            centres = [m[0] for m in members]
            added.append(merged)
            positions.append(view.positions[..., s, vis[centres]] if centres else view.positions[..., s, :0])
            original = view.visual_index[s]
            index.append(original[centres] if centres else original[:0])
            absorbed.append({int(original[m[0]]): [int(original[j]) for j in m[1:]] for m in members})
        return LayerKeep(kept, scores, added=added, added_positions=positions, added_index=index, absorbed=absorbed)


def rater_positions(embeds: Tensor, visual_mask: Tensor, key_mask: Tensor) -> Tensor:
    """Sequence positions of the text raters of one sample: the tokens after its visual span whose mean (over the
    visual tokens) softmax relevance exceeds the mean relevance."""
    vis = visual_mask.nonzero().squeeze(-1)
    text = torch.arange(int(vis[-1]) + 1, len(embeds), device=embeds.device)
    text = text[key_mask[text]]
    relevance = (embeds[vis].float() @ embeds[text].float().T).softmax(-1).mean(0)
    return text[relevance > relevance.mean()]


def recycle(hidden: Tensor, score: Tensor, deleted: Tensor, share: float) -> tuple[Tensor, list[list[int]]]:
    """Recycled tokens [c, d] from the deleted visual tokens (indices into the visual tokens present) and, per
    recycled token, its members (centre first). The best-scored int(share * n) + 1 deleted ones are clustered."""
    if share <= 0 or len(deleted) == 0:
        return hidden[:0], []
    m = min(len(deleted), int(len(deleted) * share) + 1)
    best = deleted[torch.sort(score[deleted].float(), descending=True, stable=True).indices[:m]]
    n_clusters = int(m / 10) + 1
    centres, assign = dpc_clusters(hidden[best].float(), n_clusters, n_clusters)
    merged, members = [], []
    for c, centre in enumerate(centres.tolist()):
        group = (assign == c).nonzero().squeeze(-1)
        merged.append(hidden[best[group]].float().sum(0) / (len(group) + 1e-6))
        members.append([int(best[centre]), *(int(best[j]) for j in group.tolist() if j != centre)])
    return torch.stack(merged).to(hidden.dtype), members

