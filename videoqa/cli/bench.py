"""`videoqa bench [llm] [frames] [video] [accuracy] [long] [e2e] [tower] [laptop]`: what pruning buys, measured,
next to the FLOPs formula (tower: what the published tower's temporal attention costs; laptop: LLaVA-OneVision-0.5B).

Each suite prints one markdown table; `--out` also writes them to a file.
"""

from __future__ import annotations

import argparse

from ..bench.setup import PRESETS, Setup
from .options import positive_int

SUITES = ("llm", "frames", "video", "accuracy", "long", "e2e", "tower", "laptop")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: prefill/decode with and without pruning, frames, decoders",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("suites", nargs="*", default=["llm", "frames"], choices=SUITES,
                   help="which tables (default: llm frames)")
    p.add_argument("--preset", default="mid", choices=list(PRESETS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "flash_attention_2", "eager"])
    p.add_argument("--k", type=int, default=None,
                   help="FastV's layer K (default: 2; long: the K the policy sweep chose, LONG_K)")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--decode-tokens", type=positive_int, default=16)
    p.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory processes")
    p.add_argument("--compile", action="store_true",
                   help="llm: also time the torch.compile'd decode step (compiling takes minutes on a small CPU)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    g = p.add_argument_group("video suite")
    g.add_argument("--videos", nargs="+", metavar="FILE",
                   help="clips to time (default: the shipped sample clips and two generated ones)")
    g = p.add_argument_group("accuracy, long and e2e suites")
    g.add_argument("--model", default=None,
                   help="model evaluated (default: demo for accuracy, demo-long for long)")
    g.add_argument("--clips", type=positive_int, default=None,
                   help="clips evaluated (default: accuracy 100 held-out clips, 3 questions each; long: the whole "
                        "long-clip split, 120 clips of 4-5 questions; e2e: 2 generated clips besides the 4 samples, "
                        "20 questions each)")
    g.add_argument("--methods", nargs="+", metavar="METHOD", default=None,
                   help="e2e: only these registered methods besides none, the reference (default: all); long: "
                        "instead of the policy table, these methods (or 'all') at R = 0.5, 0.75, 0.9 on 8 uniform "
                        "frames beside the unpruned reference")
    g.add_argument("--runs-dir", default=None,
                   help="run folders (resumable) and plots (default: runs/accuracy, runs/long)")
    g.add_argument("--split", default="test", choices=["test", "val"],
                   help="long: the held-out split (default) or the validation split the policy was tuned on")
    g.add_argument("--sweep", action="store_true",
                   help="long: the adaptive policy's sweep on the validation split instead of the policy table")
    g.add_argument("--write-card", metavar="DIR", default=None,
                   help="long --sweep: write the chosen constants into DIR/videoqa.json's policy section (the model "
                        "folder: every later run of that model uses them)")
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
    k = 2 if args.k is None else args.k
    if suite == "llm":
        from ..bench.decode import run_decode
        from ..bench.llm import run_llm

        prefill = run_llm(setup, k, args.repeats, args.decode_tokens, memory=not args.no_memory)
        return prefill + "\n\n" + run_decode(setup, args.decode_tokens, args.compile, k, args.repeats)
    if suite == "frames":
        from ..bench.llm import run_frames

        return run_frames(setup, k, args.repeats)
    if suite == "tower":
        from ..bench.tower import run_tower

        return run_tower(args.device, args.dtype, args.repeats)
    if suite == "laptop":
        import torch

        from ..bench.families import run_laptop

        return run_laptop(dtype=getattr(torch, args.dtype))
    if suite == "video":
        from ..bench.video import run_video

        return run_video(args.videos, repeats=args.repeats)
    if suite == "e2e":
        from ..bench.e2e import run_e2e

        return run_e2e(args.model or "demo", 2 if args.clips is None else args.clips, device=args.device,
                       methods=_methods(args.methods))
    if suite == "long":
        from ..bench.long import LONG_K, run_long

        if args.sweep:
            from ..bench.long.sweep import run_sweep

            return run_sweep(args.model or "demo-long", args.runs_dir or "runs/long", args.clips, device=args.device,
                             write_card=args.write_card)
        k = LONG_K if args.k is None else args.k
        rows = None
        if args.methods:
            from ..bench.long.rows import method_rows
            from ..pruning.registry import REGISTRY

            rows = method_rows([m.name for m in REGISTRY] if args.methods == ["all"] else _methods(args.methods), k)
        return run_long(args.model or "demo-long", args.runs_dir or "runs/long", args.clips, device=args.device,
                        split=args.split, k=k, rows=rows)
    from ..bench.accuracy import run_accuracy

    return run_accuracy(args.model or "demo", args.runs_dir or "runs/accuracy",
                        100 if args.clips is None else args.clips, device=args.device, k=k)


def _methods(names: list[str] | None) -> list[str] | None:
    """The e2e and long suites' methods, each checked against the registry (an unknown one: one clear error line)."""
    if names is None:
        return None
    from ..errors import InputError
    from ..pruning.registry import REGISTRY

    known = [m.name for m in REGISTRY]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown method(s) {', '.join(unknown)}; registered: {', '.join(known)}")
    return names
