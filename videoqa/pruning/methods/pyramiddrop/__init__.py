"""PyramidDrop (arXiv 2410.17247): the LLM split into stages; at the end of each, the visual tokens the last
instruction token attends to least (in the next layer's attention) are dropped, a fixed share λ of those present
each time. The ranking and the schedule: algorithm.py beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....errors import InputError
from ...method import Option, in_llm


def _check(params: Mapping[str, Any], n_layers: int | None) -> None:
    last = params["pd_layer"] * (params["pd_stages"] - 1)
    if last >= 32:
        raise InputError(f"PyramidDrop's last stage would start at layer {last} of 32: lower --pd-layer or --pd-stages")


METHOD = in_llm("pyramiddrop", "drop visual tokens at several layers, the same share each time (a pyramid), inside "
                "the LLM", (__name__, "PyramidDropPlan"),
                Option("pd_layer", int, 8, "PyramidDrop: layers per stage on a 32-layer model, scaled to the model's "
                       "depth (default: 8, drops before layers 8, 16, 24 as published)", low=1, high=31,
                       label="the stage length"),
                Option("pd_stages", int, 4, "PyramidDrop: stages (default: 4; each drop keeps λ = (1-R)^(1/(stages-1)) "
                       "of the tokens present, so the last stage keeps 1-R: R=0.875 is the published λ=0.5)", low=2,
                       high=8, label="the stage count"),
                check=_check)
