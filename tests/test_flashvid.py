"""FlashVID (vision side): the kept set and merged features equal the published routine (Fanziyang-v/FlashVID,
flashvid/utils.py and token_selection.py) recomputed here in plain torch: attention-calibrated max-min
selection (ADTS), temporal tree merging and DPC-kNN clustering (STTM). Where this project's version departs
from the official code (said in its module docstring), the reference does the same."""

import math

import pytest
import torch

from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout
from videoqa.pruning.methods.flashvid.algorithm import FlashVIDParams, select_flashvid


def _adts(x, attn, n):
    """Official attn_div_based_token_selection for a batch of frames: local indices, sorted."""
    normed = x / x.norm(dim=-1, keepdim=True)
    dist = (1.0 - torch.bmm(normed, normed.transpose(1, 2))) * (attn * 1e6).unsqueeze(1)
    keep = torch.zeros(x.shape[0], n, dtype=torch.long)
    keep[:, 0] = torch.topk(dist, k=2, dim=1, largest=False).values[:, 1, :].argmax(dim=-1)
    for i in range(1, n):
        sub = torch.gather(dist, 1, keep[:, :i].unsqueeze(-1).expand(-1, -1, x.shape[1]))
        nearest = sub.min(dim=1).values
        nearest.scatter_(1, keep[:, :i], -1)
        keep[:, i] = nearest.argmax(dim=-1)
    return keep.sort().values


def _dpc(x, n_clusters, k):
    """Official dpc_knn, its 1e-6 of noise replaced by the documented tie rule (of equal densities the earlier
    token counts as denser; with k = 2 two mutual nearest neighbours always tie): (centres, each row's cluster)."""
    dists = torch.cdist(x[None], x[None])[0] / math.sqrt(x.shape[-1])
    density = (-(dists.topk(k, dim=-1, largest=False).values ** 2).mean(dim=-1)).exp()
    idx = torch.arange(len(x))
    tie = (density[None, :] == density[:, None]) & (idx[None] < idx[:, None])
    higher = (density[None, :] > density[:, None]) | tie
    parent = torch.where(higher, dists, dists.max()).min(dim=-1).values
    centres = (parent * density).topk(n_clusters).indices
    assign = dists[:, centres].argmin(dim=-1)
    assign[centres] = torch.arange(n_clusters)
    return centres, assign


def _reference(feats, attn, budget, alpha, segments, threshold):
    """{visual-span index: feature} for a clip of frames with a [CLS] at 0, the segments given."""
    f_n, t, _ = feats.shape
    x, a = feats[:, 1:], attn[:, 1:]
    n = t - 1
    n_adts = math.ceil(budget * alpha)
    n_sttm = budget - n_adts
    out = {f * t: feats[f, 0] for f in range(f_n)}
    sel = _adts(x, a, n_adts)
    for f in range(f_n):
        for i in sel[f].tolist():
            out[f * t + 1 + i] = x[f, i]
    start = 0
    for size in segments:
        fr = list(range(start, start + size))
        start += size
        free = torch.ones(size, n, dtype=torch.bool)
        for j, f in enumerate(fr):
            free[j, sel[f]] = False
        # tree: each free token of frame j >= 1 points to its most similar free token of frame j-1
        parent = {}
        for j in range(1, size):
            u = x[fr[j]] / x[fr[j]].norm(dim=-1, keepdim=True)
            v = x[fr[j - 1]] / x[fr[j - 1]].norm(dim=-1, keepdim=True)
            sim = (u @ v.T).masked_fill(~free[j][:, None], -1).masked_fill(~free[j - 1][None, :], -1)
            best, arg = sim.max(dim=-1)
            for i in range(n):
                if best[i] > threshold:
                    parent[(j, i)] = (j - 1, int(arg[i]))

        groups = {}
        for j in range(size):
            for i in range(n):
                if free[j, i]:
                    node = (j, i)
                    while node in parent:  # up the tree to the root in the segment's first frames
                        node = parent[node]
                    groups.setdefault(node, []).append(x[fr[j], i])
        left = sum(1 for j in range(size) for i in range(n) if free[j, i] and (j, i) not in parent)
        ratio = n_sttm * size / left
        for j, f in enumerate(fr):
            roots = [i for i in range(n) if free[j, i] and (j, i) not in parent]
            means = torch.stack([torch.stack(groups[(j, i)]).mean(dim=0) for i in roots])
            n_clusters = math.ceil(len(roots) * ratio)
            if ratio >= 1:
                out.update({f * t + 1 + i: m for i, m in zip(roots, means, strict=True)})
                continue
            centres, assign = _dpc(means, n_clusters, min(n_clusters, 7))
            for c, centre in enumerate(centres.tolist()):
                out[f * t + 1 + roots[centre]] = means[assign == c].mean(dim=0)
    return out


def _check(sel_kept, sel_visual, expected):
    assert sel_kept == sorted(expected)
    torch.testing.assert_close(sel_visual, torch.stack([expected[i] for i in sel_kept]))


def test_single_frame_segments_match_the_published_routine():
    torch.manual_seed(0)
    layout = VisualLayout(n_frames=4, grid=4, has_cls=True)
    feats, attn = torch.randn(4, 17, 8), torch.rand(4, 17).softmax(dim=-1)
    method = REGISTRY.get("flashvid")
    sel = method.select(EncodedVideo(feats, feats, attn, layout), 4 * 9, method.defaults())
    # 32 patches over 4 frames: 8 a frame, ceil(0.7 * 8) = 6 by ADTS, 2 clusters of the other 10
    assert sel.details["segments"] == [1, 1, 1, 1] and sel.details["adts_per_frame"] == 6
    _check(sel.kept, sel.visual, _reference(feats, attn, 8, 0.7, [1, 1, 1, 1], 0.8))
    assert sum(map(len, sel.absorbed)) == 4 * (10 - 2)


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_a_long_segment_merges_along_the_temporal_tree(threshold):
    torch.manual_seed(1)
    layout = VisualLayout(n_frames=3, grid=4, has_cls=True)
    feats = torch.randn(1, 17, 8) + 0.6 * torch.randn(3, 17, 8)  # tokens persist across frames, with noise
    attn = torch.rand(3, 17).softmax(dim=-1)
    params = FlashVIDParams(alpha=0.5, temporal_threshold=threshold, segment_threshold=-2.0, min_segments=1)
    kept, visual, absorbed, details = select_flashvid(feats, attn, 3 * 9, layout, params)
    assert details["segments"] == [3]
    expected = _reference(feats, attn, 8, 0.5, [3], threshold)
    _check(kept, visual, expected)
    assert any(i // 17 != j // 17 for i, group in zip(kept, absorbed, strict=True) for j in group)  # across time
