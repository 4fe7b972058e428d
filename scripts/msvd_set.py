"""An MSVD-layout set of held-out demo clips, 20 questions each (MSVD-QA's test split asks about 20 a clip), for
timing `videoqa eval --dataset msvd` with and without the prefix cache (issue 34):

    python -m scripts.msvd_set /tmp/msvd --clips 10
    videoqa eval --dataset msvd --root /tmp/msvd --model demo --no-progress --out runs/msvd-on
    videoqa eval --dataset msvd --root /tmp/msvd --model demo --no-progress --out runs/msvd-off --prefix-cache-bytes 0

`--msvd-sized` renders each clip as long and as large as MSVD's (10 s at 30 fps, 320x240: the scene drawn at 240 px
and padded at the sides, which the demo processor's centre crop removes again), so frame decoding costs what it
costs on the real set; the default 2-s 128-px clips are the demo's own.

Each clip is asked every question type of the eval splits (colour, shape, direction, exists, how many, unknown) in
each of their phrasings, 18 distinct questions, then the first two again drawn anew: 20 rows, answers included.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import numpy as np
from PIL import Image

from videoqa.synth import short as synth

QUESTIONS_PER_CLIP = 20


def clip_rows(scene: synth.Scene, seed: int) -> list[tuple[str, str, str]]:
    """20 (question, answer, type) rows about `scene`: every eval phrasing of every type, then more drawn."""
    rows = []
    for phrasing in range(3):
        templates = {t: [forms[phrasing]] for t, forms in synth.EVAL_TEMPLATES.items()}
        rng = np.random.default_rng([seed, phrasing, int(scene.name.split("_")[-1])])
        rows += synth.questions(scene, rng, list(synth.EVAL_TEMPLATES), templates)
    rng = np.random.default_rng([seed, 3, int(scene.name.split("_")[-1])])
    while len(rows) < QUESTIONS_PER_CLIP:
        rows += synth.questions(scene, rng, list(synth.EVAL_TEMPLATES))
    return rows[:QUESTIONS_PER_CLIP]


MSVD_SECONDS, MSVD_FPS, MSVD_HEIGHT, MSVD_WIDTH = 10, 30, 240, 320


def msvd_sized(scene: synth.Scene) -> np.ndarray:
    """`scene` as a 10-s, 30-fps, 320x240 clip: drawn at 128 px, scaled to 240 and edge-padded to 320 wide."""
    frames = synth.render(scene, n_frames=MSVD_SECONDS * MSVD_FPS)
    scaled = np.stack([np.asarray(Image.fromarray(f).resize((MSVD_HEIGHT, MSVD_HEIGHT), Image.BILINEAR))
                       for f in frames])
    pad = (MSVD_WIDTH - MSVD_HEIGHT) // 2
    return np.pad(scaled, ((0, 0), (0, 0), (pad, pad), (0, 0)), mode="edge")


def write_set(out: Path, n_clips: int, seed: int = 34, sized: bool = False) -> int:
    """videos/ + test_q.json + test_a.json under `out`; returns the number of questions."""
    scenes = synth.test_scenes(n_clips, seed)
    per_clip = []
    for scene in scenes:
        frames, fps = (msvd_sized(scene), MSVD_FPS) if sized else (synth.render(scene), synth.FPS)
        synth.write_mp4(frames, out / "videos" / f"{scene.name}.mp4", fps=fps)
        per_clip.append((scene.name, clip_rows(scene, seed)))
    return synth.write_qa_files(out, per_clip, [asdict(s) for s in scenes])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--clips", type=int, default=10)
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--msvd-sized", action="store_true", help="10-s 30-fps 320x240 clips, as MSVD's are")
    args = p.parse_args(argv)
    n = write_set(args.out, args.clips, args.seed, args.msvd_sized)
    print(f"{n} questions on {args.clips} clips -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
