"""Paths on a Ray cluster mean what they mean where the user typed them.

The cluster here is started in a folder of its own (its workers' working directory) that holds a different
clip under the same relative name as the user's; relative clips, --questions, --model, --root and --out must
still name the user's files: the same records as the local back end, never an answer about the cluster's
clip. A clip the driver cannot read is refused before Ray is contacted; a worker that finds another file at
a clip's path writes an error record saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.clipgen import write_clip
from helpers.ray_cluster import Cluster
from test_eval import make_dataset

from videoqa.batch.ray_backend import _decode_row, _QAActor
from videoqa.batch.shipped import fingerprint, shipped_rows
from videoqa.batch.store import latest_by_key, read_records
from videoqa.batch.worklist import WorkItem
from videoqa.cli import main as cli_main

pytestmark = pytest.mark.slow  # seconds each: `make test-fast` leaves them out

QUESTION = "What is shown?"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The user's folder: a model, two clips, a questions file and a dataset, all named relatively."""
    from videoqa.models.tiny import make_tiny_model

    work = tmp_path_factory.mktemp("work")
    make_tiny_model(work / "model")
    (work / "clips").mkdir()
    write_clip(work / "clips" / "a.mp4", n_frames=12)
    write_clip(work / "clips" / "b.mp4", n_frames=16)  # only here: the cluster's folder has no clips/b.mp4
    (work / "questions.txt").write_text(QUESTION + "\n")
    make_dataset(work / "data")
    return work


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, work):
    ray = pytest.importorskip("ray")
    home = tmp_path_factory.mktemp("cluster-home")
    (home / "clips").mkdir()
    write_clip(home / "clips" / "a.mp4", n_frames=40, size=(48, 64))  # same relative name, another clip
    c = Cluster(num_cpus=2, cwd=str(home))
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.stop()


def on_one_thread(fn):
    """Run `fn` on one torch thread, as a Ray actor does (bit-identical arithmetic)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def assert_same_answers(got: dict, want: dict) -> None:
    assert set(got) == set(want) and want
    for key, w in want.items():
        g = got[key]
        assert (g["backend"], w["backend"]) == ("ray", "local")
        assert (g["video"], g["answer"], g["error"]) == (w["video"], w["answer"], w["error"]), key
        if w["error"] is None:
            assert (g["frames"]["indices"], g["kept"]) == (w["frames"]["indices"], w["kept"]), key


def test_batch_with_relative_paths_answers_about_the_users_clips(cluster, work, monkeypatch):
    """clips/a.mp4 is another clip in the cluster's folder, clips/b.mp4 is not there at all."""
    monkeypatch.chdir(work)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    args = ["batch", "clips", "--questions", "questions.txt", "--model", str(work / "model"), "--r", "0.5",
            "--max-new-tokens", "6", "--no-progress"]
    assert on_one_thread(lambda: cli_main([*args, "--out", "local.jsonl"])) == 0
    assert cli_main([*args, "--out", "ray.jsonl", "--backend", "ray", "--timeout", "60"]) == 0
    want, got = (latest_by_key(read_records(work / f"{name}.jsonl")) for name in ("local", "ray"))
    assert {r["video"] for r in want.values()} == {"clips/a.mp4", "clips/b.mp4"}
    assert all(r["error"] is None for r in want.values())
    assert_same_answers(got, want)


def test_eval_with_a_relative_root_and_out(cluster, work, monkeypatch, capsys):
    """R=auto: the actor decodes the clip itself, after checking it is the driver's file."""
    monkeypatch.chdir(work)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    args = ["eval", "--dataset", "msvd", "--root", "data", "--model", str(work / "model"), "--max-new-tokens", "4",
            "--no-progress"]
    assert on_one_thread(lambda: cli_main([*args, "--out", "eval-local"])) == 0
    assert cli_main([*args, "--out", "eval-ray", "--backend", "ray", "--timeout", "60"]) == 0
    want, got = (latest_by_key(read_records(work / run / "predictions.jsonl")) for run in ("eval-local", "eval-ray"))
    assert sum(r["error"] is None for r in want.values()) == 6  # vid4 is not a video, vid3 is missing
    assert_same_answers(got, want)
    results = [json.loads((work / run / "results.json").read_text()) for run in ("eval-local", "eval-ray")]
    assert results[0]["judged"] == results[1]["judged"] == 6


