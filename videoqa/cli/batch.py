"""`videoqa batch PATH... --out results.jsonl`: answer questions about many clips into a resumable JSONL file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import InputError
from .options import add_backend_options, add_model_options, add_prune_options, backend_from_args, model_spec_from_args

if TYPE_CHECKING:
    from ..batch.run import Produce


def register(sub) -> None:
    p = sub.add_parser("batch", help="answer questions about many clips into a resumable JSONL file",
                       description="Answer questions about many clips: one JSONL record per (clip, question), "
                                   "resumable, locally or on Ray.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="video files, folders (searched recursively) or work lists (.txt of videos, "
                        ".json/.jsonl of {video, question, id})")
    q = p.add_mutually_exclusive_group()
    q.add_argument("--question", help="question asked of every clip")
    q.add_argument("--questions", help="file of questions (one per line, or a JSON list) asked of every clip")
    p.add_argument("--out", required=True, help="results JSONL; re-running with the same file resumes (one run "
                                                "writes it at a time: see --wait)")
    add_model_options(p)
    add_prune_options(p)
    add_backend_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace,
        backend: Callable[[argparse.Namespace, dict], Produce] = backend_from_args) -> int:
    """The command; `backend(args, spec)` makes the batch back end (a test wraps it to slow it down)."""
    from ..batch.run import run_batch
    from ..batch.worklist import answer_options, collect_work, read_questions

    spec = model_spec_from_args(args)  # the pruning options are checked here, once
    questions = [args.question] if args.question else read_questions(args.questions) if args.questions else None
    items = collect_work(args.paths, questions, answer_options(spec))
    if not items:
        raise InputError("no videos found in " + ", ".join(args.paths))
    summary = run_batch(items, args.out, backend(args, spec), retry_errors=args.retry_errors,
                        progress=not args.no_progress, wait=args.wait)
    print(summary.line())
    return 0
