"""HoliTom (arXiv 2505.21334), its stage before the LLM: windows of frames chosen globally to save the most
static tokens, static tokens merged over time then clustered, each frame's dynamic tokens kept by attention.
The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Option, Positions, Selection, before_llm


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import HoliTomParams, select_holitom

    kept, visual, absorbed, details = select_holitom(enc.features, enc.cls_attention, keep, enc.layout,
                                                     HoliTomParams(tau=params["static_threshold"]))
    return Selection(kept, visual, enc.cls_attention.flatten().float().tolist(), details, absorbed)


# positions: the official code's rule (the merged tokens are concatenated and numbered afresh)
METHOD = before_llm("holitom", "static tokens merged over globally chosen windows, dynamic ones by attention, "
                    "before the LLM", Positions.RENUMBERED, _select,
                    Option("static_threshold", float, 0.8, "HoliTom: a token position is static over frames "
                           "whose consecutive similarities all exceed this (default: 0.8)", low=-1.0, high=1.0,
                           metavar="COSINE"))
