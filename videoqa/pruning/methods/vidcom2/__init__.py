"""VidCom2 (arXiv 2505.14454): per-frame budgets from each frame's distinctiveness, then each frame's most
distinct tokens, before the LLM. The algorithm: algorithm.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Positions, Selection, before_llm, kept_features


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_vidcom2

    kept, scores, details = select_vidcom2(enc.features, keep, enc.layout)
    return Selection(kept, kept_features(enc, kept), scores, details)


# positions: the official code's rule (the kept tokens are gathered and numbered afresh)
METHOD = before_llm("vidcom2", "distinct frames get more tokens, then each frame's most distinct, before the LLM",
                    Positions.RENUMBERED, _select)
