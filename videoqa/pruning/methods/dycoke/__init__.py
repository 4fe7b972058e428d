"""DyCoke (arXiv 2411.15024, CVPR 2025): temporal merging (TTM) of tokens repeated across adjacent frames before
the LLM, then dynamic pruning of the visual KV entries each decoded token attends to (DP) while decoding.
The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Option, Positions, Selection, before_and_inside, kept_features, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_dycoke

    kept, scores, details = select_dycoke(enc.features, keep, enc.layout)
    return Selection(kept, kept_features(enc, kept), scores, details)


def _after(params: Mapping[str, Any], rs: list[float], selections: list[Selection]):
    from .algorithm import DyCokePlan

    return DyCokePlan(params["dp_layer"], params["dp_ratio"])


# positions: the official code's rule (TTM's tokens are concatenated and numbered afresh)
METHOD = before_and_inside(
    "dycoke", "merge tokens repeated in adjacent frames before the LLM, prune the visual KV cache while decoding",
    Positions.RENUMBERED, _select, _after, ("dp_layer", 3, 28, "DyCoke's decode layer"),
    Option("dp_layer", int, 0, "DyCoke: while decoding, layers from this one attend only to the visual entries the "
           "token attends to most at the layer before (default: 0, the official 3 of 28 layers scaled to the "
           "model's depth)", low=0, metavar="LAYER"),
    share_option("dp_ratio", 0.8, "DyCoke: share of the visual KV entries each decode step hides (official P)"),
)
