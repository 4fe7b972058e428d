"""LanguageBind's temporal video tower against the published formula, recomputed here in plain torch (einsum)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from transformers import CLIPVisionConfig, CLIPVisionModel
from transformers.models.clip.modeling_clip import CLIPEncoderLayer

from videoqa.models.clip_tower import cls_attention
from videoqa.models.languagebind import TemporalEncoderLayer, add_temporal_attention, encoder_layers

HEADS = 2


def vision_config(layers: int = 2) -> CLIPVisionConfig:
    return CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=layers, num_attention_heads=HEADS,
                            image_size=32, patch_size=8, hidden_act="gelu", attn_implementation="sdpa")


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Every weight random (LayerNorms too): a formula that leaves out any part gives other numbers."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.ndim == 1 and p.shape[0] == 16 else 0.0))


def attention(x, w, prefix):
    """Multi-head self-attention over x's second axis: [B, S, D] -> ([B, S, D], probs [B, H, S, S])."""
    b, s, d = x.shape
    q, k, v = ((x @ w[f"{prefix}{n}_proj.weight"].T + w[f"{prefix}{n}_proj.bias"]).view(b, s, HEADS, d // HEADS)
               for n in "qkv")
    probs = (torch.einsum("bshd,bthd->bhst", q, k) * (d // HEADS) ** -0.5).softmax(-1)
    out = torch.einsum("bhst,bthd->bshd", probs, v).reshape(b, s, d)
    return out @ w[f"{prefix}out_proj.weight"].T + w[f"{prefix}out_proj.bias"], probs


def norm(x, w, prefix):
    return F.layer_norm(x, x.shape[-1:], w[prefix + "weight"], w[prefix + "bias"], eps=1e-5)


def interpolated(emb: torch.Tensor, n: int) -> torch.Tensor:
    """[T, D] resampled to n positions spread over the same span (numpy's interp, one dimension at a time)."""
    t = emb.shape[0]
    at = np.linspace(0, t - 1, n)
    cols = [np.interp(at, np.arange(t), emb[:, j].numpy()) for j in range(emb.shape[1])]
    return torch.tensor(np.stack(cols, 1), dtype=emb.dtype)


def layer_reference(h, w, num_frames: int, mode: str):
    """The published CLIPEncoderLayer with add_time_attn (LanguageBind / Video-LLaVA): per clip of frames, add the
    temporal embedding, then x + temporal_attn(temporal_layer_norm1(x)) over the frames at each token position
    ([CLS] included); then x + self_attn(layer_norm1(x)) over the tokens of each frame; then x + mlp(layer_norm2(x)).
    Returns (output, the spatial attention's [CLS] row averaged over heads)."""
    n = h.shape[0]
    emb = w["temporal_embedding"][0]
    if mode == "groups":
        groups = [(s, min(num_frames, n - s), emb[:min(num_frames, n - s)]) for s in range(0, n, num_frames)]
    else:
        groups = [(0, n, emb if n == num_frames else interpolated(emb, n))]
    mixed = []
    for start, length, e in groups:
        x = h[start:start + length] + e[:, None, :]
        seq = x.permute(1, 0, 2)  # [N, T, D]
        out, _ = attention(norm(seq, w, "temporal_layer_norm1."), w, "temporal_attn.")
        mixed.append(x + out.permute(1, 0, 2))
    x = torch.cat(mixed)
    out, probs = attention(norm(x, w, "layer_norm1."), w, "self_attn.")
    x = x + out
    hidden = F.gelu(norm(x, w, "layer_norm2.") @ w["mlp.fc1.weight"].T + w["mlp.fc1.bias"])
    return x + hidden @ w["mlp.fc2.weight"].T + w["mlp.fc2.bias"], probs[:, :, 0].mean(1)


def temporal_layer(num_frames: int, mode: str, seed: int = 0) -> TemporalEncoderLayer:
    layer = TemporalEncoderLayer(CLIPEncoderLayer(vision_config()), num_frames, mode)
    randomize(layer, seed)
    return layer.eval()


@pytest.mark.parametrize("mode,n_frames", [("groups", 4), ("groups", 8), ("groups", 6), ("groups", 3),
                                           ("interpolate", 4), ("interpolate", 7), ("interpolate", 2)])
@torch.no_grad()
def test_temporal_layer_is_the_published_formula(mode, n_frames):
    layer = temporal_layer(num_frames=4, mode=mode)
    h = torch.randn(n_frames, 5, 16, generator=torch.Generator().manual_seed(1))
    expected, cls_row = layer_reference(h, layer.state_dict(), 4, mode)
    torch.testing.assert_close(layer(h, None), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cls_attention(layer, h), cls_row, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_the_plain_clip_layer_is_not_the_formula():
    """The reference tells the two towers apart: the same spatial weights without the temporal step differ."""
    layer = temporal_layer(num_frames=4, mode="groups")
    plain = CLIPEncoderLayer(vision_config()).eval()
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("temporal_")})
    h = torch.randn(4, 5, 16)
    expected, _ = layer_reference(h, layer.state_dict(), 4, "groups")
    assert (plain(h, None) - expected).abs().max() > 1e-2


def tower(num_frames: int = 4, mode: str = "groups", seed: int = 0) -> CLIPVisionModel:
    model = CLIPVisionModel(vision_config())
    add_temporal_attention(model, num_frames, mode)
    randomize(model, seed)
    return model.eval()


def tower_reference(model: CLIPVisionModel, pixels: torch.Tensor, num_frames: int, mode: str):
    """The same frames through a second composition: conv patches + [CLS] + positions, pre-LayerNorm, then the
    reference layer per layer. (hidden states, the [CLS] attention of each layer)."""
    w = model.state_dict()
    patches = F.conv2d(pixels, w["embeddings.patch_embedding.weight"], stride=8).flatten(2).transpose(1, 2)
    cls = w["embeddings.class_embedding"].expand(pixels.shape[0], 1, -1)
    x = torch.cat([cls, patches], 1) + w["embeddings.position_embedding.weight"]
    x = norm(x, w, "pre_layrnorm.")
    states, cls_rows = [x], []
    for i in range(len(encoder_layers(model))):
        own = {k.removeprefix(f"encoder.layers.{i}."): v for k, v in w.items() if k.startswith(f"encoder.layers.{i}.")}
        x, row = layer_reference(x, own, num_frames, mode)
        states.append(x)
        cls_rows.append(row)
    return states, cls_rows


@pytest.mark.parametrize("mode,n_frames", [("groups", 8), ("interpolate", 6)])
@torch.no_grad()
def test_tower_equals_an_independent_composition(mode, n_frames):
    model = tower(mode=mode)
    pixels = torch.randn(n_frames, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    out = model(pixels, output_hidden_states=True)
    states, cls_rows = tower_reference(model, pixels, 4, mode)
    assert len(out.hidden_states) == len(states) == 3
    for got, want in zip(out.hidden_states, states, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    # VisPruner's [CLS] attention at the feature layer -2: the input of encoder.layers[-2] is hidden_states[-3]
    torch.testing.assert_close(cls_attention(encoder_layers(model)[-2], out.hidden_states[-3]), cls_rows[-2],
                               atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_groups_mode_encodes_a_batch_of_clips_as_each_clip_alone():
    model = tower(num_frames=4, mode="groups")
    a, b = torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)
    both = model(torch.cat([a, b]), output_hidden_states=True).hidden_states[-2]
    torch.testing.assert_close(both[:4], model(a, output_hidden_states=True).hidden_states[-2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both[4:], model(b, output_hidden_states=True).hidden_states[-2], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_swap_is_per_instance_and_keeps_the_spatial_weights():
    model = CLIPVisionModel(vision_config())
    other = CLIPVisionModel(vision_config())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    add_temporal_attention(model, 4)
    assert type(encoder_layers(other)[0]) is CLIPEncoderLayer  # the class itself is untouched
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert sorted(set(after) - set(before))[:3] == ["encoder.layers.0.temporal_attn.k_proj.bias",
                                                    "encoder.layers.0.temporal_attn.k_proj.weight",
                                                    "encoder.layers.0.temporal_attn.out_proj.bias"]


def test_tower_bench_rows_time_both_towers_and_count_the_temporal_weights():
    from videoqa.bench.tower import format_tower_table, tower_flops, tower_rows

    config = vision_config(layers=2)
    hf, published = tower_rows(config=config, frames=8)
    d, t = config.hidden_size, 8
    per_layer = 4 * (d * d + d) + 2 * d + t * d  # q k v out projections, its LayerNorm, the embedding
    assert round((published.params_m - hf.params_m) * 1e6) == 2 * per_layer
    tokens = 8 * 17  # (32 / 8)^2 patches + [CLS], 8 frames
    assert (published.gflops - hf.gflops) * 1e9 == pytest.approx(2 * (8 * tokens * d * d + 4 * 17 * 8 * 8 * d))
    assert hf.gflops == tower_flops(config, 8, temporal=False) and hf.seconds > 0 and published.cpu_seconds > 0
    assert "| published (temporal attention) | 8 |" in format_tower_table([hf, published], "tiny")
