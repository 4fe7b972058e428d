"""`videoqa bench [llm] [frames] [video] [accuracy]`: what pruning buys, measured, next to the FLOPs formula.

Each suite prints one markdown table; `--out` also writes them to a file.
"""

from __future__ import annotations

import argparse

from ..bench.llm import PRESETS, Setup

SUITES = ("llm", "frames", "video", "accuracy")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: prefill/decode with and without pruning, frames, decoders",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("suites", nargs="*", default=["llm", "frames"], choices=SUITES,
                   help="which tables (default: llm frames)")
    p.add_argument("--preset", default="mid", choices=list(PRESETS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "flash_attention_2", "eager"])
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--decode-tokens", type=int, default=16)
    p.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory processes")
    p.add_argument("--compile", action="store_true",
                   help="llm: also time the torch.compile'd decode step (compiling takes minutes on a small CPU)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    g = p.add_argument_group("video suite")
    g.add_argument("--videos", nargs="+", metavar="FILE",
                   help="clips to time (default: the shipped sample clips and two generated ones)")
    g = p.add_argument_group("accuracy suite")
    g.add_argument("--model", default="demo", help="model evaluated by the accuracy suite (default: demo)")
    g.add_argument("--clips", type=int, default=100, help="held-out clips (3 questions each)")
    g.add_argument("--runs-dir", default="runs/accuracy", help="run folders (resumable) and the plot")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    outputs = []
    for suite in args.suites:
        text = suite_text(suite, args)
        print(text + "\n", flush=True)
        outputs.append(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n\n".join(outputs) + "\n")
    return 0


def suite_text(suite: str, args: argparse.Namespace) -> str:
    setup = Setup(preset=args.preset, device=args.device, dtype=args.dtype, attn=args.attn)
    if suite == "llm":
        from ..bench.decode import run_decode
        from ..bench.llm import run_llm

        prefill = run_llm(setup, args.k, args.repeats, args.decode_tokens, memory=not args.no_memory)
        return prefill + "\n\n" + run_decode(setup, args.decode_tokens, args.compile, args.k, args.repeats)
    if suite == "frames":
        from ..bench.llm import run_frames

        return run_frames(setup, args.k, args.repeats)
    if suite == "video":
        from ..bench.video import run_video

        return run_video(args.videos, repeats=args.repeats)
    from ..bench.accuracy import run_accuracy

    return run_accuracy(args.model, args.runs_dir, args.clips, device=args.device, k=args.k)
