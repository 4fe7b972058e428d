"""Loading a checkpoint (model + processor) of any registered family (videoqa/models/): names, devices, errors."""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ModelLoadError
from .model_card import ModelCard
from .models import FAMILIES, Family, LoadedModel, family_of
from .models.families import card_of
from .safe_load import (
    LOAD_KWARGS,
    check_architecture,
    check_loading_info,
    quiet_stdout,
    read_config_file,
    refuse_remote_code,
)

if TYPE_CHECKING:  # torch is imported where a model is loaded: the command line checks model names without it
    import torch

DEFAULT_MODEL = "LanguageBind/Video-LLaVA-7B-hf"
# Short names for the models shipped in `videoqa.samples`: name -> (folder, the command that trains it).
NAMED_MODELS = {
    "demo": ("demo-model", "bash scripts/train_demo.sh"),
    "demo-long": ("demo-long-model", "bash scripts/train_demo_long.sh"),
}
DTYPES = ("float32", "bfloat16", "float16")  # names of torch dtypes


def packaged_path(name: str) -> Path:
    """A file or folder shipped with videoqa (the repository's samples/, installed as `videoqa.samples`)."""
    try:
        root = importlib.resources.files("videoqa.samples")
    except ModuleNotFoundError:
        raise ModelLoadError("videoqa.samples cannot be imported: install videoqa (`pip install -e .` in a "
                             "checkout) so its sample clips and demo models are found") from None
    return Path(str(root.joinpath(name)))


def resolve_model(name: str) -> str:
    """'demo' (or another shipped name) -> its folder; a local folder -> its path; an org/name Hugging Face id
    -> unchanged. A name meant as a folder that is not one fails here, at once, not after a hub lookup."""
    if name in NAMED_MODELS:
        folder, command = NAMED_MODELS[name]
        path = packaged_path(folder)
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"the '{name}' model is not in {path}; build it with `{command}` "
                f"or pass --model with a Hugging Face id or a local folder"
            )
        return str(path)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if _looks_like_path(name):
        raise ModelLoadError(f"cannot load model {name!r}: " + ("not a folder" if path.exists() else "no such folder"))
    if "/" not in name:
        raise ModelLoadError(f"cannot load model {name!r}: no such folder, and neither a model shipped with videoqa "
                             f"({', '.join(NAMED_MODELS)}) nor a Hugging Face id (org/name)")
    return name


def _looks_like_path(name: str) -> bool:
    """A folder was meant, not an org/name hub id: it starts like a path, has several parts, or its first part
    exists here (e.g. 'models/videollava' typed in a folder that has models/)."""
    parts = name.split("/")
    return (name.startswith(("/", ".", "~")) or "\\" in name or len(parts) > 2
            or (len(parts) == 2 and Path(parts[0]).exists()))


def _offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any((f or "").upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def hub_unreachable(repo_id: str, model_info: Callable | None = None, timeout_s: float = 10.0) -> str | None:
    """Ask the hub about `repo_id` once, with a bounded wait: None when it answers; otherwise why it cannot be
    asked (offline mode, no network, a proxy that does not answer), and the model is then read from the local
    cache only, instead of through the downloader's retries. A model the hub does not have, or keeps behind a
    login, is a ModelLoadError. `model_info` replaces `HfApi().model_info` (tests)."""
    from huggingface_hub import HfApi, errors

    if _offline():
        return "offline mode: HF_HUB_OFFLINE is set"
    try:
        (model_info or HfApi().model_info)(repo_id, timeout=timeout_s)
    except errors.GatedRepoError:
        raise ModelLoadError(f"cannot load model {repo_id!r}: it is gated on the Hugging Face hub; accept its terms "
                             f"on huggingface.co and log in with `hf auth login`") from None
    except errors.RepositoryNotFoundError:
        raise ModelLoadError(f"cannot load model {repo_id!r}: no such model on the Hugging Face hub (a private one "
                             f"needs `hf auth login`)") from None
    except Exception as e:  # DNS, connection refused, proxy, timeout, a hub error: one try, then the cache
        return f"{type(e).__name__}: {_first_line(e)}"
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def pick_device(device: str | None) -> torch.device:
    import torch

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
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return getattr(torch, dtype)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def load_model(
    name: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    attn_implementation: str = "sdpa",
    card: ModelCard | None = None,
) -> LoadedModel:
    """Load a checkpoint (HF id or folder) of a registered family with its processor, in eval mode. `card`:
    its videoqa.json when the caller has read it already (else read here)."""
    path = resolve_model(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if attn_implementation == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            raise ModelLoadError("--attn flash_attention_2 needs the flash-attn package (pip install "
                                 "flash-attn); use --attn sdpa otherwise") from None
    local = Path(path).is_dir()
    family = _check_folder(name, Path(path)) if local else None
    unreachable = None if local else hub_unreachable(path)
    try:
        if family is None:
            from transformers import AutoConfig

            family = family_of(AutoConfig.from_pretrained(path, local_files_only=unreachable is not None,
                                                          **LOAD_KWARGS))
        with quiet_stdout():
            model, processor, info = family.load(path, dt, attn_implementation, unreachable is not None)
    except ModelLoadError:
        raise
    except Exception as e:  # a missing file, a corrupt or truncated one, a bad config: one line
        raise _load_error(name, path, e, unreachable) from None
    check_loading_info(name, info)
    model.to(dev).eval()
    # Batched prompts must be left-padded so every sample's last token is at the end.
    processor.tokenizer.padding_side = "left"
    card = card if card is not None else card_of(path)
    return LoadedModel(model=model, processor=processor, device=dev, dtype=dt, name=name, card=card, family=family)


def supported_architectures() -> dict[str, str]:
    """model_type -> the architecture class name of every registered family (what a folder may declare)."""
    return {mt: family.classes()[0].__name__ for family in FAMILIES for mt in family.model_types}


def _check_folder(name: str, folder: Path) -> Family:
    """The family of a model folder. One without a readable config.json is said in those words, naming the file
    (transformers would answer with its hub advice, or a JSON position without the file's name); a folder asking
    for its own code, or of a family videoqa does not build, is refused before transformers reads it
    (videoqa/safe_load.py)."""
    config = folder / "config.json"
    if not config.is_file():
        raise ModelLoadError(f"cannot load model {name!r}: no config.json in {folder}")
    refuse_remote_code(name, folder)
    data = read_config_file(name, config)
    check_architecture(name, data, supported_architectures())
    return family_of(data)


def _load_error(name: str, path: str, e: Exception, unreachable: str | None) -> ModelLoadError:
    from safetensors import SafetensorError

    if unreachable is not None:
        return ModelLoadError(
            f"cannot load model {name!r}: the Hugging Face hub cannot be reached ({unreachable}) and the model is "
            f"not in the local cache; download it where there is network (`hf download {path} --local-dir DIR`) "
            f"and pass --model DIR"
        )
    if isinstance(e, SafetensorError):
        return ModelLoadError(f"cannot load model {name!r}: a .safetensors file is truncated or corrupt "
                              f"({_first_line(e)}); download it again")
    return ModelLoadError(f"cannot load model {name!r}: {_first_line(e)}")
