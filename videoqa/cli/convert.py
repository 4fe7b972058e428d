"""`videoqa convert video-llava ORIGINAL_DIR VIDEO_TOWER_DIR OUT_DIR`: the published Video-LLaVA (its LanguageBind
video tower with temporal attention, which the -hf checkpoint lacks) as a folder for `--model OUT_DIR`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError


def register(sub) -> None:
    p = sub.add_parser("convert", help="convert a published checkpoint into a model folder videoqa loads",
                       description="Convert a published checkpoint into a model folder for --model.")
    kinds = p.add_subparsers(dest="kind", required=True)
    v = kinds.add_parser("video-llava", help="LanguageBind/Video-LLaVA-7B + LanguageBind_Video_merge",
                         description="Convert LanguageBind/Video-LLaVA-7B (LLaVA layout: LLaMA + mm_projector) and "
                                     "LanguageBind/LanguageBind_Video_merge (the video tower, temporal attention "
                                     "included) into OUT_DIR. Every unused weight is reported (and listed in "
                                     "OUT_DIR/conversion.json); a missing one stops the conversion.")
    v.add_argument("original_dir", help="the downloaded LanguageBind/Video-LLaVA-7B")
    v.add_argument("video_tower_dir", help="the downloaded LanguageBind/LanguageBind_Video_merge")
    v.add_argument("out_dir", help="new (or empty) folder to write")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for folder in (args.original_dir, args.video_tower_dir):  # said before torch and transformers load
        if not Path(folder).is_dir():
            raise InputError(f"{folder}: no such folder")
    from ..models.video_llava_original import convert

    report = convert(args.original_dir, args.video_tower_dir, args.out_dir)
    for line in report.lines():
        print(line)
    print(f"converted model saved to {args.out_dir} (video tower with temporal attention); "
          f"use --model {args.out_dir}")
    return 0
