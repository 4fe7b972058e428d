"""The fewer-frames baseline: sample as many frames as the tokens R keeps fill, and keep every token of them.

At R=0.75 and 8 frames the LLM sees 2 whole frames (the same visual-token count as the token-pruning methods
at 8 frames); the frame count is round(kept tokens / tokens per frame), at least one. The budget plans it
(`Method.reduces_frames`, pruning/planner.py `fewer_frames`): R is applied to the frames the clip would have
had, the frames are sampled evenly over the clip, and nothing is pruned inside. FLOPs are measured against
the unpruned clip with the full frame count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...method import Acts, EncodedVideo, Method, Positions, Selection


def _select(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    # The budget planned R=0 over the fewer frames: every token is kept (`keep` is all of them).
    return Selection(None, enc.features.reshape(-1, enc.features.shape[-1]), None,
                     {"frames": enc.layout.n_frames})


METHOD = Method(name="frames", help="baseline: fewer uniformly sampled frames, the same visual-token count",
                acts=Acts.BEFORE_LLM, positions=Positions.RENUMBERED, select=_select, reduces_frames=True)
