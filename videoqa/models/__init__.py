"""Model families: one module each (videoqa/models/<family>.py), registered in videoqa/models/registry.py.

`family_of(config)` answers the family of a loaded (or to be loaded) checkpoint; a `model_type` no family
claims is one line naming the supported families. `FAMILIES` holds instances; a plugin or a test registers its
own with `FAMILIES.register`, as pruning methods do.
"""

from .base import Family, FrameTiming
from .loaded import LoadedModel
from .registry import FAMILIES, Families, family_of
from .video_llava import VideoLlava

__all__ = ["FAMILIES", "Families", "Family", "FrameTiming", "LoadedModel", "VideoLlava", "family_of"]
