"""Batch QA: work lists, the resumable JSONL, error records, and a real kill + resume with a tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clipgen import write_clip, write_text

from videoqa.batch.local import call_with_timeout, local_records
from videoqa.batch.ray_engine import _decode_row, fixed_frame_count
from videoqa.batch.run import run_batch
from videoqa.batch.store import ResultsWriter, latest_by_key, read_records
from videoqa.batch.worklist import WorkItem, collect_work, read_questions
from videoqa.errors import InputError, VideoError

REPO = Path(__file__).resolve().parents[1]


class StandIn:
    """answer_fn stand-in: answers from the file name, fails on names containing 'bad', counts calls."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def __call__(self, video: str, question: str) -> dict:
        self.calls.append((video, question))
        if "bad" in Path(video).name:
            raise VideoError(video, "not a video file")
        return {"answer": f"{Path(video).stem}|{question}", "kept": {"kept": [len(question)]}}


def produce_with(fn):
    return lambda todo: local_records(todo, fn)


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_collect_work_folders_lists_and_questions(tmp_path):
    _touch(tmp_path / "clips" / "b.mp4")
    _touch(tmp_path / "clips" / "deep" / "a.AVI")
    _touch(tmp_path / "clips" / "notes.txt")  # not a video: ignored in a folder
    items = collect_work([tmp_path / "clips"], ["q1", "q2"])
    assert [(Path(i.video).name, i.question) for i in items] == [
        ("b.mp4", "q1"),
        ("b.mp4", "q2"),
        ("a.AVI", "q1"),
        ("a.AVI", "q2"),
    ]  # sorted by path: b < deep/
    assert len({i.key for i in items}) == 4

    # A JSONL list: relative paths resolve against the list's folder; ids are the keys; extra fields kept.
    lst = tmp_path / "work.jsonl"
    lst.write_text(
        '{"video": "clips/b.mp4", "question": "own q", "id": 7, "answer": "ref"}\n'
        '{"video": "clips/deep/a.AVI", "id": "x"}\n'
    )
    items = collect_work([lst], ["default q"])
    assert [(i.key, i.question, i.video) for i in items] == [
        ("7", "own q", str(tmp_path / "clips/b.mp4")),
        ("x", "default q", str(tmp_path / "clips/deep/a.AVI")),
    ]
    assert items[0].meta == {"answer": "ref"}

    # The same clip reached twice (folder + file) is asked once; a repeated id is an error.
    assert len(collect_work([tmp_path / "clips", tmp_path / "clips" / "b.mp4"], ["q"])) == 2
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        '{"video": "a.mp4", "question": "q", "id": 1}\n{"video": "b.mp4", "question": "q", "id": 1}\n'
    )
    with pytest.raises(InputError, match="duplicate id"):
        collect_work([dup])
    with pytest.raises(InputError, match="no such file"):
        collect_work([tmp_path / "nope"], ["q"])
    with pytest.raises(InputError, match="no question"):
        collect_work([tmp_path / "clips"])

    qf = tmp_path / "qs.txt"
    qf.write_text("What?\n\nWhy?\n")
    assert read_questions(qf) == ["What?", "Why?"]


def test_resume_skips_done_and_retries_errors_only_when_asked(tmp_path):
    for name in ("a.mp4", "bad.mp4", "c.mp4"):
        _touch(tmp_path / "clips" / name)
    items = collect_work([tmp_path / "clips"], ["what?", "why?"])
    out = tmp_path / "out.jsonl"

    fn = StandIn()
    s = run_batch(items, out, produce_with(fn), progress=False)
    assert (s.ran, s.ok, s.errors, s.already_done) == (6, 4, 2, 0)
    recs = read_records(out)
    assert len(recs) == 6 and len({r["key"] for r in recs}) == 6
    by_key = latest_by_key(recs)
    for it in items:
        r = by_key[it.key]
        if "bad" in it.video:
            assert (
                r["answer"] is None and r["error"].startswith("VideoError:") and "not a video" in r["error"]
            )
        else:
            assert r["answer"] == f"{Path(it.video).stem}|{it.question}" and r["error"] is None

    # Second run: nothing to do, no model calls.
    fn2 = StandIn()
    s = run_batch(items, out, produce_with(fn2), progress=False)
    assert fn2.calls == [] and (s.ran, s.already_done, s.skipped_errors) == (0, 4, 2)

    # --retry-errors: only the two failed items run again; the file still has one record per key.
    fn3 = StandIn()
    s = run_batch(items, out, produce_with(fn3), retry_errors=True, progress=False)
    assert sorted(fn3.calls) == sorted((it.video, it.question) for it in items if "bad" in it.video)
    recs = read_records(out)
    assert len(recs) == 6 and len({r["key"] for r in recs}) == 6

    # New items added to the work list are the only ones run.
    _touch(tmp_path / "clips" / "d.mp4")
    fn4 = StandIn()
    s = run_batch(
        collect_work([tmp_path / "clips"], ["what?", "why?"]), out, produce_with(fn4), progress=False
    )
    assert {Path(v).name for v, _ in fn4.calls} == {"d.mp4"} and s.ran == 2


