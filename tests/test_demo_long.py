"""The shipped long-clip demo model (`--model demo-long`): real classes, a context that holds many more frames
than the demo model's, and answers on long sample clips at 24 frames, brief events included."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from videoqa.model import packaged_path
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig

CLIPS = REPO / "samples" / "clips_long"
FRAMES = 24  # uniform: every event of a <= 60 s clip is on a sampled frame (videoqa/synth/long.py)


@pytest.fixture(scope="module")
def demo_long():
    return VideoQA.from_pretrained("demo-long", max_new_tokens=4)


def frames_that_fit(folder) -> int:
    """Unpruned frames whose visual tokens fit the context with 32 tokens of text (as the trainer counts)."""
    cfg = json.loads((folder / "config.json").read_text())
    v = cfg["vision_config"]
    per_frame = (v["image_size"] // v["patch_size"]) ** 2 + 1  # patches + [CLS]
    return (cfg["text_config"]["max_position_embeddings"] - 32) // per_frame


def test_long_model_is_the_real_architecture_within_size():
    folder = packaged_path("demo-long-model")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["VideoLlavaForConditionalGeneration"]
    # 48 frames or more: a 60 s clip at one frame per 1.25 s, where the demo model holds 15
    assert frames_that_fit(folder) >= 48 and frames_that_fit(packaged_path("demo-model")) < 16
    assert (folder / "model.safetensors").stat().st_size <= 16 * 2**20


@pytest.mark.slow
def test_long_model_answers_the_sample_long_clips_at_24_frames(demo_long):
    items = json.loads((CLIPS / "questions.json").read_text())
    assert all(q["clip"]["duration_s"] > 30 for q in items)
    assert len({q["type"] for q in items} & {"event_colour", "event_shape", "count", "order"}) >= 2  # brief events
    for video in sorted({q["video"] for q in items}):
        qs = [q for q in items if q["video"] == video]
        answers = demo_long.ask_batch([(CLIPS / video, q["question"]) for q in qs],
                                      prune=PruneConfig(method="none"), frames=FRAMES, sampler="uniform")
        assert [a.text.strip(" .").lower() for a in answers] == [q["answer"] for q in qs], video
        assert all(a.stats.frames == FRAMES and a.stats.distinct_frames == FRAMES for a in answers)
