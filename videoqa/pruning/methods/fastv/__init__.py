"""FastV (arXiv 2403.06764): rank the visual tokens by the attention the prompt pays them at layer K-1 and
keep the best inside the LLM; layers < K see every token. The ranking itself: algorithm.py beside this file."""

from __future__ import annotations

from ...method import LayerCheck, Option, in_llm

METHOD = in_llm(
    "fastv", "rank by attention at layer K-1, prune inside the LLM", (__name__, "FastVPlan"),
    Option("k", int, 2, "FastV: prune after layer K-1 (default: 2; K=0 is pruning before the LLM: use --prune random "
           "or vispruner)", low=1, label="K"),
    Option("rank_by", str, "last", "FastV ranking query: the last prompt token (official code; default) or all text "
           "tokens", choices=("last", "text")),
    Option("frame_floor", float, 0.0, "FastV: spread this share of the kept tokens evenly over the frames, the rest "
           "by score (default: 0, FastV's global top-k)", low=0.0, high=1.0, label="the frame floor", metavar="SHARE"),
    check=LayerCheck("k", "K={}"))
