"""`--backend ray` on a real Ray cluster started by the tests (`ray start --head`, 2 CPUs), joined the documented
ways (RAY_ADDRESS=HOST:PORT and ray://HOST:PORT): the same records as the local engine, nothing lost or
duplicated when an actor is killed, and one clear line when the cluster cannot be joined."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from helpers.clipgen import write_clip, write_text
from helpers.ray_cluster import Cluster

from videoqa.batch.local import local_backend
from videoqa.batch.ray_backend import RayOptions, _QAActor, ray_backend
from videoqa.batch.run import run_batch
from videoqa.batch.store import latest_by_key, read_records
from videoqa.batch.worklist import WorkItem, collect_work
from videoqa.errors import InputError

pytestmark = pytest.mark.slow  # seconds each: `make test-fast` leaves them out

ray = pytest.importorskip("ray")

QUESTION = "What is shown?"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(num_cpus=2)
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from videoqa.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("ray")
    model = make_tiny_model(root / "model")
    clips = root / "clips"
    clips.mkdir()
    write_clip(clips / "a.mp4", n_frames=12)
    write_clip(clips / "c.gif", n_frames=9, fmt="gif")
    write_text(clips / "d_broken.mp4")
    return root, model, collect_work([clips], [QUESTION])


def spec(model, r) -> dict:
    return {"model": str(model), "device": "cpu", "dtype": None, "attn_implementation": "sdpa",
            "prune": {"method": "fastv", "k": 2, "r": r, "rank_by": "last", "seed": 0, "keep_positions": False},
            "frames": None, "max_new_tokens": 6, "prompt": "plain"}


def local_reference(root, items, model_spec, name: str = "local"):
    """The local engine's records, on one torch thread like a Ray actor (bit-identical arithmetic)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_batch(items, root / f"{name}-{model_spec['prune']['r']}.jsonl", local_backend(model_spec), progress=False)
    finally:
        torch.set_num_threads(threads)
    return latest_by_key(read_records(root / f"{name}-{model_spec['prune']['r']}.jsonl"))


