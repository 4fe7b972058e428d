"""The encode stage: frames -> the vision tower's features, its [CLS] attention and the visual layout.

What a before-the-LLM pruning method chooses from (`EncodedVideo`); follow-up questions on a clip reuse it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

from .errors import Cancelled
from .pruning import EncodedVideo, VisualLayout

__all__ = ["EncodedVideo", "LRU", "encode_frames", "frames_hash"]


def frames_hash(frames: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(frames).data, usedforsecurity=False).hexdigest() + str(frames.shape)


@torch.inference_mode()
def encode_frames(model, processor, frames: np.ndarray, device: torch.device, dtype: torch.dtype,
                  cancel: Callable[[], bool] | None = None) -> EncodedVideo:
    """Preprocess `frames` [F, H, W, 3] and run Video-LLaVA's video tower and projector. `cancel` is asked
    before preprocessing and before the tower (which takes all frames at once, so its numbers never depend
    on how a clip was split); True stops with Cancelled."""
    from .pruning.vispruner import cls_attention

    def check() -> None:
        if cancel is not None and cancel():
            raise Cancelled("encoding frames")

    check()
    pixels = processor.video_processor(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"]
    check()
    pixels = pixels[0].to(device, dtype)  # [F, 3, H, W]
    tower = model.model.video_tower
    out = tower(pixels, output_hidden_states=True)
    cfg = model.config
    layer = cfg.vision_feature_layer
    idx = layer if layer >= 0 else len(out.hidden_states) + layer  # hidden_states[0] is the embeddings
    vision_features = out.hidden_states[idx]
    attn = cls_attention(tower.encoder.layers[idx - 1], out.hidden_states[idx - 1])
    features = model.model.multi_modal_projector(vision_features)
    grid = cfg.vision_config.image_size // cfg.vision_config.patch_size
    return EncodedVideo(features, vision_features, attn, VisualLayout(n_frames=len(frames), grid=grid))


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
