"""PruneVid (arXiv 2412.16117, ACL 2025): tokens static over temporal segments merged before the LLM, then
question-guided pruning inside it (the text's attention to the visual tokens at one layer). The algorithm:
algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Option, Positions, Selection, before_and_inside, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import PruneVidParams, select_prunevid

    options = PruneVidParams(tau=params["static_threshold"], segment_ratio=params["segment_ratio"],
                             cluster_ratio=params["cluster_ratio"])
    kept, visual, absorbed, details = select_prunevid(enc.features, enc.layout, options)
    return Selection(kept, visual, enc.cls_attention.flatten().float().tolist(), details, absorbed)


def _after(params: Mapping[str, Any], rs: list[float], selections: list[Selection]):
    from .algorithm import PruneVidPlan

    return PruneVidPlan(params["vtp_layer"], rs, [sel.details["groups"] for sel in selections])


# positions: the official code's rule before the LLM (merged tokens concatenated and numbered afresh); inside it
# the kept tokens keep the positions they had
METHOD = before_and_inside(
    "prunevid", "merge tokens static over temporal segments before the LLM, prune by the question's attention "
    "inside it",
    Positions.RENUMBERED, _select, _after, ("vtp_layer", 11, 32, "PruneVid's layer"),
    Option("vtp_layer", int, 0, "PruneVid: prune inside the LLM before this layer, by the attention at the one before "
           "(default: 0, the official 11 of 32 layers scaled to the model's depth)", low=0, metavar="LAYER"),
    Option("static_threshold", float, 0.8, "PruneVid: a token position is static over a segment whose frames' mean "
           "pairwise similarity there exceeds this (default: 0.8)", low=-1.0, high=1.0, metavar="COSINE"),
    share_option("segment_ratio", 0.25, "PruneVid: segments sought, as a share of the frames"),
    share_option("cluster_ratio", 0.5, "PruneVid: tokens a set of more than 14 is clustered to, as a share"),
)
