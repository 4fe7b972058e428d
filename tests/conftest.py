"""Shared fixtures: tiny Video-LLaVA checkpoints built from config and saved like real ones."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

# transformers' logging handler holds the sys.stderr of the moment transformers is first imported. The CLI imports
# it lazily now, so without this the first import could happen inside a test capturing stderr, and a later
# test's warnings would go to that closed capture ("--- Logging error ---") instead of the real stderr.
import transformers  # noqa: F401, E402

from videoqa.tiny import TinySpec, make_tiny_model

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CLIPS = sorted((REPO / "samples" / "clips").glob("*.mp4"))

# Tests that take seconds each (a Ray cluster, a browser, a wheel build, fresh processes, long decodes; measured
# with `--durations` on a 2-core machine), marked `slow` here in one list rather than in each file:
# `make test-fast` leaves them out, `make test` (what CI runs) runs everything.
SLOW_FILES = {"test_ray.py", "test_ray_paths.py", "test_ray_auth.py", "test_browser.py", "test_browser_chat.py",
              "test_browser_layout.py", "test_wheel.py"}
SLOW_TESTS = {  # test functions, every parametrization
    "test_answer_cap_larger_than_the_context_is_capped_by_it",
    "test_bench_command_prints_tables",
    "test_compiled_step_is_one_graph",
    "test_console_script_exit_code",
    "test_eval_and_report_commands_with_a_tiny_model",
    "test_full_queue_says_busy_and_uploads_are_limited",
    "test_gpu_check_dry_run",
    "test_hub_id_behind_a_dead_proxy_fails_after_one_attempt",
    "test_kill_mid_run_then_resume_gives_the_uninterrupted_records",
    "test_long_model_answers_the_sample_long_clips_at_24_frames",
    "test_one_writer_per_results_file",
    "test_readme_python_example_runs",
    "test_serve_command_end_to_end",
    "test_static_decode_gives_the_eager_tokens",
    "test_static_decode_stops_on_any_eos_id",
    "test_static_steps_equal_eager_steps",
    "test_static_steps_equal_eager_steps_with_eager_attention",
    "test_the_synthetic_set_is_videomme_with_uniform_letters",
    "test_the_fine_tune_sequences_ask_as_eval_asks_and_teach_the_letter",
}


def free_port() -> int:
    """A TCP port nothing listens on now (servers and Ray heads the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_FILES or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


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
