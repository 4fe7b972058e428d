"""Shared fixtures: tiny Video-LLaVA checkpoints built from config and saved like real ones."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import torch

# transformers' logging handler holds the sys.stderr of the moment transformers is first imported. The CLI imports
# it lazily now, so without this the first import could happen inside a test capturing stderr, and a later
# test's warnings would go to that closed capture ("--- Logging error ---") instead of the real stderr.
import transformers  # noqa: F401, E402

from videoqa.models.tiny import TinySpec, make_tiny_model

# Under pytest-xdist (`make test` runs `-n 2`) each worker gets one thread: two workers on two cores would
# otherwise each start two and fight over them. The variable reaches the subprocesses the tests start too.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config) -> None:
    # Gradio keeps uploads in one folder per machine (/tmp/gradio), named by their content, and an app deletes
    # the files it cached when it closes: two servers of two xdist workers (or another run on this machine)
    # uploading the same generated clip shared one file, and the first to close took it from the other
    # ("file not found"). Gradio reads the variable once, when imported: test modules import it later.
    folder = tempfile.mkdtemp(prefix="videoqa-tests-gradio-")
    os.environ["GRADIO_TEMP_DIR"] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))

SAMPLE_CLIPS = sorted((REPO / "samples" / "clips").glob("*.mp4"))

# Tests that take seconds each (a Ray cluster, a browser, a wheel build, fresh processes, long decodes; measured
# with `--durations` on a 2-core machine) carry `pytest.mark.slow` in their own file (`pytestmark` for a whole
# file): `make test-fast` leaves them out, `make test` (what CI runs) runs everything.


def free_port() -> int:
    """A TCP port nothing listens on now (servers and Ray heads the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Llama-based Video-LLaVA (8 frames x 65 visual tokens), saved with save_pretrained."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), TinySpec(family="llama"))


@pytest.fixture(scope="session")
def short_context_qa(tmp_path_factory):
    """Like tiny_qa with a 1024-token context: 8 frames (520 visual tokens) leave room for ~20 chat turns."""
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    path = make_tiny_model(tmp_path_factory.mktemp("tiny-short"), TinySpec(family="llama", context=1024))
    return VideoQA.from_pretrained(str(path), prune=PruneConfig(method="fastv", k=2, r=0.5), max_new_tokens=8)


@pytest.fixture(scope="session")
def tiny_qa(tiny_model_dir):
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    return VideoQA.from_pretrained(str(tiny_model_dir), prune=PruneConfig(method="fastv", k=2, r=0.5),
                                   max_new_tokens=8)
