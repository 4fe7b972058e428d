"""FrameFusion's merging and pruning, as a client of the in-LLM hook (pruning/hook.py).

From the official code (thu-nics/FrameFusion, framefusion/main.py), per sample:
- merging, at each layer from the first: every visual token present is compared (cosine) with the token before it
  at the same patch position (the previous frame's, among those present); a run of tokens at least `threshold`
  alike is averaged into the token just before the run, and leaves. The share merged at a layer is its sparsity;
  merging stops when it falls below `ratio_floor`, or at once when it would exceed the pruning ratio the budget
  allows (then only the most alike are merged, up to that ratio, and nothing is pruned);
- pruning, at the next layer: the previous layer's attention, mean over heads and over every query row, ranks the
  visual tokens; the best round(n * (1 - p)) stay;
- the budget: `cost` = 1 - R is the visual-token work of the whole prefill (tokens x layers) as a share of the
  unpruned one; p is what the layers left must drop for it (`pruning_ratio`).
Differences: the official code acts between a layer's attention and its MLP; the hook acts between layers, so
that layer's MLP still sees every token. Its budget counts 28 layers (Qwen2-7B); we count the model's.
Merged tokens keep the run start's position; kept ones their own (as the official code). Ranking ties break by
index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...hook import LayerKeep, LayerView
from ...shared import top_k_sorted

ROWS_PER_CHUNK = 512  # query rows per attention pass when pruning (bounds the [rows, n] float buffer)


class FrameFusionPlan:
    """Merge, then prune, per sample; holds each sample's progress between layers: one plan per prefill."""

    def __init__(self, r: float | list[float], threshold: float = 0.6, ratio_floor: float = 0.1, first_layer: int = 0,
                 tokens_per_frame: int | None = None):
        self.r, self.threshold, self.ratio_floor = r, threshold, ratio_floor
        self.first_layer, self.tokens_per_frame = first_layer, tokens_per_frame
        self.layers = (first_layer,)
        self._state: list[dict] | None = None

    @classmethod
    def from_options(cls, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None) -> FrameFusionPlan:
        return cls(rs, params["ff_threshold"], params["ff_ratio_floor"], params["ff_layer"], tokens_per_frame)

    def layers_for(self, n_layers: int) -> tuple[int, ...]:
        return tuple(range(self.first_layer, n_layers))

    def at_layer(self, view: LayerView) -> LayerKeep | None:
        b = view.hidden.shape[0]
        if self._state is None or view.layer == self.first_layer:
            self._state = [{"sparsity": [0.0] * self.first_layer, "merging": True, "pruning": True} for _ in range(b)]
        tpf = self.tokens_per_frame or view.tokens_per_frame
        if tpf is None:
            raise ValueError("FrameFusion compares frames: the visual tokens per frame must be known")
        active = [st["merging"] or st["pruning"] for st in self._state]
        if not any(active):
            return None
        weights = None
        if any(not st["merging"] and st["pruning"] for st in self._state):
            weights = received_attention(view)
        kept, hidden, absorbed, scores = [], view.hidden.clone(), [], []
        for s, st in enumerate(self._state):
            vis = view.visual_mask[s].nonzero().squeeze(-1)
            everything = torch.arange(len(vis), device=vis.device)
            cost = 1.0 - view.r[s]
            if st["merging"]:
                upper = pruning_ratio(st["sparsity"], cost, view.n_layers)
                patch = patch_of(view.visual_index[s], tpf)
                sim, prev = chain_similarity(view.hidden[s, vis], patch)
                chosen = sim >= self.threshold
                share = int(chosen.sum()) / len(vis) if len(vis) else 0.0
                if share < upper:
                    st["sparsity"].append(share)
                    st["merging"] = share >= self.ratio_floor
                else:  # merging alone meets the budget: the most alike up to it, and done
                    chosen = top_mask(sim, int(upper * len(vis)))
                    st["merging"] = st["pruning"] = False
                merged_into, keep = merge_runs(chosen, prev)
                hidden[s, vis] = average_runs(view.hidden[s, vis], merged_into).to(hidden.dtype)
                absorbed.append(merge_record(view.visual_index[s], merged_into))
                scores.append(sim.clamp(min=-1.0))  # how alike each token is to its previous frame's (heatmaps)
                kept.append(keep)
            elif st["pruning"]:
                p = pruning_ratio(st["sparsity"], cost, view.n_layers)
                n_keep = max(1, round(len(vis) * (1 - p))) if len(vis) else 0
                kept.append(top_k_sorted(weights[s, vis], n_keep))
                scores.append(weights[s, vis])
                st["pruning"] = False
                absorbed.append({})
            else:
                kept.append(everything)
                scores.append(torch.zeros(len(vis), device=vis.device))
                absorbed.append({})
        return LayerKeep(kept, scores, hidden=hidden, absorbed=absorbed)


