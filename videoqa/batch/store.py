"""The results file: one JSON line per record, durable as soon as it is written, readable after a kill.

The file is the source of truth of a batch run. Every record is appended, flushed and fsynced when it
exists, so killing the run loses at most the record in flight; a torn last line is ignored on reading and
cut before the next append. Only the run holding the file's lock (`lock.exclusive`) appends to it or
compacts it; compaction (dropping errors about to be retried, and duplicates an older videoqa wrote)
writes a new file and renames it over the old one, so a kill leaves either the old or the new file whole.

File modes, one rule for every file batch and eval write: a new file gets 0666 less the umask (as `touch`
would make it), a rewritten one keeps the mode it had.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputError


def read_records(path: str | Path) -> list[dict]:
    """All complete records in a results file. A torn last line (the run was killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = path.read_bytes().split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):  # no trailing newline: a record cut by a kill; it is simply redone
                continue
            print(f"videoqa: warning: {path}:{n}: skipping a line that is not JSON", file=sys.stderr)
    return records


def latest_by_key(records: Iterable[dict]) -> dict[str, dict]:
    """The last record of each key (a retried error is superseded by its retry)."""
    return {r["key"]: r for r in records if "key" in r}


def drop_torn_tail(path: Path) -> None:
    """Cut a partial last line so the next append starts on a line of its own."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = path.read_bytes()
        f.truncate(data.rfind(b"\n") + 1)


def needs_compaction(records: list[dict], drop_keys: set[str]) -> bool:
    keys = [r["key"] for r in records if "key" in r]
    return bool(drop_keys & set(keys)) or len(keys) != len(set(keys))


def compact(path: Path, records: list[dict], drop_keys: set[str]) -> None:
    """Rewrite `path` as `records` with one record per key (the last; `latest_by_key` reads the same) and
    none for `drop_keys` (errors about to be retried). Atomic; the caller holds the file's lock, so no
    other run is appending to the file being replaced."""
    last = {r["key"]: i for i, r in enumerate(records) if "key" in r}
    keep = [r for i, r in enumerate(records) if "key" not in r or (last[r["key"]] == i and r["key"] not in drop_keys)]
    replace_file(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in keep).encode())


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` to a new temporary file beside `path`, sync it and rename it over `path`, so a kill leaves
    either the old or the new file whole. The temporary has an unpredictable name and is created with
    O_EXCL, so a link planted at a name we would use is never followed."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise


def prepare_out(path: Path) -> None:
    """Check that `path` can be a results file (not a folder, not below a file) and create its folder."""
    if path.is_dir():
        raise InputError(f"{path} is a folder; the results file must be a file, e.g. {path / 'results.jsonl'}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{path}: {parent} is a file, not a folder")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{path}: cannot create its folder ({e.strerror})") from None


class ResultsWriter:
    """Appends one JSON line per record and makes it durable before returning."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_torn_tail(path)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        # One write call per whole line, then flush + fsync: a kill can only tear the line being written.
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
