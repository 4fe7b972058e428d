"""VisPruner: [CLS] attention without eager attention, and selection on tensors with known answers."""

import pytest
import torch
from transformers import CLIPVisionConfig, CLIPVisionModel

from videoqa.models.clip_tower import cls_attention
from videoqa.pruning.base import VisualLayout
from videoqa.pruning.methods.vispruner.algorithm import select_vispruner


def _tower(attn):
    cfg = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_hidden_layers=3,
        image_size=32,
        patch_size=8,
    )
    torch.manual_seed(0)
    model = CLIPVisionModel(cfg).eval()
    model.set_attn_implementation(attn)
    return model


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_cls_attention_equals_eager_attention_weights(layer):
    model = _tower("eager")
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        out = model(pixel_values=pixels, output_hidden_states=True, output_attentions=True)
    expected = out.attentions[layer][:, :, 0, :].mean(dim=1)  # [F, T]: CLS row, mean over heads
    got = cls_attention(model.encoder.layers[layer], out.hidden_states[layer])
    assert got.shape == (3, 17)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones(3))


def test_cls_attention_from_an_sdpa_run_of_the_feature_layer():
    # The tower runs with SDPA (no attention weights); the feature layer -2's input is hidden_states[-3].
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        eager = _tower("eager")(pixel_values=pixels, output_attentions=True)
        sdpa_model = _tower("sdpa")
        out = sdpa_model(pixel_values=pixels, output_hidden_states=True)
    assert out.attentions is None
    got = cls_attention(sdpa_model.encoder.layers[-2], out.hidden_states[-3])
    torch.testing.assert_close(got, eager.attentions[-2][:, :, 0, :].mean(dim=1), atol=1e-5, rtol=1e-4)


def _official(attn, feats, budget, ratio):
    """Theia-4869/VisPruner's encode_images selection, transcribed for a batch of images (patches only)."""
    b, n, _ = feats.shape
    n_imp = int(budget * ratio)
    n_div = budget - n_imp
    order = attn.argsort(dim=-1, descending=True)
    important, residual = order[:, :n_imp], order[:, n_imp:]
    normed = feats / feats.norm(dim=-1, keepdim=True)
    while True:
        r_len = residual.shape[1]
        r = min(8, r_len - n_div)
        if r <= 0:
            break
        tokens = normed[torch.arange(b).unsqueeze(-1).expand(-1, r_len), residual]
        a, bb = tokens[..., ::2, :], tokens[..., 1::2, :]
        scores = (a @ bb.transpose(-1, -2)).max(dim=-1).values
        distinct = scores.argsort(dim=-1, descending=True)[:, r:]
        residual = torch.cat(
            [
                residual[..., ::2][torch.arange(b).unsqueeze(-1).expand(-1, r_len // 2 - r), distinct],
                residual[..., 1::2],
            ],
            dim=-1,
        )
    return [set(row) for row in torch.cat([important, residual], dim=-1).tolist()]


def test_matches_official_selection_per_frame():
    torch.manual_seed(1)
    layout = VisualLayout(n_frames=3, grid=6, has_cls=True)  # 37 tokens per frame
    attn = torch.rand(3, 37)
    feats = torch.randn(3, 37, 16)
    keep = 3 * 21  # per frame: CLS + 20 patches = 10 important + 10 diverse
    kept, details = select_vispruner(attn, feats, keep, 0.5, layout)
    reference = _official(attn[:, 1:], feats[:, 1:], 20, 0.5)
    for f in range(3):
        patches = {i - f * 37 - 1 for i in kept if i // 37 == f and i % 37 != 0}
        assert patches == reference[f]
    assert details["cls"] == [0, 37, 74]
    assert details["frame_budgets"] == [21, 21, 21]


def test_important_tokens_are_the_top_attention_patches():
    torch.manual_seed(2)
    layout = VisualLayout(n_frames=2, grid=4, has_cls=True)  # 17 tokens per frame
    attn = torch.rand(2, 17)
    attn[:, 0] = 10.0  # CLS self-attention is ignored, not ranked
    feats = torch.randn(2, 17, 8)
    kept, details = select_vispruner(attn, feats, keep=2 * 7, important_ratio=1.0, layout=layout)
    expected = []
    for f in range(2):
        top = attn[f, 1:].topk(6).indices + 1 + f * 17
        expected += [f * 17] + top.tolist()
    assert kept == sorted(expected)
    assert details["diverse"] == []


def test_near_duplicates_are_removed_and_distinct_tokens_kept():
    # 12 patches with no importance share (r = 0): six pairs of near-duplicates and four unique directions.
    # Attention orders them pair by pair, so each pair is split across the two matching sets.
    layout = VisualLayout(n_frames=1, grid=4, has_cls=False)  # 16 patches, no CLS
    dirs = torch.eye(16)
    torch.manual_seed(3)
    feats = torch.zeros(1, 16, 16)
    attn = torch.zeros(1, 16)
    order = []
    for pair in range(6):
        a, b = 2 * pair, 2 * pair + 1
        feats[0, a] = dirs[pair]
        feats[0, b] = dirs[pair] + 0.01 * torch.randn(16)
        order += [a, b]
    for u in range(12, 16):
        feats[0, u] = dirs[u - 6]
        order.append(u)
    for rank, idx in enumerate(order):
        attn[0, idx] = 1.0 - rank / 16
    kept, details = select_vispruner(attn, feats, keep=10, important_ratio=0.0, layout=layout)
    assert len(kept) == 10
    kept_dirs = {int(feats[0, i].argmax()) for i in kept}
    assert kept_dirs == set(range(10))  # one of each pair, every unique token
    assert set(range(12, 16)) <= set(kept)
    assert details["important"] == []


def test_budget_exact_sorted_deterministic_and_split_per_frame():
    torch.manual_seed(4)
    layout = VisualLayout(n_frames=8, grid=8, has_cls=True)  # 65 tokens per frame, the tiny model's layout
    attn = torch.rand(8, 65).softmax(-1)
    feats = torch.randn(8, 65, 24)
    for keep in [0, 1, 5, 8, 13, 260, 519, 520]:
        kept, details = select_vispruner(attn, feats, keep, 0.5, layout)
        assert len(kept) == keep and kept == sorted(set(kept))
        assert all(0 <= i < 520 for i in kept)
        assert kept == select_vispruner(attn.clone(), feats.clone(), keep, 0.5, layout)[0]
        per_frame = [sum(1 for i in kept if i // 65 == f) for f in range(8)]
        assert per_frame == details["frame_budgets"]
        assert max(per_frame) - min(per_frame) <= 1
        # every frame with a budget keeps its CLS
        assert details["cls"] == [f * 65 for f in range(8) if per_frame[f] > 0]
    # 5 leftover tokens over 8 frames are spread over the clip, not bunched at its start
    assert select_vispruner(attn, feats, 5, 0.5, layout)[1]["frame_budgets"] == [1, 1, 0, 1, 1, 0, 1, 0]


def test_shape_and_argument_errors():
    layout = VisualLayout(n_frames=2, grid=2, has_cls=True)
    attn, feats = torch.rand(2, 5), torch.randn(2, 5, 4)
    with pytest.raises(ValueError):
        select_vispruner(attn[:, :4], feats, 3, 0.5, layout)
    with pytest.raises(ValueError):
        select_vispruner(attn, feats, 11, 0.5, layout)
    with pytest.raises(ValueError):
        select_vispruner(attn, feats, 3, 1.5, layout)
