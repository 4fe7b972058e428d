"""VisionZip: the kept set and merged features equal the official routine (dvlab-research/VisionZip,
CLIPVisionTower_VisionZip.forward) recomputed here in plain torch, per frame as a batch of images."""

import torch

from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout


def _official(attn, metric, hidden, dominant_num, contextual_num):
    """The official selection for a batch of images (CLS at 0): the [CLS] plus the top `dominant_num` patches by
    [CLS] attention, then `contextual_num` evenly strided targets of the rest, each + the mean of its joiners.
    Returns per image the kept local indices in the official output order and the output features."""
    b, n, _ = hidden.shape
    top = attn[:, 1:].topk(dominant_num, dim=1).indices + 1
    chosen = torch.cat([torch.zeros(b, 1, dtype=torch.long), top], dim=1)
    mask = torch.ones(b, n, dtype=torch.bool).scatter_(1, chosen, False)
    dominant = hidden.masked_select(~mask.unsqueeze(-1)).view(b, dominant_num + 1, -1)
    rest_idx = torch.arange(n).expand(b, n)[mask].view(b, -1)
    m = metric[mask].view(b, n - dominant_num - 1, -1)
    m = m / m.norm(dim=-1, keepdim=True)
    h = hidden.masked_select(mask.unsqueeze(-1)).view(b, n - dominant_num - 1, -1)
    step = max(1, m.shape[1] // contextual_num)
    targets = torch.arange(0, m.shape[1], step)[:contextual_num]
    others = ~torch.isin(torch.arange(m.shape[1]), targets)
    sim = torch.bmm(m[:, others], m[:, targets].transpose(1, 2))
    one_hot = torch.zeros(b, int(others.sum()), contextual_num).scatter_(2, sim.argmax(dim=2, keepdim=True), 1)
    counts = one_hot.sum(dim=1).clamp(min=1).unsqueeze(-1)
    contextual = h[:, targets] + torch.bmm(one_hot.transpose(1, 2), h[:, others]) / counts
    dom_idx = torch.sort(chosen, dim=1).values  # masked_select keeps the original order
    return torch.cat([dom_idx, rest_idx[:, targets]], dim=1), torch.cat([dominant, contextual], dim=1)


def test_matches_the_official_routine_per_frame():
    torch.manual_seed(0)
    layout = VisualLayout(n_frames=3, grid=6, has_cls=True)  # 37 tokens per frame
    attn = torch.rand(3, 37).softmax(dim=-1)
    metric, feats = torch.randn(3, 37, 12), torch.randn(3, 37, 16)
    enc = EncodedVideo(feats, metric, attn, layout)
    method = REGISTRY.get("visionzip")
    sel = method.select(enc, 3 * 13, method.defaults())  # 13 per frame: int(13 * 10/64) = 2 contextual
    idx, out = _official(attn, metric, feats, dominant_num=10, contextual_num=2)
    expected = {}
    for f in range(3):
        for i, row in zip(idx[f].tolist(), out[f], strict=True):
            expected[f * 37 + i] = row
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, torch.stack([expected[i] for i in sel.kept]))
    assert sum(map(len, sel.absorbed)) == 3 * (37 - 13)  # every dropped patch joined one target


def test_official_settings_split_and_without_cls():
    method = REGISTRY.get("visionzip")
    enc = EncodedVideo(torch.randn(2, 577, 4), torch.randn(2, 577, 4), torch.rand(2, 577), VisualLayout(2, 24))
    sel = method.select(enc, 2 * 64, method.defaults())
    assert [len(sel.details["contextual"]), len(sel.details["dominant"])] == [2 * 10, 2 * 53]  # 54 + 10 a frame
    no_cls = VisualLayout(n_frames=2, grid=4, has_cls=False)
    attn = torch.rand(2, 16)
    sel = method.select(EncodedVideo(torch.randn(2, 16, 4), torch.randn(2, 16, 4), attn, no_cls), 2 * 7,
                        method.defaults())
    top = {f * 16 + int(i) for f in range(2) for i in attn[f].topk(6).indices}  # 7 - int(7 * 10/64) = 6
    assert top <= set(sel.kept) and len(sel.kept) == 14
