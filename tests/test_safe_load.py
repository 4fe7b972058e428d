"""A model folder is data, never code, and is loaded faithfully or not at all (issue 37, findings 2 and 9).

Rules (videoqa/safe_load.py) that every model family's loader follows: trust_remote_code=False on every
from_pretrained; a folder asking for its own code refused with one line naming file and key; nothing printed
to stdout while loading; an unsupported architecture refused naming the supported families; a missing or
unexpected weight an error."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from videoqa.errors import ModelLoadError
from videoqa.model import load_model, supported_architectures
from videoqa.safe_load import REMOTE_CODE_FILES

REPO = Path(__file__).resolve().parents[1]
EVIL = "from pathlib import Path\nPath(__file__).with_name('RAN').write_text('imported')\n"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _plant(folder: Path, file_name: str) -> None:
    """The hostile folder of the audit: `auto_map` naming an evil.py beside it, which leaves RAN if imported."""
    file = folder / file_name
    data = json.loads(file.read_text()) if file.exists() else {}
    data["auto_map"] = {"AutoTokenizer": ["evil.EvilTok", None], "AutoConfig": "evil.EvilConfig",
                        "AutoProcessor": "evil.EvilProc", "AutoImageProcessor": "evil.EvilProc"}
    if file_name == "tokenizer_config.json":
        data["tokenizer_class"] = "EvilTok"
    file.write_text(json.dumps(data))
    (folder / "evil.py").write_text(EVIL)


@pytest.mark.parametrize("file_name", REMOTE_CODE_FILES)
def test_a_folder_asking_for_its_own_code_is_refused_naming_file_and_key(tiny_model_dir, tmp_path, capsys,
                                                                        file_name):
    folder = _copy(tiny_model_dir, tmp_path / "evil-model")
    _plant(folder, file_name)
    with pytest.raises(ModelLoadError) as e:
        load_model(str(folder), device="cpu")
    line = str(e.value)
    assert "\n" not in line and file_name in line and "auto_map" in line
    assert not (folder / "RAN").exists()
    assert capsys.readouterr().out == ""


def test_transformers_itself_never_imports_the_folders_code(tiny_model_dir, tmp_path, capsys):
    """The second guard, for loaders that skip the folder check (hub snapshots): LOAD_KWARGS alone makes
    transformers refuse, without asking on the terminal and without importing evil.py."""
    from transformers import VideoLlavaProcessor

    from videoqa.safe_load import LOAD_KWARGS, quiet_stdout

    folder = _copy(tiny_model_dir, tmp_path / "evil-model")
    _plant(folder, "tokenizer_config.json")
    with pytest.raises(Exception), quiet_stdout():  # noqa: B017 - transformers' own error, whatever its class
        VideoLlavaProcessor.from_pretrained(str(folder), **LOAD_KWARGS)
    assert not (folder / "RAN").exists()
    assert capsys.readouterr().out == ""


def _from_pretrained_calls(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    calls = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained"
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("VideoQA", "cls"))):
            calls.append((node.lineno, ast.get_source_segment(path.read_text(), node) or ""))
    return calls


def test_every_transformers_load_in_videoqa_and_scripts_passes_load_kwargs():
    """Rule 1 for the loaders other issues add (new families under videoqa/models/, training scripts): a static
    check, since a from_pretrained without trust_remote_code=False is one keypress away from running a folder's
    code."""
    files = sorted((REPO / "videoqa").rglob("*.py")) + sorted((REPO / "scripts").rglob("*.py"))
    bare = [f"{p.relative_to(REPO)}:{line}" for p in files for line, src in _from_pretrained_calls(p)
            if "LOAD_KWARGS" not in src and "trust_remote_code=False" not in src]
    assert bare == []
    # the check sees the loaders it guards
    assert _from_pretrained_calls(REPO / "videoqa" / "models" / "base.py")
    assert len(_from_pretrained_calls(REPO / "scripts" / "train_demo.py")) >= 4


def test_a_folder_of_another_architecture_is_refused_naming_the_supported_ones(tiny_model_dir, tmp_path):
    folder = _copy(tiny_model_dir, tmp_path / "onevision")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["LlavaNextVideoForConditionalGeneration"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="LlavaNextVideoForConditionalGeneration.*not supported") as e:
        load_model(str(folder), device="cpu")
    assert all(arch in str(e.value) for arch in supported_architectures().values())
    config["model_type"] = "llava_next_video"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="model_type 'llava_next_video' is not supported"):
        load_model(str(folder), device="cpu")


def _edit_weights(folder: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    file = folder / "model.safetensors"
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def test_a_missing_weight_is_an_error_not_a_random_init(tiny_model_dir, tmp_path):
    folder = _copy(tiny_model_dir, tmp_path / "missing")
    removed = []
    _edit_weights(folder, lambda t: removed.append(next(k for k in sorted(t) if "layers.1.mlp.up_proj" in k))
                  or t.pop(removed[0]))
    with pytest.raises(ModelLoadError, match=r"1 weight missing from the checkpoint") as e:
        load_model(str(folder), device="cpu")
    assert removed[0].split(".")[-3] in str(e.value) and "\n" not in str(e.value)


def test_an_unexpected_weight_is_an_error(tiny_model_dir, tmp_path):
    import torch

    folder = _copy(tiny_model_dir, tmp_path / "unexpected")
    _edit_weights(folder, lambda t: t.update({"model.extra_head.weight": torch.zeros(2, 2)}))
    with pytest.raises(ModelLoadError, match=r"1 weight in the checkpoint but not in the model: .*extra_head"):
        load_model(str(folder), device="cpu")


def test_loading_prints_nothing_on_stdout(tiny_model_dir, capsys):
    load_model(str(tiny_model_dir), device="cpu")
    assert capsys.readouterr().out == ""
