"""Prefill FLOPs of the language model, by FastV's formula (arXiv 2403.06764, §4.2).

One decoder layer over n tokens costs 4·n·d² (q, k, v, o projections) + 2·n²·d (scores and weighted sum)
+ 2·n·d·m (the FFN, as the paper counts it). Pruning at layer K leaves the first K layers at the full
length n and the remaining T-K at n̂ = n - dropped visual tokens; pruning before the LLM (layer 0) runs
every layer at n̂. Like the paper, this counts the prefill only (the part pruning changes the most).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .base import ModelDims


def layer_flops(n: int, d: int, m: int) -> int:
    """FLOPs of one decoder layer over n tokens with hidden size d and FFN size m (FastV §4.2)."""
    return 4 * n * d * d + 2 * n * n * d + 2 * n * d * m


@dataclass
class FlopsEstimate:
    """Prefill FLOPs with and without pruning. `layer` is where pruning happens (None: no pruning)."""

    full: int
    pruned: int
    ratio: float  # pruned / full
    n_tokens: int  # prompt length the LLM sees before pruning (text + visual)
    n_tokens_pruned: int  # length after pruning (n̂)
    layer: int | None

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_flops(
    dims: ModelDims, n_text: int, n_visual: int, n_kept: int, layer: int | None
) -> FlopsEstimate:
    """K·f(n) + (T-K)·f(n̂) over the prefill, with n = n_text + n_visual and n̂ = n_text + n_kept.

    layer=None means no pruning (ratio 1); layer=0 means pruning before the LLM (every layer at n̂);
    layer=K means FastV at K. A layer at or past the last one prunes nothing that is ever computed.
    """
    if n_text < 0 or n_visual < 0 or not 0 <= n_kept <= n_visual:
        raise ValueError(f"need n_text >= 0 and 0 <= n_kept <= n_visual, got {n_text}, {n_kept}, {n_visual}")
    if layer is not None and layer < 0:
        raise ValueError(f"layer must be None or >= 0, got {layer}")
    t, d, m = dims.n_layers, dims.hidden, dims.ffn
    n = n_text + n_visual
    full = t * layer_flops(n, d, m)
    if layer is None:
        return FlopsEstimate(full, full, 1.0, n, n, None)
    k = min(layer, t)
    n_hat = n_text + n_kept
    pruned = k * layer_flops(n, d, m) + (t - k) * layer_flops(n_hat, d, m)
    return FlopsEstimate(full, pruned, pruned / full if full else 1.0, n, n_hat, layer)


def staged_flops(dims: ModelDims, n_text: int, n_visual: int, stages: list[tuple[int, int]]) -> FlopsEstimate:
    """The prefill FLOPs of a method that changes the visual token count at several layers: `stages` holds
    (layer, visual tokens from that layer on), ascending layers; layers before the first see all `n_visual`.
    One stage (K, n_kept) is `estimate_flops(dims, n_text, n_visual, n_kept, K)`."""
    t, d, m = dims.n_layers, dims.hidden, dims.ffn
    n = n_text + n_visual
    full = t * layer_flops(n, d, m)
    if not stages:
        return FlopsEstimate(full, full, 1.0, n, n, None)
    counts = [n_visual] * t
    for layer, visual in stages:
        if layer < 0 or visual < 0:
            raise ValueError(f"a stage needs a layer >= 0 and a count >= 0, got ({layer}, {visual})")
        counts[layer:] = [visual] * (t - min(layer, t))
    pruned = sum(layer_flops(n_text + c, d, m) for c in counts)
    return FlopsEstimate(full, pruned, pruned / full if full else 1.0, n, n_text + counts[-1], stages[0][0])


def decode_flops(dims: ModelDims, n_context: int, n_attended: int, layer: int) -> int:
    """FLOPs of one decoded token whose layers >= `layer` attend to `n_attended` of the `n_context` cached keys
    (the rest hidden for that step, as DyCoke's decode-time pruning does): per layer 4·d² + 2·n·d + 2·d·m, the
    FastV formula at one query."""
    t, d, m = dims.n_layers, dims.hidden, dims.ffn

    def one(n: int) -> int:
        return 4 * d * d + 2 * n * d + 2 * d * m

    k = min(layer, t)
    return k * one(n_context) + (t - k) * one(n_attended)
