"""Reading the files multiple-choice benchmarks are distributed as: JSON lists, JSON Lines, CSV and (with
pyarrow installed) the Parquet files of their Hugging Face copies, which lmms-eval reads. Every problem is one
line naming the file, and the entry and field when it is one of them."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ..errors import InputError
from ..jsonio import JSONProblem, parse_json, read_bounded

ROW_EXTS = (".parquet", ".json", ".jsonl", ".csv")


def read_rows(path: Path) -> list[dict]:
    """The file's rows as dicts (a JSON object of objects is read as its values, keyed rows keep no key)."""
    try:
        if path.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise InputError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or give the "
                                 "rows as .json") from None
            return pq.read_table(path).to_pylist()
        text = read_bounded(path).decode("utf-8")
        if path.suffix == ".csv":
            return list(csv.DictReader(text.splitlines()))
        if path.suffix == ".jsonl":
            return [parse_json(line) for line in text.splitlines() if line.strip()]
        data = parse_json(text)
    except JSONProblem as e:
        raise InputError(f"{path}: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    except Exception as e:  # noqa: BLE001 - pyarrow's own errors: a damaged or non-Parquet file
        raise InputError(f"{path}: cannot read it ({type(e).__name__}: {e})") from None
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
        data = list(data.values())
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise InputError(f"{path}: expected a list of objects (one per question)")
    return data


def field(row: dict, name: str, path: Path, i: int, kinds: tuple[type, ...] = (str, int, float)):
    """row[name], refused in one line when absent or of another kind."""
    if name not in row:
        raise InputError(f"{path}: entry {i} has no {name!r}")
    value = row[name]
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise InputError(f"{path}: entry {i}: {name!r} is {type(value).__name__}, expected "
                         f"{' or '.join(k.__name__ for k in kinds)}")
    return value


def first_file(root: Path, candidates: list[str], layout: str) -> Path:
    """The first of `candidates` (paths or glob patterns below root) that exists, else one line naming them."""
    for pattern in candidates:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
    raise InputError(f"{root}: no {' or '.join(candidates)} here (expected the {layout} layout)")


def file_index(folder: Path, recursive: bool = True) -> dict[str, Path]:
    """Relative path and bare file name -> path of every file under `folder` (one walk, not a stat per row)."""
    index: dict[str, Path] = {}
    if not folder.is_dir():
        return index
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            index.setdefault(p.relative_to(folder).as_posix(), p)
            index.setdefault(name, p)
        if not recursive:
            break
    return index


def find(index: dict[str, Path], name: str, exts: tuple[str, ...] = ("", ".mp4", ".MP4", ".mkv", ".webm",
                                                                        ".avi")) -> Path | None:
    for ext in exts:
        if name + ext in index:
            return index[name + ext]
    return None
