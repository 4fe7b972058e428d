"""HoliTom (arXiv 2505.21334), its stage before the LLM: windows of frames chosen globally to save the most
static tokens, static tokens merged over time then clustered, each frame's dynamic tokens kept by attention.
The algorithm: algorithm.py; its stage inside the LLM (`--llm-merge`): llm_merge.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Option, Positions, Selection, before_and_inside, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import HoliTomParams, select_holitom

    kept, visual, absorbed, details = select_holitom(enc.features, enc.cls_attention, keep, enc.layout,
                                                     HoliTomParams(tau=params["static_threshold"]))
    return Selection(kept, visual, enc.cls_attention.flatten().float().tolist(), details, absorbed)


def _after(params: Mapping[str, Any], rs: list[float], selections: list[Selection]):
    from .llm_merge import HoliTomMergePlan

    return HoliTomMergePlan(params["merge_layer"], params["merge_r"])


# positions: the official code's rule (the merged tokens are concatenated and numbered afresh); inside the LLM the
# kept tokens keep theirs
METHOD = before_and_inside(
    "holitom", "static tokens merged over globally chosen windows, dynamic ones by attention, before the LLM "
    "(--llm-merge: and merged again inside it)", Positions.RENUMBERED, _select, _after,
    ("merge_layer", 18, 28, "HoliTom's merge layer"),
    Option("static_threshold", float, 0.8, "HoliTom: a token position is static over frames whose consecutive "
           "similarities all exceed this (default: 0.8)", low=-1.0, high=1.0, metavar="COSINE"),
    Option("llm_merge", bool, False, "HoliTom: also its stage inside the LLM, merging the visual tokens the last "
           "prompt token attends to least into the most similar kept ones (default: off)"),
    Option("merge_layer", int, 0, "HoliTom's merge inside the LLM: before this layer (default: 0, the official 18 of "
           "28 layers scaled to the model's depth)", low=0, metavar="LAYER"),
    share_option("merge_r", 0.5, "HoliTom's merge inside the LLM: share of the visual tokens merged away"),
    inside_option="llm_merge",
)
