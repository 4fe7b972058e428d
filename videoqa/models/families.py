"""Today's families by name, and one question answered on them with any registered pruning method.

Until the family registry of issue 31 lands, this is the one place that maps config.json's model_type to a
family module and runs a question the way VideoQA does for Video-LLaVA: sample frames -> the family's processor
and tower -> the method's choice before the LLM, or FastV inside it -> our prefill and greedy decode.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError, ModelLoadError
from ..pruning import Acts, ModelDims, PruneConfig, keep_count
from ..pruning.budget import ANSWER_RESERVE, check_context
from ..pruning.method import Positions
from ..pruning.planner import plan
from . import llava_onevision, qwen_vl
from .prepared import Prepared, generate
from .select import apply_selection, encoded

MODEL_TYPES = {"llava_onevision": "llava-onevision", "qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl"}
FAMILIES = tuple(MODEL_TYPES.values())
# The published checkpoints named in the docs, and their families (a hub id is known before any download).
CHECKPOINTS = {
    "llava-hf/llava-onevision-qwen2-0.5b-ov-hf": "llava-onevision",
    "llava-hf/llava-onevision-qwen2-7b-ov-hf": "llava-onevision",
    "llava-hf/LLaVA-Video-7B-Qwen2-hf": "llava-onevision",
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2.5-vl",
    "Qwen/Qwen3-VL-8B-Instruct": "qwen3-vl",
}
# Their cards (videoqa.json's "policy" section, model_card.py), for a hub id that has no folder of ours: frames
# as each model is evaluated, FastV's K=2 and R=0.5.
_OV_NOTE = "32 frames: LLaVA-OneVision's video evaluation (lmms-eval max_frames_num=32)"
_QWEN_NOTE = "32 frames as the GPU check; past 16 s one frame per 0.5 s (qwen-vl-utils' 2 fps)"
CARDS = {
    "llava-hf/llava-onevision-qwen2-0.5b-ov-hf": {"frames": 32, "k": 2, "r": 0.5, "note": _OV_NOTE},
    "llava-hf/llava-onevision-qwen2-7b-ov-hf": {"frames": 32, "k": 2, "r": 0.5, "note": _OV_NOTE},
    "llava-hf/LLaVA-Video-7B-Qwen2-hf": {"frames": 64, "k": 2, "r": 0.5,
                                         "note": "64 frames: LLaVA-Video's evaluation (max_frames_num=64)"},
    "Qwen/Qwen2.5-VL-7B-Instruct": {"frames": 32, "k": 2, "r": 0.5, "seconds_per_frame": 0.5, "note": _QWEN_NOTE},
    "Qwen/Qwen3-VL-8B-Instruct": {"frames": 32, "k": 2, "r": 0.5, "seconds_per_frame": 0.5, "note": _QWEN_NOTE},
}


def card_of(model: str):
    """The model's card: its folder's videoqa.json, a named checkpoint's built-in one, else the defaults."""
    from ..model_card import ModelCard, read_card

    if Path(model).is_dir():
        return read_card(model)
    if model in CARDS:  # path: where the constants come from, named in every adaptive decision
        return ModelCard(policy=dict(CARDS[model]), path=f"videoqa.models.families.CARDS[{model!r}]")
    return ModelCard()


def family_of(path: str | Path) -> str | None:
    """The family of a model folder (its config.json's model_type) or of a named checkpoint's hub id, or None
    when it is not one of these."""
    if str(path) in CHECKPOINTS:
        return CHECKPOINTS[str(path)]
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    try:
        return MODEL_TYPES.get(json.loads(config.read_text()).get("model_type"))
    except (OSError, ValueError):
        return None  # the Video-LLaVA loader reports an unreadable config in its words


