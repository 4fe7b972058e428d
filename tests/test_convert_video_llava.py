"""`videoqa convert video-llava` end to end on the tiny published-layout pair: what it writes, what it refuses, and
the converted model's behaviour (frames meet in the tower; answers are the model's own generate)."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch
from helpers.clipgen import write_clip
from safetensors.torch import load_file, save_file

from videoqa.cli import main
from videoqa.errors import ModelLoadError
from videoqa.model import load_model
from videoqa.models import VideoLlava
from videoqa.models.languagebind import TEMPORAL_FILE, has_temporal_attention
from videoqa.models.tiny_original import make_original_pair
from videoqa.models.video_llava_original import convert
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.video import sample_frames
from videoqa.vision import encode_frames


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_original_pair(tmp_path_factory.mktemp("original"))


@pytest.fixture(scope="module")
def converted(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted") / "model"
    convert(*pair, out)
    return out


@pytest.fixture(scope="module")
def hf_style(converted, tmp_path_factory):
    """What transformers' own conversion gives: the same weights, the temporal ones dropped."""
    out = tmp_path_factory.mktemp("hf") / "model"
    shutil.copytree(converted, out)
    (out / TEMPORAL_FILE).unlink()
    config = json.loads((out / "config.json").read_text())
    del config["vision_config"]["add_time_attn"], config["vision_config"]["num_frames"]
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("clips") / "c.mp4", n_frames=16)


def _keys(folder):
    keys = set()
    for path in sorted(folder.glob("*.bin")):
        keys |= set(torch.load(path, map_location="cpu", weights_only=True))
    return keys


def test_every_weight_of_both_inputs_is_used_or_reported(pair, converted):
    original, tower = pair
    report = json.loads((converted / "conversion.json").read_text())
    total = len(_keys(original)) + len(_keys(tower))
    assert report["used"] + len(report["unused"]) == total and report["missing"] == []
    temporal = load_file(str(converted / TEMPORAL_FILE))
    assert report["temporal"] == len(temporal) == 3 * 11  # 3 layers x (embedding, norm x2, attention x8)
    assert all(k.startswith("tower:") and "temporal" not in k for k in report["unused"] if "tower" in k[:6])


def test_converted_weights_are_the_published_ones(pair, converted):
    original, tower = pair
    src = {}
    for path in sorted(original.glob("*.bin")):
        src |= torch.load(path, map_location="cpu", weights_only=True)
    merged = torch.load(tower / "pytorch_model.bin", map_location="cpu", weights_only=True)
    model = load_model(str(converted), device="cpu").model
    got = model.state_dict()
    vocab = src["model.embed_tokens.weight"].shape[0]
    assert torch.equal(got["model.language_model.embed_tokens.weight"][:vocab], src["model.embed_tokens.weight"])
    assert torch.equal(got["model.multi_modal_projector.linear_2.weight"], src["model.mm_projector.2.weight"])
    assert torch.equal(got["model.language_model.layers.1.mlp.down_proj.weight"],
                       src["model.layers.1.mlp.down_proj.weight"])
    for name in ("encoder.layers.2.temporal_attn.q_proj.weight", "encoder.layers.0.temporal_embedding",
                 "encoder.layers.1.self_attn.v_proj.bias"):
        assert torch.equal(got[f"model.video_tower.{name}"], merged[f"vision_model.{name}"])
    assert model.config.vision_feature_layer == -2 and model.config.image_token_id == vocab


def _frame0(folder, frames):
    loaded = load_model(str(folder), device="cpu")
    enc = encode_frames(loaded.family, loaded.model, loaded.processor, frames, loaded.device, loaded.dtype)
    return enc.vision_features[0], enc.cls_attention[0], has_temporal_attention(loaded.model.model.video_tower)


def test_frame0_sees_frame7_only_with_the_temporal_tower(converted, hf_style):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (8, 64, 64, 3), dtype=np.uint8)
    changed = frames.copy()
    changed[7] = 255 - changed[7]
    f0, a0, temporal = _frame0(converted, frames)
    g0, b0, _ = _frame0(converted, changed)
    assert temporal and (f0 - g0).abs().max() > 1e-3 and (a0 - b0).abs().max() > 1e-6
    h0, _, plain = _frame0(hf_style, frames)
    k0, _, _ = _frame0(hf_style, changed)
    assert not plain and torch.equal(h0, k0)


def test_converted_answer_is_the_models_own_generate(converted, clip_path):
    qa = VideoQA.from_pretrained(str(converted), prune=PruneConfig(method="none"), max_new_tokens=6)
    answer = qa.ask(clip_path, "Which way does it move?")
    frames = sample_frames(clip_path, 8).frames
    inputs = qa.processor(text=[VideoLlava().prompt("Which way does it move?", template=qa.prompt)],
                          videos=[list(frames)], return_tensors="pt")
    out = qa.model.generate(**inputs, max_new_tokens=6, do_sample=False)
    expected = qa.processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert answer.text == expected.strip() and answer.stats.temporal_attention
    assert qa.prompt == "official"  # Video-LLaVA's llava_v1 conversation


