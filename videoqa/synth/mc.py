"""The demo model's multiple-choice set: held-out clips of the short demo world (`short.py`) with its colour,
shape and direction questions, each given four lettered options, written in Video-MME's layout as lmms-eval
reads it (rows with videoID, question_id, duration, domain, sub_category, task_type, question, options
["A. ...", ...], answer "A"; videos at data/{videoID}.mp4):

    python -m videoqa.synth.mc --out /tmp/demo-mc --n 40
    videoqa eval --dataset videomme --root /tmp/demo-mc --model demo

The right option's letter is drawn uniformly (seeded), so a model that always answers one letter scores about
25 %; the distractors are three other words of the question's own kind (colours for a colour question).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from .short import COLOURS, DIRECTIONS, SHAPES, questions, render, test_scenes, write_mp4

VOCAB = {"colour": list(COLOURS), "shape": SHAPES, "direction": list(DIRECTIONS)}
# The Video-MME task type each demo question stands closest to.
TASK_TYPES = {"colour": "Attribute Perception", "shape": "Object Recognition", "direction": "Temporal Perception"}
N_OPTIONS = 4


def options_for(answer: str, kind: str, rng: np.random.Generator) -> tuple[list[str], str]:
    """Four option texts (the answer and three others of its kind, shuffled) and the answer's letter. Shape
    questions have only three shapes, so their fourth option is a colour (an answer never right for them)."""
    others = [w for w in VOCAB[kind] if w != answer]
    if len(others) < N_OPTIONS - 1:
        others += list(COLOURS)[: N_OPTIONS - 1 - len(others)]
    picked = [str(w) for w in rng.choice(others, N_OPTIONS - 1, replace=False)]
    slot = int(rng.integers(N_OPTIONS))
    picked.insert(slot, answer)
    return picked, "ABCD"[slot]


def write_videomme(out: str | Path, n: int = 40, seed: int = 0) -> tuple[Path, int]:
    """`n` held-out clips, three questions each, in the Video-MME layout under `out`; (out, questions)."""
    out = Path(out)
    rows = []
    for scene in test_scenes(n, seed):
        write_mp4(render(scene), out / "data" / f"{scene.name}.mp4")
        index = int(scene.name.split("_")[-1])
        qrng = np.random.default_rng([seed, 99, index])  # the same question phrasing as the open-ended split
        orng = np.random.default_rng([seed, 97, index])
        for j, (question, answer, kind) in enumerate(questions(scene, qrng)):
            options, letter = options_for(answer, kind, orng)
            rows.append({
                "video_id": f"{index:03d}", "duration": "short", "domain": "Synthetic", "sub_category": "Shapes",
                "url": "", "videoID": scene.name, "question_id": f"{scene.name}-{j}", "task_type": TASK_TYPES[kind],
                "question": question, "options": [f"{L}. {o}" for L, o in zip("ABCD", options, strict=True)],
                "answer": letter,
            })
    (out / "videomme").mkdir(parents=True, exist_ok=True)
    (out / "videomme" / "test.json").write_text(json.dumps(rows, indent=1))
    return out, len(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=40, help="held-out clips (3 questions each)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out, nq = write_videomme(args.out, args.n, args.seed)
    print(f"{out}: {nq} questions (Video-MME layout)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
