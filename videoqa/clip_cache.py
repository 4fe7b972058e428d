"""What a pipeline holds of decoded clips, bounded in bytes and keyed by content.

Rule (for every cache a pipeline keeps, the future prefix cache too): keyed by what the value depends on (the
file's bytes, not its path: the web page gives the same upload a new temporary path each time), bounded in bytes
as well as entries, and counted by the adaptive memory plan where it shares memory with the KV cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from .errors import Cancelled
from .video import Clip
from .video.clip import decode_size
from .vision import LRU

CLIP_CACHE_BYTES = 256 << 20  # decoded frames kept per pipeline (58 frames at 796x448 are 62 MB)
HASH_CHUNK = 1 << 20


def clip_bytes(clip: Clip) -> int:
    return int(clip.frames.nbytes)


def new_clip_cache(entries: int) -> LRU:
    return LRU(entries, max_bytes=CLIP_CACHE_BYTES, weigh=clip_bytes)


def content_key(path: Path, digests: LRU, cancel: Callable[[], bool] | None = None) -> str | None:
    """A digest of the file's bytes (None when it cannot be read: decoding then raises the user-facing error).
    Hashed once per file version: `digests` remembers it under the file's identity and modification time."""
    try:
        st = path.stat()
    except OSError:
        return None
    version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    known = digests.get_fresh(version)
    if known is not None:
        return known
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                if cancel is not None and cancel():
                    raise Cancelled("reading the clip")
                digest.update(chunk)
    except OSError:
        return None
    digests.put(version, digest.hexdigest())
    return digests[version]


def frames_bytes(width: int, height: int, max_edge: int | None, frames: int) -> int:
    """Bytes `frames` decoded RGB frames of a `width` x `height` clip hold (scaled as decoded)."""
    w, h = decode_size(width, height, max_edge)
    return frames * w * h * 3


def processor_edge(processor: object) -> int:
    """The shorter side, in pixels, the model's video processor resizes frames to (0 when it does not say)."""
    size = getattr(getattr(processor, "video_processor", None), "size", None) or {}
    if not isinstance(size, dict):
        size = {k: getattr(size, k, None) for k in ("shortest_edge", "height", "width")}
    return int(size.get("shortest_edge") or max(size.get("height") or 0, size.get("width") or 0) or 0)


def shares_host_memory(device_type: str) -> bool:
    """Whether decoded frames (in host memory) compete with the KV cache: on the CPU, and on Apple's unified
    memory."""
    return device_type in ("cpu", "mps")
