"""Reusing a clip's prefix across its questions: the KV cache of `system + USER: + visual tokens`, kept by key.

In Video-LLaVA's prompt the video comes before the question, so the LM's keys and values of everything up to the
last visual token are the same for every question about a clip, as long as the visual tokens themselves do not
depend on the question (every method that selects before the LLM, and no pruning). Then a question prefills only
its own tokens, on a copy of that prefix's cache, and attends to it exactly as in a full prefill: a prefix token
only ever attends to earlier prefix tokens (causality), so its keys and values do not change with what follows.

FastV ranks with the question's last token at layer K-1, so only layers < K (K: the plan's first pruning layer,
`PrefillResult.k`) see the same tokens for every question: a FastV prefix holds layers < K and the prefix's
hidden states after layer K-1; each question runs its own tokens through layers < K on that cache, and the
prefill's own layer loop (`llm.prefill.run_layers`) ranks and runs the kept tokens through layers >= K.

A chat's follow-up puts the earlier turns between the video and its question: its whole prompt is kept too (its
keys and values are computed anyway), so the next turn finds the conversation so far as its longest kept prefix
(`PrefixCache.longest`, by token ids and positions) and computes only the last answer and its own question.

`PrefixCache` holds the prefixes, least recently used out, bounded by bytes (on a GPU the cached tensors are
allocated memory, so the adaptive budget's free-memory reading sees them). `prefill_after_prefixes` is the prefill
of a left-padded batch whose samples' prefixes come from the cache: each sample's tokens sit as
`[padding, prefix, padding, suffix]`, with the padding masked out as keys and RoPE positions given explicitly,
so the answers are those of the plain prefill (videoqa/llm/prefill.py) within float rounding.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ..pruning.hook import LLMPlan, plan_layers
from .adapter import LanguageModel, adapt
from .masks import layer_mask
from .prefill import PrefillResult, next_positions, run_layers, visual_offsets

CPU_BYTES = 1 << 30  # prefixes kept on a CPU (a demo clip's is ~1 MB, Video-LLaVA-7B's ~1 GB in bf16)
GPU_SHARE = 0.25  # of the free GPU memory when the pipeline is made


@dataclass(frozen=True)
class Prefix:
    """One prompt prefix through layers [0, depth): keys and values [1, kv_heads, P, head_dim] per layer, and,
    when depth < the LM's layers (FastV), the hidden states [1, P, d] after layer depth-1 and `tail_in`, the input
    of layer depth-1 [1, m, d] of its last m tokens, the text after its visual tokens (a plan ranking by every
    text token reads their attention rows at layer depth-1; m = 0 for a clip's prefix)."""

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    hidden: Tensor | None
    tail_in: Tensor | None = None

    @property
    def length(self) -> int:  # depth 0 (a plan acting on the embeddings) holds only its hidden states
        return self.keys[0].shape[2] if self.keys else self.hidden.shape[1]

    def head(self, n: int) -> Prefix:
        """Its first n tokens (keys and values of a prefix's tokens do not depend on what follows them)."""
        if n == self.length:
            return self
        cut = self.length - n  # tokens off the end, all text after the visual tokens (n covers those)
        return Prefix(keys=tuple(k[:, :, :n] for k in self.keys), values=tuple(v[:, :, :n] for v in self.values),
                      hidden=None if self.hidden is None else self.hidden[:, :n],
                      tail_in=None if self.tail_in is None else self.tail_in[:, :self.tail_in.shape[1] - cut])

    @property
    def depth(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        tensors = [*self.keys, *self.values, self.hidden, self.tail_in]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@dataclass(frozen=True)
class PrefixKey:
    """What a prefix's keys and values depend on: `context` (the visual tokens' content and selection, the depth)
    and the prefix's token ids and RoPE positions."""

    context: Hashable
    ids: tuple[int, ...]
    positions: tuple[int, ...]


class PrefixCache:
    """Prefixes by key, least recently used out once their bytes pass `max_bytes` (one larger than that is not
    kept). `hits` and `misses` count lookups, `reused_tokens` the prompt tokens the hits served."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Prefix] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Prefix | None:
        prefix = self._entries.get(key)
        if prefix is None:
            self.misses += 1
            return None
        self.hits += 1
        self.reused_tokens += prefix.length
        self._entries.move_to_end(key)
        return prefix

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def longest(self, key: PrefixKey, shortest: int, count: bool = True) -> tuple[PrefixKey, Prefix] | None:
        """The longest run of `key`'s first tokens that a kept prompt of the same context starts with (same ids and
        positions), at least `shortest` tokens and shorter than the prompt (its last token is computed for the
        logits): the kept prompt's key and its prefix cut to that run. A kept prompt may go on differently: a chat
        template that writes `assistant\n` before the answer to come but `assistant \n` before an earlier one
        (LLaVA-OneVision's) still shares everything before that with the next turn. None counts no miss (the
        caller falls back to an exact lookup). `count=False`: only look, counting no hit and leaving the order of
        use as it is."""
        found, run = None, 0
        for k in self._entries:
            if isinstance(k, PrefixKey) and k.context == key.context and len(k.ids) >= shortest:
                common = _common_start(k, key, len(key.ids) - 1)
                if common >= shortest and common > run:
                    found, run = k, common
        if found is None:
            return None
        prefix = self._entries[found]
        if count:
            self.hits += 1
            self.reused_tokens += run
            self._entries.move_to_end(found)
        return found, prefix.head(run)

    def discard(self, key: Hashable) -> None:
        if key in self._entries:
            self.nbytes -= self._entries.pop(key).nbytes

    def put(self, key: Hashable, prefix: Prefix) -> None:
        if key in self._entries:
            self.nbytes -= self._entries.pop(key).nbytes
        if prefix.nbytes > self.max_bytes:
            return
        self._entries[key] = prefix
        self.nbytes += prefix.nbytes
        while self.nbytes > self.max_bytes:
            self.nbytes -= self._entries.popitem(last=False)[1].nbytes

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0


def _common_start(a: PrefixKey, b: PrefixKey, limit: int) -> int:
    """How many first tokens `a` and `b` share (ids and positions), at most `limit`."""
    n = min(len(a.ids), len(b.ids), limit)
    if a.ids[:n] == b.ids[:n] and a.positions[:n] == b.positions[:n]:
        return n
    return next(i for i in range(n) if a.ids[i] != b.ids[i] or a.positions[i] != b.positions[i])


def default_bytes(device: torch.device, free_bytes: int) -> int:
    """The cache's bound on `device`: CPU_BYTES on a CPU, GPU_SHARE of the free memory on a GPU."""
    return int(free_bytes * GPU_SHARE) if device.type == "cuda" else CPU_BYTES


@torch.inference_mode()
def compute_prefix(model: nn.Module | LanguageModel, embeds: Tensor, position_ids: Tensor, depth: int,
                   layer_additions: list[Tensor] | None = None) -> Prefix:
    """`embeds` [1, P, d] at `position_ids` [1, P] (M-RoPE: [3, 1, P]) through layers [0, depth); no padding.
    `layer_additions[i]` [1, P, d] is added after layer i (Qwen3-VL's deepstack), as `llm.prefill` adds it."""
    lm = adapt(model)
    cache = DynamicCache(config=lm.config)
    n = embeds.shape[1]
    mask = layer_mask(lm.kernel, torch.ones(1, n, dtype=torch.bool, device=embeds.device), n, embeds.dtype)
    pos_emb = lm.rotary_emb(embeds, position_ids=position_ids)
    h = embeds
    for i in range(depth):
        h = lm.run_layer(i, h, mask, pos_emb, cache)
        if layer_additions and i < len(layer_additions):
            h = h + layer_additions[i].to(h.dtype)
    return Prefix(keys=tuple(cache.layers[i].keys for i in range(depth)),
                  values=tuple(cache.layers[i].values for i in range(depth)),
                  hidden=h if depth < lm.n_layers else None, tail_in=h[:, :0] if depth < lm.n_layers else None)


def cached_prefix(cache: PrefixCache, key: Hashable, model: nn.Module | LanguageModel, embeds: Tensor,
                  position_ids: Tensor, depth: int,
                  layer_additions: list[Tensor] | None = None) -> tuple[Prefix, bool]:
    """The prefix under `key`, else computed (`compute_prefix`) and kept; and whether it was found."""
    prefix = cache.get(key)
    if prefix is not None:
        return prefix, True
    prefix = compute_prefix(model, embeds, position_ids, depth, layer_additions)
    cache.put(key, prefix)
    return prefix, False


def prefix_lengths(visual_mask: Tensor, attention_mask: Tensor) -> list[int] | None:
    """Per sample of a left-padded batch: its tokens up to and including its last visual token (None when a
    sample has no visual token: nothing to reuse)."""
    n = visual_mask.shape[1]
    out = []
    for vis, real in zip(visual_mask, attention_mask, strict=True):
        if not bool(vis.any()):
            return None
        out.append(int(vis.nonzero()[-1]) + 1 - (n - int(real.sum())))
    return out


def _regions(lengths: list[int], width: int, like: Tensor) -> Tensor:
    """[B, width] booleans: each sample's last `lengths[b]` slots (right-aligned, padding first)."""
    idx = torch.arange(width, device=like.device)
    return idx[None, :] >= width - torch.tensor(lengths, device=like.device)[:, None]


@torch.inference_mode()
def prefill_after_prefixes(
    model: nn.Module | LanguageModel,
    prefixes: list[Prefix],
    inputs_embeds: Tensor,
    attention_mask: Tensor,
    visual_mask: Tensor,
    position_ids: Tensor,
    plan: LLMPlan | None = None,
    clock: Callable[[], float] = time.perf_counter,
    whole: dict[int, Prefix | None] | None = None,
    layer_additions: list[Tensor] | None = None,
    room: int = 0,
) -> PrefillResult:
    """The prefill of a left-padded batch (as `llm.prefill` takes it) whose first `prefixes[b].length` real tokens
    per sample are already in `prefixes[b]` (each holding all of its sample's visual tokens): only the rest is
    computed (with FastV, also the kept prefix tokens through layers >= K). Returns what `llm.prefill` returns,
    for the layout `[pad, prefix, pad, suffix]`. For each sample b in `whole`, `whole[b]` is set to its whole
    prompt as a Prefix of the same depth (a chat turn's, which the next turn reuses). `position_ids` may be M-RoPE's
    [3, B, n]: each token keeps its own (the question's continue from the prefix's, as the model's get_rope_index
    gave them); `layer_additions` ([B, n, d] each, as `llm.prefill` takes them) are placed in the same layout.
    `room`: decoding steps the layers < depth get room for in their buffers (eager decoding takes them over as they
    are, `decode.GrowingCache`, rather than copying a batch's whole cache into bigger ones)."""
    lm = adapt(model)
    kernel = lm.check_kernel()
    b, n, d = inputs_embeds.shape
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    boundaries = plan_layers(plan, lm.n_layers)
    depth = plan.layers[0] if plan is not None else lm.n_layers  # below the first layer the plan may act at
    if any(p.depth != depth for p in prefixes):
        raise ValueError(f"prefixes must hold layers [0, {depth})")
    real = attention_mask.bool()
    p_len = [p.length for p in prefixes]
    s_len = [int(real[i].sum()) - p_len[i] for i in range(b)]
    p_max, s_max = max(p_len), max(s_len)
    width = p_max + s_max
    in_prefix, in_suffix = _regions(p_len, p_max, real), _regions(s_len, s_max, real)
    # where each sample's real tokens go: [pad, prefix | pad, suffix]
    slots = torch.cat([in_prefix, in_suffix], dim=1)  # [B, width]
    key_mask = slots.clone()
    pos = torch.zeros(*position_ids.shape[:-2], b, width, dtype=position_ids.dtype, device=device)
    vis = torch.zeros(b, width, dtype=torch.bool, device=device)
    pos[..., slots], vis[slots] = position_ids[..., real], visual_mask[real]  # row-major: each sample in order
    additions = []
    for add in layer_additions or []:
        placed = torch.zeros(b, width, d, dtype=add.dtype, device=device)
        placed[slots] = add[real]
        additions.append(placed)
    h = torch.zeros(b, s_max, d, dtype=dtype, device=device)
    h[in_suffix] = inputs_embeds[real & ~prefix_slots(real, p_len)]

    # Layers < depth: each layer's keys and values in one buffer [B, kv_heads, width, head_dim], the prefixes
    # copied in once and the suffix written after them (a DynamicCache would copy the whole buffer twice).
    buffers = [(_stack([p.keys[layer] for p in prefixes], p_max, width + room),
                _stack([p.values[layer] for p in prefixes], p_max, width + room)) for layer in range(depth)]
    cache = DynamicCache(config=lm.config)
    result = PrefillResult(logits=None, cache=cache, masks=[key_mask], boundaries=boundaries,
                           next_position=next_positions(pos), visual_offsets=visual_offsets(visual_mask), plan=plan)
    pos_emb = lm.rotary_emb(h, position_ids=pos[..., p_max:])
    mask = layer_mask(kernel, key_mask, s_max, dtype)
    writer = _SuffixWriter(buffers, p_max, width)
    h_in = h
    for layer in range(depth):
        h_in = h
        h = lm.run_layer(layer, h, mask, pos_emb, writer)
        if layer < len(additions):
            h = h + additions[layer][:, p_max:].to(h.dtype)
    for layer, (keys, values) in enumerate(buffers):  # decoding (and FastV's ranking) read them from the cache
        cache.layers[layer].lazy_initialization(keys, values)
        cache.layers[layer].keys, cache.layers[layer].values = keys[:, :, :width], values[:, :, :width]
        if room:
            cache.layers[layer].spare = (keys, values)
    fastv = depth < lm.n_layers
    for i in whole or {}:
        suffix = slice(s_max - s_len[i], s_max)
        whole[i] = Prefix(keys=tuple(k[i:i + 1, :, :width][:, :, slots[i]] for k, _ in buffers),
                          values=tuple(v[i:i + 1, :, :width][:, :, slots[i]] for _, v in buffers),
                          hidden=torch.cat([prefixes[i].hidden, h[i:i + 1, suffix]], 1) if fastv else None,
                          tail_in=torch.cat([prefixes[i].tail_in, h_in[i:i + 1, suffix]], 1) if fastv else None)
    if not fastv:
        result.logits = lm.logits(h)
        return result
    # In-LLM pruning (FastV): the plan ranks with the attention rows of the text after the visual tokens (the
    # suffix, and a conversation prefix's tail); the prompt's hidden states after layer K-1 go on through layers
    # >= K.
    hidden = torch.zeros(b, p_max, d, dtype=dtype, device=device)
    hidden[in_prefix] = torch.cat([p.hidden[0] for p in prefixes])
    prefix_in = torch.zeros(b, p_max, d, dtype=dtype, device=device)
    tails = [p.tail_in.shape[1] for p in prefixes]
    prefix_in[_regions(tails, p_max, real)] = torch.cat([p.tail_in[0] for p in prefixes])
    full_h = torch.cat([hidden, h], dim=1)
    full_in = torch.cat([prefix_in, h_in], dim=1)
    return run_layers(lm, result, depth, full_h, full_in, pos, key_mask, vis, clock, additions or None)


def prefix_slots(real: Tensor, p_len: list[int]) -> Tensor:
    """[B, n] booleans: the first p_len[b] real tokens of each left-padded sample."""
    n = real.shape[1]
    start = n - real.sum(-1)  # first real index per sample
    idx = torch.arange(n, device=real.device)[None, :]
    return (idx >= start[:, None]) & (idx < (start + torch.tensor(p_len, device=real.device))[:, None])


def _stack(tensors: list[Tensor], p_max: int, width: int) -> Tensor:
    """[1, H, P_b, hd] tensors right-aligned into the first `p_max` slots of one [B, H, width, hd] buffer (padding
    zero, and masked; the slots after `p_max` are left for the suffix pass to write). One clip's questions share
    one prefix: then it is one broadcast copy (zeroing the whole buffer first cost as much as the copy)."""
    first = tensors[0]
    out = first.new_empty(len(tensors), first.shape[1], width, first.shape[3])
    if all(t is first for t in tensors):
        out[:, :, :p_max] = first
        return out
    for i, t in enumerate(tensors):
        pad = p_max - t.shape[2]
        out[i, :, :pad] = 0
        out[i, :, pad:p_max] = t[0]
    return out


class _SuffixWriter:
    """The cache the layers < depth see during the suffix pass: a layer's new keys and values go after the prefixes
    in its buffer, and attention reads the whole buffer."""

    def __init__(self, buffers: list[tuple[Tensor, Tensor]], start: int, end: int):
        self.buffers, self.start, self.end = buffers, start, end

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        keys, values = self.buffers[layer_idx]
        keys[:, :, self.start:self.end] = key
        values[:, :, self.start:self.end] = value
        return keys[:, :, :self.end], values[:, :, :self.end]
