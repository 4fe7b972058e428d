"""Files handed in or pre-created by someone else (issue 37, findings 5, 7, 8, 10): read by the one JSON reader
(one line naming the file), never written through a planted link, model cards bounded and regular files."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from videoqa.batch.store import ResultsWriter, read_records
from videoqa.batch.worklist import _read_list, read_questions
from videoqa.errors import InputError, ModelLoadError
from videoqa.eval.datasets import _load_json_list
from videoqa.eval.judges import JudgmentCache
from videoqa.jsonio import dumps, parse_json
from videoqa.model_card import CARD_FILE, MAX_NOTE, read_card, write_policy
from videoqa.model_policy import model_policy

HOSTILE = {"nesting": "[" * 200_000 + "]" * 200_000, "huge-int": "[" + "9" * 5000 + "]",
           "overflow": "[1e400]", "nan": "[NaN]"}


# ------------------------------------------------------------------------------ 5: one JSON reader


@pytest.mark.parametrize("kind", HOSTILE)
def test_pathological_json_handed_in_is_one_line_naming_the_file(tmp_path, kind):
    file = tmp_path / "in.json"
    file.write_text(HOSTILE[kind])
    for read in (_read_list, read_questions, lambda p: _load_json_list(p, ("question",))):
        with pytest.raises(InputError) as e:
            read(file)
        assert str(e.value).startswith(str(file)) and "\n" not in str(e.value)
    results = tmp_path / "results.jsonl"  # a results file read back on resume: the line is skipped, not a crash
    results.write_text('{"key": "a"}\n' + HOSTILE[kind] + '\n{"key": "b"}\n')
    assert [r["key"] for r in read_records(results)] == ["a", "b"]
    card = tmp_path / CARD_FILE
    card.write_text('{"policy": {"frames": ' + HOSTILE[kind] + "}}")
    with pytest.raises(ModelLoadError, match=str(card)):
        read_card(tmp_path)


def test_outputs_never_hold_nan_or_infinity():
    text = dumps({"a": float("inf"), "b": [float("nan"), 1.5], "c": (float("-inf"),)})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": [None]}
    assert parse_json(text) == json.loads(text)  # what we write, our reader reads


# ------------------------------------------------------------------------------ 7: no planted link followed


def test_a_results_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "sym.jsonl").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        ResultsWriter(out / "sym.jsonl")
    with pytest.raises(InputError, match="symbolic link"):
        read_records(out / "sym.jsonl")
    with pytest.raises(InputError, match="symbolic link"):
        JudgmentCache(out / "sym.jsonl")
    assert victim.read_text() == "precious\n"


def test_the_sweep_writes_its_card_without_following_a_planted_link(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text('{"conversation": "plain"}')
    (folder / "videoqa.json.tmp").symlink_to(victim)  # the fixed temporary name used before
    write_policy(folder, {"frames": 8})
    assert victim.read_text() == '{"conversation": "plain"}'
    card = folder / CARD_FILE
    assert card.is_file() and not card.is_symlink() and read_card(folder).policy == {"frames": 8}
    card.unlink()
    card.symlink_to(victim)  # a card that is a link: replaced by a file, the target left alone
    write_policy(folder, {"frames": 6})
    assert not card.is_symlink() and read_card(folder).policy == {"frames": 6}
    assert victim.read_text() == '{"conversation": "plain"}'
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []


# ------------------------------------------------------------------------------ 8, 10: card limits


@pytest.mark.parametrize("make", ["fifo", "folder", "dev-zero", "dangling"])
def test_a_card_that_is_not_a_regular_file_is_refused(tmp_path, make):
    card = tmp_path / CARD_FILE
    if make == "fifo":
        os.mkfifo(card)
    elif make == "folder":
        card.mkdir()
    elif make == "dev-zero":
        card.symlink_to("/dev/zero")
    else:
        card.symlink_to(tmp_path / "nothing")
    with pytest.raises(ModelLoadError) as e:
        read_card(tmp_path)
    assert str(e.value).startswith(str(card)) and "\n" not in str(e.value)


@pytest.mark.parametrize("policy, message", [
    ({"frames": int("9" * 309)}, "an integer of 309 digits is out of range"),
    ({"frames": 10**30}, "policy.frames must be in [1, 4096]"),
    ({"seconds_per_frame": 5e-324}, "policy.seconds_per_frame must be in [0.01, 86400]"),
    ({"k": 10**30}, "policy.k must be in [0, 1000]"),
    ({"note": "x" * (MAX_NOTE + 1)}, f"policy.note must be at most {MAX_NOTE} characters"),
    ({"r": 0.5, "r_max": 0.0}, "policy.r_max (0.0) is below policy.r (0.5)"),
])
def test_card_values_out_of_range_are_refused(tmp_path, policy, message):
    (tmp_path / CARD_FILE).write_text(json.dumps({"policy": policy}))
    with pytest.raises(ModelLoadError, match=re.escape(message)) as e:
        read_card(tmp_path)
    assert len(str(e.value)) < 300  # a 309-digit value or a long note is not echoed back whole


def test_the_note_is_stored_once(tmp_path):
    note = "n" * MAX_NOTE
    (tmp_path / CARD_FILE).write_text(json.dumps({"policy": {"frames": 8, "k": 2, "r": 0.5, "note": note}}))
    constants = model_policy(read_card(tmp_path)).constants
    assert dumps(constants).count(note) == 1 and constants["note"]["value"] == note


def test_a_card_written_by_the_sweep_is_a_plain_file_copy(tmp_path):
    """The real use of write_policy: a model folder copied, then its card set (no link involved)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / CARD_FILE).write_text('{"conversation": "plain"}')
    dst = Path(shutil.copytree(src, tmp_path / "dst"))
    write_policy(dst, {"frames": 4, "note": "sweep"})
    assert read_card(dst).conversation == "plain" and read_card(src).policy == {}


def test_a_card_larger_than_its_limit_is_refused_before_parsing(tmp_path):
    from videoqa.model_card import MAX_CARD_BYTES

    (tmp_path / CARD_FILE).write_text(json.dumps({"policy": {"note": "n" * MAX_CARD_BYTES}}))
    with pytest.raises(ModelLoadError, match=f"larger than {MAX_CARD_BYTES} bytes"):
        read_card(tmp_path)
