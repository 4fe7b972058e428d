"""PruneVid (arXiv 2412.16117, ACL 2025; official code Visual-AI/PruneVid, models/pllava/modeling_pllava.py
`merge_frames_dynamic`, `refine_clusters`, and models/pllava/elastic_cache.py `VTPWindowCache`).

Before the LLM:
1. Segments: the frames' mean tokens are clustered by density peaks (DPC-kNN, k = 7) into
   int(F * 0.25) clusters; each cluster keeps its longest run of consecutive frames (a cluster whose runs are all
   single frames keeps none), and every frame left over joins the longer of its neighbouring runs (the left one
   on a tie). The runs are the segments.
2. In each segment, a token position is static when the mean cosine similarity of its tokens over every pair of
   the segment's frames exceeds tau (0.8). Static positions become one token each (their mean over the segment);
   each frame's other (dynamic) positions stay per frame. Either set, when it has more than 14 tokens, is then
   clustered by DPC-kNN (k = 7) into int(n * 0.5) clusters, each becoming the mean of its members.
Inside the LLM, after layer 10 of 32 (here: before layer K, published 11 of 32 scaled to the depth): the attention
of the text after the video to each visual token, the maximum over heads and then over those text tokens; each
segment's static tokens and each frame's dynamic tokens keep their int(n * alpha) best. Those pruned are also
dropped from the KV cache of the layers below (the official code trims them there), so every decoded token sees
only the kept ones.

Adaptations: alpha = 1 - R (the official alpha 0.4 is R = 0.6). The [CLS] of every frame stays, in both stages
(the VisPruner rule); segmentation and merging cover patches. A merged token is reported at its cluster centre's
position (a static one in its segment's first frame), with the tokens it merged as absorbed, and the LLM sees the
tokens in that position order (the official code puts each segment's static tokens first). Density ties resolve
by position where the official code adds noise; attention ties by position (stable sorts) where it leaves them to
`topk`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...base import VisualLayout
from ...hook import DecodeView, LayerKeep, LayerView
from ...shared import check_shapes, density_peaks


@dataclass(frozen=True)
class PruneVidParams:
    """The official defaults (scripts/eval.sh and modeling_pllava.py)."""

    tau: float = 0.8
    segment_ratio: float = 0.25  # temporal_segment_ratio: segments = int(frames * this)
    cluster_ratio: float = 0.5
    k: int = 7  # neighbours in the density estimate
    min_cluster: int = 14  # a set of at most this many tokens is not clustered


def clusters(x: Tensor, n_clusters: int, k: int) -> tuple[Tensor, Tensor]:
    """DPC-kNN: the centres of x [n, d] (ascending) and each row's cluster (the centre it is nearest)."""
    centres = density_peaks(x, n_clusters, min(k, len(x)))
    dist = torch.cdist(x[None].float(), x[centres][None].float())[0]
    assign = dist.argmin(dim=1)
    assign[centres] = torch.arange(len(centres))
    return centres, assign


def _runs(labels: list[int]) -> list[tuple[int, int, int]]:
    """(label, start, end inclusive) of each run of equal labels."""
    out, start = [], 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((labels[start], start, i - 1))
            start = i
    return out


def refine(labels: list[int]) -> list[int]:
    """The official `refine_clusters`: each label keeps its longest runs, leftovers join a neighbouring run."""
    out = list(labels)
    for label in set(labels):
        runs = [(s, e) for lab, s, e in _runs(labels) if lab == label]
        longest = max(e - s + 1 for s, e in runs)
        for s, e in runs:
            if longest == 1 or e - s + 1 != longest:
                out[s:e + 1] = [-1] * (e - s + 1)
    i, n = 0, len(out)
    while i < n:
        if out[i] != -1:
            i += 1
            continue
        start = i
        while i < n and out[i] == -1:
            i += 1
        left = right = None
        left_len = right_len = 0
        if start > 0:
            left, j = out[start - 1], start - 1
            while j >= 0 and out[j] == left:
                j -= 1
            left_len = start - 1 - j
        if i < n:
            right, j = out[i], i
            while j < n and out[j] == right:
                j += 1
            right_len = j - i
        label = left if left_len > right_len else right if right_len > left_len else (
            left if left is not None else right)
        out[start:i] = [0 if label is None else label] * (i - start)
    return out


def segments(frame_means: Tensor, params: PruneVidParams) -> list[tuple[int, int]]:
    """(first, last) frame of each segment. frame_means [F, d]."""
    f_n = len(frame_means)
    labels = clusters(frame_means, max(1, int(f_n * params.segment_ratio)), params.k)[1].tolist()
    return [(s, e) for _, s, e in _runs(refine(labels))]


