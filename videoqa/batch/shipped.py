"""Work sent to a Ray cluster: each clip by its absolute path here, with a fingerprint its worker checks.

A relative path means nothing on a cluster: its workers run in the folder where `ray start` ran, perhaps on
another machine, where the same name can be another clip (or none). So paths are made absolute where
videoqa runs, before anything is sent, and each carries a fingerprint of the file seen here (its size and a
hash of its first and last 64 KiB). A worker that finds no file, or another one, at that path writes an
error record saying so; it never answers about a different clip.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from ..errors import InputError, VideoError
from .worklist import WorkItem

CHUNK = 64 * 1024  # bytes hashed at each end: cheap for any clip, and headers and trailers differ between clips
SAME_PATHS = "the Ray cluster must see the clips at the same paths as the machine running videoqa"


def fingerprint(path: str | Path) -> str:
    """'SIZE:HASH' of a file: its size and a hash of its first and last CHUNK bytes (OSError if unreadable)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest = hashlib.sha256(f.read(CHUNK))
        if size > CHUNK:
            f.seek(max(CHUNK, size - CHUNK))
            digest.update(f.read(CHUNK))
    return f"{size}:{digest.hexdigest()[:16]}"


def shipped_rows(todo: Iterable[WorkItem]) -> list[dict]:
    """The rows the cluster gets: the item as it was asked (its records name the clip as the user did), the
    clip's absolute path here and its fingerprint. A clip that cannot be read here is an InputError, raised
    before anything is sent: the cluster could otherwise answer about whatever file it has at that path."""
    rows, unreadable = [], []
    for item in todo:
        path = os.path.abspath(item.video)
        try:
            rows.append({"item": json.dumps(asdict(item)), "path": path, "fingerprint": fingerprint(path)})
        except OSError as e:
            unreadable.append(f"{item.video}: {e.strerror or e}")
    if unreadable:
        more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
        raise InputError(f"{unreadable[0]}{more}; the Ray back end sends each clip by its path, so it must be "
                         f"readable where videoqa runs")
    return rows


def check_same_file(path: str, expected: str) -> None:
    """On a worker: a VideoError unless `path` is the file the driver fingerprinted."""
    where = f"on the Ray worker ({socket.gethostname()}), {path}"
    try:
        found = fingerprint(path)
    except OSError as e:
        raise VideoError(path, f"{where} cannot be read ({e.strerror or e}); {SAME_PATHS}") from None
    if found != expected:
        raise VideoError(path, f"{where} is another file than where videoqa runs (size and content {found}, "
                               f"expected {expected}); {SAME_PATHS}")


def error_text(e: Exception, path: str, typed: str) -> str:
    """A worker's failure on the clip at `path` as a record's error, naming the clip as the user typed it, as
    the local back end does (records are the same whichever back end made them)."""
    if isinstance(e, VideoError) and e.path == path:
        e = VideoError(typed, e.reason)
    return f"{type(e).__name__}: {e}"


def shipped_spec(model_spec: dict) -> dict:
    """The model spec with a local model folder made absolute, so actors load the folder meant here. A name
    that is neither a shipped model, a folder here nor a hub id is a ModelLoadError here, in one line, before
    any actor tries it."""
    from ..model import NAMED_MODELS, resolve_model

    model = model_spec["model"]
    if model in NAMED_MODELS:
        return model_spec  # each actor finds it in its own videoqa install
    resolved = resolve_model(model)  # a folder here, or a hub id each actor downloads the same way
    if not Path(resolved).is_dir():
        return model_spec
    return {**model_spec, "model": str(Path(resolved).absolute())}
