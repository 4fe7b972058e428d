"""A model folder's videoqa.json: the conversation it was trained on is the default prompt, and bad files are
one clear error."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import SAMPLE_CLIPS

from videoqa.errors import ModelLoadError
from videoqa.model import packaged_path
from videoqa.model_card import CARD_FILE, ModelCard, read_card
from videoqa.pipeline import VideoQA


def test_shipped_demo_models_declare_the_plain_conversation():
    for folder in ("demo-model", "demo-long-model"):
        assert read_card(packaged_path(folder)).conversation == "plain"


def test_a_checkpoint_without_a_card_gets_video_llavas_conversation(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "m")
    (tmp_path / "m" / CARD_FILE).unlink()
    assert read_card(tmp_path / "m") == ModelCard(conversation="official")
    assert read_card("LanguageBind/Video-LLaVA-7B-hf").conversation == "official"  # never downloads


def test_the_pipeline_prompt_defaults_to_the_card(tiny_model_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / CARD_FILE).unlink()
    assert VideoQA.from_pretrained(str(folder)).prompt == "official"
    (folder / CARD_FILE).write_text(json.dumps({"conversation": "plain", "policy": {"frames": 8, "k": 2, "r": 0.5}}))
    qa = VideoQA.from_pretrained(str(folder))
    assert qa.prompt == "plain" and VideoQA.from_pretrained(str(folder), prompt="official").prompt == "official"
    # what the model reads: the official template's system line makes the prompt longer
    official = VideoQA.from_pretrained(str(folder), prompt="official")
    plain_n = qa.ask(SAMPLE_CLIPS[0], "What is it?").stats.prompt_tokens
    assert official.ask(SAMPLE_CLIPS[0], "What is it?").stats.prompt_tokens > plain_n + 20


@pytest.mark.parametrize("text, message", [
    ('{"conversation": "vicuna"}', "conversation must be plain or official, got 'vicuna'"),
    ('{"conversaton": "plain"}', "unknown field 'conversaton'"),
    ('{"policy": {"k": "2"}}', "policy.k must be int, got '2'"),
    ('{"policy": {"r": true}}', "policy.r must be int or float, got True"),
    ('{"policy": {"r": 1.5}}', "policy.r must be in [0, 1), got 1.5"),
    ('{"policy": {"sampler": "scenes"}}', "policy.sampler must be uniform or content, got 'scenes'"),
    ('{"policy": {"rate": 2}}', "unknown field 'policy.rate'"),
    ('{"policy": [8]}', "policy must be dict, got [8]"),
    ('["plain"]', "expected a JSON object"),
    ('{"conversation": ', "not valid JSON"),
])
def test_a_bad_card_is_one_clear_error(tmp_path, text, message):
    (tmp_path / CARD_FILE).write_text(text)
    with pytest.raises(ModelLoadError, match=re.escape(message)) as e:
        read_card(tmp_path)
    assert CARD_FILE in str(e.value) and len(str(e.value).splitlines()) == 1


def test_policy_fields_are_optional_and_kept():
    folder = packaged_path("demo-long-model")
    card = read_card(folder)
    assert card.conversation == "plain"
    data = json.loads((folder / CARD_FILE).read_text())
    assert card.policy == data.get("policy", {}) and card.path == str(folder / CARD_FILE)
