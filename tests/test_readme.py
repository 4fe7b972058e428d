"""The README's Python example runs as written, with the shipped demo model, and prints what it says."""

from __future__ import annotations

import contextlib
import io
import os
import re

from conftest import REPO


def test_readme_python_example_runs(monkeypatch):
    text = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    expected = re.search(r'print\(answer\.text\)\s+# "([^"]+)"', code).group(1)
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().splitlines()[0] == expected
    assert os.path.exists(REPO / "samples" / "demo-model" / "config.json")


def test_readme_layout_names_every_module():
    """The README's Layout section lists every module of the package under its folder."""
    block = re.search(r"## Layout\n\n```\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    entries: dict[str, str] = {}  # "pipeline.py" or "batch/" -> its description (continuation lines included)
    name = None
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name, _, text = line.strip().partition(" ")
            entries[name] = text
        elif line.startswith("   ") and name:
            entries[name] += " " + line.strip()
    package = REPO / "videoqa"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) == 1:
            assert rel.name in entries, rel
        elif rel.stem not in ("__init__", "__main__"):
            assert re.search(rf"\b{rel.stem}\b", entries[f"{rel.parts[0]}/"]), rel
