"""The Video-ChatGPT "GPT_Zero_Shot_QA" layout that Video-LLaVA's evaluation reads (MSVD, MSRVTT, TGIF).

    MSVD_Zero_Shot_QA/{test_q.json, test_a.json, videos/*.avi}
    MSRVTT_Zero_Shot_QA/{test_q.json, test_a.json, videos/all/*.mp4}
    TGIF_Zero_Shot_QA/{test_q.json, test_a.json, mp4/*.mp4}      (Video-LLaVA; Video-ChatGPT's own release
                                                                  has videos_mp4/; raw .gif accepted too)

Questions are `{"video_name", "question", "question_id"}`, answers `{"answer", "question_id", ...}`. They are
joined on `question_id`, never on position, and a question whose video is not on disk is kept and reported
as missing rather than dropped.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..jsonio import read_json

BASE_EXTS = (".mp4", ".avi", ".mov", ".mkv")


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    folder: str  # the dataset's folder under GPT_Zero_Shot_QA
    video_dirs: tuple[str, ...]  # where the clips are, relative to `folder`, searched in order
    exts: tuple[str, ...] = BASE_EXTS  # the video is the first `{prefix}{video_name}{ext}` that exists
    prefix: str = ""


DATASETS: dict[str, DatasetSpec] = {
    "msvd": DatasetSpec("msvd", "MSVD_Zero_Shot_QA", ("videos",)),
    "msrvtt": DatasetSpec("msrvtt", "MSRVTT_Zero_Shot_QA", ("videos/all", "videos")),
    "tgif": DatasetSpec("tgif", "TGIF_Zero_Shot_QA", ("mp4", "videos_mp4", "gif"), exts=(*BASE_EXTS, ".gif")),
    "activitynet": DatasetSpec(
        "activitynet", "Activitynet_Zero_Shot_QA", ("all_test", "videos"), prefix="v_"
    ),
}


@dataclass
class QAItem:
    question_id: str
    question: str
    answer: str
    video_name: str
    video: Path | None  # None: not found on disk


class ByVideo:
    """`missing` / `present`: a dataset's selected items without / with their video file (open-ended and MC alike)."""

    items: list

    @property
    def missing(self) -> list:
        return [it for it in self.items if it.video is None]

    @property
    def present(self) -> list:
        return [it for it in self.items if it.video is not None]


@dataclass
class QADataset(ByVideo):
    spec: DatasetSpec
    root: Path  # the dataset folder (holding test_q.json)
    items: list[QAItem]  # the selected questions (after --limit / subset), answered, in file order
    n_questions: int  # questions in test_q.json
    unanswered: list[str] = field(default_factory=list)  # question_ids with no entry in test_a.json



MISSING_WARN_FRACTION = 0.05  # more missing videos than this and the summary warns


def check_usable(ds: QADataset) -> None:
    """Refuse a run that could not judge a single question, with the reason in one line."""
    where = ", ".join(f"{d}/" for d in ds.spec.video_dirs)
    if ds.n_questions and not ds.items and len(ds.unanswered) == ds.n_questions:
        raise InputError(
            f"{ds.root}: none of the {ds.n_questions} questions in test_q.json has an entry in test_a.json "
            "(they are joined on question_id)"
        )
    if not ds.items:
        raise InputError(f"{ds.root}: no questions selected")
    if not ds.present:
        raise InputError(
            f"{ds.root}: none of the {len(ds.items)} videos was found (looked in {where} for "
            f"{ds.spec.prefix}VIDEO_NAME with {'/'.join(ds.spec.exts)})"
        )


def missing_warning(ds: QADataset) -> str | None:
    """A warning line when more than 5 % of the selected questions have no video, else None."""
    n, k = len(ds.items), len(ds.missing)
    if n and k / n > MISSING_WARN_FRACTION:
        return (
            f"warning: {k} of {n} videos ({100 * k / n:.1f}%) are missing; scores are over the rest and "
            "not comparable with published numbers"
        )
    return None


