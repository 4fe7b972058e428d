"""A model family defined here — a tiny LLaVA (transformers' LlavaForConditionalGeneration, a class videoqa does not
ship: per-frame images, no CLS token, an `<image>` placeholder) — answers through VideoQA, the command line and
batch with no edit outside this file: its registration below is the only line that adds it. Its answers equal
transformers' own `generate` on the same frames."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa.models import FAMILIES, Family
from videoqa.models.clip_tower import cls_attention
from videoqa.models.tiny import EOS_ID, IMAGE_ID, PAD_ID, TinySpec, build_config, build_tokenizer
from videoqa.models.video_llava import vicuna_turns
from videoqa.pruning import EncodedVideo, ModelDims, PruneConfig, VisualLayout, keep_count

QUESTION = "What colour is the shape?"


class TinyLlava(Family):
    name = "llava-images"
    model_types = ("llava",)

    def classes(self):
        from transformers import LlavaForConditionalGeneration, LlavaProcessor

        return LlavaForConditionalGeneration, LlavaProcessor

    def visual_token_id(self, config) -> int:
        return config.image_token_id

    def prompt(self, question, history=None, template="plain"):
        return self.preamble(template) + vicuna_turns(question, history, "<image>")

    def encode(self, model, processor, frames, device, dtype, cancel):
        cancel()
        pixels = processor.image_processor(images=list(frames), return_tensors="pt")["pixel_values"]
        cancel()
        tower = model.model.vision_tower
        out = tower(pixels.to(device, dtype), output_hidden_states=True)
        layer = model.config.vision_feature_layer
        idx = layer if layer >= 0 else len(out.hidden_states) + layer
        vision = out.hidden_states[idx][:, 1:]  # the "default" strategy drops each image's CLS
        attn = cls_attention(tower.encoder.layers[idx - 1], out.hidden_states[idx - 1])[:, 1:]
        grid = model.config.vision_config.image_size // model.config.vision_config.patch_size
        return EncodedVideo(model.model.multi_modal_projector(vision), vision, attn,
                            VisualLayout(len(frames), grid, has_cls=False))

    def dims(self, config, dtype_bytes=2):
        v = config.vision_config
        return ModelDims.from_text_config(config.text_config, v.image_size // v.patch_size, dtype_bytes,
                                          cls_token=False)


@pytest.fixture(scope="module")
def registered():
    FAMILIES.register(TinyLlava())  # the one registration line
    yield
    FAMILIES.unregister("llava-images")


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    out = tmp_path_factory.mktemp("tiny-llava")
    spec = TinySpec()
    tokenizer = build_tokenizer(vocab_size=spec.vocab_size)
    parts = build_config(spec, len(tokenizer))
    grid = spec.image_size // spec.patch_size
    cfg = LlavaConfig(vision_config=parts.vision_config, text_config=parts.text_config, image_token_index=IMAGE_ID,
                      image_seq_length=grid * grid)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = PAD_ID, EOS_ID
    model.save_pretrained(out)
    images = CLIPImageProcessor(size={"shortest_edge": spec.image_size},
                                crop_size={"height": spec.image_size, "width": spec.image_size})
    LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=spec.patch_size,
                   vision_feature_select_strategy="default").save_pretrained(out)
    (out / "videoqa.json").write_text('{"conversation": "plain"}\n')
    return out


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llava-clips")
    for i in range(2):
        write_clip(folder / f"c{i}.mp4", n_frames=12 + 4 * i)
    return folder


@pytest.fixture(scope="module")
def qa(registered, llava_dir):
    from videoqa.pipeline import VideoQA

    return VideoQA.from_pretrained(str(llava_dir), max_new_tokens=6)


@torch.no_grad()
def test_answers_equal_transformers_generate(qa, clips):
    clip = clips / "c0.mp4"
    answer = qa.ask(clip, QUESTION, prune=PruneConfig(method="none"))
    assert answer.stats.visual_tokens == 8 * 64 and answer.kept.layout.has_cls is False
    frames = qa.sample(clip, 8)[0].frames
    ids = qa.prompt_ids(QUESTION)
    slot = ids.index(IMAGE_ID)
    ids = ids[:slot] + [IMAGE_ID] * (8 * 64) + ids[slot + 1:]
    pixels = qa.processor.image_processor(images=list(frames), return_tensors="pt")["pixel_values"]
    out = qa.model.generate(input_ids=torch.tensor([ids]), pixel_values=pixels, max_new_tokens=6, do_sample=False)
    assert answer.text == qa.processor.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()


@pytest.mark.parametrize("method", ["fastv", "vispruner", "fastvid", "random"])
def test_every_method_prunes_this_family(qa, clips, method):
    answer = qa.ask(clips / "c1.mp4", QUESTION, prune=PruneConfig(method=method, r=0.75))
    assert answer.kept.n_kept == keep_count(8 * 64, 0.75)
    assert all(f["cls_kept"] is False for f in answer.kept.frame_masks())


def test_command_line_and_batch(qa, llava_dir, clips, tmp_path, capsys):
    from videoqa.cli import main

    common = ["--model", str(llava_dir), "--prune", "fastv", "--k", "2", "--r", "0.5", "--max-new-tokens", "6"]
    cfg = PruneConfig(method="fastv", r=0.5, params=(("k", 2),))
    expected = {c.name: qa.ask(c, QUESTION, prune=cfg).text for c in sorted(clips.glob("*.mp4"))}
    assert main(["ask", str(clips / "c0.mp4"), QUESTION, *common]) == 0
    assert expected["c0.mp4"] in capsys.readouterr().out
    out = tmp_path / "answers.jsonl"
    assert main(["batch", str(clips), "--question", QUESTION, "--out", str(out), "--no-progress", *common]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["video"].rsplit("/", 1)[-1]: r["answer"] for r in records} == expected
