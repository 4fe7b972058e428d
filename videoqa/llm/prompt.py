"""The prompt through the LM's own layers (prefill), with FastV pruning at layer K.

Between layer K-1 and layer K the visual tokens are ranked (`pruning.fastv.rank`) and we slice the hidden states,
positions and mask. Layers < K cache every token, layers >= K only the kept ones, so decoding reads a smaller
cache too. Kept tokens keep their original RoPE positions (positions have gaps), as in the official FastV code.
Batches are left-padded; each sample is ranked and pruned on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ..pruning.fastv import FastVPlan, rank
from .adapter import LanguageModel, adapt
from .masks import layer_mask


@dataclass
class PrefillResult:
    logits: Tensor  # [B, V] at the last prompt position
    cache: DynamicCache  # (a StaticKVCache once a static decoder has taken it over)
    full_mask: Tensor  # [B, n] key mask of layers < K (bool; grows while decoding)
    pruned_mask: Tensor | None  # [B, n_hat] key mask of layers >= K (None: no pruning)
    next_position: Tensor  # [B] RoPE position of the next token
    k: int | None
    kept: list[Tensor] = field(default_factory=list)  # per sample: kept indices into its visual span
    scores: list[Tensor] = field(default_factory=list)  # per sample: ranking score of every visual token
    visual_offsets: list[int] = field(default_factory=list)  # per sample: sequence index of visual token 0
    t_rank: float = 0.0


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Left padding: real tokens get 0, 1, 2, ...; pads get 0 (they are masked anyway)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.inference_mode()
def prefill(
    model: nn.Module | LanguageModel,
    inputs_embeds: Tensor,
    attention_mask: Tensor,
    visual_mask: Tensor,
    plan: FastVPlan | None = None,
    position_ids: Tensor | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PrefillResult:
    """Run the prompt through the LM. With a plan, prune visual tokens after layer plan.k - 1.

    inputs_embeds [B, n, d] (left-padded), attention_mask [B, n] (1 = real), visual_mask [B, n] (True =
    visual token). Returns last-position logits and a cache ready for decoding (`llm.decode`). `clock` times the
    ranking (on CUDA, pass one that synchronises: see measure.device_clock).
    """
    lm = adapt(model)
    kernel = lm.check_kernel()
    b, n, _ = inputs_embeds.shape
    key_mask = attention_mask.bool()
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    cache = DynamicCache(config=lm.config)
    k = plan.k if plan is not None else lm.n_layers
    h = inputs_embeds
    pos_emb = lm.rotary_emb(h, position_ids=position_ids)
    mask = layer_mask(kernel, key_mask, n, h.dtype)
    offsets = [int(visual_mask[i].nonzero()[0]) if visual_mask[i].any() else -1 for i in range(b)]
    h_in = h  # input of the layer just run: layer K-1's, when ranking
    result = PrefillResult(
        logits=None, cache=cache, full_mask=key_mask, pruned_mask=None,
        next_position=position_ids[:, -1] + 1, k=plan.k if plan is not None else None, visual_offsets=offsets,
    )
    for i in range(lm.n_layers):
        if i == k:
            t0 = clock()
            h, position_ids, pruned_mask = _prune(lm, k - 1, h_in, h, position_ids, pos_emb, cache,
                                                  key_mask, visual_mask, plan, result)
            result.t_rank = clock() - t0
            result.pruned_mask = pruned_mask
            pos_emb = lm.rotary_emb(h, position_ids=position_ids)
            mask = layer_mask(kernel, pruned_mask, h.shape[1], h.dtype)
        h_in = h
        h = lm.run_layer(i, h, mask, pos_emb, cache)
    result.logits = lm.logits(h)
    return result


def _prune(lm, layer_idx, h_in, h, position_ids, pos_emb, cache, key_mask, visual_mask, plan, result):
    """Rank with layer `layer_idx`'s attention (FastV), then slice hidden states, positions and mask per sample."""
    b, n = key_mask.shape
    kept, scores = rank(lm, layer_idx, h_in, pos_emb, cache, key_mask, visual_mask, plan)
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
