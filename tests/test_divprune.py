"""DivPrune: the kept set equals the official greedy max-min routine (vbdi/divprune, DivPrune()) recomputed
here in plain torch over the clip's patches, with each frame's [CLS] kept."""

import pytest
import torch

from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout


def _official(x, n_pick):
    """DivPrune's loop: 1 - cosine distances; the first pick maximises the second-smallest entry of its column,
    each next one the minimum over the chosen rows."""
    normed = x / x.norm(dim=1, keepdim=True)
    dist = 1.0 - normed @ normed.t()
    s = torch.empty(n_pick, dtype=torch.long)
    for i in range(n_pick):
        if i == 0:
            scores = torch.topk(dist, 2, dim=0, largest=False).values[1, :]
        else:
            scores = torch.min(torch.index_select(dist, 0, s[:i]), dim=0).values
        s[i] = torch.argmax(scores)
    return s


@pytest.mark.parametrize("keep", [5, 9, 30, 60])
def test_matches_the_official_routine(keep):
    torch.manual_seed(keep)
    layout = VisualLayout(n_frames=4, grid=4, has_cls=True)  # 17 tokens per frame
    feats = torch.randn(4, 17, 8)
    method = REGISTRY.get("divprune")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(4, 17), layout), keep, method.defaults())
    n_cls = 4  # every frame's share of `keep` is >= 1, so every frame's [CLS] is kept
    patches = [f * 17 + i for f in range(4) for i in range(1, 17)]
    picked = _official(feats[:, 1:].reshape(64, 8), keep - n_cls)
    assert sel.kept == sorted([0, 17, 34, 51] + [patches[i] for i in picked.tolist()])
    torch.testing.assert_close(sel.visual, feats.reshape(68, 8)[sel.kept])
