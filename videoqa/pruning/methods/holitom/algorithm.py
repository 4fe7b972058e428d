"""HoliTom (arXiv 2505.21334; official code cokeshao/HoliTom, holitom/llava_arch.py), its stage before the LLM.

1. Global redundancy-aware segmentation: a token position is static over frames s..e when the cosine
   similarity of its token in every consecutive pair of those frames exceeds `tau`; merging a window of
   L frames saves (L - 1) tokens per static position. Dynamic programming over the clip picks the windows
   that save the most (dp[i] = max(dp[i-1], dp[i-L] + saved(i-L+1, i)) for L = 2.. `max_window`; a
   candidate must beat the best so far, so ties keep the shorter window).
2. The retention ratio is raised to what the savings leave: r' = min(r / (1 - saved / tokens), 1).
3. Temporal merging: a window's static positions become one token each, the mean over the window's frames;
   these are then merged spatially by density-peak clustering (DPC-kNN, k = min(7, clusters), round(n * r')
   clusters; a centre that others join becomes beta * itself + (1 - beta) * mean(the others), beta = 0.6).
4. Every frame's dynamic (non-static) tokens: the ceil(n * r') the attention ranks highest (with the
   official D = 0, no dynamic token is merged; D > 0 would merge a share of them as in step 3).
HoliTom's merge stage inside the LLM is llm_merge.py beside this file (`--llm-merge`).

Adaptations: the [CLS] rule of VisPruner (kept per frame, counted against `keep`; segmentation and merging
cover patches only, the official models having none); the attention is the tower's [CLS] attention (the
mean attention each token receives for a tower without [CLS]); density ties resolve by position and attention
ties by position (stable sorts), where the official code adds 1e-6 of noise or leaves them to `topk`. Counts
follow the official rounding (ceil and Python's round), so the total may differ from `keep` by a few tokens.
A static token is reported at its window's first frame, with the window's tokens it merged as absorbed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import dpc_clusters, merged_selection, patch_inputs


@dataclass(frozen=True)
class HoliTomParams:
    """The official defaults (environment defaults of holitom/llava_arch.py and its evaluation scripts)."""

    tau: float = 0.8  # static when every consecutive similarity exceeds this
    beta: float = 0.6  # a cluster centre's own weight when others join it
    dominant_share: float = 1.0  # 1 - D: share of a frame's dynamic budget kept by attention (D = 0)
    k: int = 7  # neighbours in the density estimate (at most the cluster count)
    max_window: int = 1024


def static_windows(sims: Tensor, tau: float, max_window: int) -> tuple[list[tuple[int, int]], float]:
    """Windows (first, last frame) covering the clip and the tokens their static positions save.
    sims [F-1, N]: cosine similarity of each position's token in frame f and f+1."""
    n = sims.shape[0] + 1
    above = sims > tau

    def saved(s: int, e: int) -> int:  # static positions of frames s..e, times the frames merged away
        return int(above[s:e].all(dim=0).sum()) * (e - s)

    dp, prev = [0.0] * n, [0] * n
    for i in range(n):
        best, start = (dp[i - 1] if i > 0 else 0.0), i
        for size in range(2, min(i + 1, max_window) + 1):
            j = i - size
            value = (dp[j] if j >= 0 else 0.0) + saved(j + 1, i)
            if value > best:
                best, start = value, j + 1
        dp[i], prev[i] = best, start
    windows, i = [], n - 1
    while i >= 0:
        windows.append((prev[i], i))
        i = prev[i] - 1
    return windows[::-1], dp[-1]


def merge_clusters(x: Tensor, n_clusters: int, k: int, beta: float) -> tuple[Tensor, list[list[int]], Tensor]:
    """DPC-kNN centres of x [n, d] (ascending), their merged features and, per centre, the rows that joined it."""
    centres, assign = dpc_clusters(x, n_clusters, k)
    rows, groups = [], []
    for c, centre in enumerate(centres.tolist()):
        others = [i for i in torch.nonzero(assign == c).flatten().tolist() if i != centre]
        rows.append(beta * x[centre] + (1 - beta) * x[others].mean(dim=0) if others else x[centre])
        groups.append(others)
    return centres, groups, torch.stack(rows) if rows else x[:0]


@torch.no_grad()
def select_holitom(features: Tensor, attention: Tensor, keep: int, layout: VisualLayout,
                   params: HoliTomParams = HoliTomParams()) -> tuple[list[int], Tensor, list[list[int]], dict]:
    """Kept visual-span indices (ascending), their features, what each absorbed, details; of `features` [F, T, d]
    (the projected tokens) with their [CLS] attention `attention` [F, T]."""
    p = patch_inputs(layout, keep, features, attention)
    normed = torch.nn.functional.normalize(p.x, dim=-1)
    x, attn, N = p.x, p.attn, p.x.shape[1]
    sims = (normed[:-1] * normed[1:]).sum(dim=-1)
    windows, saved = static_windows(sims, params.tau, params.max_window)
    total = layout.n_frames * N
    ratio = sum(p.budgets) / total if total else 0.0
    ratio = min(ratio / ((total - saved) / total), 1.0) if saved < total else 1.0
    out = p.kept_cls(features)
    n_static = 0
    for s, e in windows:
        static = sims[s:e].gt(params.tau).all(dim=0) if e > s else torch.zeros(N, dtype=torch.bool)
        pos = torch.nonzero(static).flatten()
        n_static += pos.numel()
        n_clusters = round(pos.numel() * ratio)
        if n_clusters > 0:
            mean = x[s:e + 1, pos].mean(dim=0)
            centres, groups, rows = merge_clusters(mean, n_clusters, min(params.k, n_clusters), params.beta)
            for c, g, row in zip(centres.tolist(), groups, rows, strict=True):
                index = p.index(s, int(pos[c]))
                window = [p.index(f, int(pos[m])) for f in range(s, e + 1) for m in [c, *g]]
                out[index] = (row, sorted(set(window) - {index}))
        dynamic = torch.nonzero(~static).flatten()
        budget = math.ceil(dynamic.numel() * ratio)
        n_dominant = round(budget * params.dominant_share)
        for f in range(s, e + 1):
            order = torch.sort(attn[f, dynamic], descending=True, stable=True).indices
            for i in dynamic[order[:n_dominant]].tolist():
                out[p.index(f, i)] = (x[f, i], [])
            rest = dynamic[order[n_dominant:].sort().values]
            if budget - n_dominant > 0 and rest.numel():
                n_ctx = budget - n_dominant
                centres, groups, rows = merge_clusters(x[f, rest], n_ctx, min(params.k, n_ctx), params.beta)
                for c, g, row in zip(centres.tolist(), groups, rows, strict=True):
                    out[p.index(f, int(rest[c]))] = (row, sorted(p.index(f, int(rest[m])) for m in g))
    kept, visual, absorbed = merged_selection(out, features)
    details = {"windows": windows, "saved": saved, "retain_ratio": round(ratio, 4), "static_positions": n_static,
               "cls": p.cls}
    return kept, visual, absorbed, details
