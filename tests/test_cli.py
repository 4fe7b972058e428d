"""`videoqa ask` as a user runs it: answers on real clips, one clear line and exit 2 on bad input."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SAMPLE_CLIPS
from helpers.clipgen import write_audio_only, write_clip, write_empty, write_text
from safetensors.torch import load_file, save_file
from transformers.utils import logging as hf_logging

from videoqa.cli import main


def ask(capsys, *argv):
    code = main(["ask", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def gif(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("gif") / "moving.gif", n_frames=12, fmt="gif")


@pytest.mark.parametrize("clip", SAMPLE_CLIPS, ids=lambda p: p.name)
def test_ask_answers_on_every_clip(capsys, tiny_model_dir, clip):
    code, out, err = ask(capsys, str(clip), "What is happening?", "--model", str(tiny_model_dir),
                         "--max-new-tokens", "4")
    assert code == 0
    assert "frames 8" in err and "visual tokens 520 -> 260" in err and "prefill" in err


def test_ask_json(capsys, tiny_model_dir, gif):
    code, out, _ = ask(capsys, str(gif), "What is shown?", "--model", str(tiny_model_dir),
                       "--json", "--prune", "random", "--r", "0.75", "--max-new-tokens", "3")
    assert code == 0
    record = json.loads(out)
    assert record["kept"]["n_kept"] == 130 and record["kept"]["method"] == "random"
    assert record["video"]["backend"] and len(record["video"]["timestamps"]) == 8


def _bad_inputs(tmp):
    return {
        "missing": (tmp / "nope.mp4", "file not found"),
        "empty": (write_empty(tmp / "empty.mp4"), "empty"),
        "text": (write_text(tmp / "notes.mp4"), "not a video"),
        "audio": (write_audio_only(tmp / "sound.mp4"), "no video stream"),
    }


@pytest.mark.parametrize("case", ["missing", "empty", "text", "audio"])
def test_bad_video_one_line_exit_2(capsys, tmp_path, tiny_model_dir, case):
    path, reason = _bad_inputs(tmp_path)[case]
    code, out, err = ask(capsys, str(path), "What?", "--model", str(tiny_model_dir))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and path.name in lines[0] and reason in lines[0].lower(), err
    assert "Traceback" not in err


@pytest.mark.parametrize("opts,msg", [
    (["--k", "7"], "K=7 is out of range"),
    (["--r", "1.5"], "R must be in [0, 1)"),
    (["--r", "lots"], "R must be a number"),
    (["--model", "/nonexistent/model"], "cannot load model"),
])
def test_bad_options_one_line_exit_2(capsys, tiny_model_dir, gif, opts, msg):
    argv = [str(gif), "What?", "--model", str(tiny_model_dir), *opts]
    code, _, err = ask(capsys, *argv)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_console_script_exit_code(tmp_path, tiny_model_dir):
    """The installed entry point, in a fresh process: no traceback, exit 2."""
    text = write_text(tmp_path / "fake.mp4")
    proc = subprocess.run([sys.executable, "-m", "videoqa.cli", "ask", str(text), "What?", "--model",
                           str(tiny_model_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "fake.mp4" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # no library notices or progress bars


def test_a_wrong_checkpoint_is_refused_and_its_report_stays_visible(tmp_path, tiny_model_dir, gif, capsys):
    """A checkpoint with missing or unexpected weights is refused (exit 2, one line naming the missing ones:
    they would be random, issue 37), and transformers' report of them still reaches the user; only known noise
    is hidden. (Read from transformers' own logger: its handler writes to the stderr of the time it was
    imported.)"""
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    missing = [k for k in weights if ".layers.3.mlp." in k]
    for k in missing:
        del weights[k]
    weights["model.not_in_this_model"] = torch.zeros(2)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    records = Records()
    hf_logging.add_handler(records)
    try:
        code = main(["ask", str(gif), "What?", "--model", str(broken), "--max-new-tokens", "2"])
    finally:
        hf_logging.remove_handler(records)
    err = "\n".join(records.lines)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("videoqa: error: ") and "3 weights missing from the checkpoint" in line
    assert all("layers." + k.split(".layers.")[-1] in line for k in missing)
    assert "model.not_in_this_model" in err and "UNEXPECTED" in err
    assert missing and all("layers." + k.split(".layers.")[-1] in err for k in missing) and "MISSING" in err
    assert "torchvision backend" not in err  # the one notice the CLI hides


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_stream_prints_the_answer_as_the_plain_output_does(capsys):
    """--stream prints the same text as the plain answer: no word-start space before the first word."""
    clip = str(Path(__file__).resolve().parents[1] / "samples" / "clips" / "orange_circle_right.mp4")
    assert main(["ask", clip, "What colour is the shape?", "--model", "demo"]) == 0
    plain = capsys.readouterr().out.splitlines()[0]
    assert main(["ask", clip, "What colour is the shape?", "--model", "demo", "--stream"]) == 0
    streamed = capsys.readouterr().out.splitlines()[0]
    assert streamed == plain == "orange"
