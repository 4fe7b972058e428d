"""DyCoke (arXiv 2411.15024, CVPR 2025): temporal merging (TTM) of tokens repeated across adjacent frames before
the LLM, then dynamic pruning of the visual KV entries each decoded token attends to (DP) while decoding.
The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import Acts, EncodedVideo, Method, Option, Positions, Selection, kept_features, layer_check, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_dycoke

    kept, scores, details = select_dycoke(enc.features, keep, enc.layout)
    return Selection(kept, kept_features(enc, kept), scores, details)


def _after(params: Mapping[str, Any], rs: list[float], selections: list[Selection]):
    from .algorithm import DyCokePlan

    if params["dp_layer"] < 1:
        raise ValueError("DyCoke's decode layer is resolved against the model (PruneConfig.validate(n_layers))")
    return DyCokePlan(params["dp_layer"], params["dp_ratio"])


# positions: the official code's rule (TTM's tokens are concatenated and numbered afresh)
METHOD = Method(
    name="dycoke",
    help="merge tokens repeated in adjacent frames before the LLM, prune the visual KV cache while decoding",
    acts=Acts.BEFORE_LLM,
    options=(
        Option("dp_layer", int, 0, "DyCoke: while decoding, layers from this one attend only to the visual entries "
               "the token attends to most at the layer before (default: 0, the official 3 of 28 layers scaled to the "
               "model's depth)", low=0, metavar="LAYER"),
        share_option("dp_ratio", 0.8, "DyCoke: share of the visual KV entries each decode step hides (official P)"),
    ),
    positions=Positions.RENUMBERED,
    positions_choosable=True,
    select=_select,
    after=_after,
    check=layer_check("dp_layer", "DyCoke's decode layer"),
    depth_defaults=(("dp_layer", 3 / 28),),
)
