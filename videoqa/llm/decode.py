"""Greedy decoding: one loop, over the prefill's own cache or over a preallocated one (in the style of gpt-fast).

"eager" steps on the prefill's keys and values, with masks rebuilt in Python; unless the plan edits the cache while
decoding, they move on the first step into buffers with room for the answer (`GrowingCache`), so a token is written
in place instead of concatenated onto a copy of the whole cache, which on a CPU cost more than the step. On a
GPU such a 7B step costs several times its memory-bandwidth limit, because Python launches some 500 kernels one
by one. "static" first copies the prompt's keys and values into fixed-size buffers — layers < K sized for every
prompt token, layers >= K for the kept ones only (FastV's saving stays) — with room for the answer. Each step then
has fixed shapes and no Python branching on data: it writes the new token's keys and values at a slot given as a
tensor, and attends over the whole buffer with a mask that hides padding and slots not written yet. "compiled"
wraps that step in `torch.compile` (on CUDA a CUDA graph, mode="reduce-overhead", replayed per token).

Either way the decoder's own layers run the step, with the configured attention kernel. Buffer lengths are
rounded up to a multiple of BUCKET so that prompts of similar lengths share one compiled graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ..errors import InputError
from ..pruning.hook import DecodeView, StepView
from .adapter import LanguageModel, adapt
from .masks import layer_mask, slot_mask
from .prefill import PrefillResult

BUCKET = 256  # buffer lengths are multiples of this: one compiled graph serves many prompt lengths
DECODE_MODES = ("eager", "static", "compiled")
DECODE_HOOKS = ("after_token", "before_step", "decode_layers")  # a plan's parts that act while decoding (eager)


def _forward_token(lm: LanguageModel, h: Tensor, position: Tensor, masks: tuple, cache,
                   boundaries: tuple[int, ...]) -> Tensor:
    """One new token per sample ([B, 1, d]) through every layer; layer i takes the mask of its group (the number of
    pruning layers <= i)."""
    pos_emb = lm.rotary_emb(h, position_ids=position)
    for i in range(lm.n_layers):
        h = lm.run_layer(i, h, masks[_group(boundaries, i)], pos_emb, cache)
    return lm.logits(h)


def _group(boundaries: tuple[int, ...], layer: int) -> int:
    return sum(b <= layer for b in boundaries)


def _forward_token_hooked(lm: LanguageModel, h: Tensor, state: PrefillResult) -> Tensor:
    """`_forward_token` on the prefill's cache for a plan with `decode_layers`: before each of them the plan may
    give the key mask that the rest of that layer's group uses in this step (pruning/hook.py, `StepView`)."""
    plan, boundaries = state.plan, state.boundaries
    pos_emb = lm.rotary_emb(h, position_ids=state.next_position[:, None])
    masks = [layer_mask(lm.kernel, m, 1, h.dtype) for m in state.masks]
    h_in = h
    for i in range(lm.n_layers):
        g = _group(boundaries, i)
        if i in plan.decode_layers:
            row = partial(_step_row, lm, i - 1, h_in, pos_emb, state.cache, state.masks[_group(boundaries, i - 1)])
            override = plan.at_decode_layer(StepView(i, state.steps, state.masks[g], row))
            if override is not None:
                masks[g] = layer_mask(lm.kernel, override, 1, h.dtype)
        h_in = h
        h = lm.run_layer(i, h, masks[g], pos_emb, state.cache)
    return lm.logits(h)


def _step_row(lm: LanguageModel, i: int, h_in: Tensor, pos_emb, cache, key_mask: Tensor) -> Tensor:
    """Layer i's attention of a decode step's token (input h_in [B, 1, d]) over its cache: [B, n]."""
    zero = torch.zeros(1, dtype=torch.long, device=h_in.device)
    return lm.attention_rows(i, h_in, zero, pos_emb, cache, key_mask, causal=False)[:, 0]


