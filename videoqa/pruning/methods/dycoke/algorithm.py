"""DyCoke (arXiv 2411.15024; official code KD-TAO/DyCoke, llava/model/llava_arch.py `dycole_ttm` and
llava/model/language_model/modeling_qwen2.py `PrunableDynamicCache`).

1. TTM, before the LLM: in each pair of frames (0, 1), (2, 3), ... the second keeps only its tokens least similar
   (cosine, position by position) to the first; then in each group of four frames starting at 0, 4, ..., while
   the group's start is below F - 4, frame i + 2 keeps only its tokens least similar to frame i. A compared frame
   keeps int(share * N) of its N tokens, share = 1 - its merging ratio K (official K = 0.7; here the share
   follows the budget: keep / the clip's tokens).
2. DP, while decoding: in every decode step, at layer L (official L = 3 of 28), the attention of the step's token
   at layer L - 1 (mean over heads) over the visual entries of the cache picks the int(n * (1 - P)) it attends
   to most (official P = 0.8); layers >= L attend, in that step, only to those visual entries (and every other
   token). The kept set is chosen anew when that attention's cosine similarity to the previous step's falls
   below 0.9.

Adaptations: the [CLS] of every frame stays (the VisPruner rule) and TTM works on patches; a clip with an odd
frame count keeps its last frame whole (the official pairing drops it); kept tokens stay in their frame's
position order (the official code orders a compared frame's tokens by similarity), and equal similarities
resolve by position (stable sort) where the official code leaves them to `topk`. When the attention stays
similar, the official code's per-step reset leaves that step unpruned; here the previous kept set is reused,
as the paper describes (the cache is pruned "dynamically", the kept set updated when attention shifts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...base import VisualLayout
from ...hook import LayerKeep, LayerView, StepView
from ...shared import check_shapes

SIMILAR = 0.9  # DP reuses its kept set while the step's attention stays this similar to the previous step's


def ttm_frames(n_frames: int) -> list[tuple[int, int]]:
    """(frame, the frame it is compared with) for every frame TTM prunes, in the official order."""
    pairs = {i + 1: i for i in range(0, n_frames - 1, 2)}
    pairs.update({i + 2: i for i in range(0, n_frames - 4, 4)})
    return sorted(pairs.items())


@torch.no_grad()
def select_dycoke(features: Tensor, keep: int, layout: VisualLayout) -> tuple[list[int], list[float], dict]:
    """TTM: kept visual-span indices (ascending), a score per token (1 - similarity to the frame compared with;
    1 for tokens of frames kept whole) and details. features [F, T, d]."""
    check_shapes(layout, keep, features)
    f_n, t, first = layout.n_frames, layout.tokens_per_frame, int(layout.has_cls)
    x = torch.nn.functional.normalize(features[:, first:].float(), dim=-1)
    n = x.shape[1]
    per_frame = int(keep / layout.n_tokens * n) if layout.n_tokens else 0
    scores = torch.ones(f_n, t)
    kept = torch.ones(f_n, t, dtype=torch.bool)
    for frame, ref in ttm_frames(f_n):
        sim = (x[frame] * x[ref]).sum(dim=-1)
        order = torch.sort(sim, stable=True).indices  # least similar first
        kept[frame, first:] = False
        kept[frame, first + order[:per_frame]] = True
        scores[frame, first:] = 1 - sim
    idx = kept.flatten().nonzero().flatten().tolist()
    details = {"pruned_frames": [f for f, _ in ttm_frames(f_n)], "tokens_per_pruned_frame": per_frame}
    return idx, scores.flatten().tolist(), details


def dp_keep(attention: Tensor, ratio: float) -> Tensor:
    """The visual entries DP keeps for one step: the int(n * (1 - ratio)) most attended, ascending."""
    n_keep = int(len(attention) * (1 - ratio))
    return torch.sort(torch.sort(attention, descending=True, stable=True).indices[:n_keep]).values


@dataclass
class DyCokePlan:
    """DP as a client of the hook: the prefill keeps every token at `layer` (DP prunes only while decoding, and so
    learns where the visual entries sit); each decode step hides, from layer `layer` on, the visual entries the
    step's token attends to least."""

    layer: int
    ratio: float  # P: the share of the visual entries hidden in a step
    visual: list[Tensor] = field(default_factory=list)  # per sample: cache slots of its visual tokens
    kept: list[Tensor | None] = field(default_factory=list)  # per sample: the kept set in use (indices into visual)
    previous: list[Tensor | None] = field(default_factory=list)  # per sample: the last step's attention
    attended: list[list[int]] = field(default_factory=list)  # per sample: visual entries attended, per step

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.layer,)

    @property
    def decode_layers(self) -> tuple[int, ...]:
        return (self.layer,)

    def at_layer(self, view: LayerView) -> LayerKeep:
        b = len(view.n_visual)
        self.visual = [view.visual_mask[s].nonzero().flatten() for s in range(b)]
        self.kept, self.previous, self.attended = [None] * b, [None] * b, [[] for _ in range(b)]
        return LayerKeep([torch.arange(n, device=view.hidden.device) for n in view.n_visual])

    def at_decode_layer(self, view: StepView) -> Tensor:
        row = view.attention_row()
        mask = view.key_mask.clone()
        for s, slots in enumerate(self.visual):
            attention = row[s, slots].float()
            prev = self.previous[s]
            similar = prev is not None and float(torch.cosine_similarity(attention, prev, dim=0)) >= SIMILAR
            if not similar or self.kept[s] is None:
                self.kept[s] = dp_keep(attention, self.ratio)
            self.previous[s] = attention
            hidden = torch.ones(len(slots), dtype=torch.bool, device=mask.device)
            hidden[self.kept[s]] = False
            mask[s, slots[hidden]] = False
            self.attended[s].append(len(self.kept[s]))
        return mask

    @property
    def details(self) -> list[dict]:
        return [{"decode_layer": self.layer, "decode_visual": len(v), "decode_visual_attended": a}
                for v, a in zip(self.visual, self.attended, strict=True)]
