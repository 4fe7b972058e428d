"""Synthetic video QA data for the demo model: one coloured shape crossing a textured background.

Every clip is drawn from a seeded scene description (colour, shape, direction, path, background), so the
train and held-out splits are reproducible and disjoint (different seed streams, and the test split
drops any scene whose discrete attributes *and* rounded path also occur in train - in practice none).
Questions come from templates with one-word answers: colour, shape and direction of motion. Direction
needs more than one frame: the shape travels over half the frame or more, and its start point is
random, so no single frame tells which way it goes.

Write the held-out split in the Video-LLaVA eval layout (test_q.json, test_a.json, videos/):

    python -m videoqa.synth.short --split test --out /tmp/demo-test

and a few sample clips with a questions.json:

    python -m videoqa.synth.short --split samples --out samples/clips
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageDraw

from . import held_out, phrasings

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (50, 80, 235),
    "yellow": (240, 220, 40),
    "purple": (150, 50, 200),
    "orange": (250, 140, 20),
}
SHAPES = ["circle", "square", "triangle"]
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
QUESTION_TYPES = ["colour", "shape", "direction"]

# Questions about the moving shape that every eval split asks; the demo models are also trained on EXTRA_TYPES.
EXTRA_TYPES = ["exists", "how_many", "unknown"]
ALL_TYPES = QUESTION_TYPES + EXTRA_TYPES
# Phrasings per type (phrasings.py says what the extra types answer); "{colour}"/"{shape}" are filled with the
# clip's own attributes, "{a}" with the shape an `exists` question names. HELD_OUT_TEMPLATES are never trained on.
TEMPLATES: dict[str, list[str]] = phrasings.SHORT
HELD_OUT_TEMPLATES: dict[str, list[str]] = held_out.SHORT_HELD_OUT
# The eval splits' phrasings: the first three of each type, the forms the shipped weights were first trained on, so a
# split (and every figure measured on one) asks the same questions whatever phrasings training adds.
EVAL_TEMPLATES: dict[str, list[str]] = {qtype: forms[:3] for qtype, forms in TEMPLATES.items()}
# What the shipped `demo` weights were trained on (the web chat's guess rule reads it): every phrasing of the eval
# types. The EXTRA_TYPES are not in its recipe (docs/demo-models.md): asked those, it guesses, and says so.
SHIPPED_TEMPLATES: dict[str, list[str]] = {qtype: TEMPLATES[qtype] for qtype in QUESTION_TYPES}
UNKNOWN, YES_NO, HOW_MANY = phrasings.UNKNOWN, phrasings.YES_NO, phrasings.HOW_MANY

SPLIT_IDS = {"train": 0, "test": 1, "samples": 2}
CLIP_FRAMES = 16  # the model sees 8 of them (np.linspace sampling)
CLIP_SIZE = 128  # pixels; the processor resizes to the model's 64
FPS = 8


@dataclass
class Scene:
    """Everything needed to render one clip; positions are in pixels of a CLIP_SIZE frame."""

    name: str
    colour: str
    shape: str
    direction: str
    radius: float
    start: tuple[float, float]
    end: tuple[float, float]
    bg_level: tuple[int, int, int]
    bg_waves: list[tuple[float, float, float, float]]  # (fx, fy, phase, amplitude) of soft gratings
    noise_seed: int

    def key(self) -> tuple:
        """Identity used to keep the splits disjoint."""
        return (self.colour, self.shape, self.direction, *(round(v) for v in (*self.start, *self.end)))


def make_scene(rng: np.random.Generator, name: str, size: int = CLIP_SIZE) -> Scene:
    colour = str(rng.choice(list(COLOURS)))
    shape = str(rng.choice(SHAPES))
    direction = str(rng.choice(list(DIRECTIONS)))
    radius = float(rng.uniform(0.18, 0.24) * size)
    # The centre may come within 0.6 radius of the border (the shape is at most ~20% cut off), so a big
    # shape still has room to travel 55-85% of the free range: large steps between sampled frames.
    lo, hi = 0.6 * radius, size - 0.6 * radius
    travel = float(rng.uniform(0.55, 0.85) * (hi - lo))
    a0 = float(rng.uniform(lo, hi - travel))
    along = (a0, a0 + travel)
    dx, dy = DIRECTIONS[direction]
    if dx + dy < 0:  # left / up: run the path backwards
        along = (along[1], along[0])
    across = float(rng.uniform(radius + 2, size - radius - 2))  # fully inside across the path
    if dx:
        start, end = (along[0], across), (along[1], across)
    else:
        start, end = (across, along[0]), (across, along[1])
    level = int(rng.integers(70, 150))
    tint = rng.integers(-12, 13, size=3)
    bg_level = tuple(int(np.clip(level + t, 0, 255)) for t in tint)
    waves = [
        (float(rng.uniform(-0.08, 0.08)), float(rng.uniform(-0.08, 0.08)), float(rng.uniform(0, 6.3)),
         float(rng.uniform(4, 10)))
        for _ in range(2)
    ]
    noise_seed = int(rng.integers(2**31))
    return Scene(name, colour, shape, direction, radius, start, end, bg_level, waves, noise_seed)


def background(scene: Scene, size: int = CLIP_SIZE) -> np.ndarray:
    """A static, low-contrast texture: tinted grey + two soft gratings + fine noise."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    img = np.zeros((size, size, 3), np.float32) + np.array(scene.bg_level, np.float32)
    for fx, fy, ph, amp in scene.bg_waves:
        img += (amp * np.sin(2 * np.pi * (fx * xx + fy * yy) / 4 + ph))[..., None]
    img += np.random.default_rng(scene.noise_seed).normal(0, 4, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def render(scene: Scene, n_frames: int = CLIP_FRAMES, size: int = CLIP_SIZE) -> np.ndarray:
    """Frames (n_frames, size, size, 3) uint8 RGB; the shape moves linearly from start to end."""
    bg = Image.fromarray(background(scene, size))
    frames = []
    for t in np.linspace(0.0, 1.0, n_frames):
        cx = scene.start[0] + t * (scene.end[0] - scene.start[0])
        cy = scene.start[1] + t * (scene.end[1] - scene.start[1])
        r = scene.radius
        img = bg.copy()
        draw_shape(ImageDraw.Draw(img), scene.shape, cx, cy, r, COLOURS[scene.colour])
        frames.append(np.asarray(img))
    return np.stack(frames)


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
               fill: tuple[int, int, int]) -> None:
    """A circle, square or triangle of 'radius' r centred at (cx, cy)."""
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        s = r * 0.85
        draw.rectangle([cx - s, cy - s, cx + s, cy + s], fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=fill)


