"""`videoqa ask VIDEO "QUESTION"`: one answer and one stats line (or a JSON object)."""

from __future__ import annotations

import argparse
import sys

from ..jsonio import dumps
from .options import add_model_options, add_prune_options, load_qa, model_choice, model_spec_from_args, prune_from_args


def register(sub) -> None:
    p = sub.add_parser("ask", help="answer one question about one video",
                       description="Answer a question about a video; prints the answer and a stats line.")
    p.add_argument("video", help="video file (mp4, avi, mkv, webm, mov, gif)")
    p.add_argument("question")
    add_model_options(p)
    add_prune_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (answer, kept tokens, stats)")
    p.add_argument("--stream", action="store_true", help="print the answer token by token")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..video import check_file

    choice = model_choice(args)  # the model's card, read once, and its policy, built once
    prune = prune_from_args(args, choice.policy.k)  # option errors first: the user's typing, found without I/O
    spec = model_spec_from_args(args, choice, prune)
    check_file(args.video)  # a missing clip is reported at once, not after the model has loaded
    qa = load_qa(args, spec, choice, prune)
    if sys.stderr.isatty():
        qa.scan_progress = _scan_progress
    if args.json:
        answer = qa.ask(args.video, args.question)
        print(dumps(answer.to_dict()))
        _warn(answer.warnings)
        return 0
    answer = None
    for item in qa.stream(args.video, args.question):
        if isinstance(item, str):
            if args.stream:
                print(item, end="", flush=True)
        else:
            answer = item
    print("" if args.stream else answer.text)
    _warn(answer.warnings)
    if answer.decision is not None:
        from ..pruning.adaptive import describe

        print(f"auto: {describe(answer.decision)}", file=sys.stderr)
    print(answer.summary(), file=sys.stderr)
    return 0


def _scan_progress(fraction: float) -> None:
    """The content sampler's change scan, drawn on one terminal line (it can take a minute on a long clip)."""
    end = "\n" if fraction >= 1.0 else ""
    print(f"\rvideoqa: scanning the clip for changes: {100 * fraction:3.0f} %", end=end, file=sys.stderr,
          flush=True)


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"videoqa: warning: {warning}", file=sys.stderr)
