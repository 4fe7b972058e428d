"""FlashVID (official code Fanziyang-v/FlashVID): per frame, attention-calibrated diverse tokens (ADTS), the
rest merged by a temporal tree and spatial clustering (STTM), before the LLM. The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import FlashVIDParams, select_flashvid

    kept, visual, absorbed, details = select_flashvid(enc.features, enc.cls_attention, keep, enc.layout,
                                                      FlashVIDParams(alpha=params["adts_share"]))
    return Selection(kept, visual, enc.cls_attention.flatten().float().tolist(), details, absorbed)


# positions: the official code's rule (the kept tokens are sorted by index and numbered afresh)
METHOD = before_llm("flashvid", "attention-diverse tokens per frame, the rest merged over time and space, "
                    "before the LLM", Positions.RENUMBERED, _select,
                    share_option("adts_share", 0.7, "FlashVID: share of each frame's budget chosen by "
                                 "attention and diversity (ADTS), the rest merged (STTM)"))
