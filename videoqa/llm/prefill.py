"""The prompt through the LM's own layers (prefill), with a method's in-LLM pruning at the layers it declares.

A plan (pruning/hook.py: `layers`, `at_layer`) is asked, before each of its layers, which visual tokens to keep;
we then slice the hidden states, positions and key mask per sample. The layers before a pruning layer cached the
tokens present then, the layers after it only the kept ones, so decoding reads a smaller cache too (one key mask
per group of layers between pruning layers). Kept tokens keep their original RoPE positions (positions have
gaps), as in the official FastV code; tokens a plan adds (merged or recycled) come with positions of their own.
A plan may act at layer 0 (on the embeddings) and may pass a layer (None): only the layers where it acted become
group boundaries. Batches are left-padded; each sample is pruned on its own.

Qwen3-VL's deepstack adds visual features to the hidden states after its first layers: `layer_additions[i]`
([B, n, d], zero off the visual tokens) is added after layer i, and sliced with the rest when a plan prunes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ..pruning.hook import LayerKeep, LayerView, LLMPlan, plan_layers
from .adapter import LanguageModel, adapt
from .masks import layer_mask

if TYPE_CHECKING:
    from .shared_prefix import SharedLayout


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
    # (layer, per sample: visual tokens present from that layer on) at each layer where the plan acted (FLOPs)
    stages: list[tuple[int, list[int]]] = field(default_factory=list)
    # per sample: original visual index of a token present at the end -> the original indices merged into it
    absorbed: list[dict[int, list[int]]] = field(default_factory=list)
    shared: SharedLayout | None = None  # the samples' questions share one prefix in one sequence (shared_prefix.py)

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


def visual_offsets(visual_mask: Tensor) -> list[int]:
    """Per sample of a batch: the sequence index of its first visual token (-1: none)."""
    return [int(row.nonzero()[0]) if row.any() else -1 for row in visual_mask]


def next_positions(position_ids: Tensor) -> Tensor:
    """[B] RoPE position of each left-padded sample's next token (M-RoPE [3, B, n]: one past its largest)."""
    last = position_ids[..., -1]
    return (last.max(0).values if last.dim() == 2 else last) + 1


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
    tokens_per_frame: int | None = None,
) -> PrefillResult:
    """Run the prompt through the LM; with a plan, prune visual tokens before each of `plan.layers`.

    inputs_embeds [B, n, d] (left-padded), attention_mask [B, n] (1 = real), visual_mask [B, n] (True =
    visual token), position_ids [B, n] or [3, B, n] (M-RoPE; default: 0, 1, ... over real tokens). Returns
    last-position logits and a cache ready for decoding (`llm.decode`). `clock` times the pruning (on CUDA,
    pass one that synchronises: see measure.device_clock). `tokens_per_frame` is shown to the plan (a method
    comparing frames, like FrameFusion, needs it where its own plan was not told).
    """
    lm = adapt(model)
    lm.check_kernel()
    key_mask = attention_mask.bool()
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    boundaries = plan_layers(plan, lm.n_layers)
    if list(boundaries) != sorted(set(boundaries)) or any(not 0 <= k < lm.n_layers for k in boundaries):
        raise ValueError(f"pruning layers {boundaries} must ascend, each in [0, {lm.n_layers - 1}]")
    cache = DynamicCache(config=lm.config)
    result = PrefillResult(logits=None, cache=cache, masks=[key_mask], boundaries=boundaries,
                           next_position=next_positions(position_ids), visual_offsets=visual_offsets(visual_mask),
                           plan=plan)
    return run_layers(lm, result, 0, inputs_embeds, inputs_embeds, position_ids, key_mask, visual_mask, clock,
                      layer_additions, tokens_per_frame)


