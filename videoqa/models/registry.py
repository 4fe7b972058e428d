"""The model families videoqa knows, by config `model_type` (one line each in `FAMILIES` below)."""

from __future__ import annotations

from ..errors import ModelLoadError
from .base import Family
from .llava_onevision import LlavaOnevision
from .qwen_vl import Qwen3VL, QwenVL
from .video_llava import VideoLlava


class Families:
    """Families in registration order."""

    def __init__(self, *families: Family):
        self._families: dict[str, Family] = {}
        for family in families:
            self.register(family)

    def register(self, family: Family) -> Family:
        taken = [t for f in self for t in f.model_types if t in family.model_types]
        if family.name in self._families or taken:
            raise ValueError(f"family {family.name!r} (model types {family.model_types}) is already registered")
        self._families[family.name] = family
        return family

    def unregister(self, name: str) -> None:
        del self._families[name]

    def __iter__(self):
        return iter(tuple(self._families.values()))

    def names(self) -> tuple[str, ...]:
        return tuple(self._families)

    def of(self, model_type: str | None) -> Family:
        for family in self:
            if model_type in family.model_types:
                return family
        supported = ", ".join(f"{f.name} ({'/'.join(f.model_types)})" for f in self)
        raise ModelLoadError(f"model type {model_type!r} is not supported; videoqa knows {supported}")


FAMILIES = Families(VideoLlava(), LlavaOnevision(), QwenVL(), Qwen3VL())


def family_of(config) -> Family:
    """The family of a transformers config (or a config.json dict)."""
    model_type = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    return FAMILIES.of(model_type)
