"""Greedy decoding on a preallocated KV cache, optionally `torch.compile`d (in the style of gpt-fast).

The engine's decode step (`engine.decode_one_token`) grows a DynamicCache and rebuilds masks in Python at every
token; on a GPU a 7B step then costs several times its memory-bandwidth limit, because Python launches some
500 kernels one by one. Here the prompt's keys and values are copied once, after the prefill, into fixed-size
buffers — layers < K sized for every prompt token, layers >= K for the kept ones only (FastV's saving stays) —
with room for the answer. Each step then has fixed shapes and no Python branching on data: it writes the new
token's keys and values at a slot given as a tensor, and attends over the whole buffer with a mask that hides
padding and slots not written yet. Such a step can be captured as one CUDA graph
(`torch.compile(mode="reduce-overhead")`) and replayed per token.

The decoder's own layers run the step (the cache handed to them is a small object with the `update` method
transformers' attention calls), so the attention kernel is still the configured one. Buffer lengths are
rounded up to a multiple of BUCKET so that prompts of similar lengths share one compiled graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from .engine import PrefillResult, cache_keyword, eos_ids, language_parts
from .errors import InputError

BUCKET = 256  # buffer lengths are multiples of this: one compiled graph serves many prompt lengths
DECODE_MODES = ("eager", "static", "compiled")


@dataclass
class KVLayer:
    """One layer's buffers, [B, kv_heads, length, head_dim] (the attribute names of transformers' cache layers)."""

    keys: Tensor
    values: Tensor


@dataclass
class StaticKVCache:
    """Preallocated keys/values of every layer. Group 0 = layers < k (every prompt token), group 1 = layers >= k
    (the kept tokens). In each group the prompt fills slots [0, start) and decoded tokens go to start, start+1, ...
    """

    layers: list[KVLayer]
    k: int  # first layer of group 1 (n_layers: no pruning, one group)
    valid: tuple[Tensor, Tensor]  # per group [B, length]: prompt slots that hold a real token (padding: False)
    start: tuple[Tensor, Tensor]  # per group [1]: the first decode slot (a tensor: compiled steps do not
    # specialise on the prompt's length)
    next_position: Tensor  # [B] RoPE position of the first decoded token
    capacity: int  # decode steps the buffers have room for

    @classmethod
    def from_prefill(cls, state: PrefillResult, n_layers: int, max_new_tokens: int) -> StaticKVCache:
        """Copy a prefill's cache into buffers with room for `max_new_tokens` decoded tokens."""
        k = state.k if state.k is not None else n_layers
        prompt_masks = (state.full_mask, state.pruned_mask if state.pruned_mask is not None else state.full_mask)
        lengths = tuple(_bucket(m.shape[1] + max_new_tokens) for m in prompt_masks)
        layers = []
        for i, src in enumerate(state.cache.layers):
            g = int(i >= k)
            layers.append(KVLayer(_padded(src.keys, lengths[g]), _padded(src.values, lengths[g])))
            src.keys = src.values = None  # free the prefill's copy layer by layer: the KV is never held twice
        device = state.full_mask.device
        valid = tuple(torch.nn.functional.pad(m.bool(), (0, lengths[g] - m.shape[1]))
                      for g, m in enumerate(prompt_masks))
        start = tuple(torch.tensor([m.shape[1]], device=device) for m in prompt_masks)
        return cls(layers, k, valid, start, state.next_position.clone(), max_new_tokens)


def _bucket(n: int) -> int:
    return -(-n // BUCKET) * BUCKET


def _padded(t: Tensor, length: int) -> Tensor:
    out = t.new_zeros(*t.shape[:2], length, t.shape[3])
    out[:, :, : t.shape[2]] = t
    if out.is_cuda:  # the buffers are updated in place: CUDA graphs may then keep them as fixed inputs
        torch._dynamo.mark_static_address(out)
    return out


class _SlotWriter:
    """What the decoder layers see as their cache during one step: each layer's new key/value goes to this step's
    slot of its group, and attention reads the whole buffer."""

    def __init__(self, cache: StaticKVCache, slots: tuple[Tensor, Tensor]):
        self.cache, self.slots = cache, slots

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        layer, slot = self.cache.layers[layer_idx], self.slots[int(layer_idx >= self.cache.k)]
        layer.keys.index_copy_(2, slot, key)
        layer.values.index_copy_(2, slot, value)
        return layer.keys, layer.values


def _step_mask(valid: Tensor, start: Tensor, slot: Tensor, dtype: torch.dtype, flash: bool) -> Tensor:
    """Keys one new query may see: real prompt tokens and the decoded tokens up to and including this one."""
    idx = torch.arange(valid.shape[1], device=valid.device)
    allowed = valid | ((idx >= start) & (idx <= slot))[None, :]
    if flash:  # FlashAttention-2 takes the 2-D padding mask
        return allowed.long()
    mask = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None, None, :]


