"""The work list: which (clip, question) pairs a batch run answers, and the key each is recorded under.

Inputs are folders (searched recursively), video files and list files (.txt of videos, .json/.jsonl of
{video, question?, id?}); every clip gets the questions given on the command line unless its row carries
its own. A key names the work, not how it was typed: the row's id when given, else "clip::question" with
the clip named by `clip_name` (its path below the folder it was found through), and, for batch runs, a
fingerprint of the options that change answers (`answer_options`). So a re-run finds what it already
did however the paths are spelled, and never takes an answer made with other options for its own.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..jsonio import JSONProblem, parse_json

VIDEO_EXTS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".gif", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv")
LIST_EXTS = (".txt", ".json", ".jsonl")


@dataclass(frozen=True)
class WorkItem:
    """One (clip, question) to answer. `key` identifies it in the results file (the id when given)."""

    key: str
    video: str
    question: str
    id: str | None = None
    meta: dict = field(default_factory=dict)  # carried into the record unchanged (e.g. the reference answer)


def item_key(clip: str, question: str, id: str | None = None, fingerprint: str = "") -> str:
    key = str(id) if id is not None else f"{clip}::{question}"
    return f"{key}::{fingerprint}" if fingerprint else key


def by_clip(items: list[WorkItem]) -> list[WorkItem]:
    """`items` with each clip's questions together, clips in the order they first appear, questions in their order:
    a clip is decoded and encoded once and its prompt prefix reused (llm/prefix_cache.py) before the next clip
    pushes it out of the pipeline's caches. Records are keyed, so the order they are written in changes nothing."""
    groups: dict[str, list[WorkItem]] = {}
    for it in items:
        groups.setdefault(it.video, []).append(it)
    return [it for group in groups.values() for it in group]


def clip_name(video: str | Path, root: str | Path) -> str:
    """A clip's name in keys: its path below `root` (the folder it was found in, or the folder of the list or
    file that named it) under the root's own name, e.g. 'clips/deep/a.mp4'.

    The same folder given as an absolute path, a relative one or '.' gives the same names, and so does the
    folder after a move; links inside it keep their own names. A clip outside `root` (a '..' or absolute
    path in a list) is named by its resolved absolute path.
    """
    rel = os.path.relpath(video, root)
    if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        return Path(video).resolve().as_posix()
    return (Path(Path(root).resolve().name) / rel).as_posix()


def answer_options(spec: dict) -> dict:
    """The options of a model spec (see `VideoQA.from_spec`) that change answers: the model (a local folder
    by its resolved path), dtype, attention kernel, the pruning fields the method reads, frames and the
    answer length, the prompt template and the frame sampler (absent for uniform frames, so keys made before
    there was a choice stay valid). Not the device, batch size or back end
    (records are identical across them)."""
    from ..model import NAMED_MODELS

    model = spec["model"]
    if model not in NAMED_MODELS and Path(model).expanduser().is_dir():
        model = Path(model).expanduser().resolve().as_posix()
    prune = prune_key(spec["prune"])
    sampler = spec.get("sampler") or "uniform"
    return {
        "model": model,
        "dtype": spec.get("dtype"),
        "attn": spec.get("attn_implementation"),
        "prune": prune,
        "frames": spec.get("frames"),
        "max_new_tokens": spec.get("max_new_tokens"),
        "prompt": spec.get("prompt", "plain"),
    } | ({"sampler": sampler} if sampler != "uniform" else {})


def prune_key(prune: dict) -> dict:
    """The pruning options that change answers: the method, R where it prunes, and the method's own options
    (another method's cannot change them; one a spec written before it existed lacks reads as its default)."""
    from ..pruning import PruneConfig

    cfg = PruneConfig(**prune)
    method = cfg.method_spec
    options = {name: getattr(cfg, name) for name in method.option_names}
    return {"method": cfg.method, **({"r": cfg.r} if method.uses_r else {}), **options}


