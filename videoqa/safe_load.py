"""What every model family's loader does so that a model folder is data, never code, and loads faithfully.

Rules for any loader (videoqa/model.py today, each family module under videoqa/models/ after issue 31):

1. Every transformers `from_pretrained` call passes `**LOAD_KWARGS` (`trust_remote_code=False`): transformers
   then never imports a folder's Python, and never asks "Do you wish to run the custom code? [y/N]".
2. Before loading a local folder, `refuse_remote_code(name, folder)`: a folder whose config files ask for their
   own code (`auto_map`, at any depth, in any of REMOTE_CODE_FILES) is refused with one line naming the file and
   the key, instead of relying on which loading path happens to read which file.
3. `check_architecture(name, config, families)`: a config.json whose `model_type` / `architectures` is not one
   of the supported families is refused with one line naming them (else transformers would build the family's
   class around another model's weights and answer with random ones).
4. The model is loaded with `output_loading_info=True` and `check_loading_info(name, info)`: a missing,
   unexpected or mis-shaped weight is an error (count and first names), not transformers' warning.
5. The loading runs inside `quiet_stdout()`: whatever a library prints goes to stderr, so `ask --json` and
   every other stdout stays the answer alone.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from .errors import ModelLoadError
from .jsonio import JSONProblem, parse_json, read_bounded

LOAD_KWARGS = {"trust_remote_code": False}
# Files transformers reads from a model folder that can name code to import (`auto_map`).
REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json", "generation_config.json")
REMOTE_CODE_KEYS = ("auto_map",)
SHOWN = 3  # names shown of missing or unexpected weights


def _find_key(value: object, keys: tuple[str, ...], where: str = "") -> str | None:
    """The dotted path of the first of `keys` anywhere in a JSON value, or None."""
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{where}.{k}" if where else str(k)
            if k in keys:
                return path
            found = _find_key(v, keys, path)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_key(v, keys, f"{where}[{i}]")
            if found:
                return found
    return None


def read_config_file(name: str, file: Path) -> object:
    """A model folder's JSON file, read by the one JSON reader; ModelLoadError naming the file otherwise."""
    try:
        return parse_json(read_bounded(file))  # a regular file of bounded size: no FIFO, no /dev/zero
    except OSError as e:
        raise ModelLoadError(f"cannot load model {name!r}: cannot read {file} ({e.strerror or e})") from None
    except JSONProblem as e:
        raise ModelLoadError(f"cannot load model {name!r}: {file}: {e}") from None


def refuse_remote_code(name: str, folder: Path) -> None:
    """ModelLoadError when any of the folder's config files asks for code from the folder (rule 2)."""
    for file_name in REMOTE_CODE_FILES:
        file = folder / file_name
        if not file.is_file():
            continue
        key = _find_key(read_config_file(name, file), REMOTE_CODE_KEYS)
        if key:
            raise ModelLoadError(f"cannot load model {name!r}: {file} asks to run code from the model folder "
                                 f"(key {key!r}); videoqa never runs a model folder's code")


def check_architecture(name: str, config: object, families: dict[str, str]) -> str:
    """The family (model_type) of a config.json dict, if it is one of `families` (model_type -> architecture
    class name) and names no other architecture; ModelLoadError naming the supported families otherwise."""
    supported = ", ".join(f"{arch} (model_type {mt!r})" for mt, arch in families.items())
    config = config if isinstance(config, dict) else {}
    model_type = config.get("model_type")
    archs = config.get("architectures") or []
    archs = archs if isinstance(archs, list) else [archs]
    if model_type not in families:
        raise ModelLoadError(f"cannot load model {name!r}: model_type {model_type!r} is not supported; "
                             f"videoqa supports {supported}")
    other = [a for a in archs if a != families[model_type]]
    if other:
        raise ModelLoadError(f"cannot load model {name!r}: architecture {other[0]!r} is not supported; "
                             f"videoqa supports {supported}")
    return model_type


def check_loading_info(name: str, info: dict) -> None:
    """ModelLoadError when transformers' loading info reports any weight that is missing (left randomly
    initialised), unexpected (in the checkpoint, unused), or of another shape than the config says."""
    if info.get("mismatched_keys"):
        key, got, want = sorted(info["mismatched_keys"])[0]
        raise ModelLoadError(f"cannot load model {name!r}: its weights do not match its config.json "
                             f"({len(info['mismatched_keys'])} tensors differ, e.g. {key}: {tuple(got)} in the "
                             f"checkpoint, {tuple(want)} in the model the config describes)")
    for kind, what in (("missing_keys", "missing from the checkpoint (they would be random)"),
                       ("unexpected_keys", "in the checkpoint but not in the model")):
        keys = sorted(info.get(kind) or [])
        if keys:
            raise ModelLoadError(f"cannot load model {name!r}: {len(keys)} weight{'s' if len(keys) > 1 else ''} "
                                 f"{what}: {', '.join(keys[:SHOWN])}{', ...' if len(keys) > SHOWN else ''}")


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send what is printed while loading to stderr (rule 5)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