def test_a_relative_model_folder_is_the_users(cluster, work, monkeypatch):
    monkeypatch.chdir(work)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    args = ["batch", "clips/b.mp4", "--question", QUESTION, "--model", "model", "--r", "0.5", "--max-new-tokens",
            "6", "--no-progress"]
    assert on_one_thread(lambda: cli_main([*args, "--out", "model-local.jsonl"])) == 0
    assert cli_main([*args, "--out", "model-ray.jsonl", "--backend", "ray", "--timeout", "60"]) == 0
    want, got = (latest_by_key(read_records(work / f"model-{name}.jsonl")) for name in ("local", "ray"))
    assert_same_answers(got, want)


def test_a_clip_unreadable_here_is_refused_before_ray_is_contacted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_clip(tmp_path / "a.mp4", n_frames=8)
    (tmp_path / "list.txt").write_text("a.mp4\nnot-here.mp4\n")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens: joining would be the error
    code = cli_main(["batch", "list.txt", "--question", QUESTION, "--model", "/nonexistent/model", "--backend",
                     "ray", "--out", "res.jsonl", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("videoqa: error: not-here.mp4: No such file or directory; the Ray back end sends")
    assert not (tmp_path / "res.jsonl").exists() or not read_records(tmp_path / "res.jsonl")


def test_a_model_folder_missing_here_is_refused_before_ray_is_contacted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_clip(tmp_path / "a.mp4", n_frames=8)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens: joining would be the error
    code = cli_main(["batch", "a.mp4", "--question", QUESTION, "--model", "./models/mine", "--backend", "ray",
                     "--out", "res.jsonl", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "videoqa: error: cannot load model './models/mine': no such folder", err


def test_workers_refuse_a_different_or_missing_file_at_the_path(tmp_path):
    """What a worker does when the cluster does not see the driver's files: the CPU stage (fixed frame
    count) and the actor (R=auto) both check the fingerprint and give an error record naming the path."""
    import numpy as np

    clip = write_clip(tmp_path / "a.mp4", n_frames=8)
    item = WorkItem(key="k", video="a.mp4", question=QUESTION)
    (row,) = shipped_rows([WorkItem(key="k", video=str(clip), question=QUESTION)])
    row = {**row, "item": json.dumps(item.__dict__)}
    assert row["path"] == str(clip) and row["fingerprint"] == fingerprint(clip)
    assert _decode_row(row, frames=8, timeout_s=30)["error"] == ""

    write_clip(clip, n_frames=20)  # the file at that path is another clip now
    decoded = _decode_row(row, frames=8, timeout_s=30)
    assert decoded["clip"] == b"" and decoded["error"].startswith("VideoError: a.mp4: on the Ray worker (")
    assert f"{clip} is another file than where videoqa runs" in decoded["error"]
    clip.unlink()
    assert f"{clip} cannot be read (No such file" in _decode_row(row, frames=8, timeout_s=30)["error"]

    class NeverAsked:  # the actor must not reach the model for a file that is not the driver's
        def frames_to_sample(self, question, duration_s):
            raise AssertionError("asked")

    actor = _QAActor.__new__(_QAActor)
    actor.qa, actor.timeout_s, actor.load_s, actor.batch_size = NeverAsked(), 30, None, 1
    batch = {key: np.array([value], dtype=object) for key, value in
             {**row, "clip": b"", "error": "", "duration": 1.0}.items()}
    (rec,) = [json.loads(r) for r in actor(batch)["record"]]
    assert (rec["key"], rec["video"], rec["answer"]) == ("k", "a.mp4", None)
    assert rec["error"].startswith("VideoError: a.mp4: on the Ray worker (")
    assert f"{clip} cannot be read (No such file" in rec["error"]
