"""FlashVID (official code Fanziyang-v/FlashVID, flashvid/utils.py), its vision-side stage, before the LLM.

1. Segmentation: frames whose mean token stops being cosine-similar to the next one's (< `segment_threshold`)
   start a new segment; while there are fewer than `min_segments` segments, the least similar remaining
   transitions are cut too (8 frames with the default 8 segments: every frame its own segment).
2. ADTS, per frame: `ceil(alpha * b)` tokens of the frame's budget b by attention-calibrated max-min diversity:
   d(i, j) = (1 - cos(x_i, x_j)) * a_j with a the [CLS] attention; the first token maximises the second-
   smallest entry of its column (its distance to its nearest neighbour), each next one its minimum
   distance to the chosen set.
3. STTM, per segment, on the tokens ADTS left: tree merging across time — a token whose best cosine match
   among the previous frame's free tokens exceeds `temporal_threshold` merges into it (if that leaves
   fewer than the segment's budget, the threshold is lowered to the similarity that leaves exactly it) —
   then per frame density-peak clustering (DPC-kNN, k = min(clusters, 7)) into ceil(n * r) clusters, r =
   the segment's remaining budget over the tokens left; a cluster becomes the mean of its members, reported
   at its centre.
The per-frame budget is ceil(patch budget / frames), the official `ceil(N * retention)` without its float
error; the official `expansion` (1.25) and in-LLM stage (FastV at layer 20) are not part of this stage.

Adaptations, each said where it differs: a single-frame segment clusters only the tokens ADTS left (the
official code clusters the whole frame there, so a centre can repeat an ADTS token); a tree's root becomes
the mean of its whole subtree (the official code divides the subtree's sum by 1 + its direct children);
density ties resolve by position (the official code adds 1e-6 of noise); every ranking is stable, so ties
go to the earlier token; the [CLS] rule of VisPruner (kept per frame, counted against `keep`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import dpc_clusters, merged_selection, patch_inputs


@dataclass(frozen=True)
class FlashVIDParams:
    """The official defaults (FlashVidConfig)."""

    alpha: float = 0.7  # share of each frame's budget chosen by ADTS
    temporal_threshold: float = 0.8
    segment_threshold: float = 0.9
    min_segments: int = 8
    dpc_k: int = 7


def segment_lengths(frame_features: Tensor, threshold: float, min_segments: int) -> list[int]:
    """Frames per segment: cut below `threshold`, then at the least similar transitions up to `min_segments`."""
    n = frame_features.shape[0]
    g = torch.nn.functional.normalize(frame_features.float(), dim=-1)
    sims = (g[:-1] * g[1:]).sum(dim=-1)
    cuts = set(torch.nonzero(sims < threshold).flatten().tolist())
    need = min(min_segments - 1, n - 1) - len(cuts)
    if need > 0:
        free = sims.masked_fill(sims < threshold, 1.0)
        cuts |= set(torch.sort(free, stable=True).indices[:need].tolist())
    bounds = [-1, *sorted(cuts), n - 1]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def adts(x: Tensor, attention: Tensor, n_pick: int) -> list[int]:
    """Attention-calibrated max-min diversity over one frame's tokens x [N, d]: local indices, in pick order."""
    n = x.shape[0]
    n_pick = min(n_pick, n)
    if n_pick <= 0:
        return []
    normed = torch.nn.functional.normalize(x.float(), dim=-1)
    dist = (1.0 - normed @ normed.T) * (attention.float() * 1e6)[None, :]
    if n == 1:
        return [0]
    chosen = [int(dist.topk(2, dim=0, largest=False).values[1].argmax())]
    nearest = dist[chosen[0]].clone()
    nearest[chosen[0]] = -1.0
    for _ in range(n_pick - 1):
        nxt = int(nearest.argmax())
        chosen.append(nxt)
        nearest = torch.minimum(nearest, dist[nxt])
        nearest[torch.as_tensor(chosen)] = -1.0
    return chosen