def pruning_ratio(sparsity: list[float], cost: float, n_layers: int) -> float:
    """The share the layers after `sparsity`'s must drop so that the visual-token work of all `n_layers` layers
    is `cost` of the unpruned one (layer i works on prod_{j<=i}(1 - sparsity_j) of the tokens)."""
    share, spent = 1.0, 0.0
    for x in sparsity:
        share *= 1.0 - x
        spent += share
    remain = n_layers * cost - spent
    left = n_layers - len(sparsity)
    if left <= 0 or remain <= 0:
        return 1.0
    return max(0.0, 1.0 - remain / (left * share))


def patch_of(visual_index: Tensor, tokens_per_frame: int) -> Tensor:
    """Patch position within its frame of each visual token (by its original index)."""
    return visual_index % tokens_per_frame


def chain_similarity(x: Tensor, patch: Tensor) -> tuple[Tensor, Tensor]:
    """For each token, the cosine similarity to the previous token of the same patch (in sequence order) and that
    token's index (-2 and -1 where there is none)."""
    n = len(x)
    order = torch.sort(patch * n + torch.arange(n, device=x.device)).indices  # by patch, then by position
    same = patch[order][1:] == patch[order][:-1]
    cos = torch.nn.functional.cosine_similarity(x[order][1:].float(), x[order][:-1].float(), dim=-1)
    sim = torch.full((n,), -2.0, device=x.device)
    prev = torch.full((n,), -1, dtype=torch.long, device=x.device)
    sim[order[1:][same]] = cos[same]
    prev[order[1:][same]] = order[:-1][same]
    return sim, prev


def top_mask(sim: Tensor, k: int) -> Tensor:
    """The k most alike tokens (that have a previous token), as a mask; ties by index."""
    order = torch.sort(sim, descending=True, stable=True).indices
    order = order[sim[order] > -2][:k]
    mask = torch.zeros_like(sim, dtype=torch.bool)
    mask[order] = True
    return mask


def merge_runs(chosen: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
    """Each token's merge target (the first token before its run of chosen ones in its patch chain, itself if not
    chosen) and the ascending indices of the tokens that stay."""
    target = torch.arange(len(chosen), device=chosen.device)
    for t in torch.sort(chosen.nonzero().squeeze(-1)).values.tolist():  # a run's start comes before its members
        target[t] = target[prev[t]]
    return target, (~chosen).nonzero().squeeze(-1)


def merge_record(original: Tensor, target: Tensor) -> dict[int, list[int]]:
    """Original index of each token that absorbed others -> the original indices merged into it."""
    out: dict[int, list[int]] = {}
    for m in (target != torch.arange(len(target), device=target.device)).nonzero().squeeze(-1).tolist():
        out.setdefault(int(original[target[m]]), []).append(int(original[m]))
    return out


def average_runs(x: Tensor, target: Tensor) -> Tensor:
    """Each target's features become the mean of itself and the tokens merged into it."""
    sums = torch.zeros_like(x, dtype=torch.float32).index_add_(0, target, x.float())
    counts = torch.zeros(len(x), device=x.device).index_add_(0, target, torch.ones(len(x), device=x.device))
    out = x.float().clone()
    has = counts > 0
    out[has] = sums[has] / counts[has, None]
    return out


def received_attention(view: LayerView) -> Tensor:
    """[B, n]: the previous layer's attention each token receives, mean over heads and each sample's query rows."""
    b, n = view.key_mask.shape
    total = torch.zeros(b, n, device=view.hidden.device)
    for start in range(0, n, ROWS_PER_CHUNK):
        rows = torch.arange(start, min(n, start + ROWS_PER_CHUNK), device=view.hidden.device)
        w = torch.nan_to_num(view.attention_rows(rows).float())  # a padding row attends to nothing
        total += (w * view.key_mask[:, rows, None]).sum(1)
    return total / view.key_mask.sum(-1, keepdim=True)