def make_tiny(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    """A tiny random-weight model of `family` (real classes, own processor and chat template) in `out_dir`."""
    if family == "llava-onevision":
        return llava_onevision.make_tiny_onevision(out_dir, seed=seed)
    return qwen_vl.make_tiny_qwen(out_dir, qwen_vl.TinyQwenSpec(family=family), seed=seed)


def dims_of(model, family: str, tokens_per_frame: int, dtype_bytes: int) -> ModelDims:
    """The LLM's sizes from the config, with the family's visual tokens per source frame."""
    text = model.config.text_config
    return replace(ModelDims.from_text_config(text, 0, dtype_bytes), tokens_per_frame=tokens_per_frame)


@dataclass
class FamilyQA:
    """A loaded model of one of today's families."""

    family: str
    model: torch.nn.Module
    processor: object
    name: str

    @classmethod
    def load(cls, path: str, dtype: torch.dtype = torch.float32, attn: str = "sdpa") -> FamilyQA:
        """A folder or a named checkpoint's hub id (read from the local cache when the hub cannot be reached,
        with today's advice when it is not there either)."""
        from ..model import _load_error, hub_unreachable
        from ..safe_load import check_loading_info, quiet_stdout, refuse_remote_code

        family = family_of(path)
        if family is None:
            raise ModelLoadError(f"cannot load model {path!r}: its config.json names none of {', '.join(FAMILIES)}")
        if Path(path).is_dir():
            refuse_remote_code(path, Path(path))
        unreachable = None if Path(path).is_dir() else hub_unreachable(path)
        local = {"local_files_only": unreachable is not None}
        try:
            with quiet_stdout():
                if family == "llava-onevision":
                    model, processor, info = llava_onevision.load(path, dtype, attn, **local)
                else:
                    model, processor, info = qwen_vl.load(path, family, dtype, attn, **local)
        except Exception as e:  # a missing file, no cache, a bad config: one line
            raise _load_error(path, path, e, unreachable) from None
        check_loading_info(path, info)  # a missing or unexpected weight is an error, never a random init
        return cls(family, model, processor, path)

    def tokens_per_frame(self, height: int, width: int) -> int:
        """Visual tokens one source frame costs at the processor's resolution for a height x width clip."""
        if self.family == "llava-onevision":
            rows, cols = llava_onevision.pooled_grid(self.model.config)
            return rows * cols
        temporal = self.model.config.vision_config.temporal_patch_size
        tokens = self.processor._get_num_multimodal_tokens(video_sizes=[(temporal, height, width)])
        return -(-tokens["num_video_tokens"][0] // temporal)

    def prepare(self, frames: np.ndarray, question: str, fps: float, indices: list[int]) -> Prepared:
        if self.family == "llava-onevision":
            inputs = llava_onevision.processor_inputs(self.processor, frames, question)
            return llava_onevision.prepare(self.model, inputs)
        inputs = qwen_vl.processor_inputs(self.processor, frames, question, fps, indices)
        return qwen_vl.prepare(self.model, inputs)

    def ask(self, video: str, question: str, cfg: PruneConfig, frames: int | None = None,
            max_new_tokens: int = 64) -> dict:
        """One answer with `cfg`'s method (R=auto: frames and R from the clip's length and the free memory)."""
        from ..measure import free_memory_bytes
        from ..model_policy import model_policy
        from ..video import probe_video, sample_frames

        t0 = time.perf_counter()
        if not question.strip():
            raise InputError("the question is empty")
        info = probe_video(video)
        dims = dims_of(self.model, self.family, self.tokens_per_frame(info.height, info.width),
                       torch.finfo(self.model.dtype).bits // 8)
        cfg = cfg.validate(dims.n_layers)
        if cfg.method_spec.reduces_frames:  # the planner's fewer-frames rule is not wired into this path yet
            raise InputError(f"--prune {cfg.method} does not apply to {self.family} yet: it plans fewer frames, "
                             f"which only the Video-LLaVA pipeline does; use --frames instead")
        if cfg.method_spec.two_stage(cfg.options):  # the stage inside the LLM after a selection: not wired in here
            raise InputError(f"--prune {cfg.method} does not apply to {self.family} yet: it acts before and inside "
                             f"the LLM, which only the Video-LLaVA pipeline does")
        n_text = 40 + len(self.processor.tokenizer(question).input_ids)  # the chat template's turns around it
        policy = model_policy(card_of(self.name)).policy
        planned = plan(dims, cfg, n_text, info.duration_s, frames, max_new_tokens,
                       lambda: free_memory_bytes(self.model.device), policy)
        check_context(dims, planned.frames, n_text, cfg, planned.r, min(max_new_tokens, ANSWER_RESERVE))
        clip = sample_frames(video, planned.frames)
        prepared = self.prepare(clip.frames, question.strip(), info.fps, clip.indices)
        method, plan_llm, kept = cfg.method_spec, None, None
        n_kept = prepared.layout.n_tokens
        if method.acts is Acts.BEFORE_LLM:
            enc = encoded(prepared, prepared.saliency)
            sel = method.select(enc, keep_count(enc.layout.n_tokens, planned.r), cfg.options)
            rule = Positions.ORIGINAL if cfg.original_positions else Positions.RENUMBERED
            prepared, kept = apply_selection(prepared, sel, rule), sel.kept
            n_kept = len(sel.visual) + prepared.layout.summary  # the summary tokens always stay
        elif method.acts is Acts.IN_LLM:
            plan_llm = method.plan(cfg.options, [planned.r], None)
        tokens, state = generate(self.model, [prepared], max_new_tokens, plan_llm)
        if plan_llm is not None:  # FastV ranks the whole visual span
            kept = state.kept[0].tolist()
            n_kept = len(kept)
        text = self.processor.tokenizer.decode(tokens[0], skip_special_tokens=True).strip()
        layout = prepared.layout
        return {
            "answer": text, "family": self.family, "prune": cfg.to_dict(), "model": self.name, "method": cfg.method,
            "r": planned.r, "k": cfg.layer, "frames": len(clip.frames), "groups": layout.groups,
            "frames_per_group": layout.frames_per_group, "grid": list(layout.grid), "summary_tokens": layout.summary,
            "n_visual": layout.n_tokens, "n_kept": n_kept,
            "kept": kept, "positions": "mrope-3d" if prepared.positions.shape[0] == 3 else "1d",
            "decision": None if planned.decision is None else planned.decision.to_dict(),
            "seconds": round(time.perf_counter() - t0, 3),
        }
