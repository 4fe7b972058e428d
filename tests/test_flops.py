"""FLOPs estimate: the paper's published Video-LLaVA ratios; PyTorch's own FLOP counter as a brute check."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from transformers import VideoLlavaConfig

from videoqa.models import VideoLlava
from videoqa.pruning.base import ModelDims
from videoqa.pruning.flops import estimate_flops, layer_flops

# A typical Video-LLaVA evaluation prompt besides the video: the llava_v1 system line (~35 tokens),
# "USER:"/"ASSISTANT:" and a one-sentence question — about 64 tokens.
TEXT_TOKENS = 64


@pytest.mark.parametrize(("k", "published"), [(2, 0.523), (5, 0.571)])
def test_paper_ratios_video_llava_7b(k, published):
    dims = VideoLlava().dims(VideoLlavaConfig())  # the 7B architecture, no weights
    assert (dims.n_layers, dims.hidden, dims.ffn) == (32, 4096, 11008)
    est = estimate_flops(dims, TEXT_TOKENS, 2048, 1024, k)  # R = 50% of 2048 visual tokens
    assert abs(est.ratio - published) < 0.01
    assert est.n_tokens == TEXT_TOKENS + 2048 and est.n_tokens_pruned == TEXT_TOKENS + 1024


class _PaperLayer(nn.Module):
    """A decoder layer with exactly the matmuls FastV's formula counts: q/k/v/o, QK^T, AV, a 2-matrix FFN."""

    def __init__(self, d, m, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.up, self.down = nn.Linear(d, m, bias=False), nn.Linear(m, d, bias=False)

    def forward(self, x):
        n, d = x.shape
        split = lambda t: t.view(n, self.heads, d // self.heads).transpose(0, 1)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-1, -2)).softmax(-1) @ v
        x = x + self.o(att.transpose(0, 1).reshape(n, d))
        return x + self.down(torch.relu(self.up(x)))


def _counted_macs(layers, x, prune_at, keep_rows):
    """Run the layers, slicing the sequence to keep_rows before layer prune_at; return multiply-adds."""
    with FlopCounterMode(display=False) as counter:
        for i, layer in enumerate(layers):
            if i == prune_at:
                x = x[keep_rows]
            x = layer(x)
    return counter.get_total_flops() // 2  # the counter reports 2 FLOPs per multiply-add


@pytest.mark.parametrize("layer", [None, 0, 2, 5, 6])
def test_matches_flop_counter_on_real_layers(layer):
    d, m, heads, t = 32, 88, 4, 6
    n_text, n_visual, n_kept = 7, 40, 13
    dims = ModelDims(
        n_layers=t,
        hidden=d,
        ffn=m,
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=d // heads,
        context=512,
        tokens_per_frame=17,
        grid=4,
    )
    torch.manual_seed(0)
    layers = [_PaperLayer(d, m, heads) for _ in range(t)]
    x = torch.randn(n_text + n_visual, d)
    keep_rows = torch.arange(n_text + n_kept)  # which rows survive does not change the count
    with torch.no_grad():
        full = _counted_macs(layers, x, None, keep_rows)
        pruned = _counted_macs(layers, x, layer, keep_rows)
    est = estimate_flops(dims, n_text, n_visual, n_kept, layer)
    assert est.full == full
    assert est.pruned == pruned
    assert est.ratio == pytest.approx(pruned / full)
    assert est.layer == layer


def test_layer_formula_and_edges():
    assert layer_flops(3, 5, 7) == 4 * 3 * 25 + 2 * 9 * 5 + 2 * 3 * 5 * 7
    dims = VideoLlava().dims(VideoLlavaConfig())
    none = estimate_flops(dims, 64, 2048, 100, None)
    assert none.ratio == 1.0 and none.pruned == none.full and none.n_tokens_pruned == none.n_tokens
    before = estimate_flops(dims, 64, 2048, 1024, 0)
    assert before.pruned == dims.n_layers * layer_flops(64 + 1024, dims.hidden, dims.ffn)
    assert before.ratio < estimate_flops(dims, 64, 2048, 1024, 2).ratio
    assert estimate_flops(dims, 64, 2048, 1024, dims.n_layers).ratio == 1.0  # pruned after the last layer
    assert set(before.to_dict()) == {"full", "pruned", "ratio", "n_tokens", "n_tokens_pruned", "layer"}
    with pytest.raises(ValueError):
        estimate_flops(dims, 64, 10, 11, 2)
    with pytest.raises(ValueError):
        estimate_flops(dims, 64, 10, 5, -1)
