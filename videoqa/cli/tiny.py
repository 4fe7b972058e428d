"""`videoqa make-tiny-model DIR`: a random-weight Video-LLaVA of the real classes, for tests and trials."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..models.tiny import TEXT_FAMILIES, TinySpec, make_tiny_model

ORIGINAL_FAMILY = "video-llava-original"  # --family: the published two-folder layout instead of a -hf folder

FAMILIES = ("llava-onevision", "qwen2.5-vl", "qwen3-vl")  # videoqa.models.families (imported when used: torch)


def register(sub) -> None:
    p = sub.add_parser("make-tiny-model", help="build a small random-weight Video-LLaVA in DIR",
                       description="Build a small Video-LLaVA (random weights, real tokenizer and processor) "
                                   "and save it so `--model DIR` loads it like any checkpoint.")
    p.add_argument("dir")
    p.add_argument("--seed", type=int, default=0)
    for f in fields(TinySpec):
        if f.name == "family":  # Video-LLaVA's text decoder, the published layout, or one of today's families
            p.add_argument("--family", choices=(*TEXT_FAMILIES, ORIGINAL_FAMILY, *FAMILIES), default=f.default,
                           help="Video-LLaVA with a llama/qwen2/mistral decoder (default: llama), "
                                f"{ORIGINAL_FAMILY} (the published two-folder layout), or a tiny "
                                "llava-onevision, qwen2.5-vl or qwen3-vl of the real classes")
            continue
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.family == ORIGINAL_FAMILY:  # the published layouts, for `videoqa convert video-llava`
        from ..models.tiny_original import make_original_pair

        spec = TinySpec(**{f.name: getattr(args, f.name) for f in fields(TinySpec) if f.name != "family"})
        original, tower = make_original_pair(args.dir, spec, seed=args.seed)
        print(f"tiny original Video-LLaVA saved to {original} and {tower}; convert it with "
              f"`videoqa convert video-llava {original} {tower} OUT_DIR`")
        return 0
    if args.family in FAMILIES:
        from ..models.families import make_tiny

        out = make_tiny(args.family, args.dir, seed=args.seed)
        print(f"tiny {args.family} (random weights, its own processor and chat template) saved to {out}")
        return 0
    spec = TinySpec(**{f.name: getattr(args, f.name) for f in fields(TinySpec)})
    out = make_tiny_model(args.dir, spec, seed=args.seed)
    print(f"tiny Video-LLaVA ({spec.family}, {spec.layers} layers, d={spec.hidden}, "
          f"{spec.frames}x{(spec.image_size // spec.patch_size) ** 2 + 1} visual tokens) saved to {out}")
    return 0
