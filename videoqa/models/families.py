"""Today's families' published checkpoints and their cards, and their tiny random-weight models.

The families themselves are registered modules (llava_onevision.py, qwen_vl.py) and answer through VideoQA like
Video-LLaVA; this module names the checkpoints the docs name, with the card each gets when it is loaded by hub id
(a folder's own videoqa.json comes first), and builds the tiny models `videoqa make-tiny-model` writes.
"""

from __future__ import annotations

from pathlib import Path

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


def make_tiny(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    """A tiny random-weight model of `family` (real classes, own processor and chat template) in `out_dir`."""
    from . import llava_onevision, qwen_vl

    if family == "llava-onevision":
        return llava_onevision.make_tiny_onevision(out_dir, seed=seed)
    return qwen_vl.make_tiny_qwen(out_dir, qwen_vl.TinyQwenSpec(family=family), seed=seed)


def family_at(path: str | Path):
    """The registered family of a model folder (its config.json's model_type) or of a named checkpoint's hub id,
    found without loading anything; None where it cannot be told yet (the loader then says what is wrong)."""
    from ..errors import ModelLoadError
    from ..safe_load import read_config_file
    from .registry import FAMILIES, family_of

    if str(path) in CHECKPOINTS:
        return next(f for f in FAMILIES if f.name == CHECKPOINTS[str(path)])
    config = Path(path) / "config.json"
    try:
        return family_of(read_config_file(str(path), config)) if config.is_file() else None
    except ModelLoadError:
        return None
