"""VisPruner (arXiv 2412.01818): keep the tokens the vision tower's [CLS] attends to most, then diverse ones,
before the LLM. The selection itself: algorithm.py beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, kept_features, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_vispruner

    kept, details = select_vispruner(enc.cls_attention.float(), enc.vision_features.float(), keep,
                                     params["important_ratio"], enc.layout)
    return Selection(kept, kept_features(enc, kept), enc.cls_attention.flatten().float().tolist(), details)


# positions: the official code's rule
METHOD = before_llm("vispruner", "[CLS]-important then diverse tokens, before the LLM", Positions.RENUMBERED,
                    _select, share_option("important_ratio", 0.5, "VisPruner: share of the budget given to "
                                          "[CLS]-important tokens"))
