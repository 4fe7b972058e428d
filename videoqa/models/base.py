"""What a model family is: everything videoqa knows about one kind of video LLM, behind one small interface.

A family (one module in videoqa/models/, registered in videoqa/models/__init__.py) says how a checkpoint folder
is recognised (its config's `model_type`), loaded (model + processor), prompted, how a clip becomes visual tokens
(`encode` -> EncodedVideo: features, a layout, per-token saliency), which positions the LLM gets (1-D RoPE by
default; a family with 3-D M-RoPE returns [3, B, n] ids from its model's own `get_rope_index`), its dimensions
for FLOPs and memory, and its 7B-class shapes for the GPU check. Nothing outside videoqa/models/ imports a
transformers model class. docs/architecture.md walks through adding one.

torch and transformers are imported inside the methods: the command line lists families without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..safe_load import LOAD_KWARGS

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..pruning import EncodedVideo, ModelDims
    from ..request import Collated, Request


class Family:
    """One kind of video LLM. Subclass it (or a family close to yours) and register an instance."""

    name: str = ""
    model_types: tuple[str, ...] = ()  # the config.json `model_type` values this family loads
    # Prompt templates by name -> text put before the conversation; the first is the default.
    templates: dict[str, str] = {"plain": ""}

    # -- loading ------------------------------------------------------------------------------------

    def classes(self) -> tuple[type, type]:
        """(the transformers model class, its processor class)."""
        raise NotImplementedError

    def load(self, path: str, dtype: torch.dtype, attn: str, local_only: bool) -> tuple[torch.nn.Module, Any, dict]:
        """(model, processor, transformers' loading info) of a checkpoint, on the CPU; never runs remote code."""
        model_class, processor_class = self.classes()
        processor = processor_class.from_pretrained(path, local_files_only=local_only, **LOAD_KWARGS)
        # Mismatched shapes are reported by the caller, by name, instead of the library's RuntimeError.
        model, info = model_class.from_pretrained(
            path, dtype=dtype, attn_implementation=attn, local_files_only=local_only, **LOAD_KWARGS,
            ignore_mismatched_sizes=True, output_loading_info=True,
        )
        return model, processor, info

    # -- the prompt ---------------------------------------------------------------------------------

    def visual_token_id(self, config) -> int:
        """The id of the one placeholder token the visual features replace (expanded to one per token)."""
        return config.video_token_id

    def prompt(self, question: str, history: list[tuple[str, str]] | None = None, template: str = "plain") -> str:
        """The prompt text with one visual placeholder (earlier turns first); `template`: one of `templates`."""
        raise NotImplementedError

    def preamble(self, template: str) -> str:
        """The text a template puts before the conversation (InputError for a template the family lacks)."""
        if template not in self.templates:
            raise InputError(f"unknown prompt template {template!r}; choose {' or '.join(self.templates)}")
        return self.templates[template]

    # -- the clip -> visual tokens ------------------------------------------------------------------

    def encode(self, model, processor, frames: np.ndarray, device: torch.device, dtype: torch.dtype,
               cancel: Callable[[], None]) -> EncodedVideo:
        """Frames [F, H, W, 3] uint8 -> the LLM-space features, tower features, saliency and layout. `cancel()`
        raises Cancelled when the user stopped; call it before each expensive step."""
        raise NotImplementedError

    def positions(self, model, batch: Collated, requests: list[Request]) -> torch.Tensor | None:
        """Position ids of a collated, left-padded batch (`batch.ids`, `batch.attention_mask`; each request's
        layout and kept tokens): None for plain 1-D RoPE (the pipeline's, with the gaps a positions rule
        leaves); a family with M-RoPE returns its model's own [3, B, n] ids (`get_rope_index`). The prefill
        slices them along the last dim when it prunes."""
        return None

    # -- sizes --------------------------------------------------------------------------------------

    def dims(self, config, dtype_bytes: int = 2) -> ModelDims:
        """The LLM's and the visual layout's sizes, for FLOPs, memory and the context budget."""
        raise NotImplementedError

    def reference_config(self):
        """A 7B-class config of this family (no weights): the GPU check's shapes and the printed tables."""
        raise NotImplementedError