@torch.inference_mode()
def decode_one_token(model: nn.Module | LanguageModel, state: PrefillResult, token_embeds: Tensor) -> Tensor:
    """Feed one new token per sample ([B, 1, d]) on the prefill's cache; returns logits [B, V]. Updates `state`
    in place. (Pass a LanguageModel when stepping repeatedly: a model's parts are resolved on every call.)"""
    lm = adapt(model)
    ones = torch.ones(token_embeds.shape[0], 1, dtype=torch.bool, device=token_embeds.device)
    state.masks = [torch.cat([m, ones], dim=1) for m in state.masks]
    before_step = getattr(state.plan, "before_step", None)
    if before_step is not None:  # a method hiding cache entries from this step on (pruning/hook.py)
        before_step(DecodeView(state.steps, state.cache, state.masks, state.boundaries))
    if getattr(state.plan, "decode_layers", ()):
        logits = _forward_token_hooked(lm, token_embeds, state)
    else:
        masks = tuple(layer_mask(lm.kernel, m, 1, token_embeds.dtype) for m in state.masks)
        logits = _forward_token(lm, token_embeds, state.next_position[:, None], masks, state.cache,
                                state.boundaries)
    state.next_position = state.next_position + 1
    state.steps += 1
    after_token = getattr(state.plan, "after_token", None)
    if after_token is not None:  # a decode-time method drops or merges cache entries (and their mask bits)
        after_token(DecodeView(state.steps, state.cache, state.masks, state.boundaries))
    return logits


@dataclass
class KVLayer:
    """One layer's buffers, [B, kv_heads, length, head_dim] (the attribute names of transformers' cache layers)."""

    keys: Tensor
    values: Tensor


@dataclass
class StaticKVCache:
    """Preallocated keys/values of every layer, in groups between pruning layers: group 0 = layers before the
    first (every prompt token), group g = layers from the g-th (the tokens kept there). In each group the prompt
    fills slots [0, start) and decoded tokens go to start, start+1, ...
    """

    layers: list[KVLayer]
    boundaries: tuple[int, ...]  # the pruning layers (none: one group)
    valid: tuple[Tensor, ...]  # per group [B, length]: prompt slots that hold a real token (padding: False)
    start: tuple[Tensor, ...]  # per group [1]: the first decode slot (a tensor: compiled steps do not
    # specialise on the prompt's length)
    next_position: Tensor  # [B] RoPE position of the first decoded token
    capacity: int  # decode steps the buffers have room for

    @classmethod
    def from_prefill(cls, state: PrefillResult, n_layers: int, max_new_tokens: int) -> StaticKVCache:
        """Copy a prefill's cache into buffers with room for `max_new_tokens` decoded tokens."""
        prompt_masks = tuple(state.masks)
        lengths = tuple(_bucket(m.shape[1] + max_new_tokens) for m in prompt_masks)
        layers = []
        for i, src in enumerate(state.cache.layers):
            g = _group(state.boundaries, i)
            layers.append(KVLayer(_padded(src.keys, lengths[g]), _padded(src.values, lengths[g])))
            src.keys = src.values = None  # free the prefill's copy layer by layer: the KV is never held twice
        device = state.masks[0].device
        valid = tuple(torch.nn.functional.pad(m.bool(), (0, lengths[g] - m.shape[1]))
                      for g, m in enumerate(prompt_masks))
        start = tuple(torch.tensor([m.shape[1]], device=device) for m in prompt_masks)
        return cls(layers, state.boundaries, valid, start, state.next_position.clone(), max_new_tokens)


class _GrowingLayer:
    """One layer's keys and values in buffers with room for the answer, written in place a token at a time (a
    DynamicCache concatenates, copying the layer's whole cache every token: for a 2,000-token prompt on a CPU that
    copy, not the step's arithmetic, was most of a step). `keys` / `values` are views of the filled slots."""

    def __init__(self, keys: Tensor, values: Tensor, room: int, spare: tuple[Tensor, Tensor] | None = None):
        self.length = keys.shape[2]
        if spare is not None and spare[0].shape[2] >= self.length + room and spare[0].data_ptr() == keys.data_ptr():
            self._keys, self._values = spare  # the prefill wrote into buffers with room already: no copy
            return
        self._keys = _padded(keys, self.length + room, static=False)
        self._values = _padded(values, self.length + room, static=False)

    @property
    def keys(self) -> Tensor:
        return self._keys[:, :, :self.length]

    @property
    def values(self) -> Tensor:
        return self._values[:, :, :self.length]

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        end = self.length + key.shape[2]
        if end > self._keys.shape[2]:  # more tokens than planned for: room for as many again
            self._keys, self._values = (_padded(t[:, :, :self.length], 2 * end, static=False)
                                        for t in (self._keys, self._values))
        self._keys[:, :, self.length:end] = key
        self._values[:, :, self.length:end] = value
        self.length = end
        return self.keys, self.values


