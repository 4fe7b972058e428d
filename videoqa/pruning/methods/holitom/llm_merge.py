"""HoliTom's stage inside the LLM (cokeshao/HoliTom, holitom/modeling_qwen2.py, `Qwen2Model_holitom.forward`):
before layer K (official K = 18 of Qwen2-7B's 28 layers, HOLITOM_k), the last prompt token's attention at layer
K - 1 (mean over heads) keeps the round(n * (1 - r)) visual tokens it attends to most (official r = 0.5,
HOLITOM_r); every other visual token is merged into the kept one whose hidden state is most similar (cosine), in
ascending token order, each merge averaging the two: h_kept = (h_kept + h_other) / 2. The kept tokens keep their
positions. Attention ties resolve by position (stable sort), where the official code leaves them to `topk`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...hook import LayerKeep, LayerView


def merge_into_kept(hidden: Tensor, score: Tensor, r: float) -> tuple[Tensor, Tensor, dict[int, list[int]]]:
    """For one sample's visual tokens (hidden [n, d], score [n]): kept indices (ascending), the hidden states after
    the merges, and kept index -> the indices merged into it."""
    n_keep = round(len(score) * (1 - r))
    top = torch.sort(score, descending=True, stable=True).indices[:n_keep]
    rest = torch.ones(len(score), dtype=torch.bool, device=score.device)
    rest[top] = False
    others = rest.nonzero().flatten()
    out = hidden.clone()
    merged: dict[int, list[int]] = {int(t): [] for t in top}
    if len(others) and len(top):
        h = hidden.float()
        a, b = h[others], h[top]
        sim = (a @ b.T) / (a.norm(dim=-1, keepdim=True) * b.norm(dim=-1)[None])
        for o, target in zip(others.tolist(), top[sim.argmax(dim=-1)].tolist(), strict=True):
            out[target] = (out[target] + out[o]) / 2
            merged[target].append(o)
    return torch.sort(top).values, out, merged


@dataclass(frozen=True)
class HoliTomMergePlan:
    """The stage as a client of the hook: at `layer`, keep and merge as above; the merges are reported in
    `LayerKeep.absorbed`."""

    layer: int
    r: float

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.layer,)

    def at_layer(self, view: LayerView) -> LayerKeep:
        rows = torch.tensor([view.hidden.shape[1] - 1], device=view.hidden.device)
        weights = view.attention_rows(rows)[:, 0]
        hidden = view.hidden.clone()
        kept, scores, absorbed = [], [], []
        for s in range(hidden.shape[0]):
            vis = view.visual_mask[s].nonzero().flatten()
            keep, merged_h, merged = merge_into_kept(hidden[s, vis], weights[s, vis], self.r)
            hidden[s, vis] = merged_h
            kept.append(keep)
            scores.append(weights[s, vis])
            index = view.visual_index[s].tolist()  # present -> original (here: into the selection)
            absorbed.append({index[k]: [index[m] for m in ms] for k, ms in merged.items()})
        return LayerKeep(kept, scores, hidden, absorbed=absorbed)
