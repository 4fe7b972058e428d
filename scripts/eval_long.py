"""Accuracy of a model on a long-clip split (videoqa/synth/long.py) at several frame counts, unpruned,
by question type, clip length and event position: the training-side check of samples/demo-long-model.

    python -m videoqa.synth.long --split test --out /tmp/long-test --n 120
    python scripts/eval_long.py --model samples/demo-long-model --root /tmp/long-test --frames 8 16 24

Answers go through videoqa.pipeline.VideoQA (the app's own path) and are scored with the exact judge of
`videoqa eval --judge exact`. "event" columns count only the event questions (colour/shape of the brief
object, flash count, order); "resolved" = those on clips whose events all fall on sampled frames.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from videoqa.bench.accuracy import split_rows
from videoqa.bench.long.core import read_scenes
from videoqa.errors import VideoQAError
from videoqa.eval.judges import ExactJudge  # noqa: E402
from videoqa.pipeline import VideoQA  # noqa: E402
from videoqa.pruning import PruneConfig  # noqa: E402
from videoqa.synth import long as synth_long  # noqa: E402

EVENT_TYPES = {t for ts in synth_long.KIND_TYPES.values() for t in ts}


def bucket(duration: float) -> str:
    return "<=10s" if duration <= 10 else "10-30s" if duration <= 30 else ">30s"


def evaluate(qa: VideoQA, root: Path, frames: int) -> dict[str, list[bool]]:
    """Per group name, the list of right/wrong answers."""
    questions = split_rows(root, "test_q.json", "video_name", "question")
    answers = {a["question_id"]: a for a in split_rows(root, "test_a.json", "answer", "type")}
    meta = read_scenes(root)
    by_video: dict[str, list[dict]] = defaultdict(list)
    for q in questions:
        by_video[q["video_name"]].append(q)
    judge, groups = ExactJudge(), defaultdict(list)
    for name, qs in by_video.items():
        m, video = meta[name], root / "videos" / f"{name}.mp4"
        out = qa.ask_batch([(video, q["question"]) for q in qs], prune=PruneConfig(method="none"),
                           frames=frames, max_new_tokens=6)
        seen = synth_long.resolved(synth_long_scene(m), frames)
        for q, ans in zip(qs, out, strict=True):
            a = answers[q["question_id"]]
            ok = judge.judge(q["question"], a["answer"], ans.text).pred == "yes"
            keys = ["all", a["type"], bucket(m["duration_s"])]
            if a["type"] in EVENT_TYPES:
                keys += ["event", f"event {bucket(m['duration_s'])}", f"event {m['event_third']}",
                         "event resolved" if seen else "event missed"]
            for k in keys:
                groups[k].append(ok)
    return groups


def synth_long_scene(m: dict) -> synth_long.LongScene:
    """Enough of a scene (frame count and event frames) to ask `resolved`."""
    events = [synth_long.Event(e["kind"], e["start"], e["stop"]) for e in m["events"]]
    return synth_long.LongScene(m["name"], m["kind"], m["n_frames"], None, events, m["fps"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--root", required=True, help="a split written by python -m videoqa.synth.long")
    p.add_argument("--frames", type=int, nargs="+", default=[8, 16, 24])
    p.add_argument("--out", help="also write the figures as JSON here")
    args = p.parse_args(argv)
    try:
        qa = VideoQA.from_pretrained(args.model, device="cpu")
        rows = {f: evaluate(qa, Path(args.root), f) for f in args.frames}
    except VideoQAError as e:  # one line, as the videoqa command prints it
        print(f"error: {e}", file=sys.stderr)
        return 2
    cols = list(dict.fromkeys(k for g in rows.values() for k in sorted(g, key=_order)))
    print("| frames | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for f, g in rows.items():
        cells = [f"{100 * np.mean(g[c]):.1f} ({len(g[c])})" if g.get(c) else "-" for c in cols]
        print(f"| {f} | " + " | ".join(cells) + " |")
    if args.out:
        table = {f: {c: {"acc": float(np.mean(v)), "n": len(v)} for c, v in g.items()} for f, g in rows.items()}
        Path(args.out).write_text(json.dumps(table, indent=1))
    return 0


def _order(key: str) -> tuple:
    first = ["all", "colour", "shape", "direction", "event_colour", "event_shape", "count", "order",
             "<=10s", "10-30s", ">30s", "event", "event <=10s", "event 10-30s", "event >30s", "event first",
             "event middle", "event last", "event resolved", "event missed"]
    return (first.index(key), "") if key in first else (len(first), key)


if __name__ == "__main__":
    raise SystemExit(main())