def test_torn_last_line_is_redone(tmp_path):
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        _touch(tmp_path / name)
    items = collect_work([tmp_path], ["q"])
    out = tmp_path / "out.jsonl"
    run_batch(items, out, produce_with(StandIn()), progress=False)
    lines = out.read_text().splitlines(keepends=True)
    # Simulate a kill in the middle of writing the third record.
    out.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    assert [r["key"] for r in read_records(out)] == [json.loads(x)["key"] for x in lines[:2]]
    fn = StandIn()
    s = run_batch(items, out, produce_with(fn), progress=False)
    assert s.ran == 1 and fn.calls == [(items[2].video, "q")]
    text = out.read_text()
    assert text.endswith("\n") and [json.loads(x) for x in text.splitlines()] == read_records(out)
    assert sorted(r["key"] for r in read_records(out)) == sorted(i.key for i in items)


def test_writer_makes_each_record_visible_immediately(tmp_path):
    out = tmp_path / "o.jsonl"
    with ResultsWriter(out) as w:
        w.write({"key": "1"})
        assert read_records(out) == [{"key": "1"}]  # another process would see it now


def test_call_with_timeout_gives_up_on_a_hang():
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="gave up after 0.2s"):
        call_with_timeout(lambda: time.sleep(5), 0.2)
    assert time.perf_counter() - t0 < 2
    assert call_with_timeout(lambda: 42, 1.0) == 42
    with pytest.raises(VideoError):
        call_with_timeout(lambda: (_ for _ in ()).throw(VideoError("x", "broken")), 1.0)


def test_ray_decode_stage_decodes_fixed_frame_counts_and_probes_otherwise(tmp_path):
    import pickle

    from videoqa.video import sample_frames

    write_clip(tmp_path / "a.mp4", n_frames=30)
    write_text(tmp_path / "bad.mp4")
    prune = {"method": "fastv", "r": 0.5}
    assert fixed_frame_count({"frames": None, "prune": prune}) == 8
    assert fixed_frame_count({"frames": 4, "prune": {**prune, "r": "auto"}}) == 4
    assert fixed_frame_count({"frames": None, "prune": {**prune, "r": "auto"}}) is None  # the actor's device decides

    def row(name):
        return {"item": json.dumps(WorkItem(key=name, video=str(tmp_path / name), question="q").__dict__)}

    out = _decode_row(row("a.mp4"), frames=8, timeout_s=30)
    clip, ref = pickle.loads(out["clip"]), sample_frames(tmp_path / "a.mp4", 8)
    assert out["error"] == "" and clip.indices == ref.indices and (clip.frames == ref.frames).all()
    assert _decode_row(row("a.mp4"), frames=None, timeout_s=30) == {**row("a.mp4"), "clip": b"", "error": ""}
    bad = _decode_row(row("bad.mp4"), frames=8, timeout_s=30)
    assert bad["clip"] == b"" and bad["error"].startswith("VideoError:") and "bad.mp4" in bad["error"]


# ------------------------------------------------------------------------------ real model, real kill


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    from videoqa.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("batch")
    model = make_tiny_model(root / "model")
    clips = root / "clips"
    clips.mkdir()
    for i in range(4):
        write_clip(clips / f"c{i}.mp4", n_frames=10 + 3 * i, size=(64, 48))
    write_text(clips / "broken.mp4")  # a corrupt clip: an error record, the run goes on
    return model, clips


def _batch_cmd(model: Path, clips: Path, out: Path, *, delay_s: float | None = None) -> list[str]:
    """`videoqa batch` over `clips`; with `delay_s`, the same run paused after each record (tests/slow_batch.py)."""
    args = [str(clips), "--question", "What is shown?", "--out", str(out), "--model", str(model),
            "--prune", "fastv", "--k", "2", "--r", "0.5", "--max-new-tokens", "4", "--no-progress"]
    if delay_s is None:
        return [sys.executable, "-m", "videoqa.cli", "batch", *args]
    return [sys.executable, str(REPO / "tests" / "slow_batch.py"), str(delay_s), *args]


def test_kill_mid_run_then_resume_gives_the_uninterrupted_records(tiny_setup, tmp_path):
    from videoqa.batch.local import qa_answer_fn
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    model, clips = tiny_setup
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    out = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(
        _batch_cmd(model, clips, out, delay_s=1.0),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    partial = read_records(out)
    assert 1 <= len(partial) < 5  # killed mid-run

    subprocess.run(_batch_cmd(model, clips, out), cwd=REPO, env=env, check=True, capture_output=True)
    resumed = read_records(out)
    keys = [r["key"] for r in resumed]
    assert len(keys) == len(set(keys)) == 5  # every item once, no duplicates
    assert resumed[: len(partial)] == partial  # what was written before the kill is kept as it was

    # The uninterrupted reference, computed here with the same model and options.
    qa = VideoQA.from_pretrained(str(model), prune=PruneConfig("fastv", k=2, r=0.5), max_new_tokens=4)
    ref = latest_by_key(
        read_records_of(
            run_batch(
                collect_work([clips], ["What is shown?"]),
                tmp_path / "ref.jsonl",
                produce_with(qa_answer_fn(qa)),
                progress=False,
            )
        )
    )
    got = latest_by_key(resumed)
    assert set(got) == set(ref)
    for key, r in ref.items():
        g = got[key]
        assert (g["answer"], bool(g["error"])) == (r["answer"], bool(r["error"])), key
        if r["error"]:
            assert "broken.mp4" in key and g["error"] == r["error"]
        else:
            assert g["kept"]["kept"] == r["kept"]["kept"]
            assert g["kept"]["n_visual"] == 8 * 65 and g["kept"]["n_kept"] == 8 * 65 // 2  # R = 0.5


def read_records_of(summary) -> list[dict]:
    return read_records(summary.out)
