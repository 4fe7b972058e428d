"""The synthetic data generator and the shipped demo model (samples/demo-model) trained on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from videoqa.synth import short as synth

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
DEMO = SAMPLES / "demo-model"


def shape_centre(frame: np.ndarray, colour: str) -> np.ndarray:
    """Centroid (x, y) of the pixels close to the shape's colour - independent of the renderer's maths."""
    dist = np.abs(frame.astype(int) - np.array(synth.COLOURS[colour])).sum(-1)
    ys, xs = np.nonzero(dist < 90)
    assert len(xs) > 20, "shape not found in frame"
    return np.array([xs.mean(), ys.mean()])


def test_eval_split_layout_and_motion(tmp_path):
    scenes = synth.test_scenes(4, seed=0, train_n=500)
    out, nq = synth.write_eval_split(tmp_path, scenes)
    qs = json.loads((out / "test_q.json").read_text())
    ans = json.loads((out / "test_a.json").read_text())
    assert nq == len(qs) == len(ans) == 3 * len(scenes)
    assert [q["question_id"] for q in qs] == [a["question_id"] for a in ans]
    assert {a["type"] for a in ans} == {"colour", "shape", "direction"}
    for scene in scenes:
        frames = synth.read_frames(out / "videos" / f"{scene.name}.mp4", 8)
        assert frames.shape == (8, synth.CLIP_SIZE, synth.CLIP_SIZE, 3)
        move = shape_centre(frames[-1], scene.colour) - shape_centre(frames[0], scene.colour)
        # The decoded pixels move the way the answer says, by a good part of the frame.
        want = np.array(synth.DIRECTIONS[scene.direction])
        assert move @ want > 0.3 * synth.CLIP_SIZE
        assert abs(move @ want[::-1]) < 3
        a = {x["type"]: x["answer"] for x in ans if x["question_id"].startswith(scene.name)}
        assert a == {"colour": scene.colour, "shape": scene.shape, "direction": scene.direction}


def test_splits_are_disjoint_and_seeded():
    train = synth.make_split("train", 300)
    assert [s.key() for s in synth.make_split("train", 300)] == [s.key() for s in train]
    test_keys = {s.key() for s in synth.test_scenes(100, train_n=300)}
    assert not test_keys & {s.key() for s in train}
    # All answers occur in both splits.
    for attr in ("colour", "shape", "direction"):
        assert {getattr(s, attr) for s in train} == {getattr(s, attr) for s in synth.make_split("test", 300)}


needs_model = pytest.mark.skipif(not (DEMO / "config.json").exists(), reason="samples/demo-model not built")


@pytest.fixture(scope="module")
def demo():
    from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

    torch.set_num_threads(2)
    model = VideoLlavaForConditionalGeneration.from_pretrained(DEMO).eval()
    return model, VideoLlavaProcessor.from_pretrained(DEMO)


def ask(model, processor, frames: list[np.ndarray], questions: list[str]) -> list[str]:
    inputs = processor(
        text=[f"USER: <video>\n{q} ASSISTANT:" for q in questions],
        videos=[list(f) for f in frames],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    return [
        t.strip().lower()
        for t in processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    ]


@needs_model
def test_demo_model_size_and_layout(demo):
    model, processor = demo
    size = sum(f.stat().st_size for f in DEMO.iterdir())
    assert size <= 16 * 2**20
    assert model.config.video_seq_length >= 512
    frames = [np.zeros((8, 64, 64, 3), np.uint8)]
    inputs = processor(text=["USER: <video>\nhi ASSISTANT:"], videos=[list(frames[0])], return_tensors="pt")
    assert inputs["pixel_values_videos"].shape[1] == 8
    assert int((inputs["input_ids"] == model.config.video_token_index).sum()) >= 512


@needs_model
def test_demo_model_answers_heldout_colour_and_direction(demo, tmp_path):
    model, processor = demo
    scenes = synth.test_scenes(8, seed=0, train_n=500)
    frames, questions, answers = [], [], []
    for scene in scenes:
        path = synth.write_mp4(synth.render(scene), tmp_path / f"{scene.name}.mp4")
        f = synth.read_frames(path, 8)
        frames += [f, f]
        questions += ["What colour is the shape?", "In which direction is the shape moving?"]
        answers += [scene.colour, scene.direction]
    got = ask(model, processor, frames, questions)
    colour_ok = [g == a for g, a, q in zip(got, answers, questions, strict=True) if "colour" in q]
    dir_ok = [g == a for g, a, q in zip(got, answers, questions, strict=True) if "direction" in q]
    assert all(colour_ok), list(zip(got, answers, strict=True))
    assert sum(dir_ok) >= 7, list(zip(got, answers, strict=True))


@needs_model
def test_demo_model_answers_sample_clips(demo):
    items = json.loads((SAMPLES / "clips" / "questions.json").read_text())
    frames = [synth.read_frames(SAMPLES / "clips" / it["video"], 8) for it in items]
    got = ask(demo[0], demo[1], frames, [it["question"] for it in items])
    assert got == [it["answer"] for it in items]
