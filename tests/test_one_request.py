"""One straight request (issue 31): `videoqa ask clip.mp4 Q --r auto` reads the model's card once and builds its
policy once, on the way from the options to the answer, for Video-LLaVA and for today's families alike. The
reads and builds are counted by wrapping the one card reader and the policy builder where they are called."""

from __future__ import annotations

import json

import pytest
from helpers.clipgen import write_clip

import videoqa.cli.options
import videoqa.model_card
import videoqa.model_policy
import videoqa.pipeline
from videoqa.cli import main


def counting(monkeypatch, target, name: str, counts: dict) -> None:
    original = getattr(target, name)

    def counted(*args, **kwargs):
        counts[name] = counts.get(name, 0) + 1
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)


@pytest.fixture(params=["video-llava", "qwen2.5-vl"])
def model_dir(request, tiny_model_dir, tmp_path_factory):
    if request.param == "video-llava":
        return tiny_model_dir
    from videoqa.models.families import make_tiny

    folder = make_tiny(request.param, tmp_path_factory.mktemp(request.param))
    (folder / "videoqa.json").write_text(json.dumps({"policy": {"frames": 4, "k": 2}}))
    return folder


def test_ask_reads_the_card_once_and_builds_the_policy_once(model_dir, tmp_path, monkeypatch, capsys):
    clip = write_clip(tmp_path / "clip.mp4", n_frames=20, size=(112, 112))
    counts: dict[str, int] = {}
    counting(monkeypatch, videoqa.model_card, "read_card", counts)  # every card_of reads through it
    for module in (videoqa.cli.options, videoqa.pipeline):  # the builder, where each caller has it
        name = "model_policy" if module is videoqa.cli.options else "policy_of_card"
        counting(monkeypatch, module, name, counts)
    assert main(["ask", str(clip), "What colour is it?", "--model", str(model_dir), "--r", "auto",
                 "--max-new-tokens", "2", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["decision"] is not None  # the adaptive policy planned it
    assert counts.get("read_card") == 1
    assert counts.get("model_policy", 0) + counts.get("policy_of_card", 0) == 1


def test_ask_checks_each_pruning_option_once(model_dir, tmp_path, monkeypatch, capsys):
    """The command line checks the options before the model loads (a bad one fails without loading weights);
    the pipeline then binds them to the model's depth without checking them again."""
    from videoqa.pruning.method import Method, Option

    clip = write_clip(tmp_path / "clip.mp4", n_frames=20, size=(112, 112))
    checks: dict[str, int] = {}
    original = Option.check

    def counted(self, value):
        checks[self.name] = checks.get(self.name, 0) + 1
        return original(self, value)

    monkeypatch.setattr(Option, "check", counted)
    counting(monkeypatch, Method, "resolve_depth", checks)  # binding to the model's depth, once it is known
    assert main(["ask", str(clip), "What colour is it?", "--model", str(model_dir), "--prune", "fastv", "--k", "1",
                 "--r", "0.5", "--max-new-tokens", "2", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["prune"]["k"] == 1
    assert checks == {"k": 1, "resolve_depth": 1}  # the option given (defaults are not checked), then the depth
