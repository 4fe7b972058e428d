"""The in-LLM hook: how a method that prunes inside the language model meets the prefill.

A method acting inside the LLM returns, from its `plan`, an object with `layers` (ascending layer indices in
[0, n_layers - 1]) and `at_layer(view) -> LayerKeep | None`. The prefill (videoqa/llm/prefill.py) runs the layers;
at each declared layer L, before running it, it calls `at_layer` with a `LayerView` of the tokens present, then
keeps what it answers: layers < L cached every token present, layers >= L see (and cache) only the kept ones.
None: nothing changes at L (a method whose stopping layer depends on the input, like FrameFusion, declares every
layer it may act at). Several layers make a pyramid (PyramidDrop); a method that merges returns replacement
hidden states (FrameFusion) or new tokens placed after the kept visual ones (SparseVLM's recycled tokens), with
their positions and the original visual tokens each stands for.
Optionally `after_token(view: DecodeView)` is called by the eager decoder after each decoded token with the
cache and its key masks, to drop or merge KV-cache entries while decoding (it edits them in place); `before_step`
and `decode_layers`/`at_decode_layer` act inside each decode step (below). A method acting before the LLM may
add a plan of this shape after its selection (`Method.after`: PruneVid, DyCoke, HoliTom's `--llm-merge`); its
layers then see the selection's tokens, and `visual_index` indexes the selection.

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
    # over heads, recomputed from its cached keys (no n x n matrix; every layer keeps its fast kernel).
    # At layer 0 there is no such layer: calling it raises.
    attention_rows: Callable[[Tensor], Tensor]
    # the same for layer `layer` itself, the one about to run, on `hidden` (its keys computed for the query)
    attention_rows_here: Callable[[Tensor], Tensor] | None = None
    # layer `layer - 1`'s rows per head, [B, heads, q, n] (methods that take the maximum over heads, as PruneVid's
    # code does)
    attention_heads: Callable[[Tensor], Tensor] | None = None
    tokens_per_frame: int | None = None  # visual tokens per frame (time step) of the clip, when the caller knows

    @property
    def n_visual(self) -> list[int]:
        return [len(ix) for ix in self.visual_index]


@dataclass(frozen=True)
class LayerKeep:
    """A method's answer at one layer."""

    kept: list[Tensor]  # per sample: ascending indices into that sample's visual tokens present (0..n_visual-1)
    scores: list[Tensor] | None = None  # per sample: a score per visual token present (heatmaps); None: none
    hidden: Tensor | None = None  # [B, n, d] replacement for view.hidden (merging); None: keep it as it is
    # per sample: new visual tokens [m, d] placed after the kept visual ones (recycled or merged tokens); their
    # positions ([m], or [3, m] for M-RoPE) and the original visual index each stands for (heatmaps)
    added: list[Tensor] | None = None
    added_positions: list[Tensor] | None = None
    added_index: list[Tensor] | None = None
    # per sample: original visual index of a token present -> the original indices merged into it here
    absorbed: list[dict[int, list[int]]] | None = None


@dataclass(frozen=True)
class DecodeView:
    """What a decode-time hook sees after each decoded token (eager decoding)."""

    step: int  # decoded tokens so far
    cache: object  # the prefill's DynamicCache: cache.layers[i].keys / .values [B, kv_heads, n_i, head_dim]
    key_masks: list[Tensor]  # per layer group (between pruning layers): [B, n_g] which cached keys are live
    boundaries: tuple[int, ...]  # the pruning layers; group g holds layers [boundaries[g-1], boundaries[g])


@runtime_checkable
class LLMPlan(Protocol):
    """What `Method.plan` returns for a method acting inside the LLM. A plan whose layers scale with the model's
    depth (published for 32 layers) also has `layers_for(n_layers) -> tuple[int, ...]`, which the prefill asks
    instead; its `layers` then names the first layer it may act at (what layers below it may cache)."""

    layers: tuple[int, ...]

    def at_layer(self, view: LayerView) -> LayerKeep | None: ...


def plan_layers(plan: LLMPlan | None, n_layers: int) -> tuple[int, ...]:
    """The layers `plan` acts at on a model of `n_layers` layers (none without a plan)."""
    if plan is None:
        return ()
    layers_for = getattr(plan, "layers_for", None)
    return tuple(layers_for(n_layers)) if layers_for is not None else tuple(plan.layers)


def scaled_layers(published: tuple[int, ...], n_layers: int, low: int = 0, depth: int = 32) -> tuple[int, ...]:
    """Layers published for a `depth`-layer model (32: PyramidDrop's, SparseVLM's), at the same depth share of an
    `n_layers`-layer one: ascending, distinct, in [low, n_layers - 1] (later ones pushed up by one where rounding
    makes two meet; past the end dropped)."""
    out: list[int] = []
    for layer in published:
        at = max(low, round(layer * n_layers / depth), out[-1] + 1 if out else low)
        if at < n_layers:
            out.append(at)
    return tuple(out)


# --- Inside a decode step (eager decoding) ------------------------------------------------------------------
# A plan may also define, for decoding:
#   `before_step(view: DecodeView) -> None`: called at the start of each decode step, once the step's token has
#       its slot in every key mask, before any layer runs; it may edit the masks in place (they persist). PruneVid
#       hides, from the layers below its pruning layer, the visual tokens it pruned there.
#   `decode_layers: tuple[int, ...]` and `at_decode_layer(view: StepView) -> Tensor | None`: called inside each
#       step before layer `view.layer` runs; a [B, n] boolean answer is the key mask the layers from there to the
#       end of that layer's group use in this step only (None: unchanged). DyCoke keeps the visual entries the
#       step's token attends to most.


@dataclass(frozen=True)
class StepView:
    """What a decode-layer hook sees inside one decode step, before layer `layer` runs."""

    layer: int
    step: int  # tokens fed before this one (0: the first token after the prefill)
    key_mask: Tensor  # [B, n] the live keys of layer `layer`'s group; this step's token is the last
    # layer `layer - 1`'s attention of this step's token over its cache [B, n], mean over heads
    attention_row: Callable[[], Tensor]
