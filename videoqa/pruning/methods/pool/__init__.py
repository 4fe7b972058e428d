"""The pooling baseline: average-pool each frame's patch grid to the grid nearest its budget, before the LLM.
The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_pool

    kept, visual, absorbed, details = select_pool(enc.features, keep, enc.layout)
    return Selection(kept, visual, None, details, absorbed)


# positions: pooled frames are numbered afresh, as the models that pool frames do
METHOD = before_llm("pool", "baseline: average-pool each frame's patch grid to the kept count, before the LLM",
                    Positions.RENUMBERED, _select)
