"""SparseVLM (arXiv 2410.04417): text raters (the text tokens most related to the visual ones) rate the visual
tokens with their attention at three layers; the worst are deleted, and the best of the deleted are clustered
and merged into a few recycled tokens that stay. The algorithm: algorithm.py beside this file."""

from __future__ import annotations

from ...method import Option, in_llm, share_option

METHOD = in_llm("sparsevlm", "text raters' attention deletes visual tokens at three layers, the best deleted "
                "recycled as merged tokens, inside the LLM", (__name__, "SparseVLMPlan"),
                Option("sv_layer", int, 2, "SparseVLM: its first rating layer on a 32-layer model, scaled to the "
                       "model's depth; the others stay at the published 6 and 15 (default: 2)", low=0, high=14,
                       label="the first rating layer"),
                share_option("recycle", 0.3, "SparseVLM: the share of the deleted tokens (the best rated) recycled "
                             "into merged tokens, one per ten (0: no recycling)"))
