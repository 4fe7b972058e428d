"""FastV (arXiv 2403.06764): rank the visual tokens by the attention the prompt pays them at layer K-1 and
keep the best inside the LLM; layers < K see every token. The ranking itself: algorithm.py beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....errors import InputError
from ...method import Acts, Method, Option


def _plan(params: Mapping[str, Any], rs: list[float], tokens_per_frame: int):
    from .algorithm import FastVPlan

    return FastVPlan(params["k"], rs, params["rank_by"], params["frame_floor"], tokens_per_frame)


def _check(params: Mapping[str, Any], n_layers: int | None) -> None:
    k = params["k"]
    if n_layers is not None and k >= n_layers:
        raise InputError(f"K={k} is out of range: the language model has {n_layers} layers, "
                         f"so K must be in [1, {n_layers - 1}]")


METHOD = Method(
    name="fastv",
    help="rank by attention at layer K-1, prune inside the LLM",
    acts=Acts.IN_LLM,
    options=(
        Option("k", int, 2, "FastV: prune after layer K-1 (default: 2; K=0 is pruning before the LLM: use "
               "--prune random or vispruner)", low=1, label="K"),
        Option("rank_by", str, "last", "FastV ranking query: the last prompt token (official code; default) or "
               "all text tokens", choices=("last", "text")),
        Option("frame_floor", float, 0.0, "FastV: spread this share of the kept tokens evenly over the frames, "
               "the rest by score (default: 0, FastV's global top-k)", low=0.0, high=1.0, label="the frame floor",
               metavar="SHARE"),
    ),
    plan=_plan,
    check=_check,
    layer_option="k",
)
