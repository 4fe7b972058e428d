"""Random pruning before the LLM (FastV's K=0 baseline): a uniform, seeded sample of the visual tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..method import Acts, EncodedVideo, Method, Option, Positions, Selection, kept_features


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    from ..random import select_random

    kept = select_random(enc.layout.n_tokens, keep, params["seed"])
    return Selection(kept, kept_features(enc, kept), None, {"seed": params["seed"]})


METHOD = Method(
    name="random",
    help="random tokens, before the LLM",
    acts=Acts.BEFORE_LLM,
    options=(Option("seed", int, 0, "seed of random pruning (default: 0)"),),
    positions=Positions.RENUMBERED,
    positions_choosable=True,
    select=_select,
)
