"""SparseVLM (arXiv 2410.04417): text raters (the text tokens most related to the visual ones) rate the visual
tokens with their attention at three layers; the worst are deleted, and the best of the deleted are clustered
and merged into a few recycled tokens that stay. The algorithm: algorithm.py beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import Acts, Method, Option, share_option


def _plan(params: Mapping[str, Any], rs: list[float], tokens_per_frame: int):
    from .algorithm import SparseVLMPlan

    return SparseVLMPlan(params["sv_layer"], rs, params["recycle"])


METHOD = Method(
    name="sparsevlm",
    help="text raters' attention deletes visual tokens at three layers, the best deleted recycled as merged "
         "tokens, inside the LLM",
    acts=Acts.IN_LLM,
    options=(
        Option("sv_layer", int, 2, "SparseVLM: its first rating layer on a 32-layer model, scaled to the model's "
               "depth; the others stay at the published 6 and 15 (default: 2)", low=0, high=14,
               label="the first rating layer"),
        share_option("recycle", 0.3, "SparseVLM: the share of the deleted tokens (the best rated) recycled into "
                     "merged tokens, one per ten (0: no recycling)"),
    ),
    plan=_plan,
    layer_option="sv_layer",
)
