"""Visual-token pruning: the method registry, the user's configuration, the budget (frames, R, context)."""

from .base import KeptTokens, ModelDims, VisualLayout
from .config import AUTO, PruneConfig, Ratio, format_r, parse_r
from .method import Acts, EncodedVideo, Method, Option, Positions, Selection
from .registry import REGISTRY, Registry
from .shared import frame_budgets, keep_count

__all__ = ["AUTO", "REGISTRY", "Acts", "EncodedVideo", "KeptTokens", "Method", "ModelDims", "Option", "Positions",
           "PruneConfig", "Ratio", "Registry", "Selection", "VisualLayout", "format_r", "frame_budgets", "keep_count",
           "parse_r"]
