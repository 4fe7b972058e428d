"""The pipeline's prefill through the prefix cache (llm/prefix_cache.py): each sample's prompt prefix looked up by
everything its keys and values depend on, computed and kept when missing."""

from __future__ import annotations

from .llm.prefill import PrefillResult
from .llm.prefix_cache import Prefix, PrefixCache, cached_prefix, prefill_after_prefixes, prefix_lengths
from .request import Collated, Request


def prefill_cached(cache: PrefixCache, lm, requests: list[Request], batch: Collated, plan, n_layers: int,
                   clock) -> PrefillResult | None:
    """The batch's prefill with each prefix from `cache` (None when a sample has no visual token: nothing to
    reuse, or M-RoPE positions [3, B, n]: not handled). With an in-LLM plan the prefixes hold the layers below its
    first pruning layer."""
    lengths = prefix_lengths(batch.visual_mask, batch.attention_mask)
    if lengths is None or batch.position_ids.dim() != 2:
        return None
    depth = plan.layers[0] if plan is not None else n_layers
    found = [_prefix(cache, lm, req, batch, i, lengths[i], depth) for i, req in enumerate(requests)]
    state = prefill_after_prefixes(lm, [p for p, _ in found], batch.embeds, batch.attention_mask,
                                   batch.visual_mask, batch.position_ids, plan, clock=clock)
    state.prefix_hits = [hit for _, hit in found]
    return state


def _prefix(cache: PrefixCache, lm, req: Request, batch: Collated, i: int, length: int,
            depth: int) -> tuple[Prefix, bool]:
    """Sample `i`'s prompt prefix through layers [0, depth) from the cache, else computed and kept; and whether it
    was found. The key holds everything the prefix's keys and values depend on: the decoded frames' content (so
    the file, frame count and sampler), what was selected from them and how (method, options, kept tokens), the
    prefix's token ids (template, system text) and positions, and the depth."""
    start = batch.embeds.shape[1] - len(req.ids)
    ids, pos = req.ids[:length], batch.position_ids[i, start:start + length]
    chosen = None if req.kept is None else (req.cfg.method, req.cfg.params, tuple(req.kept))
    key = (req.frames_key, chosen, tuple(ids.tolist()), tuple(pos.tolist()), depth)
    return cached_prefix(cache, key, lm, batch.embeds[i:i + 1, start:start + length], pos[None], depth)
