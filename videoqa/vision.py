"""The encode stage: frames -> the family's vision features, per-token saliency and visual layout.

What a before-the-LLM pruning method chooses from (`EncodedVideo`); follow-up questions on a clip reuse it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

from .errors import Cancelled
from .models import Family, FrameTiming
from .pruning import EncodedVideo

__all__ = ["EncodedVideo", "LRU", "encode_frames", "frames_hash"]


def frames_hash(frames: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(frames).data, usedforsecurity=False).hexdigest() + str(frames.shape)


@torch.inference_mode()
def encode_frames(family: Family, model, processor, frames: np.ndarray, device: torch.device, dtype: torch.dtype,
                  cancel: Callable[[], bool] | None = None, timing: FrameTiming | None = None,
                  max_pixels: int | None = None) -> EncodedVideo:
    """`frames` [F, H, W, 3] through the family's vision tower and projector. `cancel` is asked before each
    expensive step (preprocessing, the tower); True stops with Cancelled. A family that `uses_timing` gets the
    frames' `timing` (default: one frame a second) and the resolution bound `max_pixels`."""

    def check() -> None:
        if cancel is not None and cancel():
            raise Cancelled("encoding frames")

    if family.uses_timing:
        timing = timing or FrameTiming(1.0, tuple(range(len(frames))))
        return family.encode(model, processor, frames, device, dtype, check, timing=timing, max_pixels=max_pixels)
    return family.encode(model, processor, frames, device, dtype, check)


class LRU(OrderedDict):
    """A small least-recently-used cache (decoded clips, encodings, prompt ids of one pipeline)."""

    def __init__(self, size: int, max_bytes: int | None = None, weigh: Callable[[object], int] | None = None):
        super().__init__()
        self.size = size
        self.max_bytes, self.weigh = max_bytes, weigh  # a bound in bytes too (weigh(value) -> bytes)

    def nbytes(self) -> int:
        """Bytes the values hold, as `weigh` counts them (0 without it)."""
        return sum(self.weigh(v) for v in self.values()) if self.weigh else 0

    def get_fresh(self, key):
        """The value under `key` (now the most recent), or None."""
        if key not in self:
            return None
        self.move_to_end(key)
        return self[key]

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size or (self.max_bytes is not None and self and self.nbytes() > self.max_bytes):
            self.popitem(last=False)  # a value larger than max_bytes alone is not kept either
