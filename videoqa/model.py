"""Loading Video-LLaVA (model + processor) and writing its prompt."""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import ModelLoadError

DEFAULT_MODEL = "LanguageBind/Video-LLaVA-7B-hf"
# Short names for the models shipped in `videoqa.samples`: name -> (folder, the script that trains it).
NAMED_MODELS = {
    "demo": ("demo-model", "samples/train_demo.py"),
    "demo-long": ("demo-long-model", "samples/train_long.py"),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    processor: object
    device: torch.device
    dtype: torch.dtype
    name: str


def packaged_path(name: str) -> Path:
    """A file or folder shipped with videoqa (the repository's samples/, installed as `videoqa.samples`)."""
    try:
        root = importlib.resources.files("videoqa.samples")
    except ModuleNotFoundError:
        raise ModelLoadError("videoqa.samples cannot be imported: install videoqa (`pip install -e .` in a "
                             "checkout) so its sample clips and demo models are found") from None
    return Path(str(root.joinpath(name)))


def resolve_model(name: str) -> str:
    """'demo' (or another shipped name) -> its folder; a local folder or a Hugging Face id is returned unchanged."""
    if name in NAMED_MODELS:
        folder, script = NAMED_MODELS[name]
        path = packaged_path(folder)
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"the '{name}' model is not in {path}; build it with `python {script}` "
                f"or pass --model with a Hugging Face id or a local folder"
            )
        return str(path)
    return name


def pick_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ModelLoadError(f"unknown device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but CUDA is not available here; use --device cpu")
    return dev


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return DTYPES[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_model(
    name: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    attn_implementation: str = "sdpa",
) -> LoadedModel:
    """Load a Video-LLaVA checkpoint (HF id or folder) with its processor, in eval mode."""
    from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

    path = resolve_model(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if attn_implementation == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            raise ModelLoadError("--attn flash_attention_2 needs the flash-attn package (pip install "
                                 "flash-attn); use --attn sdpa otherwise") from None
    try:
        processor = VideoLlavaProcessor.from_pretrained(path)
        model = VideoLlavaForConditionalGeneration.from_pretrained(
            path, dtype=dt, attn_implementation=attn_implementation
        )
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(
            f"cannot load model {name!r}: {first}. If you are offline or the id is wrong, download the "
            f"checkpoint elsewhere (`hf download {DEFAULT_MODEL} --local-dir DIR`) and pass --model DIR"
        ) from None
    model.to(dev).eval()
    # Batched prompts must be left-padded so every sample's last token is at the end.
    processor.tokenizer.padding_side = "left"
    return LoadedModel(model=model, processor=processor, device=dev, dtype=dt, name=name)


def build_prompt(question: str, history: list[tuple[str, str]] | None = None) -> str:
    """The checkpoint's template: `USER: <video>\\n{question} ASSISTANT:`; earlier turns come first.

    Earlier answers end with `</s>` as in the Vicuna v1 conversation format the model was trained on.
    """
    turns = list(history or []) + [(question, None)]
    parts = []
    for i, (q, a) in enumerate(turns):
        user = f"USER: <video>\n{q}" if i == 0 else f"USER: {q}"
        parts.append(f"{user} ASSISTANT:" + ("" if a is None else f" {a}</s>"))
    return "".join(parts)
