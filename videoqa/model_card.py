"""A model folder's own settings for videoqa: `videoqa.json` beside config.json.

    {"conversation": "plain"}

Every field is optional. `conversation` is the prompt template the model was trained on and the default of
`--prompt` (ask, batch, eval, serve): "official" is Video-LLaVA's `llava_v1` conversation (its system line, then
`USER: <video>\\n{question} ASSISTANT:`), "plain" the same turns without the system line. A checkpoint without
the file (the real Video-LLaVA-7B) gets "official", the conversation it was trained and evaluated with.

`policy` holds the model's constants of the adaptive frames/pruning policy (videoqa/model_policy.py); a field
left out takes Video-LLaVA-7B's default, named as such in every adaptive answer's decision:

    {"conversation": "plain",
     "policy": {"frames": 8, "k": 2, "r": 0.5, "seconds_per_frame": 6.0, "budget_exponent": 0.25,
                "r_max": 0.9, "sampler": "uniform", "note": "videoqa bench long --sweep, 120 validation clips"}}

    frames              frames of a clip up to frames x seconds_per_frame long (Video-LLaVA-7B: 8, as trained)
    k                   FastV's layer K when none is asked for (FastV's K=2)
    r                   R the policy gives those frames (FastV's R=0.5)
    seconds_per_frame   longer clips get one frame per this many seconds
    budget_exponent     kept tokens grow as frames^budget_exponent
    r_max               the largest R the policy may choose
    sampler             how frames are placed over the clip: "uniform" or "content"
    note                where the constants came from (free text up to MAX_NOTE characters; stored once per
                        answer, as the "note" entry of the decision's constants)

Limits (a card is a few lines written by hand or by the sweep; anything far out of range is a mistake or an
attack, refused with one line naming the file): the file is a regular file (a link to one is fine: the hub
cache links its files) of at most MAX_CARD_BYTES; each number within the range `_RULES` states, so no later
arithmetic overflows; the note at most MAX_NOTE characters.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ModelLoadError
from .jsonio import JSONProblem, dumps, parse_json
from .video.samplers import SAMPLERS

CARD_FILE = "videoqa.json"
CONVERSATIONS = ("plain", "official")
DEFAULT_CONVERSATION = "official"
MAX_CARD_BYTES = 64 << 10
MAX_NOTE = 1000  # characters
MAX_FRAMES = 4096  # more frames than any context holds (a 7B model's 4,096 tokens hold 15 frames)


@dataclass(frozen=True)
class ModelCard:
    conversation: str = DEFAULT_CONVERSATION
    policy: dict = field(default_factory=dict)  # the "policy" section: only the fields the file gives
    path: str | None = field(default=None, compare=False)  # the file it was read from (None: no file)


_TYPES = {"conversation": (str,), "policy": (dict,)}
POLICY_TYPES = {"frames": (int,), "k": (int,), "r": (int, float), "seconds_per_frame": (int, float),
                "budget_exponent": (int, float), "r_max": (int, float), "sampler": (str,), "note": (str,)}


def _check_fields(data: dict, types: dict, where: str, prefix: str = "") -> None:
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ModelLoadError(f"{where}: unknown field {(prefix + unknown[0])!r}; known: {', '.join(sorted(types))}")
    for name, value in data.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, types[name])):
            raise ModelLoadError(f"{where}: {prefix}{name} must be {' or '.join(t.__name__ for t in types[name])}, "
                                 f"got {value!r}")


_RULES = {"frames": (lambda v: 1 <= v <= MAX_FRAMES, f"in [1, {MAX_FRAMES}]"),
          "k": (lambda v: 0 <= v <= 1000, "in [0, 1000]"), "r": (lambda v: 0 <= v < 1, "in [0, 1)"),
          "seconds_per_frame": (lambda v: 0.01 <= v <= 86400, "in [0.01, 86400] seconds"),
          "budget_exponent": (lambda v: 0 <= v <= 1, "in [0, 1]"),
          "r_max": (lambda v: 0 <= v < 1, "in [0, 1)"), "sampler": (lambda v: v in SAMPLERS, " or ".join(SAMPLERS)),
          "note": (lambda v: len(v) <= MAX_NOTE, f"at most {MAX_NOTE} characters")}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _check_policy(policy: dict, where: str) -> None:
    _check_fields(policy, POLICY_TYPES, where, "policy.")
    for name, (ok, rule) in _RULES.items():
        if policy.get(name) is not None and not ok(policy[name]):
            raise ModelLoadError(f"{where}: policy.{name} must be {rule}, got {_short(policy[name])}")
    r, r_max = policy.get("r"), policy.get("r_max")
    if r is not None and r_max is not None and r_max < r:
        raise ModelLoadError(f"{where}: policy.r_max ({r_max!r}) is below policy.r ({r!r}); the policy's "
                             f"largest R cannot be smaller than its base R")


def parse_card(data: object, where: str) -> ModelCard:
    """A ModelCard from the file's JSON; anything unknown or mistyped is one clear error naming the file."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{where}: expected a JSON object such as {{\"conversation\": \"plain\"}}")
    _check_fields(data, _TYPES, where)
    _check_policy(data.get("policy") or {}, where)
    if data.get("conversation", DEFAULT_CONVERSATION) not in CONVERSATIONS:
        raise ModelLoadError(f"{where}: conversation must be {' or '.join(CONVERSATIONS)}, got "
                             f"{data['conversation']!r}")
    return ModelCard(conversation=data.get("conversation") or DEFAULT_CONVERSATION,
                     policy={k: v for k, v in (data.get("policy") or {}).items() if v is not None}, path=where)


def read_card(path: str | Path) -> ModelCard:
    """The card of a model folder, or of a hub id whose snapshot is in the local cache; the defaults when
    there is none (no network is used)."""
    file = Path(path) / CARD_FILE
    if not Path(path).is_dir():
        file = _cached_hub_file(str(path))
        if file is None:
            return ModelCard()
    if not (file.exists() or file.is_symlink()):
        return ModelCard()
    return parse_card(_read_card_json(file), str(file))


def _read_card_json(file: Path) -> object:
    """The card's JSON; ModelLoadError naming the file when it is not a regular file of at most MAX_CARD_BYTES
    (a FIFO, a folder, a link to /dev/zero or to nothing) or not plain JSON. Never silently skipped: the card
    sets the prompt template, and a model run with the other one answers differently."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ModelLoadError(f"{file}: cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelLoadError(f"{file}: not a regular file; a model card must be one")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_CARD_BYTES + 1)
    if len(data) > MAX_CARD_BYTES:
        raise ModelLoadError(f"{file}: larger than {MAX_CARD_BYTES} bytes; a model card is a few lines")
    try:
        return parse_json(data)
    except JSONProblem as e:
        raise ModelLoadError(f"{file}: {e}") from None


def write_policy(folder: str | Path, policy: dict) -> Path:
    """Set the "policy" section of `folder`'s videoqa.json (the rest of the file is kept); returns the file."""
    from .batch.store import replace_file  # a unique O_EXCL | O_NOFOLLOW temporary, renamed: no planted link

    file = Path(folder) / CARD_FILE
    data = _read_card_json(file) if file.exists() or file.is_symlink() else {}
    data["policy"] = dict(policy)
    parse_card(data, str(file))  # never write a card that would not load
    replace_file(file, (dumps(data, indent=1) + "\n").encode("utf-8"))
    return file


def _cached_hub_file(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, CARD_FILE)
    except Exception:  # an id the cache cannot hold: no card
        return None
    return Path(found) if isinstance(found, str) else None