class GrowingCache:
    """The eager decoding's cache: the prefill's keys and values moved into `_GrowingLayer`s (the prefill's copy is
    freed layer by layer), for plans that do not edit the cache while decoding (DECODE_HOOKS). A prefill layer whose
    `spare` holds the whole buffers its keys and values are the start of (the prefix cache's batch prefill allocates
    them with room for the answer) is taken over as it is."""

    def __init__(self, cache, room: int):
        self.layers = []
        for src in cache.layers:
            self.layers.append(_GrowingLayer(src.keys, src.values, room, getattr(src, "spare", None)))
            src.keys = src.values = src.spare = None

    @classmethod
    def copied(cls, keys: tuple[Tensor, ...], values: tuple[Tensor, ...], room: int) -> GrowingCache:
        """A cache starting from copies of these layers' keys and values (the originals are left as they are)."""
        out = cls.__new__(cls)
        out.layers = [_GrowingLayer(k, v, room) for k, v in zip(keys, values, strict=True)]
        return out

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        return self.layers[layer_idx].update(key, value)


def _bucket(n: int) -> int:
    return -(-n // BUCKET) * BUCKET


def _padded(t: Tensor, length: int, static: bool = True) -> Tensor:
    """`t` [B, H, n, hd] in the first n slots of a [B, H, length, hd] buffer (the rest zero for a static cache,
    whose steps attend over the whole buffer; uninitialised for a growing one, which only shows filled slots)."""
    out = t.new_zeros(*t.shape[:2], length, t.shape[3]) if static else t.new_empty(*t.shape[:2], length, t.shape[3])
    out[:, :, : t.shape[2]] = t
    if static and out.is_cuda:  # the buffers are updated in place: CUDA graphs may then keep them as fixed inputs
        torch._dynamo.mark_static_address(out)
    return out


class _SlotWriter:
    """What the decoder layers see as their cache during one static step: each layer's new key/value goes to this
    step's slot of its group, and attention reads the whole buffer."""

    def __init__(self, cache: StaticKVCache, slots: tuple[Tensor, Tensor]):
        self.cache, self.slots = cache, slots

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        layer, slot = self.cache.layers[layer_idx], self.slots[_group(self.cache.boundaries, layer_idx)]
        layer.keys.index_copy_(2, slot, key)
        layer.values.index_copy_(2, slot, value)
        return layer.keys, layer.values


def static_step(lm: LanguageModel, cache: StaticKVCache, tokens: Tensor, step: Tensor) -> tuple[Tensor, Tensor]:
    """Feed `tokens` [B] as decode step `step` ([1], a tensor so a compiled step serves every step) on a static
    cache. Returns (logits [B, V] float32, the greedy next tokens [B])."""
    h = lm.embed_tokens(tokens[:, None])
    slots = tuple(start + step for start in cache.start)
    masks = tuple(slot_mask(lm.kernel, valid, start, slot, h.dtype)
                  for valid, start, slot in zip(cache.valid, cache.start, slots, strict=True))
    logits = _forward_token(lm, h, (cache.next_position + step)[:, None], masks, _SlotWriter(cache, slots),
                            cache.boundaries)
    return logits, logits.argmax(-1)


class DecodeLoop:
    """Greedy decoding of one model in one mode (DECODE_MODES). Its parts are resolved once, here; with
    "compiled", graphs are kept per buffer shape, so the first answer of each shape pays the compilation."""

    def __init__(self, model: nn.Module | LanguageModel, mode: str = "eager", backend: str = "inductor"):
        if mode not in DECODE_MODES:
            raise InputError(f"unknown decode mode {mode!r}; choose one of {', '.join(DECODE_MODES)}")
        self.lm = adapt(model)
        self.mode = mode
        self.compiled = mode == "compiled"
        self._static_step: Callable = static_step
        if self.compiled:
            # fullgraph: a graph break would mean Python (and data-dependent branching) inside the step.
            device = next(self.lm.decoder.parameters()).device
            cuda_graph = device.type == "cuda" and backend == "inductor"
            self._static_step = torch.compile(static_step, backend=backend, fullgraph=True,
                                              mode="reduce-overhead" if cuda_graph else None)

    @torch.inference_mode()
    def step(self, cache: StaticKVCache, tokens: Tensor, step: Tensor) -> tuple[Tensor, Tensor]:
        """One static-cache step; the outputs are copies (a CUDA graph's outputs are overwritten by its next
        replay)."""
        if self.compiled and tokens.is_cuda:
            torch.compiler.cudagraph_mark_step_begin()
        logits, nxt = self._static_step(self.lm, cache, tokens, step)
        return logits.clone(), nxt.clone()

    def room(self, plan, max_new_tokens: int) -> int:
        """Decode steps a prefill can leave room for in its cache's buffers: the eager mode's `GrowingCache` takes
        such buffers over when the plan does not edit the cache while decoding; the other modes copy them anyway."""
        return max(1, max_new_tokens - 1) if self.mode == "eager" and not _hooked(plan) else 0

    def _stepper(self, state: PrefillResult, max_new_tokens: int) -> Callable[[Tensor], Tensor]:
        """tokens [B] -> the greedy next tokens [B], on the cache of this decoder's mode."""
        hooked = _hooked(state.plan)
        if self.mode != "eager" and hooked:
            raise InputError("this pruning method acts on the KV cache while decoding: use --decode eager")
        if self.mode == "eager":
            def eager(tokens: Tensor) -> Tensor:
                if state.shared is not None:  # a clip's questions in one sequence on its one prefix
                    return state.shared.step(self.lm, state, tokens).argmax(-1)
                if not hooked and not isinstance(state.cache, GrowingCache):  # on the first step: a one-token answer
                    state.cache = GrowingCache(state.cache, self.room(state.plan, max_new_tokens))  # never copies
                return decode_one_token(self.lm, state, self.lm.embed_tokens(tokens[:, None])).argmax(-1)
            return eager
        # The prefill's cache moves into the static one (`state.cache` becomes it): the KV is never held twice.
        cache = StaticKVCache.from_prefill(state, self.lm.n_layers, max(1, max_new_tokens - 1))
        state.cache = cache
        step = torch.zeros(1, dtype=torch.long, device=state.logits.device)

        def advance(tokens: Tensor) -> Tensor:
            _, nxt = self.step(cache, tokens, step)
            step.add_(1)
            return nxt
        return advance

    @torch.inference_mode()
    def decode_n_tokens(self, state: PrefillResult, max_new_tokens: int,
                        eos_token_id: int | Iterable[int] | None) -> Iterator[Tensor]:
        """Yields the next token of every sample ([B]); stops when all samples hit an EOS id (any of them)."""
        advance = self._stepper(state, max_new_tokens)
        next_tokens = state.logits.argmax(-1)
        done = torch.zeros_like(next_tokens, dtype=torch.bool)
        eos = torch.tensor(sorted(eos_ids(eos_token_id)), dtype=next_tokens.dtype, device=next_tokens.device)
        for i in range(max_new_tokens):
            yield next_tokens
            done |= torch.isin(next_tokens, eos)
            if bool(done.all()) or i == max_new_tokens - 1:
                return
            next_tokens = advance(next_tokens)


def _hooked(plan) -> bool:
    return any(getattr(plan, name, None) for name in DECODE_HOOKS)


def decode_loop_for(model: nn.Module | LanguageModel, mode: str) -> DecodeLoop:
    """The decoder for a decode mode ("eager", "static" or "compiled"; InputError otherwise)."""
    return DecodeLoop(model, mode)


def decode_n_tokens(model: nn.Module | LanguageModel, state: PrefillResult, max_new_tokens: int,
                    eos_token_id: int | Iterable[int] | None) -> Iterator[Tensor]:
    """Greedy decoding on the prefill's own cache (the "eager" mode)."""
    return DecodeLoop(model).decode_n_tokens(state, max_new_tokens, eos_token_id)


def eos_ids(eos_token_id: int | Iterable[int] | None) -> set[int]:
    """A generation config's EOS id(s) as a set: Qwen2-style configs list several, and any of them ends."""
    if eos_token_id is None:
        return set()
    return {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)


def cache_bytes(cache: DynamicCache | StaticKVCache) -> int:
    """Bytes held by a cache's keys and values, all layers."""
    total = 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            if t is not None:
                total += t.numel() * t.element_size()
    return total
