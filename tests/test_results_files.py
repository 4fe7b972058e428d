"""The files batch and eval write, under hostile conditions: links planted at the names they use, a full disk,
a write-protected results file, and the mode new files get."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from videoqa.batch.local import local_records
from videoqa.batch.lock import lock_path
from videoqa.batch.run import run_batch
from videoqa.batch.store import read_records
from videoqa.batch.worklist import WorkItem
from videoqa.errors import InputError
from videoqa.eval.protocol import write_audit

ITEMS = [WorkItem(key=f"k{i}", video=f"/clips/{'bad' if i == 1 else 'ok'}{i}.mp4", question="q") for i in range(3)]


def answer(video: str, question: str) -> dict:
    if "bad" in video:
        raise ValueError("not a video")
    return {"answer": Path(video).stem}


def produce(todo):
    return local_records(todo, answer)


def test_a_link_planted_as_the_lock_file_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "res.jsonl"
    lock_path(out).symlink_to(victim)
    with pytest.raises(InputError, match=r"res.jsonl.lock is a symbolic link"):
        run_batch(ITEMS, out, produce, progress=False)
    assert victim.read_text() == "precious\n" and not out.exists()
    # A hard link to another file is refused too: truncating the lock would truncate that file.
    lock_path(out).unlink()
    os.link(victim, lock_path(out))
    with pytest.raises(InputError, match=r"res.jsonl.lock has other names"):
        run_batch(ITEMS, out, produce, progress=False)
    assert victim.read_text() == "precious\n"


def test_a_link_planted_as_the_compaction_temporary_is_not_followed(tmp_path):
    out = tmp_path / "res.jsonl"
    run_batch(ITEMS, out, produce, progress=False)  # one error record, k1
    victim = tmp_path / "victim2.txt"
    victim.write_text("precious\n")
    planted = out.with_name(out.name + ".tmp")
    planted.symlink_to(victim)
    s = run_batch(ITEMS, out, produce, retry_errors=True, progress=False)  # compacts: drops k1's error
    assert s.ran == 1 and victim.read_text() == "precious\n"
    assert out.is_file() and not out.is_symlink()
    assert sorted(r["key"] for r in read_records(out)) == ["k0", "k1", "k2"]
    assert planted.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        "res.jsonl", "res.jsonl.tmp", "victim2.txt"]  # no temporary left behind


def test_a_link_planted_as_an_eval_temporary_is_not_followed(tmp_path):
    victim = tmp_path / "victim3.txt"
    victim.write_text("precious\n")
    (tmp_path / "audit.jsonl.tmp").symlink_to(victim)
    write_audit(tmp_path / "audit.jsonl", [{"id": "1"}])
    assert victim.read_text() == "precious\n"
    assert json.loads((tmp_path / "audit.jsonl").read_text()) == {"id": "1"}
    assert not (tmp_path / "audit.jsonl").is_symlink()


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_one_rule_for_modes_the_umask_decides_and_a_rewrite_keeps_the_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        out = tmp_path / "res.jsonl"
        seen = {}

        def watching(todo):
            seen["lock"] = stat.S_IMODE(lock_path(out).stat().st_mode)
            return produce(todo)

        run_batch(ITEMS, out, watching, progress=False)
        write_audit(tmp_path / "audit.jsonl", [{"id": "1"}])
    finally:
        os.umask(old)
    expected = 0o666 & ~umask
    assert seen["lock"] == expected
    assert stat.S_IMODE(out.stat().st_mode) == expected
    assert stat.S_IMODE((tmp_path / "audit.jsonl").stat().st_mode) == expected
    # Compaction replaces the file: the new one keeps the mode the user gave the old one.
    out.chmod(0o640)
    run_batch(ITEMS, out, produce, retry_errors=True, progress=False)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


# ------------------------------------------------------------------- a full disk, a write-protected --out

CLIPS = [f"c{i}.mp4" for i in range(4)]


class Counting:
    """A stand-in engine that counts the clips it is given (starting it = loading the model)."""

    def __init__(self):
        self.started = 0

    def __call__(self, args, spec=None):
        def produce_(todo):
            self.started += 1
            return local_records(todo, lambda video, q: {"answer": Path(video).stem})
        return produce_


def batch_command(tmp_path: Path, out: Path, engine: Counting) -> tuple[int, str]:
    """`videoqa batch` as the command runs it (parser, error lines, exit code), with a stand-in engine."""
    import contextlib
    import io
    from functools import partial

    from videoqa.cli import batch, build_parser, run_command

    for name in CLIPS:
        (tmp_path / name).write_bytes(b"x")
    args = build_parser().parse_args(["batch", *(str(tmp_path / n) for n in CLIPS), "--question", "q",
                                      "--out", str(out), "--no-progress"])
    args.func = partial(batch.run, backend=engine)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run_command(args)
    return code, err.getvalue()


# The kernel reports ENOSPC at either call; when fsync does, the third line is in the file already (whole).
@pytest.mark.parametrize("call,kept", [("write", 2), ("fsync", 3)])
def test_a_full_disk_is_one_line_and_what_was_written_resumes(tmp_path, monkeypatch, call, kept):
    import errno

    out = tmp_path / "res.jsonl"
    real, calls = getattr(os, call), []

    def full_after_two(fd, *rest):  # the results file's third record meets a full disk
        if _is_file(fd, out):
            calls.append(fd)
            if len(calls) > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *rest)

    monkeypatch.setattr(os, call, full_after_two)
    code, err = batch_command(tmp_path, out, Counting())
    monkeypatch.undo()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"{out}: cannot write" in err and "No space left on device" in err, err
    assert len(read_records(out)) == kept and out.read_bytes().endswith(b"\n")  # what was written stays whole
    engine = Counting()
    assert batch_command(tmp_path, out, engine) == (0, "")  # space freed: the re-run does the rest
    assert sorted(Path(r["video"]).name for r in read_records(out)) == CLIPS


def _is_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _protect(path: Path, monkeypatch) -> str:
    """Make `path` unwritable: immutable (chattr +i) as root, read-only otherwise; where neither holds (a file
    system without attributes), refuse to open it for writing as the kernel would (EPERM)."""
    import errno
    import subprocess

    if os.geteuid() != 0:
        path.chmod(0o444)
        return "chmod"
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0:
        return "chattr"
    real_open = os.open

    def refusing(p, flags, *a, **kw):
        if Path(p) == path and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(p))
        return real_open(p, flags, *a, **kw)

    monkeypatch.setattr(os, "open", refusing)
    return "injected"


def test_a_write_protected_results_file_is_refused_before_the_engine_starts(tmp_path, monkeypatch):
    import subprocess

    out = tmp_path / "res.jsonl"
    out.write_text('{"key": "torn')  # a torn tail too: cutting it needs write access as well
    how = _protect(out, monkeypatch)
    engine = Counting()
    try:
        code, err = batch_command(tmp_path, out, engine)
    finally:
        if how == "chattr":
            subprocess.run(["chattr", "-i", str(out)], check=True)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (how, err)
    assert f"{out}: cannot write" in err and engine.started == 0, (how, err)  # no model was loaded
    assert out.read_text() == '{"key": "torn'


def test_eval_checks_its_run_folder_is_writable_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import subprocess

    from videoqa.cli import main

    data = tmp_path / "MSVD_Zero_Shot_QA"
    (data / "videos").mkdir(parents=True)
    (data / "videos" / "v.mp4").write_bytes(b"x")
    (data / "test_q.json").write_text(json.dumps([{"video_name": "v", "question": "q", "question_id": 1}]))
    (data / "test_a.json").write_text(json.dumps([{"answer": "a", "question_id": 1}]))
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("")
    how = _protect(run / "predictions.jsonl", monkeypatch)
    try:  # the model does not exist: had it been loaded first, its error would show
        code = main(["eval", "--dataset", "msvd", "--root", str(data), "--out", str(run), "--model",
                     "/nonexistent/model", "--no-progress"])
    finally:
        if how == "chattr":
            subprocess.run(["chattr", "-i", str(run / "predictions.jsonl")], check=True)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (how, err)
    assert f"{run / 'predictions.jsonl'}: cannot write" in err, (how, err)


def test_a_full_disk_while_caching_judgments_is_one_line(tmp_path, monkeypatch):
    import errno

    from videoqa.eval.judges import ExactJudge, JudgeRequest, JudgmentCache, judge_all

    cache = JudgmentCache(tmp_path / "judgments.jsonl")

    def full(fd, data):  # the cache is the only file this judging writes
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(InputError, match=r"judgments.jsonl: cannot write \(No space left on device\)"):
        judge_all(ExactJudge(), [JudgeRequest("1", "q", "a", "a")], cache, progress=False)


def test_an_engine_that_cannot_start_leaves_no_empty_results_file(tmp_path):
    out = tmp_path / "res.jsonl"

    def cannot_start(todo):
        raise InputError("cannot join Ray at 127.0.0.1:1")

    with pytest.raises(InputError):
        run_batch(ITEMS, out, cannot_start, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no results file, no lock file
    run_batch(ITEMS[:1], out, produce, progress=False)
    with pytest.raises(InputError):  # an existing file is left as it was
        run_batch(ITEMS, out, cannot_start, progress=False)
    assert [r["key"] for r in read_records(out)] == ["k0"]
