"""The README's Python example runs as written, with the shipped demo model, and prints what it says.

The module map, links, the command table and `make demo`'s printed example are checked in test_docs.py."""

from __future__ import annotations

import contextlib
import io
import os
import re

import pytest
from conftest import REPO


@pytest.mark.slow
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

