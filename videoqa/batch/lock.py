"""One writer per results file: an OS lock (flock) on `OUT.lock`, held for the whole run.

A second run on the same file either stops at once, naming the run that holds it, or waits for it and
then resumes from what that run wrote. The lock is the kernel's, not the file's existence: a run killed
with -9 releases it, and the next run takes it over whatever the stale file says.

The lock lives in a file of its own, not on the results file, because compaction replaces the results
file (a lock on the old inode would guard nothing). The holder removes it when done; a run that was
waiting on the removed file notices (its inode is no longer the one at the path) and tries again.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import BusyError, InputError
from ..jsonio import parse_json


def lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


@contextmanager
def exclusive(out: Path, wait: bool = False, lock: Path | None = None) -> Iterator[None]:
    """Hold the lock of results file `out` (in `lock`, default `OUT.lock`); raises BusyError when another run
    holds it (unless `wait`)."""
    path = lock or lock_path(out)
    fd = _acquire(path, out, wait)
    try:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:  # for the message of a run that finds it taken; the flock is the lock, so a full disk is no matter
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
        except OSError:
            pass
        yield
    finally:
        try:
            os.unlink(path)  # still locked: a run blocked on this inode sees it removed and retries
        except OSError:
            pass
        os.close(fd)


def _acquire(path: Path, out: Path, wait: bool) -> int:
    import fcntl  # POSIX only, and only needed here

    while True:
        fd = _open_lock(path, out)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(fd)
            if not wait:
                os.close(fd)
                raise BusyError(f"{out} is being written by another run ({holder}); wait for it with --wait, "
                                f"or give another --out") from None
            print(f"videoqa: waiting for the run writing {out} ({holder})", file=sys.stderr, flush=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:  # Ctrl-C while waiting
                os.close(fd)
                raise
        if _is_current(fd, path):
            return fd
        os.close(fd)  # the holder removed this file when it finished: lock the one at the path now


def _open_lock(path: Path, out: Path) -> int:
    """Open (or create) the lock file, never through a link: the lock is truncated and written, so a link
    planted at its name would have us overwrite the file it points to. Mode: 0666 less the umask, as every
    file batch writes (store.py)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{out}: its lock file {path} is a symbolic link; not following it "
                             "(remove the link if it is yours)") from None
        raise InputError(f"{out}: cannot create its lock file {path.name} ({e.strerror})") from None
    st = os.fstat(fd)
    why = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
           else "has other names (hard links); not writing to it" if st.st_nlink > 1 else None)
    if why:
        os.close(fd)
        raise InputError(f"{out}: its lock file {path} {why} (remove it if it is yours)")
    return fd


def _is_current(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def describe_holder(fd: int) -> str:
    """'pid 123 on host, started 2025-01-02 10:11:12', from what the holder wrote into the lock file."""
    try:
        h = parse_json(os.pread(fd, 4096, 0) or b"{}")  # JSONProblem is a ValueError
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a run that is just starting"
