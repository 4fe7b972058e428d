"""Shared fixtures: tiny Video-LLaVA checkpoints built from config and saved like real ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from videoqa.tiny import TinySpec, make_tiny_model

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CLIPS = sorted((REPO / "samples" / "clips").glob("*.mp4"))
@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Llama-based Video-LLaVA (8 frames x 65 visual tokens), saved with save_pretrained."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), TinySpec(family="llama"))


@pytest.fixture(scope="session")
def tiny_qa(tiny_model_dir):
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    return VideoQA.from_pretrained(str(tiny_model_dir), prune=PruneConfig(method="fastv", k=2, r=0.5),
                                   max_new_tokens=8)
