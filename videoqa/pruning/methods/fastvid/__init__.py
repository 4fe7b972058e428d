"""FastVID (arXiv 2503.11187): segment the clip, keep salient tokens and merge the rest into density peaks,
before the LLM. The algorithm itself: algorithm.py beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, share_option


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import FastVIDParams, select_fastvid

    # Density and merging on the LLM's input embeddings, segmentation on the tower's CLS features:
    # the spaces the official code uses (projected tokens; the vision tower's pooled output).
    sel = select_fastvid(enc.features, keep, enc.layout, enc.cls_attention, enc.vision_features[:, 0],
                         FastVIDParams(context_share=params["context_share"]))
    return Selection(sel.kept, sel.merged, enc.cls_attention.flatten().float().tolist(), sel.details, sel.absorbed)


# positions: the official code's rule
METHOD = before_llm("fastvid", "segment, keep salient tokens, merge the rest, before the LLM", Positions.ORIGINAL,
                    _select, share_option("context_share", 0.4, "FastVID: share of each segment's budget chosen "
                                          "by density, the rest by attention"))
