"""`videoqa batch` that pauses after writing each record until a gate file exists, so a test can kill it or
race it mid-run without guessing how long anything takes.

    python tests/helpers/slow_batch.py GATE [videoqa batch arguments...]

The run is the command's own (its parser, work list, keys, lock, results file, error lines and exit
codes); only the pause is added, around the back end's records.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from videoqa.batch.run import Produce
from videoqa.batch.worklist import WorkItem
from videoqa.cli import batch, build_parser, run_command
from videoqa.cli.options import backend_from_args


def gated(produce: Produce, gate: Path) -> Produce:
    def run(todo: list[WorkItem]) -> Iterator[dict]:
        for record in produce(todo):
            yield record
            while not gate.exists():  # the record is written and fsynced before the generator resumes
                time.sleep(0.02)

    return run


def main(argv: list[str]) -> int:
    gate, args = Path(argv[0]), build_parser().parse_args(["batch", *argv[1:]])
    args.func = partial(batch.run, backend=lambda a, spec: gated(backend_from_args(a, spec), gate))
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