def run_layers(lm: LanguageModel, result: PrefillResult, start: int, h: Tensor, h_in: Tensor, position_ids: Tensor,
               key_mask: Tensor, visual_mask: Tensor, clock: Callable[[], float],
               layer_additions: list[Tensor] | None = None, tokens_per_frame: int | None = None) -> PrefillResult:
    """Layers [start, n_layers) on hidden states `h` (`h_in`: the input of layer start-1, whose attention rows a
    plan pruning at `start` reads), pruning at `result.boundaries` (the plan's layers; on return, the layers where
    it acted); fills `result` (kept, scores, masks, stages, absorbed, logits). The prefix cache (prefix_cache.py)
    enters here at the first pruning layer, with layers < it already cached. `layer_additions[i]` [B, n, d] is
    added after layer i (Qwen3-VL's deepstack features), sliced with `h`."""
    kernel, plan, declared, cache = lm.kernel, result.plan, result.boundaries, result.cache
    b = h.shape[0]
    pos_emb = lm.rotary_emb(h, position_ids=position_ids)
    mask = layer_mask(kernel, key_mask, h.shape[1], h.dtype)
    visual_index = [torch.arange(int(visual_mask[i].sum()), device=h.device) for i in range(b)]
    acted = []
    for i in range(start, lm.n_layers):
        if i in declared:
            t0 = clock()
            view = LayerView(layer=i, hidden=h, hidden_prev=h_in, positions=position_ids, key_mask=key_mask,
                             visual_mask=visual_mask, visual_index=visual_index, r=_per_sample(plan, b),
                             n_layers=lm.n_layers, attention_rows=_rows_of(lm, i - 1, h_in, pos_emb, cache, key_mask),
                             attention_rows_here=_rows_here(lm, i, h, pos_emb, key_mask),
                             attention_heads=_rows_of(lm, i - 1, h_in, pos_emb, cache, key_mask, per_head=True),
                             tokens_per_frame=tokens_per_frame)
            keep = plan.at_layer(view)
            if keep is not None:
                h, position_ids, key_mask, visual_mask, visual_index, layer_additions = _apply(
                    keep, result, h, position_ids, key_mask, visual_mask, visual_index, layer_additions)
            result.t_rank += clock() - t0
            if keep is not None:  # None: nothing changed here, and no new group of layers starts
                result.masks.append(key_mask)
                result.stages.append((i, [len(ix) for ix in visual_index]))
                acted.append(i)
                pos_emb = lm.rotary_emb(h, position_ids=position_ids)
                mask = layer_mask(kernel, key_mask, h.shape[1], h.dtype)
        h_in = h
        h = lm.run_layer(i, h, mask, pos_emb, cache)
        if layer_additions and i < len(layer_additions):
            h = h + layer_additions[i].to(h.dtype)
    result.boundaries = tuple(acted)
    result.kept = visual_index if acted else []
    result.absorbed = [{k: v for k, v in a.items() if v} for a in result.absorbed] if acted else []
    result.logits = lm.logits(h)
    return result


def _apply(keep: LayerKeep, result: PrefillResult, h: Tensor, position_ids: Tensor, key_mask: Tensor,
           visual_mask: Tensor, visual_index: list[Tensor], layer_additions: list[Tensor] | None):
    """The tokens present after a plan's answer: (hidden, positions, key mask, visual mask, visual index, additions)
    with the kept visual tokens and any new ones; records its scores (the first layer's) and merges in `result`."""
    b = h.shape[0]
    if keep.hidden is not None:
        h = keep.hidden
    if not result.scores and keep.scores is not None:
        result.scores = keep.scores
    if not result.absorbed:
        result.absorbed = [{} for _ in range(b)]
    for s in range(b):
        _absorb(result.absorbed[s], keep.absorbed[s] if keep.absorbed else {}, visual_index[s], keep.kept[s])
    added = keep.added or [h.new_zeros(0, h.shape[-1])] * b
    gather, valid = _gather_index(key_mask, visual_mask, keep.kept, [len(a) for a in added])
    visual_index = [torch.cat([visual_index[s][keep.kept[s]],
                               keep.added_index[s].to(h.device) if keep.added else visual_index[s][:0]])
                    for s in range(b)]
    n_add = max(len(a) for a in added)
    if n_add:  # new tokens go after the present ones, then the gather places them
        h = torch.cat([h, _pad_rows(added, n_add, h)], dim=1)
        position_ids = torch.cat([position_ids, _pad_positions(keep.added_positions, n_add, position_ids)], -1)
        key_mask = torch.cat([key_mask, key_mask.new_ones(b, n_add)], 1)
        visual_mask = torch.cat([visual_mask, visual_mask.new_ones(b, n_add)], 1)
        layer_additions = [torch.cat([a, a.new_zeros(b, n_add, a.shape[-1])], 1) for a in layer_additions or []]
    h = _take(h, gather)
    layer_additions = [_take(a, gather) for a in layer_additions or []]
    position_ids = position_ids.gather(-1, gather.expand_as(position_ids[..., :gather.shape[1]]))
    return (h, position_ids, key_mask.gather(1, gather) & valid, visual_mask.gather(1, gather) & valid,
            visual_index, layer_additions)


