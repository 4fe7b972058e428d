"""VidCom2: the per-frame budgets and kept set equal the official routine (xuyang-liu16/VidCom2,
token_compressor/vidcom2/vidcom2.py) recomputed here in plain torch on the clip's patches."""

import pytest
import torch

from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout


def _official(flat, tpf, base_scale):
    """Low-variance half of the channels; Gaussian similarity to the video and frame centres; frame scales from
    a softmax over -mean video similarity; each frame's k lowest-similarity tokens (local indices)."""
    variances = flat.var(dim=0, unbiased=False)
    channels = torch.topk(variances, k=int(flat.shape[-1] * 0.5), largest=False).indices
    frames = torch.nn.functional.normalize(flat[:, channels].view(-1, tpf, len(channels)), dim=-1)

    def gauss(c):
        d2 = ((frames - c) ** 2).sum(dim=-1)
        return sum(torch.exp(-d2 / (2 * a)) for a in [2**k for k in range(-3, 2)])

    vid, frm = gauss(frames.mean(dim=(0, 1), keepdim=True)), gauss(frames.mean(dim=1, keepdim=True))
    s = -vid.mean(dim=-1)
    probs = torch.softmax((s - s.max()) / 0.01, dim=0)
    scales = (base_scale * (1 + probs - probs.mean())).clamp(max=1.0)
    ks = (scales * tpf).round().long().clamp(min=1).tolist()
    return ks, [torch.topk((vid + frm)[i], k=k, largest=False).indices.sort().values for i, k in enumerate(ks)]


@pytest.mark.parametrize("keep", [30, 60, 90])
def test_matches_the_official_routine(keep):
    torch.manual_seed(keep)
    layout = VisualLayout(n_frames=6, grid=4, has_cls=True)  # 17 tokens per frame
    # frames of different content so their distinctiveness (and budgets) differ
    feats = torch.randn(6, 17, 10) + torch.linspace(0, 2, 6)[:, None, None] * torch.randn(1, 1, 10)
    method = REGISTRY.get("vidcom2")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(6, 17), layout), keep, method.defaults())
    ks, local = _official(feats[:, 1:].reshape(-1, 10), 16, (keep - 6) / (6 * 16))
    assert sel.details["frame_keeps"] == ks and len(set(ks)) > 1
    expected = [f * 17 for f in range(6)] + [f * 17 + 1 + int(i) for f in range(6) for i in local[f]]
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, feats.reshape(-1, 10)[sel.kept])
