"""`videoqa` command line: one module per subcommand in this package; this file only routes.

Errors the user can act on (VideoQAError) print one line on stderr and exit 2; any other exception (a defect)
one line and exit 1; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ..errors import VideoQAError

# Subcommand modules of this package. Each defines `register(subparsers)`, which adds its parser(s) and
# sets `func`. They keep heavy imports (torch, gradio, ray) inside functions so `--help` stays fast.
COMMANDS = ("ask", "tiny", "convert", "bench", "batch", "eval", "serve")


class Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line (the error and where to find help), not the whole usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="videoqa", description="Answer questions about videos with Video-LLaVA "
                                     "and training-free visual-token pruning.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv))


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command: a VideoQAError becomes one line on stderr and exit 2, any other exception one line
    and exit 1."""
    _quiet_libraries()
    try:
        return int(args.func(args) or 0)
    except VideoQAError as e:
        if args.debug:
            raise
        print(f"videoqa: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("videoqa: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a defect of videoqa's, not the user's input: still one line, the traceback on request
        if args.debug:
            raise
        print(f"videoqa: internal error: {type(e).__name__}: {e} (a bug in videoqa; --debug shows the traceback)",
              file=sys.stderr)
        return 1


def _quiet_libraries() -> None:
    """Hide the library output that is noise for CLI users, and nothing else: transformers' warnings (a
    checkpoint with missing or unexpected weights, say) stay visible. Without importing transformers: most
    commands check their inputs first, and a bad one is reported without waiting for it."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    else:  # read when huggingface_hub and transformers are imported (by the commands that load a model)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # On every processor load transformers says Video-LLaVA's image processor has no torchvision variant; the
    # PIL one is what the checkpoint uses. transformers' loggers are the standard library's, by module name.
    notices = logging.getLogger("transformers.models.auto.image_processing_auto")
    if _not_backend_notice not in notices.filters:
        notices.addFilter(_not_backend_notice)


def _not_backend_notice(record) -> bool:
    return not record.getMessage().startswith("Requested torchvision backend is not available")
