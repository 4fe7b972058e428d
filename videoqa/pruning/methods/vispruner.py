"""VisPruner (arXiv 2412.01818): keep the tokens the vision tower's [CLS] attends to most, then diverse ones,
before the LLM. The selection itself: videoqa/pruning/vispruner.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..method import Acts, EncodedVideo, Method, Option, Positions, Selection, kept_features


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from ..vispruner import select_vispruner

    kept, details = select_vispruner(enc.cls_attention.float(), enc.vision_features.float(), keep,
                                     params["important_ratio"], enc.layout)
    return Selection(kept, kept_features(enc, kept), enc.cls_attention.flatten().float().tolist(), details)


METHOD = Method(
    name="vispruner",
    help="[CLS]-important then diverse tokens, before the LLM",
    acts=Acts.BEFORE_LLM,
    options=(Option("important_ratio", float, 0.5, "VisPruner: share of the budget given to [CLS]-important "
                    "tokens (default: 0.5)", low=0.0, high=1.0, metavar="SHARE"),),
    positions=Positions.RENUMBERED,  # the official code's
    positions_choosable=True,
    select=_select,
)
