"""The one JSON reader for everything a user or a server hands in, and the one writer for what videoqa writes.

Rule: JSON from outside (a model card, a work list, a results file read back on resume, a judge's reply, a
benchmark's question file) is read with `parse_json` / `read_json`, never with a bare `json.loads`. Valid JSON
can still be hostile: 100,000 levels of nesting (RecursionError), an integer of 5,000 digits (ValueError from
Python's int limit), a number out of float range (`1e400` reads as inf), `NaN` / `Infinity` (not JSON at all,
but Python reads them). Each of these is a `JSONProblem` here, whose one line the caller prefixes with the file
or the server it came from. What videoqa writes goes through `dumps`, which writes null for a NaN or an
infinity (a number that is not one), so no output of ours is JSON that other readers reject.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

MAX_DIGITS = 308  # an integer longer than this is out of float range: no field of ours means one
# A JSON file videoqa reads (a benchmark's question file is the largest: tens of MB); more is refused unread
MAX_FILE_BYTES = 256 << 20


class JSONProblem(ValueError):
    """Text that is not usable JSON; the message is one line without the file's name."""


def _no_constant(name: str) -> object:
    raise JSONProblem(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem(f"the number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise JSONProblem(f"an integer of {len(text.lstrip('-'))} digits is out of range")
    return int(text)


def parse_json(text: str | bytes) -> object:
    """The value of JSON `text`; JSONProblem (one line) for anything that is not plain, finite JSON."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except JSONProblem:
        raise
    except json.JSONDecodeError as e:
        raise JSONProblem(f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError:
        raise JSONProblem("not UTF-8 text") from None
    except RecursionError:
        raise JSONProblem("nested too deeply") from None
    except (ValueError, OverflowError) as e:  # Python's own limits on numbers
        raise JSONProblem(f"a number out of range ({str(e).splitlines()[0][:80]})") from None


def read_bounded(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path`; OSError when it cannot be read, JSONProblem when it is not a
    regular file (a FIFO would block, /dev/zero never ends) or holds more than `max_bytes`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, then is refused below
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JSONProblem("not a regular file")
        if st.st_size > max_bytes:
            raise JSONProblem(f"{st.st_size} bytes, more than the {max_bytes} a JSON file may hold")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while being read
        raise JSONProblem(f"more than the {max_bytes} bytes a JSON file may hold")
    return data


def read_json(path: str | Path, error: type[Exception], max_bytes: int = MAX_FILE_BYTES) -> object:
    """The JSON value of the file at `path`; `error("<path>: <why>")` when it cannot be read or parsed, is not a
    regular file or holds more than `max_bytes`."""
    try:
        return parse_json(read_bounded(path, max_bytes))
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    except JSONProblem as e:
        raise error(f"{path}: {e}") from None


def finite(value: object) -> object:
    """`value` with every float that is NaN or infinite (in dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: object, **kwargs) -> str:
    """`json.dumps` of `finite(value)`: null, never `NaN` / `Infinity`, for a number that is not finite."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
