"""The one place that knows where transformers keeps a language model's parts.

Our prefill and decode loops drive the decoder's own modules (layers, rotary embedding, final norm, head) instead
of its forward. `LanguageModel.of` finds them once per model, Video-LLaVA or a bare *ForCausalLM, and the loops
take the result: nothing is looked up again per layer or per token. The attention kernel is the one thing read
live, because `set_attn_implementation` may switch it after loading.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import InputError

KERNELS = ("sdpa", "eager", "flash_attention_2")  # attention kernels the masks (llm.masks) are written for


@dataclass(frozen=True, eq=False)
class LanguageModel:
    """A decoder LM's parts, as our loops use them. `decoder` is transformers' *Model (its forward is the
    independent reference in checks); the other fields are its modules and the head."""

    decoder: nn.Module
    layers: nn.ModuleList
    rotary_emb: nn.Module
    norm: nn.Module
    embed_tokens: nn.Module
    lm_head: nn.Module
    cache_keyword: str  # the layers' cache argument: `cache` from transformers 5.24, `past_key_values` before

    @classmethod
    def of(cls, model: nn.Module) -> LanguageModel:
        """The parts of a VideoLlavaForConditionalGeneration or a bare *ForCausalLM."""
        inner = model.model
        decoder = getattr(inner, "language_model", inner)
        # 5.24 still accepts `past_key_values`, but warns on every call; older versions know only that name.
        params = inspect.signature(type(decoder.layers[0]).forward).parameters
        return cls(decoder=decoder, layers=decoder.layers, rotary_emb=decoder.rotary_emb, norm=decoder.norm,
                   embed_tokens=model.get_input_embeddings(), lm_head=model.lm_head,
                   cache_keyword="cache" if "cache" in params else "past_key_values")

    @property
    def config(self):
        return self.decoder.config

    @property
    def n_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def kernel(self) -> str:
        return self.config._attn_implementation

    def check_kernel(self) -> str:
        """The attention kernel, if our masks are written for it (InputError otherwise)."""
        if self.kernel not in KERNELS:
            raise InputError(f"attention kernel {self.kernel!r} is not supported; use one of {', '.join(KERNELS)}")
        return self.kernel

    @contextmanager
    def using_kernel(self, kernel: str) -> Iterator[None]:
        """Run the decoder with another attention kernel for a while (e.g. eager, the one returning weights)."""
        saved = self.config._attn_implementation
        self.config._attn_implementation = kernel
        try:
            yield
        finally:
            self.config._attn_implementation = saved

    def run_layer(self, i: int, h: Tensor, mask: Tensor | None, pos_emb: tuple[Tensor, Tensor], cache) -> Tensor:
        """Layer `i` on hidden states `h`, caching its keys and values in `cache` (anything with `update`)."""
        # RoPE comes in pos_emb. position_ids are not passed: FlashAttention-2 would read gaps in them (FastV's
        # kept positions) as packed sequences and check for that with a device sync in every layer.
        out = self.layers[i](h, attention_mask=mask, position_embeddings=pos_emb, use_cache=True,
                             **{self.cache_keyword: cache})
        return out[0] if isinstance(out, tuple) else out

    def attention_rows(self, i: int, h_in: Tensor, rows: Tensor, pos_emb: tuple[Tensor, Tensor], cache,
                       key_mask: Tensor, keys: Tensor | None = None, per_head: bool = False,
                       causal: bool = True) -> Tensor:
        """Attention weights of layer `i` for query positions `rows` only, mean over heads: [B, len(rows), n]
        (`per_head`: [B, heads, len(rows), n]).

        `h_in` is the layer's input [B, n, d]; its keys (after RoPE) are read from the cache the layer just
        filled, or given as `keys` (`layer_keys`, for a layer that has not run yet). Costs O(len(rows) * n * d)
        instead of the n x n matrix eager attention would build. `causal` False: every live key is seen (a decode
        step's token, whose row index is not its cache slot)."""
        layer = self.layers[i]
        attn = layer.self_attn
        b = h_in.shape[0]
        x = layer.input_layernorm(h_in[:, rows])
        q = attn.q_proj(x).view(b, len(rows), -1, attn.head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3-style per-head query norm
            q = attn.q_norm(q)
        q = q.transpose(1, 2)  # [B, H, r, hd]
        cos, sin = (t[:, rows].unsqueeze(1) for t in pos_emb)
        q = q * cos + _rotate_half(q) * sin
        keys = cache.layers[i].keys if keys is None else keys  # [B, Hkv, n, hd]
        groups = q.shape[1] // keys.shape[1]
        q = q.view(b, keys.shape[1], groups, len(rows), -1)  # heads grouped by their kv head (GQA)
        logits = torch.einsum("bkgrd,bknd->bkgrn", q.float(), keys.float()) * attn.scaling
        n = keys.shape[2]
        allowed = key_mask[:, None, None, None, :]
        if causal:
            allowed = allowed & (torch.arange(n, device=q.device)[None, :] <= rows[:, None])[None, None, None]
        weights = logits.masked_fill(~allowed, float("-inf")).softmax(-1)
        return weights.flatten(1, 2) if per_head else weights.mean(dim=(1, 2))

    def layer_keys(self, i: int, h_in: Tensor, pos_emb: tuple[Tensor, Tensor]) -> Tensor:
        """Layer `i`'s keys after RoPE [B, Hkv, n, hd] for its input `h_in` [B, n, d], as the layer would cache
        them: what a method ranking with the attention of the layer about to run needs (PyramidDrop)."""
        layer = self.layers[i]
        attn = layer.self_attn
        b, n, _ = h_in.shape
        k = attn.k_proj(layer.input_layernorm(h_in)).view(b, n, -1, attn.head_dim)
        if hasattr(attn, "k_norm"):  # Qwen3-style per-head key norm
            k = attn.k_norm(k)
        k = k.transpose(1, 2)
        cos, sin = (t.unsqueeze(1) for t in pos_emb)
        return k * cos + _rotate_half(k) * sin

    def logits(self, h: Tensor) -> Tensor:
        """Float logits [B, V] of the last position of hidden states `h` [B, n, d]."""
        return self.lm_head(self.norm(h[:, -1:]))[:, 0].float()


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def adapt(model: nn.Module | LanguageModel) -> LanguageModel:
    """`model`'s parts; a LanguageModel is returned as it is, so callers that loop resolve it once."""
    return model if isinstance(model, LanguageModel) else LanguageModel.of(model)


def check_kernel(model: nn.Module | LanguageModel) -> str:
    """The LM's attention kernel, if the loops support it (InputError otherwise)."""
    return adapt(model).check_kernel()
