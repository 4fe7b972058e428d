"""The pipeline's prefill through the prefix cache (llm/prefix_cache.py): each sample's prompt prefix looked up by
everything its keys and values depend on, computed and kept when missing. A chat's follow-up (a request with
earlier turns in its prompt) starts from the longest kept prefix of its prompt, the conversation so far, and
keeps its own whole prompt for the next turn.

Every family goes through it: on M-RoPE (Qwen2.5-VL, Qwen3-VL) a token's position is a (temporal, height, width)
triple that the model's own get_rope_index gave the whole prompt (the question's continue from the video's, after its
rope delta), so the key holds the triples, and Qwen3-VL's deepstack features are added in the prefix as in a full
prefill."""

from __future__ import annotations

from torch import Tensor

from .llm.prefill import PrefillResult
from .llm.prefill import prefill as llm_prefill
from .llm.prefix_cache import Prefix, PrefixCache, PrefixKey, cached_prefix, prefill_after_prefixes, prefix_lengths
from .llm.shared_prefix import can_share, prefill_shared
from .request import Collated, Request


def prefill_cached(cache: PrefixCache, lm, requests: list[Request], batch: Collated, plan, n_layers: int,
                   clock, layer_additions: list[Tensor] | None = None, room: int = 0) -> PrefillResult | None:
    """The batch's prefill with each prefix from `cache` (None when a sample has no visual token: nothing to
    reuse). With an in-LLM plan the prefixes hold the layers below its first pruning layer. Positions may be
    M-RoPE's [3, B, n]; `layer_additions` (Qwen3-VL's deepstack, [B, n, d] each) as `llm.prefill` takes them;
    `room`: decoding steps to leave room for in the cache's buffers (`prefill_after_prefixes`)."""
    lengths = prefix_lengths(batch.visual_mask, batch.attention_mask)
    if lengths is None:
        return None
    depth = plan.layers[0] if plan is not None else n_layers
    adds = layer_additions or None
    keys = [_key(req, batch, i, depth) for i, req in enumerate(requests)]
    if plan is None and len(requests) == 1 and _missing(cache, keys[0], lengths[0], requests[0].history_turns > 0):
        return _prefill_and_keep(cache, lm, requests[0], batch, keys[0], lengths[0], clock, adds)
    found = [_prefix(cache, lm, key, batch, i, lengths[i], req.history_turns > 0, adds)
             for i, (req, key) in enumerate(zip(requests, keys, strict=True))]
    whole: dict[int, Prefix | None] = {i: None for i, req in enumerate(requests) if req.history_turns > 0}
    prefixes = [p for p, _, _ in found]
    if can_share(lm, prefixes, plan, room, bool(whole)):
        state = prefill_shared(lm, prefixes[0], batch.embeds, batch.attention_mask, batch.visual_mask,
                               batch.position_ids, room, adds)
    else:
        state = prefill_after_prefixes(lm, prefixes, batch.embeds, batch.attention_mask,
                                       batch.visual_mask, batch.position_ids, plan, clock=clock, whole=whole,
                                       layer_additions=adds, room=room)
    for i, prefix in whole.items():
        # A chat goes on from its latest turn: the turn this one extends gives way to it (the clip's prefix stays).
        if len(found[i][2].ids) > lengths[i]:
            cache.discard(found[i][2])
        cache.put(keys[i], prefix)
    state.prefix_hits = [hit for _, hit, _ in found]
    return state


def _key(req: Request, batch: Collated, i: int, depth: int) -> PrefixKey:
    """Sample `i`'s whole prompt as a key. Its context holds everything a prefix's keys and values depend on besides
    its ids and positions: the decoded frames' content (so the file, frame count and sampler), the resolution they
    were encoded at (Qwen's third knob), what was selected from them and how (method, options, kept tokens), and
    the depth (last, as `_prefix` reads it). Positions: one int a token, or M-RoPE's (t, h, w) triple."""
    start = batch.embeds.shape[1] - len(req.ids)
    chosen = None if req.kept is None else (req.cfg.method, req.cfg.params, tuple(req.kept))
    pos = batch.position_ids[..., i, start:]
    positions = tuple(zip(*pos.tolist(), strict=True)) if pos.dim() == 2 else tuple(pos.tolist())
    return PrefixKey((req.frames_key, req.plan.max_pixels, chosen, depth), tuple(req.ids.tolist()), positions)


def _prefix(cache: PrefixCache, lm, key: PrefixKey, batch: Collated, i: int, length: int,
            follow_up: bool, additions: list[Tensor] | None) -> tuple[Prefix, bool, PrefixKey]:
    """Sample `i`'s prompt prefix through layers [0, key's depth): for a follow-up the longest kept one (the
    conversation so far), else the first `length` tokens (up to the last visual one) from the cache or computed
    and kept; whether it was found, and its key."""
    if follow_up and (found := cache.longest(key, length)) is not None:
        return found[1], True, found[0]
    clip = PrefixKey(key.context, key.ids[:length], key.positions[:length])
    start = batch.embeds.shape[1] - len(key.ids)
    span = slice(start, start + length)
    pos = batch.position_ids[..., i:i + 1, span]
    adds = [a[i:i + 1, span] for a in additions] if additions else None
    prefix, hit = cached_prefix(cache, clip, lm, batch.embeds[i:i + 1, span], pos, key.context[-1], adds)
    return prefix, hit, clip


def _missing(cache: PrefixCache, key: PrefixKey, length: int, follow_up: bool) -> bool:
    """Whether neither a conversation prefix (for a follow-up) nor the clip's prefix is kept for `key`."""
    clip = PrefixKey(key.context, key.ids[:length], key.positions[:length])
    return clip not in cache and not (follow_up and cache.longest(key, length, count=False) is not None)


def _prefill_and_keep(cache: PrefixCache, lm, req: Request, batch: Collated, key: PrefixKey, length: int,
                      clock, additions: list[Tensor] | None) -> PrefillResult:
    """One question whose prefix is not kept, on every layer: the plain prefill in one call (a prefix pass then a
    question pass would cost a second call's overhead), its first `length` tokens' keys and values kept as the
    clip's prefix, and, for a follow-up, the whole prompt's."""
    state = llm_prefill(lm, batch.embeds, batch.attention_mask, batch.visual_mask, None, batch.position_ids,
                        clock=clock, layer_additions=additions)
    layers = [state.cache.layers[i] for i in range(len(state.cache.layers))]
    for n in (length, len(key.ids)) if req.history_turns > 0 else (length,):
        cache.put(PrefixKey(key.context, key.ids[:n], key.positions[:n]),
                  Prefix(keys=tuple(layer.keys[:, :, :n].clone() for layer in layers),
                         values=tuple(layer.values[:, :, :n].clone() for layer in layers), hidden=None))
    cache.misses += 1
    state.prefix_hits = [False]
    return state
