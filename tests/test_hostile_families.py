"""Every family's folder is loaded faithfully or not at all (issue 37, finding 9: a folder whose weights leave a
parameter uninitialised was answered with random weights and exit 0). One test per family the registry supports
with a weight deleted (from the language model and from the vision tower) and one added; Video-LLaVA's are in
tests/test_safe_load.py. The tiny folders are the real classes saved with save_pretrained (models/families.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from videoqa.errors import ModelLoadError
from videoqa.model import load_model, supported_architectures
from videoqa.models.families import make_tiny

FAMILIES = {"llava-onevision": "llava_onevision", "qwen2.5-vl": "qwen2_5_vl", "qwen3-vl": "qwen3_vl"}


def test_the_families_here_are_every_supported_one_but_video_llava():
    assert set(supported_architectures()) == {"video_llava", *FAMILIES.values()}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_dir(request, tmp_path_factory) -> Path:
    return make_tiny(request.param, tmp_path_factory.mktemp(request.param.replace(".", "")) / "model")


def _edited(src: Path, dst: Path, edit) -> Path:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


WHERE = {"llm": lambda k: "layers.1." in k and "mlp.down_proj" in k,
         "vision": lambda k: ("vision" in k or "visual" in k) and k.endswith("bias")}


@pytest.mark.parametrize("where", WHERE)
def test_a_deleted_weight_is_refused_naming_it(family_dir, tmp_path, where):
    removed: list[str] = []

    def drop(tensors: dict) -> None:
        removed.append(next(k for k in sorted(tensors) if WHERE[where](k)))
        del tensors[removed[0]]

    folder = _edited(family_dir, tmp_path / "missing", drop)
    with pytest.raises(ModelLoadError, match=r"1 weight missing from the checkpoint \(they would be random\)") as e:
        load_model(str(folder), device="cpu")
    line = str(e.value)
    assert "\n" not in line
    # checkpoints name the module by their own layout (e.g. language_model.model.layers vs model.language_model
    # .layers); the refusal names the parameter as the model knows it: the same module path below the layout
    tail = ".".join(removed[0].split(".")[-4:])
    assert tail in line, (removed[0], line)


def test_an_added_weight_is_refused_naming_it(family_dir, tmp_path):
    import torch

    folder = _edited(family_dir, tmp_path / "unexpected", lambda t: t.update({"extra_head.weight": torch.zeros(2)}))
    with pytest.raises(ModelLoadError, match=r"1 weight in the checkpoint but not in the model: .*extra_head"):
        load_model(str(folder), device="cpu")


def test_the_whole_folder_loads(family_dir):
    """The guard for the two tests above: what they refuse is the edit, not the family."""
    assert load_model(str(family_dir), device="cpu") is not None
