"""Long synthetic video QA clips (4-60 s) whose answer depends on a brief event at a random moment.

Each clip is the short demo scene of videoqa/synth/short.py (one coloured shape crossing a textured
background, now slowly over the whole clip) at FPS frames per second, plus one kind of event:

* ``object``: a second, static shape of another colour, with a white halo, appears for 1-3 s somewhere in
  the frame. Questions: its colour (``event_colour``) and its shape (``event_shape``).
* ``flash``: the background turns light grey 1-3 times, each flash 1-3 s (``count``: one/two/three).
* ``order``: two brief haloed shapes appear one after the other, the two shapes the moving one is not
  (``order``: "Which appears first, the square or the triangle?").

The halo marks the brief shape in any single frame, so finding it needs no comparison across frames (which
a model this small learned too slowly); what matters is whether a sampled frame shows it at all.

Every clip also gets the short clips' questions about the moving shape (``colour``, ``shape``,
``direction``), phrased with "moving" so they never mean the brief shape.

Timing, stated honestly. Frames are sampled as ``np.linspace(0, n - 1, F, dtype=int)``, so two
consecutive samples are at most ``ceil((n - 1) / (F - 1))`` frames apart (``max_gap``). An event that
lasts ``d`` consecutive frames is therefore seen by every ``F`` with ``max_gap(n, F) <= d``. Every event
lasts at least ``max(1 s, max_gap(n, GUARANTEE_FRAMES))`` and at most 3 s, and consecutive events are
separated by at least ``max(0.5 s, max_gap(n, GUARANTEE_FRAMES))``, so **every event, and every gap
between two flashes, is seen with 24 or more frames**, whatever the clip length. At 4 fps a 60 s clip
has 240 frames: 8 frames are 34-35 frames (8.5 s) apart, so a 2.75-3 s event is caught by about a third
of the placements; 16 frames are up to 16 frames (4 s) apart; 24 frames up to 11 (2.75 s) apart.
Each clip's metadata says exactly which frame counts resolve it (``resolved``) and the smallest
``F`` from which every larger count up to 64 does (``frames_needed``).

Lengths are drawn uniformly per bucket (4-10 s, 10-30 s, 30-60 s, one third each). Splits come from
separate seed streams (seed, split, index); validation drops any scene that is also in train, and
held-out drops any that is in train or validation (in practice none). Write a split in the eval layout
(videos/*.mp4, test_q.json, test_a.json with ``type``, scenes.json with durations, event frames,
seconds and thirds):

    python -m videoqa.synth.long --split test --out /tmp/long-test --n 120

and sample clips (with a questions.json that also holds each clip's metadata):

    python -m videoqa.synth.long --split samples --out samples/clips_long --pick 3 7
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from . import held_out, phrasings
from . import short as synth

FPS = 4
SIZE = synth.CLIP_SIZE
SPLIT_IDS = {"train": 0, "val": 1, "test": 2, "samples": 3}
KINDS = ("object", "flash", "order")
BUCKETS_S = ((4.0, 10.0), (10.0, 30.0), (30.0, 60.0))
GUARANTEE_FRAMES = 24  # every event (and every gap between flashes) is seen at this many frames or more
MIN_EVENT_S, MAX_EVENT_S, MIN_GAP_S = 1.0, 3.0, 0.5
FLASH_RGB = (235, 235, 235)
HALO_RGB, HALO_SCALE = (255, 255, 255), 1.3  # a white shape 1.3x the size behind each brief object
COUNT_WORDS = ["one", "two", "three"]
QUESTION_TYPES = ["colour", "shape", "direction", "event_colour", "event_shape", "count", "order"]
KIND_TYPES = {"object": ["event_colour", "event_shape"], "flash": ["count"], "order": ["order"]}

EXTRA_TYPES = ["unknown"]  # trained, never in an eval split (phrasings.py says what it answers)
# Phrasings per type; "{a}"/"{b}" are the two shapes an order question names. HELD_OUT_TEMPLATES: never trained on.
TEMPLATES: dict[str, list[str]] = phrasings.LONG
HELD_OUT_TEMPLATES: dict[str, list[str]] = held_out.LONG_HELD_OUT
# The eval splits' phrasings: the first two of each type, the forms the shipped weights were first trained on
EVAL_TEMPLATES: dict[str, list[str]] = {qtype: forms[:2] for qtype, forms in TEMPLATES.items()}
# What the shipped demo-long weights were trained on (see short.py): the long clips' questions, and the short clips'
# (and `built.compose`'s questions built from parts)
SHIPPED_TEMPLATES: dict[str, list[str]] = {qtype: TEMPLATES[qtype] for qtype in QUESTION_TYPES}
SHIPPED_SHORT_TEMPLATES: dict[str, list[str]] = {qtype: synth.TEMPLATES[qtype] for qtype in synth.QUESTION_TYPES}


@dataclass
class Event:
    """Something visible in frames start..stop-1 (0-based frame numbers of the clip)."""

    kind: str  # "object" or "flash"
    start: int
    stop: int
    colour: str = ""
    shape: str = ""
    centre: tuple[float, float] = (0.0, 0.0)
    radius: float = 0.0


@dataclass
class LongScene:
    name: str
    kind: str  # one of KINDS
    n_frames: int
    main: synth.Scene
    events: list[Event] = field(default_factory=list)
    fps: int = FPS

    @property
    def duration_s(self) -> float:
        return self.n_frames / self.fps

    def key(self) -> tuple:
        """Identity used to keep the splits disjoint."""
        ev = tuple((e.kind, e.start, e.stop, e.colour, e.shape) for e in self.events)
        return (self.kind, self.n_frames, self.main.key(), ev)


def max_gap(n_frames: int, num_frames: int) -> int:
    """Largest distance between consecutive sampled frames of np.linspace(0, n-1, F, dtype=int)."""
    if num_frames < 2 or n_frames < 2:
        return n_frames
    return math.ceil((n_frames - 1) / (num_frames - 1))


def sample_indices(n_frames: int, num_frames: int) -> list[int]:
    return [int(i) for i in np.linspace(0, n_frames - 1, num_frames, dtype=int)]


def _place(rng: np.random.Generator, n: int, lengths: list[int], min_gap: int) -> list[int]:
    """Start frames for events of these lengths in order, >= min_gap apart, slack spread at random."""
    slack = n - sum(lengths) - min_gap * (len(lengths) - 1)
    assert slack >= 0, (n, lengths, min_gap)
    cuts = np.sort(rng.integers(0, slack + 1, size=len(lengths)))
    starts, pos = [], 0
    for k, length in enumerate(lengths):
        pos += int(cuts[k] - (cuts[k - 1] if k else 0))
        starts.append(pos)
        pos += length + min_gap
    return starts


def _object(rng: np.random.Generator) -> tuple[tuple[float, float], float]:
    radius = float(rng.uniform(0.14, 0.2) * SIZE)
    centre = (float(rng.uniform(radius, SIZE - radius)), float(rng.uniform(radius, SIZE - radius)))
    return centre, radius


def make_scene(rng: np.random.Generator, name: str) -> LongScene:
    lo, hi = BUCKETS_S[int(rng.integers(len(BUCKETS_S)))]
    n = int(round(rng.uniform(lo, hi) * FPS))
    main = synth.make_scene(rng, name)
    kind = str(rng.choice(KINDS))
    floor = max_gap(n, GUARANTEE_FRAMES)
    min_len, max_len = max(int(MIN_EVENT_S * FPS), floor), int(MAX_EVENT_S * FPS)
    min_gap = max(int(MIN_GAP_S * FPS), floor)
    k = {"object": 1, "order": 2, "flash": int(rng.integers(1, 4))}[kind]
    cap = min(max_len, (n - min_gap * (k - 1)) // k)  # a 4 s clip fits three 1 s flashes, no more
    lengths = [int(rng.integers(min_len, cap + 1)) for _ in range(k)]
    starts = _place(rng, n, lengths, min_gap)
    others = [c for c in synth.COLOURS if c != main.colour]
    if kind == "flash":
        events = [Event("flash", s, s + d) for s, d in zip(starts, lengths, strict=True)]
    else:
        colours = [str(c) for c in rng.choice(others, size=k, replace=False)]
        if kind == "order":
            shapes = [str(s) for s in rng.permutation([s for s in synth.SHAPES if s != main.shape])]
        else:
            shapes = [str(rng.choice(synth.SHAPES))]
        events = []
        for s, d, c, sh in zip(starts, lengths, colours, shapes, strict=True):
            centre, radius = _object(rng)
            events.append(Event("object", s, s + d, c, sh, centre, radius))
    return LongScene(name, kind, n, main, events)


def erased(scene: LongScene) -> LongScene:
    """The same clip with its brief events removed (same name, moving shape, background and questions): the
    counterfactual that tells whether an event answer was read from the frames or guessed."""
    return LongScene(scene.name, scene.kind, scene.n_frames, scene.main, [], scene.fps)


def render(scene: LongScene) -> np.ndarray:
    """Frames (n_frames, SIZE, SIZE, 3) uint8 RGB: background (light during a flash), moving shape, objects."""
    main = scene.main
    bg = Image.fromarray(synth.background(main, SIZE))
    light = Image.new("RGB", (SIZE, SIZE), FLASH_RGB)
    frames = []
    for i, t in enumerate(np.linspace(0.0, 1.0, scene.n_frames)):
        on = [e for e in scene.events if e.start <= i < e.stop]
        img = (light if any(e.kind == "flash" for e in on) else bg).copy()
        draw = ImageDraw.Draw(img)
        cx = main.start[0] + t * (main.end[0] - main.start[0])
        cy = main.start[1] + t * (main.end[1] - main.start[1])
        synth.draw_shape(draw, main.shape, cx, cy, main.radius, synth.COLOURS[main.colour])
        for e in on:
            if e.kind == "object":
                synth.draw_shape(draw, e.shape, *e.centre, e.radius * HALO_SCALE, HALO_RGB)
                synth.draw_shape(draw, e.shape, *e.centre, e.radius, synth.COLOURS[e.colour])
        frames.append(np.asarray(img))
    return np.stack(frames)


def resolved(scene: LongScene, num_frames: int) -> bool:
    """Whether F uniformly sampled frames see every event and, between two events, a frame without one."""
    return shows(scene, sample_indices(scene.n_frames, num_frames))


def shows(scene: LongScene, idx: list[int]) -> bool:
    """Whether the frames `idx` see every event and, between two events, a frame without one: what an event
    question needs to be answerable from those frames."""
    for e in scene.events:
        if not any(e.start <= i < e.stop for i in idx):
            return False
    for a, b in zip(scene.events, scene.events[1:], strict=False):
        if not any(a.stop <= i < b.start for i in idx):
            return False
    return True


def frames_needed(scene: LongScene, up_to: int = 64) -> int:
    """Smallest F such that every frame count F..up_to resolves the clip."""
    need = up_to + 1
    for f in range(up_to, 0, -1):
        if not resolved(scene, f):
            break
        need = f
    return need


def third(frame: float, n_frames: int) -> str:
    return ("first", "middle", "last")[min(2, int(3 * frame / n_frames))]


def metadata(scene: LongScene) -> dict:
    """What a benchmark buckets by: duration, event frames / seconds / thirds, frames that resolve it."""
    centres = [(e.start + e.stop) / 2 for e in scene.events]
    lo = next(i for i, (a, b) in enumerate(BUCKETS_S) if scene.duration_s <= b or i == len(BUCKETS_S) - 1)
    return {
        "name": scene.name, "kind": scene.kind, "duration_s": scene.duration_s, "fps": scene.fps,
        "n_frames": scene.n_frames, "length_bucket": f"{BUCKETS_S[lo][0]:g}-{BUCKETS_S[lo][1]:g}s",
        "events": [{**asdict(e), "start_s": e.start / scene.fps, "end_s": e.stop / scene.fps,
                    "third": third((e.start + e.stop) / 2, scene.n_frames)} for e in scene.events],
        # the mean event centre; "first" means the event(s) happen in the first third of the clip
        "event_third": third(float(np.mean(centres)), scene.n_frames),
        "resolved_at_8": resolved(scene, 8), "frames_needed": frames_needed(scene),
        "main": asdict(scene.main),
    }


def questions(scene: LongScene, rng: np.random.Generator, extra: bool = False,
              templates: dict[str, list[str]] = EVAL_TEMPLATES) -> list[tuple[str, str, str]]:
    """(question, answer, type): the moving shape's three, then the event's (then, with `extra`, the EXTRA_TYPES);
    phrasing drawn at random from `templates` (the eval splits' by default; training passes TEMPLATES)."""
    main = scene.main
    answers = {"colour": main.colour, "shape": main.shape, "direction": main.direction}
    if scene.kind == "object":
        answers |= {"event_colour": scene.events[0].colour, "event_shape": scene.events[0].shape}
    elif scene.kind == "flash":
        answers["count"] = COUNT_WORDS[len(scene.events) - 1]
    else:
        answers["order"] = scene.events[0].shape
    if extra:
        answers["unknown"] = phrasings.UNKNOWN
    options = [str(s) for s in rng.permutation(sorted(s for s in synth.SHAPES if s != main.shape))]
    out = []
    for qtype in [t for t in QUESTION_TYPES + EXTRA_TYPES if t in answers]:
        template = templates[qtype][int(rng.integers(len(templates[qtype])))]
        out.append((template.format(a=options[0], b=options[1]), answers[qtype], qtype))
    return out


def make_split(split: str, n: int, seed: int = 0) -> list[LongScene]:
    return [make_scene(np.random.default_rng([seed, 10 + SPLIT_IDS[split], i]), f"long{split}_{i:05d}")
            for i in range(n)]


def val_scenes(n: int, seed: int = 0, train_n: int = 20000) -> list[LongScene]:
    taken = {s.key() for s in make_split("train", train_n, seed)}
    return [s for s in make_split("val", n, seed) if s.key() not in taken]


def test_scenes(n: int, seed: int = 0, train_n: int = 20000, val_n: int = 1000) -> list[LongScene]:
    taken = {s.key() for s in make_split("train", train_n, seed) + make_split("val", val_n, seed)}
    return [s for s in make_split("test", n, seed) if s.key() not in taken]


def question_rng(scene: LongScene, seed: int) -> np.random.Generator:
    split = scene.name[len("long"):].split("_")[0]
    return np.random.default_rng([seed, 99, SPLIT_IDS[split], int(scene.name.split("_")[-1])])


def write_eval_split(out: str | Path, scenes: list[LongScene], seed: int = 0, erase: bool = False) -> tuple[Path, int]:
    """videos/ + test_q.json + test_a.json (with type) + scenes.json (metadata); returns (dir, n questions).

    With `erase`, the videos show each clip without its events (`erased`); questions, answers and metadata are
    those of the original clips, so the two folders pair up question by question."""
    out = Path(out)
    per_clip = []
    for scene in scenes:
        shown = erased(scene) if erase else scene
        synth.write_mp4(render(shown), out / "videos" / f"{scene.name}.mp4", fps=scene.fps)
        per_clip.append((scene.name, questions(scene, question_rng(scene, seed))))
    return out, synth.write_qa_files(out, per_clip, [metadata(s) for s in scenes])


def write_samples(out: str | Path, indices: list[int], seed: int = 0) -> Path:
    """Clips `indices` of the samples split + questions.json = [{video, question, answer, type, ...metadata}]."""
    out = Path(out)
    scenes = make_split("samples", max(indices) + 1, seed)
    items = []
    for i in indices:
        scene = scenes[i]
        name = f"{scene.kind}_{scene.main.colour}_{scene.main.shape}_{scene.duration_s:g}s.mp4"
        synth.write_mp4(render(scene), out / name, fps=scene.fps)
        meta = {k: v for k, v in metadata(scene).items() if k != "main"}
        for q, a, qtype in questions(scene, question_rng(scene, seed)):
            items.append({"video": name, "question": q, "answer": a, "type": qtype, "clip": meta})
    (out / "questions.json").write_text(json.dumps(items, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=["train", "val", "test", "samples"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=120, help="clips (4-5 questions each)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pick", type=int, nargs="+", default=[0], help="samples: which clips of the split")
    p.add_argument("--erase", action="store_true", help="the same clips with their brief events erased")
    args = p.parse_args(argv)
    if args.split == "samples":
        print(write_samples(args.out, args.pick, args.seed))
        return 0
    pick = {"train": make_split, "val": val_scenes, "test": test_scenes}[args.split]
    scenes = pick("train", args.n, args.seed) if args.split == "train" else pick(args.n, args.seed)
    out, nq = write_eval_split(args.out, scenes, args.seed, erase=args.erase)
    print(f"{out}: {len(scenes)} clips, {nq} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
