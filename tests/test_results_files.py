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
