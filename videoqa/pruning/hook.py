"""The in-LLM hook: how a method that prunes inside the language model meets the prefill.

A method acting inside the LLM returns, from its `plan`, an object with `layers` (ascending layer indices in
[1, n_layers - 1]) and `at_layer(view) -> LayerKeep`. The prefill (videoqa/llm/prefill.py) runs the layers; at
each declared layer L, before running it, it calls `at_layer` with a `LayerView` of the tokens present, then
keeps what it answers: layers < L cached every token present, layers >= L see (and cache) only the kept ones.
Several layers make a pyramid (PyramidDrop); a method that merges returns replacement hidden states.
Optionally `after_token(view: DecodeView)` is called by the eager decoder after each decoded token with the
cache and its key masks, to drop or merge KV-cache entries while decoding (it edits them in place).

The prefill imports only this module, never a method: FastV (methods/fastv/) is one client among others.
This module is importable without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class LayerView:
    """The tokens present at the boundary before layer `layer`, batched and left-padded."""

    layer: int  # the layer about to run; layers < layer have run (and cached) these tokens
    hidden: Tensor  # [B, n, d] the input of layer `layer`
    hidden_prev: Tensor  # [B, n, d] the input of layer `layer - 1`
    positions: Tensor  # [B, n] RoPE position ids, or [3, B, n] M-RoPE ids; always sliced on the last dim
    key_mask: Tensor  # [B, n] True: a real token (False: left padding)
    visual_mask: Tensor  # [B, n] True: a visual token still present
    visual_index: list[Tensor]  # per sample: the original visual-span index of each visual token present, in order
    r: list[float]  # per sample: the R the method was asked for (its share of the visual tokens to drop)
    n_layers: int
    # query positions [q] (indices into n) -> layer `layer - 1`'s attention from those queries [B, q, n], mean
    # over heads, recomputed from its cached keys (no n x n matrix; every layer keeps its fast kernel)
    attention_rows: Callable[[Tensor], Tensor]

    @property
    def n_visual(self) -> list[int]:
        return [len(ix) for ix in self.visual_index]


@dataclass(frozen=True)
class LayerKeep:
    """A method's answer at one layer."""

    kept: list[Tensor]  # per sample: ascending indices into that sample's visual tokens present (0..n_visual-1)
    scores: list[Tensor] | None = None  # per sample: a score per visual token present (heatmaps); None: none
    hidden: Tensor | None = None  # [B, n, d] replacement for view.hidden (merging); None: keep it as it is


@dataclass(frozen=True)
class DecodeView:
    """What a decode-time hook sees after each decoded token (eager decoding)."""

    step: int  # decoded tokens so far
    cache: object  # the prefill's DynamicCache: cache.layers[i].keys / .values [B, kv_heads, n_i, head_dim]
    key_masks: list[Tensor]  # per layer group (between pruning layers): [B, n_g] which cached keys are live
    boundaries: tuple[int, ...]  # the pruning layers; group g holds layers [boundaries[g-1], boundaries[g])


@runtime_checkable
class LLMPlan(Protocol):
    """What `Method.plan` returns for a method acting inside the LLM."""

    layers: tuple[int, ...]

    def at_layer(self, view: LayerView) -> LayerKeep: ...