def test_cli_round_trip_says_the_tower_has_temporal_attention(pair, tmp_path, clip_path, capsys):
    root = tmp_path / "o"
    assert main(["make-tiny-model", str(root), "--family", "video-llava-original"]) == 0
    out = tmp_path / "converted"
    assert main(["convert", "video-llava", str(root / pair[0].name), str(root / pair[1].name), str(out)]) == 0
    assert "missing 0" in capsys.readouterr().out
    assert main(["ask", str(clip_path), "What is it?", "--model", str(out), "--json", "--max-new-tokens", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["temporal_attention"] is True


def test_convert_refuses_a_tower_without_temporal_weights(pair, tmp_path, capsys):
    original, tower = pair
    bare = tmp_path / "tower"
    shutil.copytree(tower, bare)
    state = torch.load(bare / "pytorch_model.bin", map_location="cpu", weights_only=True)
    torch.save({k: v for k, v in state.items() if ".temporal_" not in k}, bare / "pytorch_model.bin")
    assert main(["convert", "video-llava", str(original), str(bare), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "temporal weights are missing (33 of 33" in err
    assert "temporal_attn, temporal_embedding, temporal_layer_norm1" in err
    assert not (tmp_path / "out").exists()


def test_loader_reads_the_temporal_weights_strictly(converted, tmp_path):
    broken = tmp_path / "m"
    shutil.copytree(converted, broken)
    state = load_file(str(broken / TEMPORAL_FILE))
    del state["encoder.layers.1.temporal_layer_norm1.bias"]
    save_file(state, str(broken / TEMPORAL_FILE))
    with pytest.raises(ModelLoadError, match=r"1 missing \(e.g. encoder.layers.1.temporal_layer_norm1.bias\)"):
        load_model(str(broken), device="cpu")
    (broken / TEMPORAL_FILE).unlink()
    with pytest.raises(ModelLoadError, match="says add_time_attn but temporal_attention.safetensors is not in"):
        load_model(str(broken), device="cpu")


def test_a_card_less_folder_without_temporal_attention_is_named_once(hf_style, tmp_path, caplog):
    bare = tmp_path / "hf"
    shutil.copytree(hf_style, bare)
    (bare / "videoqa.json").unlink()  # as the -hf checkpoint: no videoqa card
    with caplog.at_level(logging.WARNING, logger="videoqa"):
        load_model(str(bare), device="cpu")
    notes = [r.getMessage() for r in caplog.records if r.name == "videoqa"]
    assert len(notes) == 1 and "has no temporal attention" in notes[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="videoqa"):
        load_model(str(hf_style), device="cpu")  # a model trained as it is (a card) is not warned about
    assert not [r for r in caplog.records if r.name == "videoqa"]


def test_safetensors_shards_convert_to_the_same_model(pair, converted, tmp_path):
    original, tower = pair
    shards = tmp_path / "original"
    shards.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(original / name, shards / name)
    index = json.loads((original / "pytorch_model.bin.index.json").read_text())
    renamed = {}
    for path in sorted(original.glob("pytorch_model-*.bin")):
        target = path.name.replace("pytorch_model", "model").replace(".bin", ".safetensors")
        save_file(torch.load(path, map_location="cpu", weights_only=True), str(shards / target))
        renamed[path.name] = target
    index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
    (shards / "model.safetensors.index.json").write_text(json.dumps(index))
    convert(shards, tower, tmp_path / "out")
    want, got = load_file(str(converted / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


@torch.no_grad()
def test_videos_batched_through_transformers_stay_clips_of_their_own(converted):
    """transformers flattens [B, F] videos into one tower batch; each video must still be one clip of 8 frames."""
    loaded = load_model(str(converted), device="cpu")
    model, proc = loaded.model, loaded.processor
    rng = np.random.default_rng(1)
    a, b = (list(rng.integers(0, 255, (8, 64, 64, 3), dtype=np.uint8)) for _ in range(2))
    prompt = VideoLlava().prompt("What moves?", template="official")
    both = model(**proc(text=[prompt, prompt], videos=[a, b], return_tensors="pt")).logits
    alone = [model(**proc(text=[prompt], videos=[v], return_tensors="pt")).logits[0] for v in (a, b)]
    torch.testing.assert_close(both[0], alone[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(both[1], alone[1], atol=1e-4, rtol=1e-4)
    assert all(layer.clip_frames is None for layer in model.model.video_tower.encoder.layers)  # forgotten after


def test_loader_refuses_temporal_weights_of_another_shape(converted, tmp_path):
    broken = tmp_path / "m"
    shutil.copytree(converted, broken)
    state = load_file(str(broken / TEMPORAL_FILE))
    state["encoder.layers.0.temporal_embedding"] = torch.zeros(1, 4, state["encoder.layers.0.temporal_embedding"]
                                                               .shape[-1])
    save_file(state, str(broken / TEMPORAL_FILE))
    with pytest.raises(ModelLoadError, match=r"layer 0's temporal weights do not fit the tower \(temporal_embedding"):
        load_model(str(broken), device="cpu")