def decode_step(model, cache: StaticKVCache, tokens: Tensor, step: Tensor) -> tuple[Tensor, Tensor]:
    """Feed `tokens` [B] as decode step `step` ([1], a tensor so a compiled step serves every step).

    Returns (logits [B, V] float32, the greedy next tokens [B])."""
    decoder, lm_head = language_parts(model)
    h = model.get_input_embeddings()(tokens[:, None])
    position = (cache.next_position + step)[:, None]
    pos_emb = decoder.rotary_emb(h, position_ids=position)
    slots = (cache.start[0] + step, cache.start[1] + step)
    flash = decoder.config._attn_implementation == "flash_attention_2"
    masks = [_step_mask(cache.valid[g], cache.start[g], slots[g], h.dtype, flash) for g in (0, 1)]
    writer = _SlotWriter(cache, slots)
    cache_kw = cache_keyword(decoder)
    for i, layer in enumerate(decoder.layers):
        # RoPE comes in pos_emb; no position_ids: FlashAttention-2 would read FastV's gaps as packed sequences.
        out = layer(h, attention_mask=masks[int(i >= cache.k)], position_embeddings=pos_emb, use_cache=True,
                    **{cache_kw: writer})
        h = out[0] if isinstance(out, tuple) else out
    logits = lm_head(decoder.norm(h))[:, 0].float()
    return logits, logits.argmax(-1)


class StaticDecoder:
    """Greedy decoding of one model on static caches; with `compile`, the step is `torch.compile`d (CUDA: as a
    CUDA graph, mode="reduce-overhead"). Compiled graphs are kept per buffer shape, so the first answer of each
    shape pays the compilation."""

    def __init__(self, model, compile: bool = False, backend: str = "inductor"):
        self.model = model
        self.compiled = compile
        self._step = decode_step
        if compile:
            # fullgraph: a graph break would mean Python (and data-dependent branching) inside the step.
            device = next(model.parameters()).device
            mode = "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None
            self._step = torch.compile(decode_step, backend=backend, mode=mode, fullgraph=True)

    @torch.inference_mode()
    def step(self, cache: StaticKVCache, tokens: Tensor, step: Tensor) -> tuple[Tensor, Tensor]:
        """One decode step; the outputs are copies (a CUDA graph's outputs are overwritten by its next replay)."""
        if self.compiled and tokens.is_cuda:
            torch.compiler.cudagraph_mark_step_begin()
        logits, nxt = self._step(self.model, cache, tokens, step)
        return logits.clone(), nxt.clone()

    @torch.inference_mode()
    def decode_n_tokens(self, state: PrefillResult, max_new_tokens: int,
                        eos_token_id: int | Iterable[int] | None) -> Iterator[Tensor]:
        """Same contract and tokens as `engine.decode_n_tokens` (any of the EOS ids ends a sample). The prefill's
        cache is moved into the static one (`state.cache` becomes the StaticKVCache), so the KV cache is never
        held twice."""
        decoder, _ = language_parts(self.model)
        cache = StaticKVCache.from_prefill(state, decoder.config.num_hidden_layers, max(1, max_new_tokens - 1))
        state.cache = cache
        next_tokens = state.logits.argmax(-1)
        done = torch.zeros_like(next_tokens, dtype=torch.bool)
        eos = torch.tensor(sorted(eos_ids(eos_token_id)), dtype=next_tokens.dtype, device=next_tokens.device)
        step = torch.zeros(1, dtype=torch.long, device=next_tokens.device)
        for i in range(max_new_tokens):
            yield next_tokens
            done |= torch.isin(next_tokens, eos)
            if bool(done.all()) or i == max_new_tokens - 1:
                return
            _, next_tokens = self.step(cache, next_tokens, step)
            step += 1


def decoder_for(model, mode: str) -> StaticDecoder | None:
    """The decoder for a decode mode: None for "eager" (the engine's own loop)."""
    if mode not in DECODE_MODES:
        raise InputError(f"unknown decode mode {mode!r}; choose one of {', '.join(DECODE_MODES)}")
    return None if mode == "eager" else StaticDecoder(model, compile=mode == "compiled")
