"""DivPrune (arXiv 2503.02175): the clip's most diverse tokens (greedy max-min cosine distance), before the LLM.
The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, kept_features


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_divprune

    kept, details = select_divprune(enc.features, keep, enc.layout)
    return Selection(kept, kept_features(enc, kept), None, details)


# positions: the official code's rule (the kept tokens replace the image's, numbered afresh)
METHOD = before_llm("divprune", "the clip's most diverse tokens (max-min distance), before the LLM",
                    Positions.RENUMBERED, _select)
