"""The smaller findings of the hostile audit (issue 37, finding 10, and make-tiny-model of finding 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from videoqa.cli import main
from videoqa.errors import InputError
from videoqa.eval.judges import ExactJudge
from videoqa.models.tiny import TEXT_FAMILIES, TinySpec, make_tiny_model

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("answer", ["\u202eblue", "bl\u200bue", "\ufeffblue\u2060"])
def test_invisible_format_characters_do_not_change_an_exact_verdict(answer):
    judge = ExactJudge()
    assert judge.judge("q", answer, "it is blue").pred == "yes"
    assert judge.judge("q", "blue", f"it is {answer}").pred == "yes"
    assert judge.judge("q", answer, "it is red").pred == "no"


def test_fractional_frames_are_refused_by_the_web_controls_as_by_the_cli():
    from videoqa.ui.controls import parse_frames

    assert [parse_frames(v) for v in (None, "", 0, "0", 3, "3", 3.0)] == [None, None, None, None, 3, 3, 3]
    for bad in (2.7, "2.7", -1, "x", float("nan"), float("inf")):
        with pytest.raises(InputError, match="Frames must be a whole number"):
            parse_frames(bad)


def test_make_tiny_model_family_is_one_of_the_registry_in_one_line(tmp_path, capsys):
    try:
        code = main(["make-tiny-model", str(tmp_path / "m"), "--family", "nope"])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "nope" in err and "llama" in err, err
    with pytest.raises(InputError, match="unknown text decoder family 'nope'; choose " + ", ".join(TEXT_FAMILIES)):
        make_tiny_model(tmp_path / "m2", TinySpec(family="nope"))


@pytest.mark.slow
def test_the_server_keeps_gradios_state_under_its_own_folder(tmp_path):
    """`videoqa serve` sets GRADIO_TEMP_DIR before gradio is imported (gradio reads it once, at import, and
    made /tmp/gradio/vibe_edit_history outside the server's folder). Stopped before the model loads."""
    code = (
        "import os, sys\n"
        "import videoqa.cli.serve as s\n"
        "def stop(args):\n"
        "    import gradio.route_utils as r\n"
        "    print(r.DEFAULT_TEMP_DIR, os.environ['GRADIO_TEMP_DIR'], flush=True)\n"
        "    raise SystemExit(0)\n"
        "s.load_qa = stop\n"
        "sys.exit(s.serve(s.argparse.Namespace(auth=None, host='127.0.0.1', port=0, share=False, samples=None)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRADIO_TEMP_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    gradio_dir, ours = out.stdout.split()
    assert gradio_dir == ours and Path(ours).name.startswith("videoqa-serve-"), out
