"""What every part of `bench long` shares: its constants, a row (one policy) and a row's result, and the frames
a row takes from the rows run before it."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...errors import InputError
from ...jsonio import read_json
from ...model_policy import ModelPolicy
from ...pruning import ModelDims, PruneConfig
from ...pruning.adaptive import AdaptivePolicy

MAX_NEW = 8  # answers are one or two words
SPLIT_CLIPS = 120  # the whole held-out (and validation) split
BUCKETS = (("≤10 s", 10.0), ("10–30 s", 30.0), (">30 s", math.inf))  # (label, longest duration)
THIRDS = ("first", "middle", "last")
FASTVID_RATIOS = (0.5, 0.75, 0.9, 0.95)
FRAME_FLOOR = 0.5  # the floor row's share (chosen on the validation split)
LONG_K = 2  # FastV's layer in this table's rows (chosen on the validation split)


def read_scenes(root: Path) -> dict[str, dict]:
    """A long split's scenes.json (size-limited, hostile-safe: jsonio) by clip name; a file that is not a list of
    objects each with a string "name" is one InputError naming it."""
    path = root / "scenes.json"
    data = read_json(path, InputError)
    if not isinstance(data, list) or not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in data):
        raise InputError(f"{path}: expected a JSON list of objects, each with a \"name\"")
    return {s["name"]: s for s in data}


@dataclass(frozen=True)
class Row:
    """One policy: which frames, pruned how.

    frames: a count; "max" (per question, the most whose unpruned tokens fit the context); or "auto" (the
    adaptive policy's: the pipeline decides them when R is "auto", and a fixed-R row takes the adaptive
    FastV row's frames for the same question, so both see the same frames)."""

    label: str
    prune: PruneConfig
    frames: int | str = "auto"
    policy: AdaptivePolicy | None = None  # None: the model's (its videoqa.json, else Video-LLaVA-7B's defaults)
    # None: the model's default frame sampler (its card's); "uniform" pins the baseline every reference row uses,
    # whatever the card says; "oracle": rows.oracle_clip
    sampler: str | None = None
    match_flops: bool = False  # R (and frames) per question: the FLOPs of unpruned 8 frames (rows.py)

    def config(self, model: str, split: str, card: ModelPolicy | None = None) -> dict:
        """What the row runs; `card`: the model's own policy, which fills what the row leaves unset (so a card
        rewritten by `--sweep --write-card` never resumes a run made with the old constants)."""
        policy = self.policy or (card.policy if card else AdaptivePolicy())
        sampler_used = self.sampler or (card.sampler if card else None)
        # absent when uniform: run folders made before samplers existed keep their names
        sampler = ({"sampler": sampler_used} if sampler_used not in (None, "uniform") else {}) | (
            {"match_flops": True} if self.match_flops else {})
        return {"dataset": f"long-{split}", "model": model, "prune": self.prune.to_dict(), "frames": self.frames,
                "policy": asdict(policy) if self.prune.adaptive or self.frames == "auto" else None} | sampler

    def folder(self, model: str, split: str, card: ModelPolicy | None = None) -> str:
        """A folder name that changes whenever the configuration does, so a resumed run never mixes two."""
        digest = hashlib.sha1(json.dumps(self.config(model, split, card), sort_keys=True).encode()).hexdigest()[:8]
        return re.sub(r"[^a-z0-9.]+", "-", self.label.lower()).strip("-") + "-" + digest


@dataclass
class RowResult:
    """What the table shows for one row: (hits, questions) per group, and cost figures."""

    label: str
    groups: dict[str, tuple[int, int]]
    frames: dict[str, float]  # bucket (or "all") -> mean frames
    kept: float
    flops: dict[str, float]  # bucket (or "all") -> FLOPs / unpruned-8-frame FLOPs, the model's dims
    flops_7b: dict[str, float]  # the same at Video-LLaVA-7B's dims
    prefill_s: float
    errors: int
    prefill_ratio: float | None = None
    extra: dict = field(default_factory=dict)

    def accuracy(self, group: str) -> float | None:
        h, n = self.groups.get(group, (0, 0))
        return h / n if n else None


def resolve_frames(row: Row, rows: list[Row], done: dict[str, dict], dims: ModelDims) -> dict[tuple, int | None]:
    """(video, question) -> frames for this row (None: the pipeline decides), from rows already run."""
    if isinstance(row.frames, int):
        return {}
    if row.frames == "max":
        ref = done[rows[0].label]  # the unpruned 8-frame row: its prompt length gives each question's room
        return {(rec["video"], rec["question"]): (dims.context - text_tokens_of(rec) - MAX_NEW) // dims.tokens_per_frame
                for rec in ref.values() if not rec.get("error")}
    if row.prune.adaptive:
        return {}
    source = next(r for r in rows if r.prune.method == "fastv" and r.prune.adaptive and r.frames == "auto")
    return {(rec["video"], rec["question"]): rec["stats"]["frames"]
            for rec in done[source.label].values() if not rec.get("error")}


def text_tokens_of(rec: dict) -> int:
    """Prompt tokens besides the visual ones (the prompt itself may hold only the kept visual tokens)."""
    return rec["flops"]["n_tokens"] - rec["kept"]["n_visual"]
