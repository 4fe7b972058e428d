"""Start-up stays fast: building the parser, `--help`, an argument error and a bad input file import none of
torch, transformers, gradio or ray (together 5-9 s on a loaded machine), so they are reported at once.

Each check runs in a fresh interpreter: the test process itself has those libraries loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers", "gradio", "ray")
REPO = Path(__file__).resolve().parents[1]
CLIP = str(REPO / "samples" / "clips" / "orange_circle_right.mp4")

# Runs `code`, then prints which heavy modules it imported and the exit code of `main(argv)` if it ran one.
PROBE = """
import json, sys
code = None
{code}
print(json.dumps({{"heavy": sorted(m for m in {heavy!r} if m in sys.modules), "code": code}}))
"""


def probe(code: str, cwd: Path) -> tuple[list[str], int | None, str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["heavy"], result["code"], proc.stderr


def test_building_the_parser_imports_no_heavy_library(tmp_path):
    heavy, _, _ = probe("import videoqa.cli\nvideoqa.cli.build_parser()", tmp_path)
    assert heavy == []


def run_main(argv: list[str]) -> str:
    return (f"from videoqa.cli import main\n"
            f"try:\n    code = main({argv!r})\nexcept SystemExit as e:\n    code = e.code")


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["batch", "--help"],
    ["make-tiny-model", "--help"],
    ["bench", "--help"],
    ["convert", "video-llava", "--help"],
    ["batch", CLIP, "--question", "q", "--out", "o.jsonl", "--bogus"],
])
def test_help_and_argument_errors_import_no_heavy_library(tmp_path, argv):
    heavy, code, _ = probe(run_main(argv), tmp_path)
    assert code in (0, 2) and heavy == []


@pytest.mark.parametrize("argv,msg", [
    (["batch", "missing.mp4", "--question", "q", "--out", "o.jsonl"], "missing.mp4: no such file or folder"),
    (["batch", CLIP, "--questions", "missing.txt", "--out", "o.jsonl"], "missing.txt: questions file not found"),
    (["ask", "missing.mp4", "q"], "missing.mp4: file not found"),
    (["eval", "--dataset", "msvd", "--root", "missing"], "missing"),
    (["convert", "video-llava", "missing", "tower", "out"], "missing: no such folder"),
])
def test_a_missing_input_is_reported_before_the_model_libraries_load(tmp_path, argv, msg):
    heavy, code, err = probe(run_main(argv), tmp_path)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert heavy == []