def assert_same_records(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        assert (g["backend"], w["backend"]) == ("ray", "local")
        assert (g["answer"], g["error"]) == (w["answer"], w["error"]), key
        if w["error"] is None:
            assert g["kept"] == w["kept"], key
            if w["decision"]:  # the same choice; the memory it saw differs between processes
                assert {**g["decision"], "memory": None} == {**w["decision"], "memory": None}, key
            assert g["frames"]["indices"] == w["frames"]["indices"], key
        else:
            assert "d_broken.mp4" in key and "not a video" in g["error"]


def test_two_actors_on_a_two_cpu_cluster_match_the_local_engine(cluster, setup, monkeypatch):
    """RAY_ADDRESS=HOST:PORT; R=auto, so the actors choose the frame count and decode (under the timeout)
    themselves; --batch-size 2 answers two questions per batch."""
    root, model, items = setup
    model_spec = spec(model, "auto")
    want = local_reference(root, items, model_spec)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    out = root / "ray-auto.jsonl"
    summary = run_batch(items, out, ray_backend(model_spec, RayOptions(actors=2, batch_size=2, timeout_s=60)),
                        progress=False)
    print(summary.line())
    assert (summary.ran, summary.ok, summary.errors) == (3, 2, 1)
    assert [name for name, _ in summary.phases] == ["cluster connect", "model load", "processing"]
    got = read_records(out)
    assert len(got) == len({r["key"] for r in got}) == 3
    assert_same_records(latest_by_key(got), want)
    assert all(r["decision"] for r in got if not r["error"])  # R=auto decided per clip
    ray.shutdown()


def test_an_actor_killed_mid_run_loses_and_duplicates_nothing(cluster, setup):
    """Through Ray Client (ray://), one actor: after the first record its process is killed; Ray restarts
    it and the run completes with each record exactly once, equal to the local engine's."""
    root, model, items = setup
    model_spec = spec(model, 0.5)
    want = local_reference(root, items, model_spec)
    produce = ray_backend(model_spec, RayOptions(actors=1, timeout_s=60, address=cluster.client_address))
    killed: list[int] = []

    def kill_after_first(todo):
        for i, rec in enumerate(produce(todo)):
            if i == 0:
                (pid,) = cluster.pids("MapWorker(MapBatches(_QAActor))")
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            yield rec

    out = root / "ray-killed.jsonl"
    summary = run_batch(items, out, kill_after_first, progress=False)
    assert killed and (summary.ran, summary.ok, summary.errors) == (3, 2, 1)
    got = read_records(out)
    assert sorted(r["key"] for r in got) == sorted(it.key for it in items)  # none lost, none twice
    assert_same_records(latest_by_key(got), want)
    ray.shutdown()


def test_each_clips_questions_go_to_one_actor_that_encodes_and_prefills_it_once(cluster, setup):
    """Two actors, three questions on each of two clips: each clip is encoded once and its prompt prefix computed
    once (its first question), the other questions reuse both, as the local engine's clip-by-clip run does; the
    answers are the local engine's."""
    root, model, _ = setup
    clips = [root / "clips" / "a.mp4", root / "clips" / "c.gif"]
    questions = [QUESTION, "What colour is the shape?", "Which way does it move?"]
    items = collect_work(clips, questions)
    model_spec = spec(model, 0.5)
    want = local_reference(root, items, model_spec, "local-by-clip")
    out = root / "ray-by-clip.jsonl"
    summary = run_batch(items, out, ray_backend(model_spec, RayOptions(actors=2, timeout_s=60,
                                                                      address=cluster.address)), progress=False)
    assert (summary.ran, summary.ok) == (6, 6)
    got = latest_by_key(read_records(out))
    assert_same_records(got, want)
    for clip in clips:
        stats = [got[it.key]["stats"] for it in items if it.video == str(clip)]
        assert [(s["encode_cached"], s["prefix_cached"]) for s in stats] == [(False, False)] + [(True, True)] * 2
    ray.shutdown()


def test_cluster_that_cannot_be_joined_is_one_line_and_exit_2(cluster, setup, capsys, monkeypatch):
    from videoqa.cli import main as cli_main

    root, model, _ = setup
    closed = "127.0.0.1:1"  # nothing listens there
    args = ["batch", str(root / "clips"), "--question", QUESTION, "--model", str(model), "--backend", "ray",
            "--out", str(root / "never.jsonl"), "--no-progress"]
    for address in (closed, "ray://" + closed):
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert cli_main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith(f"videoqa: error: cannot reach Ray at {address}"), err
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    assert cli_main([*args, "--num-cpus", "2"]) == 2
    assert "--num-cpus sizes a local Ray" in capsys.readouterr().err
    assert not (root / "never.jsonl").exists() or not read_records(root / "never.jsonl")


def test_actor_decodes_auto_frame_counts_under_the_timeout(tmp_path):
    """Under R=auto the actor decodes; a decoder that hangs becomes an error record after the timeout."""
    import numpy as np

    from videoqa.batch.shipped import shipped_rows

    hung = threading.Event()

    class HangingQA:
        prompt, prune, frames, max_new_tokens = "plain", None, None, 6

        def frames_to_sample(self, question, duration_s):
            return 8

        def sample(self, video, frames):
            hung.wait(30)  # a decoder that never returns (released at the end of the test)

    actor = _QAActor.__new__(_QAActor)
    actor.qa, actor.timeout_s, actor.load_s, actor.batch_size = HangingQA(), 0.2, None, 1
    item = WorkItem(key="k", video=str(write_clip(tmp_path / "hangs.mp4", n_frames=8)), question=QUESTION)
    (row,) = shipped_rows([item])
    batch = {**{key: np.array([value], dtype=object) for key, value in row.items()},
             "clip": np.array([b""], dtype=object), "error": np.array([""], dtype=object),
             "duration": np.array([3.0])}
    try:
        (rec,) = [json.loads(r) for r in actor(batch)["record"]]
    finally:
        hung.set()
    assert rec["key"] == "k" and rec["answer"] is None and rec["error"] == "TimeoutError: gave up after 0.2s"


def test_layout_fits_two_actors_on_two_cpus_and_refuses_what_cannot_fit(cluster):
    from videoqa.batch.ray_backend import _layout

    ray.init(address=cluster.address, log_to_driver=False)
    try:
        assert _layout(RayOptions(actors=2)) == {"cpus": 0.75, "gpus": 0}
        assert _layout(RayOptions(actors=1)) == {"cpus": 1.0, "gpus": 0}
        assert _layout(RayOptions(actors=2, cpus_per_actor=0.5)) == {"cpus": 0.5, "gpus": 0}
        with pytest.raises(InputError, match="do not fit the cluster's 2 CPUs"):
            _layout(RayOptions(actors=2, cpus_per_actor=1))
        with pytest.raises(InputError, match=r"needs 1 GPUs; the cluster has 0 \(fractions share one"):
            _layout(RayOptions(actors=2, gpus_per_actor=0.5))
    finally:
        ray.shutdown()


def test_actor_answers_a_clips_questions_in_left_padded_batches():
    """A clip's questions reach one actor as one row; --batch-size N asks the model N of them at a time
    (VideoQA.ask_batch); a clip the CPU stage could not decode is an error record for each of its questions."""
    import pickle

    import numpy as np

    from videoqa.batch.ray_backend import clip_rows
    from videoqa.video import Clip

    calls = []

    class FakeAnswer:
        def __init__(self, q):
            self.q = q

        def to_dict(self):
            return {"answer": f"answer to {self.q}"}

    class BatchQA:
        def ask_batch(self, items):
            calls.append([q for _, q in items])
            return [FakeAnswer(q) for _, q in items]

        def ask(self, video, q):
            calls.append([q])
            return FakeAnswer(q)

    actor = _QAActor.__new__(_QAActor)
    actor.qa, actor.timeout_s, actor.load_s, actor.batch_size = BatchQA(), 60, 1.5, 2
    items = [WorkItem(key=f"k{i}", video=f"/clips/{i % 2}.mp4", question=f"q{i}") for i in range(5)]
    shipped = [{"item": json.dumps(it.__dict__), "path": it.video, "fingerprint": ""} for it in items]
    rows = clip_rows(shipped)
    assert [[d["key"] for d in json.loads(r["items"])] for r in rows] == [["k0", "k2", "k4"], ["k1", "k3"]]
    clip = pickle.dumps(Clip.__new__(Clip))
    batch = {"items": np.array([r["items"] for r in rows], dtype=object),
             "path": np.array([r["path"] for r in rows], dtype=object),  # not read: the CPU stage decoded them
             "fingerprint": np.array(["", ""], dtype=object),
             "clip": np.array([clip, b""], dtype=object),
             "error": np.array(["", "VideoError: /clips/1.mp4: not a video"], dtype=object),
             "duration": np.array([None, None], dtype=object)}
    recs = [json.loads(r) for r in actor(batch)["record"]]
    assert calls == [["q0", "q2"], ["q4"]]
    assert [(r["key"], r["answer"], r["error"]) for r in recs] == [
        ("k0", "answer to q0", None), ("k2", "answer to q2", None), ("k4", "answer to q4", None),
        ("k1", None, "VideoError: /clips/1.mp4: not a video"), ("k3", None, "VideoError: /clips/1.mp4: not a video")]
    assert recs[0]["_model_load_s"] == 1.5 and "_model_load_s" not in recs[1]  # the actor's first record only
