"""The README and docs/ stay true: links resolve, the module map matches the tree, the CLI table names
options that exist, `make demo`'s printed example is what it prints, and the worked examples run."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from videoqa.cli import build_parser
from videoqa.cli import main as cli_main

DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS]
README_MAX_LINES = 250  # a front door; experiment logs and reference belong in docs/


def _without_code(text: str) -> str:
    """Markdown with fenced blocks and inline code removed (links inside code are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _links(text: str) -> list[str]:
    text = _without_code(text)
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    heads = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_docs_exist_and_readme_is_a_front_door():
    names = {p.name for p in DOCS}
    for name in ("architecture.md", "pruning.md", "evaluation.md", "web-chat.md", "benchmarks.md",
                 "long-clips.md", "gpu.md", "demo-models.md"):
        assert name in names
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    linked = {Path(link.split("#")[0]).name for link in _links(readme) if link.startswith("docs/")}
    assert names <= linked, f"docs pages the README does not link: {names - linked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_to_existing_files_and_headings(page):
    bad = []
    for link in _links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            bad.append(f"{link}: no heading #{anchor} in {target.name}")
    assert not bad, bad


def _module_map() -> dict[str, str]:
    """docs/architecture.md's module map: "videoqa/engine.py" or "ui/" -> its description."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = re.search(r"## Module map\n.*?```\n(.*?)```", text, re.S).group(1)
    entries: dict[str, str] = {}
    key = None
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            continue
        if indent in (0, 2):
            name, _, desc = line.strip().partition(" ")
            key = name if indent == 0 else f"videoqa/{name}"
            entries[key] = desc.strip()
        else:
            entries[key] += " " + line.strip()
    return entries


def test_module_map_matches_the_package_tree():
    entries = _module_map()
    package = REPO / "videoqa"
    tree = {f"videoqa/{p.name}" for p in package.glob("*.py")}
    tree |= {f"videoqa/{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    mapped = {k for k in entries if k.startswith("videoqa/") and k != "videoqa/"}
    assert tree == mapped, f"not in the map: {sorted(tree - mapped)}; not in the tree: {sorted(mapped - tree)}"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) > 1 and rel.stem not in ("__init__", "__main__"):
            assert re.search(rf"\b{rel.stem}\b", entries[f"videoqa/{rel.parts[0]}/"]), rel


def test_module_map_names_every_top_level_folder_and_its_files():
    entries = _module_map()
    for top in ("videoqa/", "ui/", "samples/", "scripts/", "tests/", "docs/"):
        assert top in entries and (REPO / top).is_dir(), top
    for name in entries:
        if "/" in name.rstrip("/") or not name.endswith("/"):
            continue
        assert (REPO / name).is_dir(), f"the map names {name}, which does not exist"
    for module in sorted((REPO / "ui").glob("*.py")):
        if module.stem != "__init__":
            assert re.search(rf"\b{module.stem}\b", entries["ui/"]), module.name
    for script in sorted((REPO / "scripts").iterdir()):
        if script.is_file():
            assert script.name in entries["scripts/"], script.name
    for folder in sorted((REPO / "samples").iterdir()):
        if folder.is_dir() and folder.name != "__pycache__":
            assert folder.name in entries["samples/"], folder.name


def _options_of(parser) -> dict[str, set[str]]:
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: {s for a in p._actions for s in a.option_strings} for name, p in sub.choices.items()}


def test_readme_command_table_names_commands_and_options_that_exist():
    options = _options_of(build_parser())
    rows = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `")]
    assert len(rows) >= 8
    for row in rows:
        command = re.search(r"`videoqa ([a-z-]+)", row)
        name = command.group(1) if command else "ask"  # the pruning row: options of every model command
        assert name in options, row
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", row.replace("--[no-]", "--no-")))
        missing = {f for f in flags if f not in options[name]}
        assert not missing, f"videoqa {name} has no {sorted(missing)}"


def _mask_timings(line: str) -> str:
    line = re.sub(r"\b(sample|encode|prefill|generate) [\d.]+s", r"\1 _s", line)
    line = re.sub(r"[\d.]+ tok/s", "_ tok/s", line)
    return re.sub(r"usable [\d.]+ GiB", "usable _ GiB", line)


def test_make_demo_example_is_the_makefile_and_what_it_prints(monkeypatch, capsys):
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    commands = [line.strip().replace("$(VENV)", ".venv") for line in recipe.splitlines()]
    block = re.search(r"```\n\$ make demo\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    shown: dict[str, list[str]] = {}
    for line in block.splitlines():
        if line.startswith(".venv/bin/videoqa "):
            shown[line] = []
        else:
            shown[list(shown)[-1]].append(line)
    assert list(shown) == commands
    monkeypatch.chdir(REPO)
    for command, printed in shown.items():
        assert cli_main(shlex.split(command)[1:]) == 0
        out = capsys.readouterr()
        lines = out.out.splitlines() + out.err.splitlines()
        assert [_mask_timings(x) for x in lines] == [_mask_timings(x) for x in printed]


def test_how_to_add_a_dataset_example_runs(tmp_path, monkeypatch, capsys):
    """docs/architecture.md's worked example: one DatasetSpec line, and `videoqa eval` takes the new set."""
    from videoqa.eval import datasets
    from videoqa.eval.datasets import DatasetSpec

    text = (REPO / "docs" / "architecture.md").read_text()
    section = text[text.index("## How to add a dataset"):]
    line = re.search(r"```python\n(.*?)\n```", section, re.S).group(1)
    (name, spec), = eval("{" + line + "}", {"DatasetSpec": DatasetSpec}).items()
    monkeypatch.setitem(datasets.DATASETS, name, spec)
    command = re.search(r"```bash\n(videoqa eval .*?)\n```", section, re.S).group(1)

    folder = tmp_path / "data" / "GPT_Zero_Shot_QA" / spec.folder
    (folder / spec.video_dirs[0]).mkdir(parents=True)
    asked = [("orange_circle_right", "Which direction does the orange circle move?", "right"),
             ("green_square_up", "What colour is the shape?", "green")]
    for clip, _, _ in asked:
        shutil.copy(REPO / "samples" / "clips" / f"{clip}.mp4", folder / spec.video_dirs[0] / f"{clip}.mp4")
    (folder / "test_q.json").write_text(json.dumps(
        [{"video_name": c, "question": q, "question_id": i} for i, (c, q, _) in enumerate(asked)]))
    (folder / "test_a.json").write_text(json.dumps(
        [{"answer": a, "question_id": i} for i, (_, _, a) in enumerate(asked)]))

    monkeypatch.chdir(tmp_path)
    args = shlex.split(command)[1:] + ["--out", "run", "--no-progress", "--prompt", "plain", "--max-new-tokens", "4"]
    assert cli_main(args) == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (results["judged"], results["yes"]) == (2, 2)
