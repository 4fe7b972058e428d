"""Batch QA: work lists, the resumable JSONL, error records, and a real kill + resume with a tiny model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.clipgen import write_clip, write_text

from videoqa.batch.local import local_records
from videoqa.batch.ray_backend import _decode_row, fixed_frame_count
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


def test_keys_name_the_clip_not_how_its_path_was_typed(tmp_path, monkeypatch):
    clips = tmp_path / "data" / "clips"
    _touch(clips / "a.mp4")
    _touch(clips / "deep" / "b.mp4")

    def keys(*paths):
        return sorted(i.key for i in collect_work(paths, ["q"]))

    want = ["clips/a.mp4::q", "clips/deep/b.mp4::q"]
    assert keys(clips) == want
    monkeypatch.chdir(clips)
    assert keys(".") == keys("./") == keys("../clips") == keys(".", "a.mp4") == want
    # Named below the folder given, or a file's own folder.
    assert keys("a.mp4") == ["clips/a.mp4::q"] and keys("deep") == keys("deep/b.mp4") == ["deep/b.mp4::q"]
    (tmp_path / "latest").symlink_to(clips)  # a link to the folder names it as the folder itself
    assert keys(tmp_path / "latest") == want
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").rename(tmp_path / "moved")  # a moved folder keeps its keys
    assert keys(tmp_path / "moved" / "clips") == want

    # Two different files that would get one name: an error, not a silently skipped clip.
    _touch(tmp_path / "other" / "clips" / "a.mp4")
    with pytest.raises(InputError, match="would both be recorded as 'clips/a.mp4'"):
        collect_work([tmp_path / "moved" / "clips", tmp_path / "other" / "clips"], ["q"])


def test_keys_carry_the_options_that_change_answers(tmp_path, monkeypatch):
    from videoqa.batch.worklist import answer_options

    _touch(tmp_path / "clips" / "a.mp4")
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = {"model": "model", "device": "cpu", "dtype": None, "attn_implementation": "sdpa", "frames": None,
            "max_new_tokens": 8, "prune": {"method": "fastv", "k": 2, "r": 0.5, "rank_by": "last", "seed": 0,
                                            "important_ratio": 0.5, "keep_positions": False}}

    def key(**changes):
        s = {**spec, **changes, "prune": {**spec["prune"], **changes.get("prune", {})}}
        [item] = collect_work(["clips"], ["q"], answer_options(s))
        assert item.meta["options"] == answer_options(s)  # recorded with the answer
        return item.key

    same = {key(), key(device="cuda"), key(model=str(tmp_path / "model")), key(prune={"seed": 7}),
            key(prune={"keep_positions": True}),
            key(prune={"frame_floor": 0.0})}  # the device, the model's spelling, unread fields, a field's default
    assert len(same) == 1 and next(iter(same)).startswith("clips/a.mp4::q::")
    others = {key(prune={"r": 0.7}), key(prune={"k": 3}), key(max_new_tokens=4), key(frames=12), key(dtype="bfloat16"),
              key(model="demo"), key(prune={"method": "random", "seed": 7}), key(prune={"frame_floor": 0.5})}
    assert len(others) == 8 and not others & same


def test_duplicates_left_by_an_older_run_are_compacted_on_resume(tmp_path):
    for name in ("a.mp4", "b.mp4"):
        _touch(tmp_path / name)
    items = collect_work([tmp_path], ["q"])
    out = tmp_path / "out.jsonl"
    run_batch(items, out, produce_with(StandIn()), progress=False)
    first = read_records(out)
    again = [{**r, "answer": r["answer"] + " (later)"} for r in first]
    out.write_text("".join(json.dumps(r) + "\n" for r in first + again))  # two runs wrote every key twice
    fn = StandIn()
    s = run_batch(items, out, produce_with(fn), progress=False)
    assert fn.calls == [] and s.already_done == 2
    assert read_records(out) == again  # one record per key: the latest, as resuming and eval read them


HOLD_LOCK = """import sys
from pathlib import Path
from videoqa.batch.lock import exclusive
with exclusive(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def _hold_lock(out: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], cwd=REPO, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "held\n"
    return p


def test_lock_names_its_holder_and_is_freed_by_a_kill(tmp_path):
    from videoqa.batch.lock import exclusive, lock_path
    from videoqa.errors import BusyError

    out = tmp_path / "r.jsonl"
    holder = _hold_lock(out)
    with pytest.raises(BusyError, match=rf"r.jsonl is being written by another run \(pid {holder.pid} on "):
        with exclusive(out):
            pass
    holder.kill()
    holder.wait()
    assert lock_path(out).exists()  # left behind by the kill, and no obstacle:
    with exclusive(out):
        assert json.loads(lock_path(out).read_text())["pid"] == os.getpid()
    assert not lock_path(out).exists()


def test_a_waiting_run_takes_over_when_the_holder_finishes(tmp_path, capfd):
    import threading

    from videoqa.batch.lock import exclusive, lock_path

    out = tmp_path / "r.jsonl"
    holder = _hold_lock(out)
    seen = {}

    def waiter():
        with exclusive(out, wait=True):
            seen["holder"] = json.loads(lock_path(out).read_text())["pid"]

    t = threading.Thread(target=waiter)
    t.start()
    message = ""
    while t.is_alive() and "waiting for the run writing" not in message:
        message += capfd.readouterr().err
        time.sleep(0.01)
    assert f"pid {holder.pid}" in message
    holder.stdin.close()  # the holder finishes: it removes its lock file, and the waiter locks a new one
    holder.wait()
    t.join()
    assert seen == {"holder": os.getpid()} and not lock_path(out).exists()


def test_ray_decode_stage_decodes_fixed_frame_counts_and_probes_otherwise(tmp_path):
    import pickle

    from videoqa.batch.shipped import shipped_rows
    from videoqa.video import probe_video, sample_frames

    write_clip(tmp_path / "a.mp4", n_frames=30)
    write_text(tmp_path / "bad.mp4")
    prune = {"method": "fastv", "r": 0.5}
    assert fixed_frame_count({"frames": None, "prune": prune}, 8) == 8
    assert fixed_frame_count({"frames": 4, "prune": {**prune, "r": "auto"}}, 8) == 4
    assert fixed_frame_count({"frames": None, "prune": {**prune, "r": "auto"}}, 8) is None  # the actor's device decides

    def row(name):  # as the driver sends it: the item, the clip's absolute path and its fingerprint
        (shipped,) = shipped_rows([WorkItem(key=name, video=str(tmp_path / name), question="q")])
        return shipped

    out = _decode_row(row("a.mp4"), frames=8, timeout_s=30)
    clip, ref = pickle.loads(out["clip"]), sample_frames(tmp_path / "a.mp4", 8)
    assert out["error"] == "" and clip.indices == ref.indices and (clip.frames == ref.frames).all()
    probed = _decode_row(row("a.mp4"), frames=None, timeout_s=30)  # the length only: the actor decides frames
    assert probed == {**row("a.mp4"), "clip": b"", "error": "", "duration": probe_video(tmp_path / "a.mp4").duration_s}
    bad = _decode_row(row("bad.mp4"), frames=8, timeout_s=30)
    assert bad["clip"] == b"" and bad["error"].startswith("VideoError:") and "bad.mp4" in bad["error"]


# ------------------------------------------------------------------------------ real model, real processes


QUESTION = "What is shown?"


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    from videoqa.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("batch")
    model = make_tiny_model(root / "model")
    clips = root / "clips"
    clips.mkdir()
    for i in range(4):
        write_clip(clips / f"c{i}.mp4", n_frames=10 + 3 * i, size=(64, 48))
    write_text(clips / "broken.mp4")  # a corrupt clip: an error record, the run goes on
    return model, clips


def _batch_args(model: Path, clips: Path | str, out: Path, *extra: str) -> list[str]:
    return [str(clips), "--question", QUESTION, "--out", str(out), "--model", str(model), "--prune", "fastv",
            "--k", "2", "--r", "0.5", "--max-new-tokens", "4", "--no-progress", *extra]


def _batch_cmd(model: Path, clips: Path, out: Path, *extra: str, gate: Path | None = None) -> list[str]:
    """`videoqa batch` over `clips`; with `gate`, the same run pausing after each record until `gate` exists
    (tests/helpers/slow_batch.py)."""
    if gate is None:
        return [sys.executable, "-m", "videoqa.cli", "batch", *_batch_args(model, clips, out, *extra)]
    script = REPO / "tests" / "helpers" / "slow_batch.py"
    return [sys.executable, str(script), str(gate), *_batch_args(model, clips, out, *extra)]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}


