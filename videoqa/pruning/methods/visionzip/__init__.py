"""VisionZip (arXiv 2412.04467): per frame, the [CLS]-dominant tokens plus contextual tokens that merge the
rest, before the LLM. The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_visionzip

    kept, visual, absorbed, details = select_visionzip(enc.cls_attention, enc.vision_features, enc.features, keep,
                                                       enc.layout, params["contextual_share"])
    return Selection(kept, visual, enc.cls_attention.flatten().float().tolist(), details, absorbed)


# positions: the official code's rule (the kept tokens are concatenated, so the LLM numbers them afresh)
METHOD = before_llm("visionzip", "[CLS]-dominant tokens + contextual merges per frame, before the LLM",
                    Positions.RENUMBERED, _select,
                    share_option("contextual_share", 0.15625, "VisionZip: share of each frame's budget given to "
                                 "contextual (merged) tokens; 10 of 64 as the official settings"))
