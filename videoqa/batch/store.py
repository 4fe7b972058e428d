"""The results file: one JSON line per record, durable as soon as it is written, readable after a kill.

The file is the source of truth of a batch run. Every record is appended, flushed and fsynced when it
exists, so killing the run loses at most the record in flight; a torn last line is ignored on reading and
cut before the next append. Only the run holding the file's lock (`lock.exclusive`) appends to it or
compacts it; compaction (dropping errors about to be retried, and duplicates an older videoqa wrote)
writes a new file and renames it over the old one, so a kill leaves either the old or the new file whole.

File modes, one rule for every file batch and eval write: a new file gets 0666 less the umask (as `touch`
would make it), a rewritten one keeps the mode it had.

Links, one rule for every file videoqa writes or reads back where others may write (results, caches, cards
written by the sweep, reports): it is appended to only through `open_for_append` (O_NOFOLLOW, a regular file
only), read back through `read_no_follow`, or replaced whole through `replace_file` (a unique temporary created
with O_EXCL | O_NOFOLLOW, then renamed). A link planted at the name is refused with one line, never followed.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputError
from ..jsonio import JSONProblem, dumps, parse_json


def read_records(path: str | Path) -> list[dict]:
    """All complete records in a results file. A torn last line (the run was killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = read_no_follow(path).split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(parse_json(line))
        except JSONProblem:
            if n == len(lines):  # no trailing newline: a record cut by a kill; it is simply redone
                continue
            print(f"videoqa: warning: {path}:{n}: skipping a line that is not JSON", file=sys.stderr)
    return records


def latest_by_key(records: Iterable[dict]) -> dict[str, dict]:
    """The last record of each key (a retried error is superseded by its retry)."""
    return {r["key"]: r for r in records if "key" in r}


def _drop_torn_tail(fd: int, path: Path) -> None:
    """Cut a partial last line so the next append starts on a line of its own."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    data = os.pread(fd, size, 0)
    try:
        os.ftruncate(fd, data.rfind(b"\n") + 1)
    except OSError as e:
        raise write_error(path, e) from None


def write_error(path: Path, e: OSError) -> InputError:
    """One line for a results or run file that cannot be written (full disk, read-only, immutable)."""
    return InputError(f"{path}: cannot write ({e.strerror or e}); what was written before is kept whole: "
                      "free space or fix the permissions, then re-run to resume")


def _refuse_link(path: Path, e: OSError) -> None:
    if e.errno == errno.ELOOP:
        raise InputError(f"{path} is a symbolic link; videoqa does not write or read its files through links "
                         "(remove it or choose another path)") from None


def _regular(fd: int, path: Path) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path} is not a regular file")
    return fd


def open_for_append(path: Path) -> int:
    """A file descriptor appending to `path` (created if absent), never through a link (module docstring)."""
    try:  # 0666 less the umask: the one rule for new files (see the module's docstring)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as e:
        _refuse_link(path, e)
        raise write_error(path, e) from None
    return _regular(fd, path)


def read_no_follow(path: Path) -> bytes:
    """The bytes of the regular file at `path`, never through a link (module docstring)."""
    try:
        fd = _regular(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), path)
    except OSError as e:
        _refuse_link(path, e)
        raise InputError(f"{path}: cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def needs_compaction(records: list[dict], drop_keys: set[str]) -> bool:
    keys = [r["key"] for r in records if "key" in r]
    return bool(drop_keys & set(keys)) or len(keys) != len(set(keys))


def compact(path: Path, records: list[dict], drop_keys: set[str]) -> None:
    """Rewrite `path` as `records` with one record per key (the last; `latest_by_key` reads the same) and
    none for `drop_keys` (errors about to be retried). Atomic; the caller holds the file's lock, so no
    other run is appending to the file being replaced."""
    last = {r["key"]: i for i, r in enumerate(records) if "key" in r}
    keep = [r for i, r in enumerate(records) if "key" not in r or (last[r["key"]] == i and r["key"] not in drop_keys)]
    replace_file(path, "".join(dumps(r, ensure_ascii=False) + "\n" for r in keep).encode())


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
        except OSError as e:
            raise write_error(path, e) from None
    else:
        raise InputError(f"{path}: no free temporary name beside it")
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
    except BaseException as e:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
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
    """Appends one JSON line per record and makes it durable before returning. Opening it checks that the
    file can be written (and cuts a torn tail), so a run opens it before its engine starts."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = open_for_append(path)
        try:
            _drop_torn_tail(self._fd, path)
        except BaseException:
            os.close(self._fd)
            raise

    def write(self, record: dict) -> None:
        # The whole line in one O_APPEND write, then fsync: a kill can only tear the line being written.
        view = memoryview((dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        try:
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
