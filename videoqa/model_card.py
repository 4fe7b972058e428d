"""A model folder's own settings for videoqa: `videoqa.json` beside config.json.

    {"conversation": "plain"}

Every field is optional. `conversation` is the prompt template the model was trained on and the default of
`--prompt` (ask, batch, eval, serve): "official" is Video-LLaVA's `llava_v1` conversation (its system line, then
`USER: <video>\\n{question} ASSISTANT:`), "plain" the same turns without the system line. A checkpoint without
the file (the real Video-LLaVA-7B) gets "official", the conversation it was trained and evaluated with.

The other fields are the per-model constants of the adaptive frames/pruning policy; a field left out means the
policy's own default, which is Video-LLaVA-7B's: 8 frames, FastV K=2, R=0.5.

    frames              frames sampled at a fixed R (default 8)
    k                   FastV's layer K (default 2)
    r                   fixed pruning ratio R (default 0.5)
    seconds_per_frame   adaptive: clip seconds per sampled frame
    budget_exponent     adaptive: how the token budget grows with the clip's length
    r_max               adaptive: the largest R it may choose
    sampler             how frames are placed over the clip (e.g. "uniform")
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from .errors import ModelLoadError

CARD_FILE = "videoqa.json"
CONVERSATIONS = ("plain", "official")
DEFAULT_CONVERSATION = "official"


@dataclass(frozen=True)
class ModelCard:
    conversation: str = DEFAULT_CONVERSATION
    frames: int | None = None
    k: int | None = None
    r: float | None = None
    seconds_per_frame: float | None = None
    budget_exponent: float | None = None
    r_max: float | None = None
    sampler: str | None = None


_TYPES = {"conversation": (str,), "frames": (int,), "k": (int,), "r": (int, float), "seconds_per_frame": (int, float),
          "budget_exponent": (int, float), "r_max": (int, float), "sampler": (str,)}


def parse_card(data: object, where: str) -> ModelCard:
    """A ModelCard from the file's JSON; anything unknown or mistyped is one clear error naming the file."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{where}: expected a JSON object such as {{\"conversation\": \"plain\"}}")
    known = {f.name for f in fields(ModelCard)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ModelLoadError(f"{where}: unknown field {unknown[0]!r}; known: {', '.join(sorted(known))}")
    for name, value in data.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, _TYPES[name])):
            raise ModelLoadError(f"{where}: {name} must be {' or '.join(t.__name__ for t in _TYPES[name])}, "
                                 f"got {value!r}")
    if data.get("conversation", DEFAULT_CONVERSATION) not in CONVERSATIONS:
        raise ModelLoadError(f"{where}: conversation must be {' or '.join(CONVERSATIONS)}, got "
                             f"{data['conversation']!r}")
    return ModelCard(**data)


def read_card(path: str | Path) -> ModelCard:
    """The card of a model folder, or of a hub id whose snapshot is in the local cache; the defaults when
    there is none (no network is used)."""
    file = Path(path) / CARD_FILE
    if not Path(path).is_dir():
        file = _cached_hub_file(str(path))
        if file is None:
            return ModelCard()
    if not file.is_file():
        return ModelCard()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{file}: not readable as JSON ({e})") from None
    return parse_card(data, str(file))


def _cached_hub_file(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, CARD_FILE)
    except Exception:  # an id the cache cannot hold: no card
        return None
    return Path(found) if isinstance(found, str) else None