def resolve_root(spec: DatasetSpec, root: str | Path) -> Path:
    """Accept the dataset folder itself, its parent (GPT_Zero_Shot_QA) or the parent of that."""
    root = Path(root)
    others = {s.folder.lower(): s.name for s in DATASETS.values() if s is not spec}
    if root.name.lower() in others:  # e.g. --dataset msvd --root .../TGIF_Zero_Shot_QA: wrong folders, wrong scores
        raise InputError(f"{root} is the {others[root.name.lower()]} folder, not {spec.name} ({spec.folder})")
    for cand in (root, root / spec.folder, root / "GPT_Zero_Shot_QA" / spec.folder):
        if (cand / "test_q.json").is_file():
            return cand
    raise InputError(
        f"{root}: no test_q.json here or in {spec.folder}/ (expected the GPT_Zero_Shot_QA layout)"
    )


_TYPE_NAMES = {type(None): "null", bool: "a boolean", list: "a list", dict: "an object"}


def _load_json_list(path: Path, fields: tuple[str, ...]) -> list[dict]:
    """The file's entries, each an object whose `fields` are strings or numbers; anything else is refused
    naming the file, the entry (its index in the list, and its question_id) and the field."""
    if not path.is_file():
        raise InputError(f"{path}: not found")
    data = read_json(path, InputError)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of objects, got {_TYPE_NAMES.get(type(data), 'a value')}")
    for i, d in enumerate(data):
        if not isinstance(d, dict):
            raise InputError(f"{path}: entry {i} is {_TYPE_NAMES.get(type(d), 'a value')}, not an object")
        qid = d.get("question_id")
        entry = f"entry {i}" + (f" (question_id {qid})" if isinstance(qid, (str, int)) else "")
        for f in ("question_id", *fields):
            if f not in d:
                raise InputError(f"{path}: {entry} has no {f!r}")
            if type(d[f]) in _TYPE_NAMES:  # null, a list...: str() would make "None" and judge it
                raise InputError(f"{path}: {entry}: {f!r} is {_TYPE_NAMES[type(d[f])]}")
    return data


def _video_index(root: Path, spec: DatasetSpec) -> dict[str, Path]:
    """File name -> path for every file in the video folders (one listing instead of a stat per question)."""
    index: dict[str, Path] = {}
    for d in spec.video_dirs:
        folder = root / d
        if folder.is_dir():
            with os.scandir(folder) as it:
                for e in it:
                    if e.is_file():
                        index.setdefault(e.name, Path(e.path))
    return index


def find_video(index: dict[str, Path], spec: DatasetSpec, video_name: str) -> Path | None:
    name = spec.prefix + video_name
    for ext in spec.exts:
        if name + ext in index:
            return index[name + ext]
    return index.get(name)  # a video_name that already carries its extension


def select(items: list, limit: int | None, seed: int | None) -> list:
    """The first `limit` items, or with `seed` a seeded random subset of that size (kept in file order)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 0:
        raise InputError(f"--limit must be >= 0, got {limit}")
    if seed is None:
        return list(items[:limit])
    chosen = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in chosen]


def load_dataset(name: str, root: str | Path, limit: int | None = None, seed: int | None = None) -> QADataset:
    if name not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    spec = DATASETS[name]
    root = resolve_root(spec, root)
    questions = _load_json_list(root / "test_q.json", ("video_name", "question"))
    answers = _load_json_list(root / "test_a.json", ("answer",))
    by_id: dict[str, dict] = {}
    for a in answers:
        qid = str(a["question_id"])
        if qid in by_id:
            raise InputError(f"{root / 'test_a.json'}: question_id {qid} appears twice")
        by_id[qid] = a
    seen: set[str] = set()
    rows, unanswered = [], []
    for q in questions:
        qid = str(q["question_id"])
        if qid in seen:
            raise InputError(f"{root / 'test_q.json'}: question_id {qid} appears twice")
        seen.add(qid)
        if qid not in by_id:
            unanswered.append(qid)
            continue
        rows.append((qid, q))
    index = _video_index(root, spec)
    items = [
        QAItem(
            question_id=qid,
            question=str(q["question"]),
            answer=str(by_id[qid]["answer"]),
            video_name=str(q["video_name"]),
            video=find_video(index, spec, str(q["video_name"])),
        )
        for qid, q in select(rows, limit, seed)
    ]
    return QADataset(spec=spec, root=root, items=items, n_questions=len(questions), unanswered=unanswered)