def _merge(x: Tensor, params: PruneVidParams) -> list[list[int]]:
    """Groups of rows of x [n, d] merged into one token each (first: the cluster centre), or singletons."""
    if len(x) <= params.min_cluster:
        return [[i] for i in range(len(x))]
    centres, assign = clusters(x, int(len(x) * params.cluster_ratio), params.k)
    return [[c, *[i for i in (assign == a).nonzero().flatten().tolist() if i != c]]
            for a, c in enumerate(centres.tolist())]


@torch.no_grad()
def select_prunevid(features: Tensor, layout: VisualLayout, params: PruneVidParams = PruneVidParams()
                    ) -> tuple[list[int], Tensor, list[list[int]], dict]:
    """Kept visual-span indices (ascending), their features, what each absorbed, and details (`groups`: per kept
    token, -1 for a [CLS], else the id of its set: a segment's static tokens or one frame's dynamic ones).
    features [F, T, d]: the projected tokens."""
    check_shapes(layout, 0, features)
    f_n, t, first = layout.n_frames, layout.tokens_per_frame, int(layout.has_cls)
    x = features[:, first:].float()
    normed = torch.nn.functional.normalize(x, dim=-1)
    out: dict[int, tuple[Tensor, list[int], int]] = {f * t: (features[f, 0].float(), [], -1)
                                                     for f in range(f_n) if first}
    group = 0
    segs = segments(x.mean(dim=1), params)
    for s, e in segs:
        w = e - s + 1
        if w > 1:
            sim = torch.einsum("wnd,vnd->wvn", normed[s:e + 1], normed[s:e + 1])
            static = (sim.sum(dim=(0, 1)) - w) / (w * (w - 1)) > params.tau
        else:
            static = torch.zeros(x.shape[1], dtype=torch.bool)
        pos, dyn = static.nonzero().flatten(), (~static).nonzero().flatten()
        # (positions, the frames the set spans, its rows): a static set is reported in the segment's first frame
        sets = [(pos, list(range(s, e + 1)), x[s:e + 1, pos].mean(dim=0))] if len(pos) else []
        sets += [(dyn, [f], x[f, dyn]) for f in range(s, e + 1) if len(dyn)]
        for positions, frames, rows in sets:
            for members in _merge(rows, params):
                index = frames[0] * t + first + int(positions[members[0]])
                merged = sorted({f * t + first + int(positions[m]) for f in frames for m in members} - {index})
                out[index] = (rows[members].mean(dim=0), merged, group)
            group += 1
    kept = sorted(out)
    visual = torch.stack([out[i][0] for i in kept]).to(features.dtype)
    details = {"segments": segs, "groups": [out[i][2] for i in kept]}
    return kept, visual, [out[i][1] for i in kept], details


def keep_by_group(score: Tensor, groups: list[int], alpha: float) -> Tensor:
    """Ascending indices kept: every [CLS] (group -1), and in each group its int(size * alpha) best scores."""
    g = torch.tensor(groups, device=score.device)
    keep = g < 0
    for label in sorted(set(groups) - {-1}):
        members = (g == label).nonzero().flatten()
        n_keep = int(len(members) * alpha)
        keep[members[torch.sort(score[members], descending=True, stable=True).indices[:n_keep]]] = True
    return keep.nonzero().flatten()


@dataclass
class PruneVidPlan:
    """The in-LLM stage: before layer `layer`, keep each group's best by the text's attention (max over heads and
    text tokens) at the layer before; from the first decoded token on, the layers below hide the pruned too."""

    layer: int
    r: list[float]
    groups: list[list[int]]  # per sample: the selection's `groups`
    dropped: list[Tensor] = field(default_factory=list)  # per sample: sequence slots (group 0) of pruned tokens

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.layer,)

    def at_layer(self, view: LayerView) -> LayerKeep:
        n = view.hidden.shape[1]
        # every sample's text after its video: from the earliest end of a visual span (left padding varies)
        first = min(int(view.visual_mask[s].nonzero().max()) for s in range(len(view.r))) + 1
        rows = torch.arange(first, n, device=view.hidden.device)
        heads = view.attention_heads(rows)  # [B, H, q, n]
        kept, scores, self.dropped = [], [], []
        for s in range(len(view.r)):
            vis = view.visual_mask[s].nonzero().flatten()
            text = (rows > int(vis.max())) & view.key_mask[s, rows]
            score = heads[s][:, text][..., vis].amax(dim=0).amax(dim=0)
            groups = self.groups[s] + [-1] * (len(vis) - len(self.groups[s]))  # summary tokens stay, as a [CLS]
            keep = keep_by_group(score, groups, 1 - view.r[s])
            gone = torch.ones(len(vis), dtype=torch.bool, device=vis.device)
            gone[keep] = False
            kept.append(keep)
            scores.append(score)
            self.dropped.append(vis[gone])
        return LayerKeep(kept, scores)

    def before_step(self, view: DecodeView) -> None:
        for s, slots in enumerate(self.dropped):
            view.key_masks[0][s, slots] = False
