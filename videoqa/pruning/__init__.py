"""Visual-token pruning: FastV (inside the LLM), VisPruner and random (before the LLM), the adaptive R policy."""

from .base import FIELDS_USED, METHODS, KeptTokens, ModelDims, PruneConfig, VisualLayout, keep_count

__all__ = ["FIELDS_USED", "METHODS", "KeptTokens", "ModelDims", "PruneConfig", "VisualLayout", "keep_count"]
