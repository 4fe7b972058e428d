"""Random pruning before the LLM (FastV's K=0 baseline): a uniform, seeded sample of the visual tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import EncodedVideo, Option, Positions, Selection, before_llm, kept_features


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from .algorithm import select_random

    kept = select_random(enc.layout.n_tokens, keep, params["seed"])
    return Selection(kept, kept_features(enc, kept), None, {"seed": params["seed"]})


METHOD = before_llm("random", "random tokens, before the LLM", Positions.RENUMBERED, _select,
                    Option("seed", int, 0, "seed of random pruning (default: 0)"))
