"""Prefill and greedy decoding over a decoder LM's own layers, with FastV pruning at layer K.

We drive the language model's modules (`layers`, `rotary_emb`, `norm`, `lm_head`) from a short loop of our
own instead of patching transformers classes: between layer K-1 and layer K the visual tokens are ranked
(`pruning.fastv.rank`) and we slice the hidden states, positions and mask. Every layer runs with the
configured attention kernel (SDPA, eager, FlashAttention-2; see `_layer_mask`).

Layers < K cache every token, layers >= K only the kept ones, so decoding reads a smaller cache too.
Kept tokens keep their original RoPE positions (positions have gaps), as in the official FastV code.
Batches are left-padded; each sample is ranked and pruned on its own.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import DynamicCache

from .errors import InputError
from .pruning.fastv import FastVPlan, rank

KERNELS = ("sdpa", "eager", "flash_attention_2")  # attention kernels the engine's masks are written for


@dataclass
class PrefillResult:
    logits: Tensor  # [B, V] at the last prompt position
    cache: DynamicCache
    full_mask: Tensor  # [B, n] key mask of layers < K (bool; grows while decoding)
    pruned_mask: Tensor | None  # [B, n_hat] key mask of layers >= K (None: no pruning)
    next_position: Tensor  # [B] RoPE position of the next token
    k: int | None
    kept: list[Tensor] = field(default_factory=list)  # per sample: kept indices into its visual span
    scores: list[Tensor] = field(default_factory=list)  # per sample: ranking score of every visual token
    visual_offsets: list[int] = field(default_factory=list)  # per sample: sequence index of visual token 0
    t_rank: float = 0.0


def language_parts(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(decoder, lm_head) of a VideoLlavaForConditionalGeneration or a bare *ForCausalLM."""
    inner = model.model
    return getattr(inner, "language_model", inner), model.lm_head


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Left padding: real tokens get 0, 1, 2, ...; pads get 0 (they are masked anyway)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def check_kernel(model) -> str:
    """The LM's attention kernel, if the engine supports it (InputError otherwise)."""
    kernel = language_parts(model)[0].config._attn_implementation
    if kernel not in KERNELS:
        raise InputError(f"attention kernel {kernel!r} is not supported; use one of {', '.join(KERNELS)}")
    return kernel