def fingerprint(options: dict) -> str:
    """A short stable hash of `answer_options` (the same options in any order give the same one)."""
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]

def find_videos(folder: Path) -> list[Path]:
    """Video files under `folder`, recursively, in a stable (sorted) order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_EXTS)


def _read_list(path: Path) -> list[dict]:
    """A work list: .txt (one video per line) or .json/.jsonl of {video, question?, id?}."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".txt":
        rows = [
            {"video": line.strip()} for line in text.splitlines() if line.strip() and not line.startswith("#")
        ]
    elif path.suffix.lower() == ".json":
        rows = _parse(text, path)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                rows.append(_parse(line, f"{path}:{n}"))
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "video" in r for r in rows):
        raise InputError(f"{path}: expected a list of objects with a 'video' field")
    for r in rows:  # relative video paths are relative to the list file, so a list travels with its clips
        if not Path(r["video"]).is_absolute():
            r["video"] = str(path.parent / r["video"])
    return rows


def _parse(text: str, where: object) -> object:
    try:
        return parse_json(text)
    except JSONProblem as e:
        raise InputError(f"{where}: {e}") from None


def read_questions(path: str | Path) -> list[str]:
    """Questions asked of every clip: a text file (one per line) or a JSON list of strings."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: questions file not found")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        qs = _parse(text, path)
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
            raise InputError(f"{path}: expected a JSON list of strings")
    else:
        qs = [line.strip() for line in text.splitlines() if line.strip()]
    if not qs:
        raise InputError(f"{path}: no questions")
    return qs


def _rows(p: Path) -> tuple[Path, list[dict]]:
    """The rows an input names, and the folder their clips are named from (`clip_name`)."""
    if p.is_dir():
        return p, [{"video": str(v)} for v in find_videos(p)]
    if p.is_file() and p.suffix.lower() in LIST_EXTS:
        return p.parent, _read_list(p)
    if p.exists():
        return p.parent, [{"video": str(p)}]
    raise InputError(f"{p}: no such file or folder")


def collect_work(paths: Iterable[str | Path], questions: list[str] | None = None,
                 options: dict | None = None) -> list[WorkItem]:
    """Expand folders (recursively), video files and work lists into (clip, question) items.

    Each clip gets every question in `questions`; list rows that carry their own `question` keep it.
    `options` (`answer_options`) is recorded with every item, and its fingerprint is part of every key.
    """
    fp = fingerprint(options) if options else ""
    recorded = {"options": options} if options else {}
    items: dict[str, WorkItem] = {}
    named: dict[str, Path] = {}  # clip name -> the file it names

    def add(video: str, name: str, question: str, id: str | None, meta: dict) -> None:
        if id is None and named.setdefault(name, Path(video).resolve()) != Path(video).resolve():
            raise InputError(f"{named[name]} and {Path(video).resolve()} would both be recorded as {name!r}; "
                             f"answer them in separate runs, or give them ids in a work list")
        key = item_key(name, question, id, fp)
        if key in items:
            if id is not None:
                raise InputError(f"duplicate id {id!r} in the work list")
            return  # the same clip and question reached twice (e.g. a folder and a file in it): ask once
        items[key] = WorkItem(key=key, video=video, question=question, id=id, meta={**meta, **recorded})

    for p in map(Path, paths):
        root, rows = _rows(p)
        for r in rows:
            meta = {k: v for k, v in r.items() if k not in ("video", "question", "id")}
            id = None if r.get("id") is None else str(r["id"])
            name = clip_name(r["video"], root)
            if r.get("question"):
                add(r["video"], name, r["question"], id, meta)
            elif questions:
                for n, q in enumerate(questions):
                    # one id with several questions: suffix the question number to keep keys unique
                    qid = id if id is None or len(questions) == 1 else f"{id}#{n}"
                    add(r["video"], name, q, qid, meta)
            else:
                raise InputError(
                    f"{r['video']}: no question (give --question, --questions or a 'question' field)"
                )
    return list(items.values())