def _absorb(total: dict[int, list[int]], new: dict[int, list[int]], present: Tensor, kept: Tensor) -> None:
    """Fold one layer's merges (original index -> indices merged into it) into the running record; a token merged
    away brings what it had absorbed, and a dropped token's record goes with it."""
    for into, members in new.items():
        group = total.setdefault(into, [])
        for m in members:
            group += [m, *total.pop(m, [])] if m != into else []
    for i in set(present.tolist()) - set(present[kept].tolist()) - set(new):
        total.pop(i, None)


def _pad_rows(rows: list[Tensor], n: int, like: Tensor) -> Tensor:
    """Per-sample rows [m_s, d] -> [B, n, d], zero after each sample's own."""
    out = like.new_zeros(len(rows), n, like.shape[-1])
    for s, r in enumerate(rows):
        out[s, :len(r)] = r.to(like.dtype)
    return out


def _pad_positions(positions: list[Tensor], n: int, like: Tensor) -> Tensor:
    """Per-sample positions [m_s] (or [3, m_s]) -> like's layout with last dim n."""
    out = like.new_zeros(*like.shape[:-2], len(positions), n)
    for s, p in enumerate(positions):
        out[..., s, :p.shape[-1]] = p.to(like.device)
    return out


def _take(x: Tensor, gather: Tensor) -> Tensor:
    """x [B, n, d] at the sequence indices gather [B, m]."""
    return x.gather(1, gather[..., None].expand(-1, -1, x.shape[-1]))


def _per_sample(plan, b: int) -> list[float]:
    r = getattr(plan, "r", 0.0)
    return list(r) if isinstance(r, (list, tuple)) else [r] * b


def _rows_of(lm: LanguageModel, i: int, h_in: Tensor, pos_emb, cache, key_mask: Tensor,
             per_head: bool = False) -> Callable[[Tensor], Tensor]:
    if i < 0:
        def no_rows(rows: Tensor) -> Tensor:
            raise ValueError("at layer 0 no layer has run: there is no previous layer's attention")
        return no_rows
    return lambda rows: lm.attention_rows(i, h_in, rows, pos_emb, cache, key_mask, per_head=per_head)


def _rows_here(lm: LanguageModel, i: int, h: Tensor, pos_emb, key_mask: Tensor) -> Callable[[Tensor], Tensor]:
    """Layer i's attention rows on its input h, before it runs (its keys computed once, on the first call)."""
    keys: list[Tensor] = []

    def rows_of(rows: Tensor) -> Tensor:
        if not keys:
            keys.append(lm.layer_keys(i, h, pos_emb))
        return lm.attention_rows(i, h, rows, pos_emb, None, key_mask, keys=keys[0])
    return rows_of


def _gather_index(key_mask: Tensor, visual_mask: Tensor, kept: list[Tensor],
                  added: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """Per sample, the sequence indices that stay (every non-visual token and the kept visual ones, then its
    `added[s]` new tokens, at n, n+1, ..., right after its kept visual tokens), left-padded to one length with
    copies of index 0 (masked out as keys); and [B, length] which of them are real."""
    b, n = key_mask.shape
    keep_idx = []
    for s in range(b):
        vis = visual_mask[s].nonzero().squeeze(-1)
        keep = torch.ones(n, dtype=torch.bool, device=key_mask.device)
        keep[vis] = False
        keep[vis[kept[s]]] = True
        ix = keep.nonzero().squeeze(-1)
        if added and added[s]:
            at = int((ix <= vis[-1]).sum())  # just after the visual span's last kept token
            ix = torch.cat([ix[:at], n + torch.arange(added[s], device=ix.device), ix[at:]])
        keep_idx.append(ix)
    length = max(len(ix) for ix in keep_idx)
    gather = torch.stack([torch.cat([ix.new_zeros(length - len(ix)), ix]) for ix in keep_idx])
    valid = torch.stack([torch.arange(length, device=key_mask.device) >= length - len(ix) for ix in keep_idx])
    return gather, valid
