"""Shared fixtures: tiny Video-LLaVA checkpoints built from config and saved like real ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from videoqa.tiny import TinySpec, make_tiny_model

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CLIPS = sorted((REPO / "samples" / "clips").glob("*.mp4"))
# Real-world clips some checkouts have next to the repository. They only add test cases: every test also
# runs on clips generated here or shipped in samples/.
SHARED_MEDIA = REPO.parent / "shared" / "media"


def shared_media(*names: str) -> list[Path]:
    """The named files of ../shared/media that exist (none on a plain clone)."""
    return [SHARED_MEDIA / n for n in names if (SHARED_MEDIA / n).is_file()]


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
