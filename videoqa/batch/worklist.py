"""The work list: which (clip, question) pairs a batch run answers, and the key each is recorded under.

Inputs are folders (searched recursively), video files and list files (.txt of videos, .json/.jsonl of
{video, question?, id?}); every clip gets the questions given on the command line unless its row carries
its own. A key is the row's id when given, else "video::question", so a re-run finds what it already did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

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


def item_key(video: str, question: str, id: str | None = None) -> str:
    return str(id) if id is not None else f"{video}::{question}"

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
        rows = json.loads(text)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "video" in r for r in rows):
        raise InputError(f"{path}: expected a list of objects with a 'video' field")
    for r in rows:  # relative video paths are relative to the list file, so a list travels with its clips
        if not Path(r["video"]).is_absolute():
            r["video"] = str(path.parent / r["video"])
    return rows


def read_questions(path: str | Path) -> list[str]:
    """Questions asked of every clip: a text file (one per line) or a JSON list of strings."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: questions file not found")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        qs = json.loads(text)
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
            raise InputError(f"{path}: expected a JSON list of strings")
    else:
        qs = [line.strip() for line in text.splitlines() if line.strip()]
    if not qs:
        raise InputError(f"{path}: no questions")
    return qs


def collect_work(paths: Iterable[str | Path], questions: list[str] | None = None) -> list[WorkItem]:
    """Expand folders (recursively), video files and work lists into (clip, question) items.

    Each clip gets every question in `questions`; list rows that carry their own `question` keep it.
    """
    items: dict[str, WorkItem] = {}

    def add(video: str, question: str, id: str | None, meta: dict) -> None:
        key = item_key(video, question, id)
        if key in items:
            if id is not None:
                raise InputError(f"duplicate id {id!r} in the work list")
            return  # the same clip and question reached twice (e.g. a folder and a file in it): ask once
        items[key] = WorkItem(key=key, video=video, question=question, id=id, meta=meta)

    for p in map(Path, paths):
        if p.is_dir():
            rows = [{"video": str(v)} for v in find_videos(p)]
        elif p.is_file() and p.suffix.lower() in LIST_EXTS:
            rows = _read_list(p)
        elif p.exists():
            rows = [{"video": str(p)}]
        else:
            raise InputError(f"{p}: no such file or folder")
        for r in rows:
            meta = {k: v for k, v in r.items() if k not in ("video", "question", "id")}
            id = None if r.get("id") is None else str(r["id"])
            if r.get("question"):
                add(r["video"], r["question"], id, meta)
            elif questions:
                for n, q in enumerate(questions):
                    # one id with several questions: suffix the question number to keep keys unique
                    qid = id if id is None or len(questions) == 1 else f"{id}#{n}"
                    add(r["video"], q, qid, meta)
            else:
                raise InputError(
                    f"{r['video']}: no question (give --question, --questions or a 'question' field)"
                )
    return list(items.values())
