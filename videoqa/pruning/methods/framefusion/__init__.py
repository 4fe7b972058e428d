"""FrameFusion (arXiv 2501.01986): from the first layers on, a visual token very like the token at the same
patch position in the previous frame is merged into it (averaged), layer after layer until few are alike; then
the tokens the prompt attends to least are pruned, so the whole prefill costs 1-R of its visual-token work.
The algorithm: algorithm.py beside this file."""

from __future__ import annotations

from ...method import LayerCheck, Option, in_llm, share_option

# Merging may start at the embeddings (layer 0), as published.
METHOD = in_llm("framefusion", "merge tokens like the same patch of the previous frame, then prune by attention, "
                "inside the LLM", (__name__, "FrameFusionPlan"),
                Option("ff_layer", int, 0, "FrameFusion: the layer merging starts at (default: 0, the embeddings, "
                       "as published)", low=0, label="the first merging layer"),
                Option("ff_threshold", float, 0.6, "FrameFusion: merge a token whose cosine similarity to the same "
                       "patch of the previous frame is at least this (default: 0.6)", low=-1.0, high=1.0,
                       metavar="COSINE", label="the similarity threshold"),
                share_option("ff_ratio_floor", 0.1, "FrameFusion: merging stops once fewer than this share of the "
                             "visual tokens are alike; pruning follows"),
                check=LayerCheck("ff_layer", "FrameFusion's first merging layer", low=0))