def write_mp4(frames: np.ndarray, path: str | Path, fps: int = FPS) -> Path:
    """H.264 mp4 (yuv420p) with PyAV, the format users give the model."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        # x264 with one thread encodes other bytes than with several (any number alike): pinned, a clip is the
        # same on a one-CPU container, a trainer pinned to a core and a 16-core workstation
        stream.options = {"crf": "18", "threads": "2"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def read_frames(path: str | Path, num_frames: int = 8) -> np.ndarray:
    """Decode `num_frames` frames exactly as the pipeline does (videoqa.video when it exists)."""
    try:
        from videoqa.video import sample_frames
    except ImportError:
        sample_frames = None
    if sample_frames is not None:
        return sample_frames(path, num_frames).frames
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    idx = np.linspace(0, len(decoded) - 1, num_frames).astype(int)
    return np.stack([decoded[i] for i in idx])


def questions(scene: Scene, rng: np.random.Generator, types: list[str] = QUESTION_TYPES,
              templates: dict[str, list[str]] = EVAL_TEMPLATES) -> list[tuple[str, str, str]]:
    """One (question, answer, type) per question type in `types`, phrasing drawn at random from `templates` (the
    eval splits' by default; training passes TEMPLATES)."""
    out = []
    for qtype in types:
        template = templates[qtype][int(rng.integers(len(templates[qtype])))]
        named = scene.shape
        if qtype == "exists" and rng.random() < 0.5:  # half the time a shape the clip does not show
            named = str(rng.choice([s for s in SHAPES if s != scene.shape]))
        answer = {"exists": YES_NO[named != scene.shape], "how_many": HOW_MANY, "unknown": UNKNOWN}.get(qtype)
        q = template.format(colour=scene.colour, shape=scene.shape, a=named)
        out.append((q, answer or getattr(scene, qtype), qtype))
    return out


def corpus() -> list[str]:
    """Text the demo tokenizer is trained on, so prompts and answers are a few tokens each. Only the first three
    phrasings of each type, as when the shipped tokenizer was made (a run from scratch makes the same one); the
    byte-level tokenizer encodes every later phrasing, in more pieces."""
    lines = []
    for qtype in QUESTION_TYPES:
        for t in TEMPLATES[qtype][:3]:
            for c in COLOURS:
                for s in SHAPES:
                    lines.append(f"USER: <video>\n{t.format(colour=c, shape=s)} ASSISTANT:")
    answers = list(COLOURS) + SHAPES + list(DIRECTIONS)
    lines += [f"ASSISTANT: {a}" for a in answers] * 20
    return lines


def make_split(split: str, n: int, seed: int = 0) -> list[Scene]:
    """`n` scenes of `split`; each from its own seed stream (seed, split, index)."""
    scenes = []
    for i in range(n):
        rng = np.random.default_rng([seed, SPLIT_IDS[split], i])
        scenes.append(make_scene(rng, f"{split}_{i:05d}"))
    return scenes


def write_eval_split(out: str | Path, scenes: list[Scene], seed: int = 0) -> tuple[Path, int]:
    """Write videos/ + test_q.json + test_a.json (Video-LLaVA/MSVD layout); returns (dir, n questions)."""
    out = Path(out)
    per_clip = []
    for scene in scenes:
        write_mp4(render(scene), out / "videos" / f"{scene.name}.mp4")
        rng = np.random.default_rng([seed, 99, int(scene.name.split("_")[-1])])
        per_clip.append((scene.name, questions(scene, rng)))
    return out, write_qa_files(out, per_clip, [asdict(s) for s in scenes])


def write_qa_files(out: Path, per_clip: list[tuple[str, list[tuple[str, str, str]]]], scenes_meta: list[dict]) -> int:
    """test_q.json + test_a.json (the MSVD layout, answers with their type) + scenes.json, from each clip's name and
    (question, answer, type) list; returns the number of questions."""
    qs, ans = [], []
    for name, items in per_clip:
        for j, (q, a, qtype) in enumerate(items):
            qid = f"{name}_{j}"
            qs.append({"video_name": name, "question": q, "question_id": qid})
            ans.append({"answer": a, "type": qtype, "question_id": qid})
    (out / "test_q.json").write_text(json.dumps(qs, indent=1))
    (out / "test_a.json").write_text(json.dumps(ans, indent=1))
    (out / "scenes.json").write_text(json.dumps(scenes_meta, indent=1))
    return len(qs)


def test_scenes(n: int, seed: int = 0, train_n: int = 20000) -> list[Scene]:
    """Held-out scenes, minus any that coincide with one of the first `train_n` training scenes."""
    train_keys = {s.key() for s in make_split("train", train_n, seed)}
    return [s for s in make_split("test", n, seed) if s.key() not in train_keys]


def write_samples(out: str | Path, seed: int = 0) -> Path:
    """A few sample clips (one per direction) with questions.json = [{video, question, answer, type}]."""
    out = Path(out)
    picked: dict[str, Scene] = {}
    for scene in make_split("samples", 200, seed):
        picked.setdefault(scene.direction, scene)
        if len(picked) == len(DIRECTIONS):
            break
    items = []
    for d, scene in picked.items():
        name = f"{scene.colour}_{scene.shape}_{d}.mp4"
        write_mp4(render(scene), out / name)
        rng = np.random.default_rng([seed, 98, len(items)])
        for q, a, qtype in questions(scene, rng):
            items.append({"video": name, "question": q, "answer": a, "type": qtype})
    (out / "questions.json").write_text(json.dumps(items, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=["test", "samples"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=200, help="test clips (3 questions each)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.split == "samples":
        print(write_samples(args.out, args.seed))
    else:
        out, nq = write_eval_split(args.out, test_scenes(args.n, args.seed), args.seed)
        print(f"{out}: {nq} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
