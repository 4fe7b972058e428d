"""The prompt through the LM's own layers (prefill), with a method's in-LLM pruning at the layers it declares.

A plan (pruning/hook.py: `layers`, `at_layer`) is asked, before each of its layers, which visual tokens to keep;
we then slice the hidden states, positions and key mask per sample. The layers before a pruning layer cached the
tokens present then, the layers after it only the kept ones, so decoding reads a smaller cache too (one key mask
per group of layers between pruning layers). Kept tokens keep their original RoPE positions (positions have
gaps), as in the official FastV code. Batches are left-padded; each sample is pruned on its own.

Qwen3-VL's deepstack adds visual features to the hidden states after its first layers: `layer_additions[i]`
([B, n, d], zero off the visual tokens) is added after layer i, and sliced with the rest when a plan prunes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ..pruning.hook import LayerView, LLMPlan
from .adapter import LanguageModel, adapt
from .masks import layer_mask


@dataclass
class PrefillResult:
    logits: Tensor  # [B, V] at the last prompt position
    cache: DynamicCache  # (a StaticKVCache once a static decoder has taken it over)
    masks: list[Tensor]  # per group of layers: [B, n_g] key mask (bool; grows while decoding)
    boundaries: tuple[int, ...]  # the pruning layers: group g is layers [boundaries[g-1], boundaries[g])
    next_position: Tensor  # [B] RoPE position of the next token
    kept: list[Tensor] = field(default_factory=list)  # per sample: kept indices into its visual span (after all)
    scores: list[Tensor] = field(default_factory=list)  # per sample: the first pruning layer's score per token
    visual_offsets: list[int] = field(default_factory=list)  # per sample: sequence index of visual token 0
    t_rank: float = 0.0
    plan: LLMPlan | None = None  # its `after_token`, if any, runs while decoding
    steps: int = 0  # tokens decoded on this state (eager decoding)
    prefix_hits: list[bool] = field(default_factory=list)  # per sample: its prefix came from the prefix cache

    @property
    def k(self) -> int | None:
        """The first pruning layer (None: nothing was pruned inside the LLM)."""
        return self.boundaries[0] if self.boundaries else None

    def group(self, layer: int) -> int:
        """The group (index into `masks`) of layer `layer`."""
        return sum(b <= layer for b in self.boundaries)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Left padding: real tokens get 0, 1, 2, ...; pads get 0 (they are masked anyway)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.inference_mode()
def prefill(
    model: nn.Module | LanguageModel,
    inputs_embeds: Tensor,
    attention_mask: Tensor,
    visual_mask: Tensor,
    plan: LLMPlan | None = None,
    position_ids: Tensor | None = None,
    clock: Callable[[], float] = time.perf_counter,
    layer_additions: list[Tensor] | None = None,
) -> PrefillResult:
    """Run the prompt through the LM; with a plan, prune visual tokens before each of `plan.layers`.

    inputs_embeds [B, n, d] (left-padded), attention_mask [B, n] (1 = real), visual_mask [B, n] (True =
    visual token), position_ids [B, n] or [3, B, n] (M-RoPE; default: 0, 1, ... over real tokens). Returns
    last-position logits and a cache ready for decoding (`llm.decode`). `clock` times the pruning (on CUDA,
    pass one that synchronises: see measure.device_clock).
    """
    lm = adapt(model)
    lm.check_kernel()
    b = inputs_embeds.shape[0]
    key_mask = attention_mask.bool()
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    boundaries = tuple(plan.layers) if plan is not None else ()
    if list(boundaries) != sorted(set(boundaries)) or any(not 0 < k < lm.n_layers for k in boundaries):
        raise ValueError(f"pruning layers {boundaries} must ascend, each in [1, {lm.n_layers - 1}]")
    cache = DynamicCache(config=lm.config)
    offsets = [int(visual_mask[i].nonzero()[0]) if visual_mask[i].any() else -1 for i in range(b)]
    result = PrefillResult(logits=None, cache=cache, masks=[key_mask], boundaries=boundaries,
                           next_position=position_ids[..., -1].max(0).values + 1 if position_ids.dim() == 3
                           else position_ids[:, -1] + 1, visual_offsets=offsets, plan=plan)
    return run_layers(lm, result, 0, inputs_embeds, inputs_embeds, position_ids, key_mask, visual_mask, clock,
                      layer_additions)


def run_layers(lm: LanguageModel, result: PrefillResult, start: int, h: Tensor, h_in: Tensor, position_ids: Tensor,
               key_mask: Tensor, visual_mask: Tensor, clock: Callable[[], float],
               layer_additions: list[Tensor] | None = None) -> PrefillResult:
    """Layers [start, n_layers) on hidden states `h` (`h_in`: the input of layer start-1, whose attention rows a
    plan pruning at `start` reads), pruning at `result.boundaries`; fills `result` (kept, scores, masks, logits).
    The prefix cache (prefix_cache.py) enters here at the first pruning layer, with layers < it already cached.
    `layer_additions[i]` [B, n, d] is added after layer i (Qwen3-VL's deepstack features), sliced with `h`."""
    kernel, plan, boundaries, cache = lm.kernel, result.plan, result.boundaries, result.cache
    b = h.shape[0]
    pos_emb = lm.rotary_emb(h, position_ids=position_ids)
    mask = layer_mask(kernel, key_mask, h.shape[1], h.dtype)
    visual_index = [torch.arange(int(visual_mask[i].sum()), device=h.device) for i in range(b)]
    for i in range(start, lm.n_layers):
        if i in boundaries:
            t0 = clock()
            view = LayerView(layer=i, hidden=h, hidden_prev=h_in, positions=position_ids, key_mask=key_mask,
                             visual_mask=visual_mask, visual_index=visual_index, r=_per_sample(plan, b),
                             n_layers=lm.n_layers, attention_rows=_rows_of(lm, i - 1, h_in, pos_emb, cache, key_mask),
                             attention_heads=_rows_of(lm, i - 1, h_in, pos_emb, cache, key_mask, per_head=True))
            keep = plan.at_layer(view)
            if keep.hidden is not None:
                h = keep.hidden
            if not result.scores and keep.scores is not None:
                result.scores = keep.scores
            gather, valid = _gather_index(key_mask, visual_mask, keep.kept)
            visual_index = [visual_index[s][keep.kept[s]] for s in range(b)]
            h = _take(h, gather)
            layer_additions = [_take(a, gather) for a in layer_additions or []]
            position_ids = position_ids.gather(-1, gather.expand_as(position_ids[..., :gather.shape[1]]))
            visual_mask = visual_mask.gather(1, gather) & valid
            key_mask = key_mask.gather(1, gather) & valid
            result.t_rank += clock() - t0
            result.masks.append(key_mask)
            pos_emb = lm.rotary_emb(h, position_ids=position_ids)
            mask = layer_mask(kernel, key_mask, h.shape[1], h.dtype)
        h_in = h
        h = lm.run_layer(i, h, mask, pos_emb, cache)
        if layer_additions and i < len(layer_additions):
            h = h + layer_additions[i].to(h.dtype)
    result.kept = visual_index if boundaries else []
    result.logits = lm.logits(h)
    return result


def _take(x: Tensor, gather: Tensor) -> Tensor:
    """x [B, n, d] at the sequence indices gather [B, m]."""
    return x.gather(1, gather[..., None].expand(-1, -1, x.shape[-1]))


def _per_sample(plan, b: int) -> list[float]:
    r = getattr(plan, "r", 0.0)
    return list(r) if isinstance(r, (list, tuple)) else [r] * b


def _rows_of(lm: LanguageModel, i: int, h_in: Tensor, pos_emb, cache, key_mask: Tensor,
             per_head: bool = False) -> Callable[[Tensor], Tensor]:
    return lambda rows: lm.attention_rows(i, h_in, rows, pos_emb, cache, key_mask, per_head=per_head)


def _gather_index(key_mask: Tensor, visual_mask: Tensor, kept: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Per sample, the sequence indices that stay (every non-visual token and the kept visual ones), left-padded
    to one length with copies of index 0 (masked out as keys); and [B, length] which of them are real."""
    b, n = key_mask.shape
    keep_idx = []
    for s in range(b):
        vis = visual_mask[s].nonzero().squeeze(-1)
        keep = torch.ones(n, dtype=torch.bool, device=key_mask.device)
        keep[vis] = False
        keep[vis[kept[s]]] = True
        keep_idx.append(keep.nonzero().squeeze(-1))
    length = max(len(ix) for ix in keep_idx)
    gather = torch.stack([torch.cat([ix.new_zeros(length - len(ix)), ix]) for ix in keep_idx])
    valid = torch.stack([torch.arange(length, device=key_mask.device) >= length - len(ix) for ix in keep_idx])
    return gather, valid
