"""Accuracy on phrasings the demo models were never trained on, beside the trained forms, per question type.

    python -m scripts.measure_phrasings --model demo --clips 60
    python -m scripts.measure_phrasings --model demo-long --clips 40

Each held-out clip (the test split: clips no training run saw) is asked every question type twice, once in a
trained phrasing (TEMPLATES) and once in a held-out one (HELD_OUT_TEMPLATES), each drawn at random, through the
pipeline as `videoqa ask` asks (unpruned; the short model at its 8 frames, demo-long at 24 uniform frames, where
every event of a clip is on a sampled frame). Exact match after lowercasing and stripping punctuation.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth


def asked(model: str, n: int, folder: Path, seed: int = 0, extra: bool = False,
          skip: int = 0) -> tuple[list[tuple[Path, str, str, str, str]], int | None]:
    """(clip, question, answer, type, "trained" | "held-out") for `n` held-out clips after the first `skip`, and
    the frames to ask at; the eval splits' question types, and with `extra` the EXTRA_TYPES too."""
    out = []
    if model == "demo-long":
        for scene in synth_long.test_scenes(n + skip, seed)[skip:]:
            path = synth.write_mp4(synth_long.render(scene), folder / f"{scene.name}.mp4", fps=scene.fps)
            for form, templates in (("trained", synth_long.TEMPLATES), ("held-out", synth_long.HELD_OUT_TEMPLATES)):
                rng = np.random.default_rng([seed, 95, int(scene.name.split("_")[-1])])
                out += [(path, q, a, t, form) for q, a, t in synth_long.questions(scene, rng, extra, templates)]
        return out, 24
    types = synth.ALL_TYPES if extra else synth.QUESTION_TYPES
    for scene in synth.test_scenes(n + skip, seed)[skip:]:
        path = synth.write_mp4(synth.render(scene), folder / f"{scene.name}.mp4")
        for form, templates in (("trained", synth.TEMPLATES), ("held-out", synth.HELD_OUT_TEMPLATES)):
            rng = np.random.default_rng([seed, 95, int(scene.name.split("_")[-1])])
            out += [(path, q, a, t, form) for q, a, t in synth.questions(scene, rng, types, templates)]
    return out, None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="demo, demo-long or a model folder of either kind")
    p.add_argument("--clips", type=int, default=60)
    p.add_argument("--long", action="store_true", help="the model is a demo-long kind (implied by demo-long)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N held-out clips: a set of clips that no earlier measure saw")
    p.add_argument("--extra-types", action="store_true",
                   help="also the questions the clips cannot answer (yes/no, how many, unknown)")
    args = p.parse_args(argv)
    kind = "demo-long" if args.long or args.model == "demo-long" else "demo"
    qa = VideoQA.from_pretrained(args.model, max_new_tokens=8)
    hits: dict[tuple[str, str], list[bool]] = {}
    wrong: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        items, frames = asked(kind, args.clips, Path(tmp), extra=args.extra_types, skip=args.skip)
        for b in range(0, len(items), args.batch):
            chunk = items[b : b + args.batch]
            answers = qa.ask_batch([(v, q) for v, q, *_ in chunk], prune=PruneConfig(method="none"), frames=frames,
                                   sampler="uniform")
            for (_, q, a, t, form), ans in zip(chunk, answers, strict=True):
                got = ans.text.strip().lower().strip(".!?,;: ")
                hits.setdefault((t, form), []).append(got == a)
                if got != a:
                    wrong.setdefault((t, form), []).append(f"{q!r} -> {got!r} (want {a})")
    types = list(dict.fromkeys(t for t, _ in hits))
    after = f" after the first {args.skip}" if args.skip else ""
    print(f"Phrasings: {args.model}, {args.clips} held-out clips{after}, each type asked once in a trained and "
          f"once in a held-out phrasing (unpruned{', 24 uniform frames' if frames else ''}):")
    print("| type | n | trained forms % | held-out forms % | held-out / trained |")
    print("|---|---|---|---|---|")
    for t in types:
        tr, ho = np.mean(hits[(t, "trained")]), np.mean(hits[(t, "held-out")])
        print(f"| {t} | {len(hits[(t, 'trained')])} | {100 * tr:.1f} | {100 * ho:.1f} | "
              f"{100 * ho / tr if tr else float('nan'):.1f} % |")
    for key, lines in wrong.items():
        print(f"  wrong {key[0]} ({key[1]}), first of {len(lines)}: " + "; ".join(lines[:3]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