def _layer_mask(decoder, key_mask: Tensor, q_len: int, dtype: torch.dtype) -> Tensor | None:
    """The attention mask a layer needs for `q_len` new queries against keys whose validity is `key_mask`.

    Causality is by sequence order (the last q_len keys are the queries), never by RoPE position: after
    FastV's slicing positions have gaps. None where the kernel's own path is exact and fastest: one query
    with nothing padded sees every key in every kernel; SDPA's is_causal (top-left aligned) is exact when
    queries and keys are the same tokens; FlashAttention-2's causal flag is bottom-right aligned, so exact
    for any q_len. Eager attention applies no causality of its own, so it always gets the mask for q_len > 1.
    FlashAttention-2 takes the 2-D padding mask; SDPA and eager an additive 4-D mask.
    """
    kernel = decoder.config._attn_implementation
    kv_len = key_mask.shape[1]
    if bool(key_mask.all()):
        if q_len == 1 or kernel == "flash_attention_2" or (kernel == "sdpa" and q_len == kv_len):
            return None
    elif kernel == "flash_attention_2":
        return key_mask.long()
    q_idx = torch.arange(kv_len - q_len, kv_len, device=key_mask.device)
    k_idx = torch.arange(kv_len, device=key_mask.device)
    allowed = (k_idx[None, :] <= q_idx[:, None])[None] & key_mask[:, None, :]
    # A padded query would see no key at all (NaN rows in SDPA); let every query see itself.
    allowed |= k_idx[None, None, :] == q_idx[None, :, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=key_mask.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def cache_keyword(decoder) -> str:
    """The decoder layers' cache argument: `cache` from transformers 5.24, `past_key_values` before.

    (5.24 still accepts `past_key_values`, but with a deprecation warning on every call.)"""
    params = inspect.signature(type(decoder.layers[0]).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _run_layer(decoder, i: int, h: Tensor, mask, pos_emb, cache: DynamicCache, cache_kw: str) -> Tensor:
    # RoPE comes in pos_emb. position_ids are not passed: FlashAttention-2 would read gaps in them (FastV's
    # kept positions) as packed sequences and check for that with a device sync in every layer.
    out = decoder.layers[i](h, attention_mask=mask, position_embeddings=pos_emb, use_cache=True,
                            **{cache_kw: cache})
    return out[0] if isinstance(out, tuple) else out


@torch.inference_mode()
def prefill(
    model,
    inputs_embeds: Tensor,
    attention_mask: Tensor,
    visual_mask: Tensor,
    plan: FastVPlan | None = None,
    position_ids: Tensor | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PrefillResult:
    """Run the prompt through the LM. With a plan, prune visual tokens after layer plan.k - 1.

    inputs_embeds [B, n, d] (left-padded), attention_mask [B, n] (1 = real), visual_mask [B, n] (True =
    visual token). Returns last-position logits and a cache ready for `decode_one_token`. `clock` times the
    ranking (on CUDA, pass one that synchronises: see measure.device_clock).
    """
    check_kernel(model)
    decoder, lm_head = language_parts(model)
    b, n, _ = inputs_embeds.shape
    key_mask = attention_mask.bool()
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    cache = DynamicCache(config=decoder.config)
    n_layers = decoder.config.num_hidden_layers
    k = plan.k if plan is not None else n_layers
    h = inputs_embeds
    pos_emb = decoder.rotary_emb(h, position_ids=position_ids)
    mask = _layer_mask(decoder, key_mask, n, h.dtype)
    cache_kw = cache_keyword(decoder)
    offsets = [int(visual_mask[i].nonzero()[0]) if visual_mask[i].any() else -1 for i in range(b)]
    h_in = h  # input of the layer just run: layer K-1's, when ranking
    result = PrefillResult(
        logits=None, cache=cache, full_mask=key_mask, pruned_mask=None,
        next_position=position_ids[:, -1] + 1, k=plan.k if plan is not None else None, visual_offsets=offsets,
    )
    for i in range(n_layers):
        if i == k:
            t0 = clock()
            h, position_ids, pruned_mask = _prune(decoder, k - 1, h_in, h, position_ids, pos_emb, cache,
                                                  key_mask, visual_mask, plan, result)
            result.t_rank = clock() - t0
            result.pruned_mask = pruned_mask
            pos_emb = decoder.rotary_emb(h, position_ids=position_ids)
            mask = _layer_mask(decoder, pruned_mask, h.shape[1], h.dtype)
        h_in = h
        h = _run_layer(decoder, i, h, mask, pos_emb, cache, cache_kw)
    result.logits = lm_head(decoder.norm(h[:, -1:]))[:, 0].float()
    return result


def _prune(decoder, layer_idx, h_in, h, position_ids, pos_emb, cache, key_mask, visual_mask, plan, result):
    """Rank with layer `layer_idx`'s attention (FastV), then slice hidden states, positions and mask per sample."""
    b, n = key_mask.shape
    kept, scores = rank(decoder, layer_idx, h_in, pos_emb, cache, key_mask, visual_mask, plan)
    result.kept, result.scores = kept, scores

    keep_idx = []
    for s in range(b):
        vis = visual_mask[s].nonzero().squeeze(-1)
        keep = torch.ones(n, dtype=torch.bool, device=h.device)
        keep[vis] = False
        keep[vis[kept[s]]] = True
        keep_idx.append(keep.nonzero().squeeze(-1))
    length = max(len(ix) for ix in keep_idx)
    # Left-pad shorter samples with copies of index 0, masked out as keys.
    gather = torch.stack([torch.cat([ix.new_zeros(length - len(ix)), ix]) for ix in keep_idx])
    valid = torch.stack([torch.arange(length, device=h.device) >= length - len(ix) for ix in keep_idx])
    h = h.gather(1, gather[..., None].expand(-1, -1, h.shape[-1]))
    position_ids = position_ids.gather(1, gather)
    pruned_mask = key_mask.gather(1, gather) & valid
    return h, position_ids, pruned_mask


@torch.inference_mode()
def decode_one_token(model, state: PrefillResult, token_embeds: Tensor) -> Tensor:
    """Feed one new token per sample ([B, 1, d]); returns logits [B, V]. Updates `state` in place."""
    decoder, lm_head = language_parts(model)
    b = token_embeds.shape[0]
    ones = torch.ones(b, 1, dtype=torch.bool, device=token_embeds.device)
    state.full_mask = torch.cat([state.full_mask, ones], dim=1)
    if state.pruned_mask is not None:
        state.pruned_mask = torch.cat([state.pruned_mask, ones], dim=1)
    position_ids = state.next_position[:, None]
    pos_emb = decoder.rotary_emb(token_embeds, position_ids=position_ids)
    full = _layer_mask(decoder, state.full_mask, 1, token_embeds.dtype)
    pruned = None if state.pruned_mask is None else _layer_mask(decoder, state.pruned_mask, 1, token_embeds.dtype)
    h = token_embeds
    k = state.k if state.k is not None else decoder.config.num_hidden_layers
    cache_kw = cache_keyword(decoder)
    for i in range(decoder.config.num_hidden_layers):
        h = _run_layer(decoder, i, h, full if i < k else pruned, pos_emb, state.cache, cache_kw)
    state.next_position = state.next_position + 1
    return lm_head(decoder.norm(h))[:, 0].float()


def eos_ids(eos_token_id: int | Iterable[int] | None) -> set[int]:
    """A generation config's EOS id(s) as a set: Qwen2-style configs list several, and any of them ends."""
    if eos_token_id is None:
        return set()
    return {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)


def decode_n_tokens(model, state: PrefillResult, max_new_tokens: int,
                    eos_token_id: int | Iterable[int] | None) -> Iterator[Tensor]:
    """Greedy decoding. Yields the next token of every sample ([B]); stops when all samples hit an EOS id."""
    embed = model.get_input_embeddings()
    next_tokens = state.logits.argmax(-1)
    done = torch.zeros_like(next_tokens, dtype=torch.bool)
    eos = torch.tensor(sorted(eos_ids(eos_token_id)), dtype=next_tokens.dtype, device=next_tokens.device)
    for step in range(max_new_tokens):
        yield next_tokens
        if len(eos):
            done |= torch.isin(next_tokens, eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            return
        logits = decode_one_token(model, state, embed(next_tokens[:, None]))
        next_tokens = logits.argmax(-1)


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes held by a cache's keys and values, all layers."""
    total = 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            if t is not None:
                total += t.numel() * t.element_size()
    return total
