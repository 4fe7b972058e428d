"""`videoqa batch` that pauses after writing each record, so a test can kill it mid-run.

    python tests/slow_batch.py SECONDS [videoqa batch arguments...]

The run is the command's own (its parser, work list, engine and results file); only the pause is added,
around the engine's records.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from videoqa.batch.run import Produce, run_batch
from videoqa.batch.worklist import WorkItem, collect_work
from videoqa.cli import build_parser
from videoqa.cli.options import engine_from_args


def slowly(produce: Produce, seconds: float) -> Produce:
    def run(todo: list[WorkItem]) -> Iterator[dict]:
        for record in produce(todo):
            yield record
            time.sleep(seconds)  # the record is written and fsynced before the generator resumes

    return run


def main(argv: list[str]) -> int:
    seconds, args = float(argv[0]), build_parser().parse_args(["batch", *argv[1:]])
    items = collect_work(args.paths, [args.question])
    run_batch(items, args.out, slowly(engine_from_args(args), seconds), progress=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
