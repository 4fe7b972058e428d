"""The encode stage: frames -> the family's vision features, per-token saliency and visual layout.

What a before-the-LLM pruning method chooses from (`EncodedVideo`); follow-up questions on a clip reuse it.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

from .errors import Cancelled
from .models import Family, FrameTiming
from .pruning import Acts, EncodedVideo, PruneConfig, Selection, keep_count
from .video.clip import frames_hash

__all__ = ["ENCODED_CACHE_BYTES", "EncodedVideo", "LRU", "encode_frames", "feature_cache", "frames_hash",
           "tensor_bytes"]

# Vision features (and the selections made from them) kept per pipeline, in bytes: Video-LLaVA-7B's features of one
# 64-frame clip are 168 MB in fp16, so a bound in entries alone let 8 of them hold 1.4 GB of the device's memory.
ENCODED_CACHE_BYTES = 1 << 30


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


def frame_timing(clip, n_frames: int) -> FrameTiming:
    """The sampled frames' timing: the clip's frame rate and frame numbers (a clip without a frame rate, or
    frames without a clip: one a second, in order)."""
    if clip is not None and clip.info.fps:
        return FrameTiming(float(clip.info.fps), tuple(clip.indices))
    return FrameTiming(1.0, tuple(range(n_frames)))


def select_tokens(enc: EncodedVideo, cfg: PruneConfig, r: float, cache: LRU, frames_key: str | None = None
                  ) -> Selection:
    """The visual tokens the LLM will see and as what: the method's choice among the frames' tokens when it prunes
    before the LLM (summary tokens always stay), else every token (FastV, if chosen, prunes inside the LLM). With
    `frames_key` (the encoding's cache key) a question-independent choice is made once per clip, method, options
    and count, and kept in `cache`."""
    method = cfg.method_spec
    if method.acts is not Acts.BEFORE_LLM:
        return Selection(None, enc.all_features())
    frames_enc = enc.for_methods()
    keep = keep_count(frames_enc.layout.n_tokens, r)
    # the layout too: one clip's frames encoded at another resolution (Qwen's pixel bound) make another grid
    key = (frames_key, frames_enc.layout, cfg.method, cfg.params, keep) if frames_key and method.question_independent \
        else None
    if (sel := cache.get_fresh(key) if key else None) is None:
        sel = method.select(frames_enc, keep, cfg.options)
        if key:
            cache.put(key, sel)
    return enc.with_summary(sel)


class LRU(OrderedDict):
    """A small least-recently-used cache (decoded clips, encodings, prompt ids of one pipeline)."""

    def __init__(self, size: int, max_bytes: int | None = None, weigh: Callable[[object], int] | None = None):
        super().__init__()
        self.size = size
        self.max_bytes, self.weigh = max_bytes, weigh  # a bound in bytes too (weigh(value) -> bytes)
        self._weights: dict[object, int] = {}  # each value weighed once, when set: weighing walks its tensors

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if self.weigh:
            self._weights[key] = self.weigh(value)

    def nbytes(self) -> int:
        """Bytes the values hold, as `weigh` counts them (0 without it)."""
        if not self.weigh:
            return 0
        for gone in self._weights.keys() - self.keys():
            del self._weights[gone]
        return sum(self._weights[k] for k in self)

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


def tensor_bytes(value: object) -> int:
    """Bytes of the tensor storages `value` holds in its dataclass fields, dicts, lists and tuples, at any depth;
    a storage several views share is counted once, whole (a view keeps all of it alive)."""
    seen: dict[tuple[str, int], int] = {}
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            seen[(str(item.device), storage.data_ptr())] = storage.nbytes()
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            todo.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return sum(seen.values())


def feature_cache(entries: int) -> LRU:
    """An LRU of encodings or selections, bounded by `entries` and by ENCODED_CACHE_BYTES of tensors."""
    return LRU(entries, max_bytes=ENCODED_CACHE_BYTES, weigh=tensor_bytes)
