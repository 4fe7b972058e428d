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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..safe_load import LOAD_KWARGS


@dataclass(frozen=True)
class FrameTiming:
    """When the sampled frames were in their file: its frame rate and each frame's index (Qwen-VL's time axis)."""

    fps: float
    indices: tuple[int, ...]


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
    frames_per_group: int = 1  # source frames that share one frame of visual tokens (Qwen-VL's temporal patch: 2)
    uses_timing: bool = False  # `encode` wants the frames' timing (`timing=FrameTiming`): Qwen-VL's M-RoPE time axis

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

    def render(self, processor, question: str, history: list[tuple[str, str]] | None = None,
               template: str = "plain") -> str:
        """The prompt text as `prompt` gives it; a family whose processor has a chat template renders with it."""
        return self.prompt(question, history, template)

    def expand(self, processor, config, ids: list[int], enc: EncodedVideo, kept: list[int] | None) -> list[int]:
        """The prompt's ids with its one visual placeholder expanded to the visual tokens the LLM sees (`kept`:
        indices into the visual span, None: all), as the family's processor expands it."""
        from ..prompt_tokens import expand_video_slot

        n = enc.layout.n_tokens if kept is None else len(kept)
        return expand_video_slot(ids, self.visual_token_id(config), n)

    def preamble(self, template: str) -> str:
        """The text a template puts before the conversation (InputError for a template the family lacks)."""
        if template not in self.templates:
            raise InputError(f"unknown prompt template {template!r}; choose {' or '.join(self.templates)}")
        return self.templates[template]

    # -- the clip -> visual tokens ------------------------------------------------------------------

    def encode(self, model, processor, frames: np.ndarray, device: torch.device, dtype: torch.dtype,
               cancel: Callable[[], None]) -> EncodedVideo:
        """Frames [F, H, W, 3] uint8 -> the LLM-space features, tower features, saliency and layout. `cancel()`
        raises Cancelled when the user stopped; call it before each expensive step. A family with `uses_timing`
        also takes `timing` (FrameTiming) and `max_pixels` (its resolution knob, None: the processor's)."""
        raise NotImplementedError

    def layer_additions(self, model, batch: Collated, requests: list[Request]) -> list[torch.Tensor]:
        """Per-layer additions [B, n, d] to the LLM's hidden states after its first layers (Qwen3-VL's deepstack
        features in the visual slots); none by default."""
        return []

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

    def dims_for(self, config, processor, dtype_bytes: int = 2, max_pixels: int | None = None) -> ModelDims:
        """`dims` where the tokens a frame costs depend on the processor's resolution (Qwen-VL: at most
        `max_pixels` a frame, default the processor's own bound)."""
        return self.dims(config, dtype_bytes)

    def resolutions(self, processor) -> list[int]:
        """Frame sizes (pixels) the adaptive policy may lower to before it drops frames, largest first; empty:
        the family's resolution is fixed (the third adaptive knob, docs/qwen-vl.md)."""
        return []

    def reference_config(self):
        """A 7B-class config of this family (no weights): the GPU check's shapes and the printed tables."""
        raise NotImplementedError


def chat_prompt(processor, question: str, history: list[tuple[str, str]] | None) -> str:
    """The processor's chat template on the conversation: the video in the first user turn, earlier answers
    as assistant turns, the generation prompt last."""
    turns = list(history or []) + [(question, None)]
    messages = []
    for i, (q, a) in enumerate(turns):
        content = ([{"type": "video"}] if i == 0 else []) + [{"type": "text", "text": q}]
        messages.append({"role": "user", "content": content})
        if a is not None:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": a}]})
    return processor.apply_chat_template(messages, add_generation_prompt=True)
