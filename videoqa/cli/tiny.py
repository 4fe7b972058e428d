"""`videoqa make-tiny-model DIR`: a random-weight Video-LLaVA of the real classes, for tests and trials."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..models.tiny import TEXT_FAMILIES, TinySpec, make_tiny_model

ORIGINAL_FAMILY = "video-llava-original"  # --family: the published two-folder layout instead of a -hf folder


def register(sub) -> None:
    p = sub.add_parser("make-tiny-model", help="build a small random-weight Video-LLaVA in DIR",
                       description="Build a small Video-LLaVA (random weights, real tokenizer and processor) "
                                   "and save it so `--model DIR` loads it like any checkpoint.")
    p.add_argument("dir")
    p.add_argument("--seed", type=int, default=0)
    for f in fields(TinySpec):
        choices = {"choices": (*TEXT_FAMILIES, ORIGINAL_FAMILY)} if f.name == "family" else {}  # one line, exit 2
        doc = f"text decoder ({', '.join(TEXT_FAMILIES)}) or {ORIGINAL_FAMILY}" if f.name == "family" else None
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, help=doc, **choices)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.family == ORIGINAL_FAMILY:  # the published layouts, for `videoqa convert video-llava`
        from ..models.tiny_original import make_original_pair

        spec = TinySpec(**{f.name: getattr(args, f.name) for f in fields(TinySpec) if f.name != "family"})
        original, tower = make_original_pair(args.dir, spec, seed=args.seed)
        print(f"tiny original Video-LLaVA saved to {original} and {tower}; convert it with "
              f"`videoqa convert video-llava {original} {tower} OUT_DIR`")
        return 0
    spec = TinySpec(**{f.name: getattr(args, f.name) for f in fields(TinySpec)})
    out = make_tiny_model(args.dir, spec, seed=args.seed)
    print(f"tiny Video-LLaVA ({spec.family}, {spec.layers} layers, d={spec.hidden}, "
          f"{spec.frames}x{(spec.image_size // spec.patch_size) ** 2 + 1} visual tokens) saved to {out}")
    return 0