def _start_paused(cmd: list[str], out: Path) -> subprocess.Popen:
    """Start a gated run and return once it has written its first record (so it holds the file's lock)."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300  # a guard against a hang, not a timing assertion
    while time.time() < deadline and proc.poll() is None and not (out.exists() and b"\n" in out.read_bytes()):
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    return proc


@pytest.mark.slow
def test_kill_mid_run_then_resume_gives_the_uninterrupted_records(tiny_setup, tmp_path, capsys):
    from videoqa.batch.lock import lock_path
    from videoqa.cli import main

    model, clips = tiny_setup
    out = tmp_path / "killed.jsonl"
    proc = _start_paused(_batch_cmd(model, clips, out, gate=tmp_path / "never"), out)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    partial = read_records(out)
    assert len(partial) == 1 and lock_path(out).exists()  # killed mid-run (after broken.mp4), its lock file left

    # The kernel released the killed run's lock: the resume runs (the stale lock file does not stop it).
    assert main(["batch", *_batch_args(model, clips, out)]) == 0
    summary = capsys.readouterr().out
    assert "4 run (4 ok, 0 errors)" in summary and "1 earlier errors kept" in summary
    resumed = read_records(out)
    keys = [r["key"] for r in resumed]
    assert len(keys) == len(set(keys)) == 5  # every item once, no duplicates
    assert resumed[:1] == partial  # what was written before the kill is kept as it was
    assert out.read_bytes().endswith(b"\n") and not lock_path(out).exists()

    # The uninterrupted reference: the same command into another file.
    assert main(["batch", *_batch_args(model, clips, tmp_path / "ref.jsonl")]) == 0
    ref, got = latest_by_key(read_records(tmp_path / "ref.jsonl")), latest_by_key(resumed)
    assert set(got) == set(ref)
    for key, r in ref.items():
        g = got[key]
        assert (g["answer"], bool(g["error"])) == (r["answer"], bool(r["error"])), key
        if r["error"]:
            assert "broken.mp4" in key and g["error"] == r["error"]
        else:
            assert g["kept"]["kept"] == r["kept"]["kept"]
            assert g["kept"]["n_visual"] == 8 * 65 and g["kept"]["n_kept"] == 8 * 65 // 2  # R = 0.5


@pytest.mark.slow
def test_one_writer_per_results_file(tiny_setup, tmp_path, capsys):
    """Two processes on one --out while the first (a real `videoqa batch`, paused) is mid-run: an identical
    run stops at once naming it; a --retry-errors run (which compacts the file) waits with --wait, then
    resumes from what the first wrote. Every record either run reports is in the file, each key once."""
    import threading

    from videoqa.cli import main

    model, clips = tiny_setup
    out, gate = tmp_path / "race.jsonl", tmp_path / "go"
    first = _start_paused(_batch_cmd(model, clips, out, gate=gate), out)
    seen = {"out": "", "err": ""}

    def read_output() -> None:
        got = capsys.readouterr()
        seen["out"], seen["err"] = seen["out"] + got.out, seen["err"] + got.err

    retry = threading.Thread(target=lambda: seen.setdefault("code", main(
        ["batch", *_batch_args(model, clips, out, "--retry-errors", "--wait")])))
    try:
        assert main(["batch", *_batch_args(model, clips, out)]) == 2
        twin = capsys.readouterr().err.strip()
        assert len(twin.splitlines()) == 1 and "race.jsonl is being written by another run" in twin
        assert f"(pid {first.pid} on {socket.gethostname()}, started " in twin and "--wait" in twin
        assert len(read_records(out)) == 1  # it wrote nothing

        retry.start()
        while retry.is_alive() and "waiting for the run writing" not in seen["err"]:
            read_output()
            time.sleep(0.02)
        assert f"pid {first.pid}" in seen["err"]
        gate.touch()
        first_out, first_err = first.communicate(timeout=300)
        retry.join(300)
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()
    read_output()
    assert first.returncode == 0 and seen["code"] == 0, first_err + seen["err"]
    assert "5 run (4 ok, 1 errors)" in first_out
    assert "1 run (0 ok, 1 errors)" in seen["out"] and "4 already done" in seen["out"]
    recs = read_records(out)
    # The first run wrote in path order; the retry replaced the error record after the first had finished.
    names = [Path(r["video"]).name for r in recs]
    assert names == ["c0.mp4", "c1.mp4", "c2.mp4", "c3.mp4", "broken.mp4"] and len({r["key"] for r in recs}) == 5

    assert main(["batch", *_batch_args(model, clips, out)]) == 0  # a later resume: nothing to do, nothing added
    assert capsys.readouterr().out.startswith("0 run") and read_records(out) == recs


def test_same_folder_spelled_another_way_is_not_redone(tiny_setup, tmp_path, monkeypatch, capsys):
    from videoqa.cli import main

    model, clips = tiny_setup
    out = tmp_path / "spelled.jsonl"
    assert main(["batch", *_batch_args(model, clips.resolve(), out)]) == 0
    assert "5 run" in capsys.readouterr().out
    monkeypatch.chdir(clips)
    for spelling in (".", "./", "c0.mp4", f"../{clips.name}"):
        assert main(["batch", *_batch_args(model, spelling, out)]) == 0
        assert " 0 run" in " " + capsys.readouterr().out, spelling
    assert len(read_records(out)) == 5
    # An option that changes the answers is other work: it runs, and its records name their options.
    assert main(["batch", *_batch_args(model, ".", out, "--max-new-tokens", "2")]) == 0
    recs = read_records(out)
    assert len(recs) == 10 and len({r["key"] for r in recs}) == 10
    assert {r["options"]["max_new_tokens"] for r in recs} == {2, 4}


def test_engine_is_a_deprecated_spelling_of_backend(tiny_setup, tmp_path, capsys):
    from videoqa.cli import main

    model, clips = tiny_setup
    out = tmp_path / "alias.jsonl"
    assert main(["batch", *_batch_args(model, clips / "c0.mp4", out, "--engine", "local")]) == 0
    captured = capsys.readouterr()
    assert "--engine is deprecated, use --backend" in captured.err and "1 run" in captured.out
    assert [r["backend"] for r in read_records(out)] == ["local"]
    assert main(["batch", *_batch_args(model, clips / "c0.mp4", out, "--backend", "local")]) == 0
    captured = capsys.readouterr()
    assert "deprecated" not in captured.err and " 0 run" in " " + captured.out  # the same work: already done
    with pytest.raises(SystemExit):
        main(["batch", "--help"])
    help_text = capsys.readouterr().out
    assert "--backend {local,ray}" in help_text and "deprecated spelling of --backend" in help_text


def test_batch_checks_the_pruning_options_once(tiny_setup, tmp_path, monkeypatch, capsys):
    from videoqa.cli import main, options

    model, clips = tiny_setup
    calls = []
    real = options.prune_from_args
    monkeypatch.setattr(options, "prune_from_args", lambda *a: calls.append(1) or real(*a))
    assert main(["batch", *_batch_args(model, clips / "c0.mp4", tmp_path / "once.jsonl")]) == 0
    assert "1 run" in capsys.readouterr().out and len(calls) == 1
