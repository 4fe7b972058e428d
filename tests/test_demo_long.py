"""The shipped long-clip demo model (`--model demo-long`): real classes, a 2048-token context, and answers on
long sample clips at more frames than the 1024-token demo model can take."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from videoqa.model import packaged_path
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig

CLIPS = REPO / "samples" / "clips_long"
FRAMES = 24  # 24 x 65 visual tokens: beyond the demo model's context (13 frames at most)


@pytest.fixture(scope="module")
def demo_long():
    return VideoQA.from_pretrained("demo-long", max_new_tokens=4)


def test_long_model_is_the_real_architecture_within_size():
    folder = packaged_path("demo-long-model")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["VideoLlavaForConditionalGeneration"]
    assert cfg["text_config"]["max_position_embeddings"] >= 2048
    assert (folder / "model.safetensors").stat().st_size <= 16 * 2**20


def test_long_model_answers_the_sample_long_clips_at_24_frames(demo_long):
    items = json.loads((CLIPS / "questions.json").read_text())
    assert all(q["clip"]["duration_s"] > 30 for q in items)
    for video in sorted({q["video"] for q in items}):
        qs = [q for q in items if q["video"] == video]
        answers = demo_long.ask_batch([(CLIPS / video, q["question"]) for q in qs],
                                      prune=PruneConfig(method="none"), frames=FRAMES)
        assert [a.text.strip(" .").lower() for a in answers] == [q["answer"] for q in qs], video
        assert all(a.stats.frames == FRAMES and a.stats.distinct_frames == FRAMES for a in answers)
