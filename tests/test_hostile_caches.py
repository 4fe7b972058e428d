"""The pipeline's caches of vision features are bounded in bytes as well as entries (issue 37, finding 4).

Rule (clip_cache.py's, for every cache a pipeline keeps): bounded by the bytes its values hold, each entry's tensors
counted, not by a count of entries whose size depends on the clip and the model."""

from __future__ import annotations

import numpy as np
import torch

from videoqa import vision
from videoqa.pipeline import VideoQA
from videoqa.pruning import EncodedVideo, PruneConfig
from videoqa.vision import LRU, tensor_bytes


def _plain_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_each_entry_is_weighed_by_the_tensors_it_holds():
    features, tower, attention = torch.zeros(4, 9, 16), torch.zeros(4, 9, 8, dtype=torch.float16), torch.zeros(4, 9)
    enc = EncodedVideo(features, tower, attention, layout=None)
    assert tensor_bytes(enc) == _plain_bytes(features, tower, attention) == 4 * 9 * (16 * 4 + 8 * 2 + 4)
    # views of one storage keep all of it alive and are counted once; tensors inside dicts and lists are counted
    assert tensor_bytes({"a": features[:1], "b": [features[2:], (attention,)], "n": 3}) == _plain_bytes(
        features, attention)
    cache = LRU(8, max_bytes=2 * _plain_bytes(features), weigh=tensor_bytes)
    for k in range(3):
        cache.put(k, torch.zeros(4, 9, 16))
    assert list(cache) == [1, 2] and cache.nbytes() == 2 * _plain_bytes(features)  # the oldest went first


def test_the_pipeline_keeps_no_more_encoded_clips_than_its_byte_bound(tiny_model_dir, monkeypatch):
    qa = VideoQA.from_pretrained(str(tiny_model_dir), prune=PruneConfig(method="none"), max_new_tokens=4)
    rng = np.random.default_rng(0)
    clips = [rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8) for _ in range(4)]
    first, _ = qa.encode(clips[0])
    one = _plain_bytes(first.features, first.vision_features, first.cls_attention)
    assert qa._encoded.nbytes() >= one
    # a bound of two and a half encodings: a fresh pipeline keeps the last two of four clips, fewer than its 8 entries
    monkeypatch.setattr(vision, "ENCODED_CACHE_BYTES", int(2.5 * qa._encoded.nbytes()))
    qa = VideoQA.from_pretrained(str(tiny_model_dir), prune=PruneConfig(method="none"), max_new_tokens=4)
    for frames in clips:
        qa.encode(frames)
    assert len(qa._encoded) == 2 and qa._encoded.nbytes() <= vision.ENCODED_CACHE_BYTES
    assert qa.encode(clips[3])[1] and not qa.encode(clips[0])[1]  # the newest is cached, the oldest was dropped
    assert qa._selections.max_bytes == vision.ENCODED_CACHE_BYTES and qa._selections.weigh is tensor_bytes


def test_a_value_is_weighed_once_and_the_bound_follows_replacements_and_removals():
    """Weighing walks a value's tensors, so it happens when the value is stored, not on every later store or look-up;
    the byte bound still sees a value replaced under its key, and entries removed or cleared from outside."""
    weighed = []

    def weigh(v: torch.Tensor) -> int:
        weighed.append(v.numel())
        return tensor_bytes(v)

    cache = LRU(10, max_bytes=1000, weigh=weigh)
    cache.put("a", torch.zeros(100, dtype=torch.uint8))
    cache.put("b", torch.zeros(200, dtype=torch.uint8))
    for _ in range(5):
        assert cache.get_fresh("a") is not None
        cache.put("c", torch.zeros(300, dtype=torch.uint8))
    assert weighed == [100, 200] + [300] * 5 and cache.nbytes() == 600
    cache.put("a", torch.zeros(700, dtype=torch.uint8))  # 1200 bytes: the least recently used ("b") goes
    assert list(cache) == ["c", "a"] and cache.nbytes() == 1000
    del cache["c"]
    assert cache.nbytes() == 700
    cache.clear()
    cache.put("d", torch.zeros(900, dtype=torch.uint8))
    assert list(cache) == ["d"] and cache.nbytes() == 900
