"""The memory model: bytes a prompt needs beyond the weights (KV cache and live activations), by phase."""

from __future__ import annotations

from .base import ModelDims


def memory_need(dims: ModelDims, n_text: int, n_visual: int, n_kept: int, k: int, new_tokens: int) -> dict:
    """Bytes needed beyond the weights: the peak of KV cache + live activations while one prompt is prefilled
    and `new_tokens` tokens are decoded.

    KV: 2 (k and v) · kv_heads · head_dim · dtype bytes per token per layer, for the full sequence in
    layers < K and for the kept one in layers >= K (k=0: pruned before the LLM), answer tokens included.
    Activations of a layer over n tokens: about 6·d (residual, norm, q/k/v, attention output) plus 3·m
    (gate, up, product) per token with SDPA/FlashAttention (no n×n matrix).
    The cache grows layer by layer, so the peak is the largest of three moments: layer K-1 (the KV of the
    first K layers, full-length activations), the last layer (the whole prompt's KV, activations of the kept
    tokens) and the end of decoding (the whole KV, answer included; a token's activations are negligible).
    Adding the whole KV to full-length activations instead overstates FastV's need by up to ~40%.
    """
    per_token_layer = 2 * dims.n_kv_heads * dims.head_dim * dims.dtype_bytes
    k = min(max(k, 0), dims.n_layers)
    n_full = n_text + n_visual
    n_pruned = n_text + n_kept
    kv_front = per_token_layer * k * n_full  # layers < K after the prompt
    kv_prompt = kv_front + per_token_layer * (dims.n_layers - k) * n_pruned
    kv = kv_prompt + per_token_layer * dims.n_layers * new_tokens

    def activations(n: int) -> int:
        return n * (6 * dims.hidden + 3 * dims.ffn) * dims.dtype_bytes

    moments = {"decode": kv}
    if k > 0:
        moments["layer K-1"] = kv_front + activations(n_full)
    if k < dims.n_layers:
        moments["last layer"] = kv_prompt + activations(n_pruned)
    phase = max(moments, key=moments.get)
    return {
        "kv_bytes_per_token": per_token_layer * dims.n_layers,
        "kv_bytes_full": per_token_layer * dims.n_layers * (n_full + new_tokens),
        "kv_bytes": kv,
        "activation_bytes": activations(n_full if k > 0 else n_pruned),  # the widest layer's
        "need_bytes": moments[phase],
        "peak_phase": phase,
    }