def tree_merge(x: Tensor, free: Tensor, threshold: float,
               lower_bound: int) -> tuple[Tensor, Tensor, list[list[list[int]]]]:
    """Temporal tree merging in one segment. x [n, N, d], free [n, N] (not chosen by ADTS).

    Returns the roots' mean features [n, N, d], which tokens are roots [n, N] (free and not merged), and per
    frame and token the local (frame, token) pairs flattened as frame * N + token that its subtree holds."""
    n, N, _ = x.shape
    normed = torch.nn.functional.normalize(x.float(), dim=-1)
    sims = normed[1:] @ normed[:-1].transpose(1, 2)  # [n-1, N, N]: token i of frame t+1 vs j of frame t
    sims = sims.masked_fill(~free[1:, :, None], -1.0).masked_fill(~free[:-1, None, :], -1.0)
    best, parent = sims.max(dim=-1)
    best = torch.cat([torch.full((1, N), -1.0), best])
    parent = torch.cat([torch.full((1, N), -1, dtype=torch.long), parent])
    merged = best > threshold
    if int((~merged).sum()) < lower_bound:
        soft = max(float(best.flatten().topk(n * N - lower_bound).values[-1]), -1.0 + 1e-6)
        merged = best > soft
    total = x.float().clone()
    members = [[[t * N + i] for i in range(N)] for t in range(n)]
    for t in range(n - 1, 0, -1):
        for i in torch.nonzero(merged[t]).flatten().tolist():
            p = int(parent[t, i])
            total[t - 1, p] += total[t, i]
            members[t - 1][p] += members[t][i]
    counts = torch.tensor([[len(m) for m in row] for row in members], dtype=total.dtype)
    return total / counts[..., None], free & ~merged, members


@torch.no_grad()
def select_flashvid(features: Tensor, attention: Tensor, keep: int, layout: VisualLayout,
                    params: FlashVIDParams = FlashVIDParams()) -> tuple[list[int], Tensor, list[list[int]], dict]:
    """Kept visual-span indices (ascending), their features (cluster means), what each absorbed, details.
    features [F, T, d]: the projected tokens; attention [F, T]: [CLS] -> token attention."""
    p = patch_inputs(layout, keep, features, attention)
    x, attn, N = p.x, p.attn, p.x.shape[1]
    budget = -(-sum(p.budgets) // layout.n_frames)
    n_adts = math.ceil(budget * params.alpha)
    n_sttm = budget - n_adts
    out = p.kept_cls(features)  # visual-span index -> (feature, absorbed)
    sizes = segment_lengths(x.mean(dim=1), params.segment_threshold, params.min_segments)
    start = 0
    for size in sizes:
        frames = range(start, start + size)
        start += size
        free = torch.ones(size, N, dtype=torch.bool)
        for j, f in enumerate(frames):
            for i in adts(x[f], attn[f], n_adts):
                out[p.index(f, i)] = (x[f, i], [])
                free[j, i] = False
        if n_sttm <= 0 or params.temporal_threshold >= 1.0:
            continue
        seg = x[frames.start:frames.stop]
        if size > 1:
            means, roots, members = tree_merge(seg, free, params.temporal_threshold, budget * size)
        else:
            means, roots, members = seg, free, [[[i] for i in range(N)]]
        n_left = int(roots.sum())
        ratio = n_sttm * size / n_left if n_left else 1.0
        for j, f in enumerate(frames):
            local = torch.nonzero(roots[j]).flatten()
            groups = [[p.index(frames.start + m // N, m % N) for m in members[j][i]] for i in local.tolist()]
            n_clusters = math.ceil(local.numel() * ratio)
            if ratio >= 1.0 or n_clusters <= 0:
                for i, g in zip(local.tolist(), groups, strict=True):
                    out[p.index(f, i)] = (means[j, i], sorted(set(g) - {p.index(f, i)}))
                continue
            centres, assign = dpc_clusters(means[j, local], n_clusters, params.dpc_k)
            for c, centre in enumerate(centres.tolist()):
                rows = torch.nonzero(assign == c).flatten()
                index = p.index(f, int(local[centre]))
                absorbed = sorted({m for r in rows.tolist() for m in groups[r]} - {index})
                out[index] = (means[j, local[rows]].mean(dim=0), absorbed)
    kept, visual, absorbed = merged_selection(out, features)
    details = {"segments": sizes, "frame_budget": budget, "adts_per_frame": n_adts, "sttm_per_frame": n_sttm,
               "cls": p.cls}
    return kept, visual, absorbed, details
