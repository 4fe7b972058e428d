"""Build small Video-LLaVA models from config (random weights) with a real tokenizer and processor.

Everything is saved to a folder and loaded back through `from_pretrained`, the same path the real
checkpoint takes, so tests exercise the code users run. The demo model (samples/) is built with these
same functions and then trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast, VideoLlavaConfig, VideoLlavaProcessor

# torch, tokenizers and transformers are imported by the functions that use them: the command line reads
# TinySpec's fields for `make-tiny-model`'s options, and `videoqa --help` should not wait for those libraries.

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<video>"]
UNK_ID, BOS_ID, EOS_ID, PAD_ID, IMAGE_ID, VIDEO_ID = range(6)

# A small English corpus so the byte-level BPE merges common words; any text still encodes (bytes).
BASE_CORPUS = [
    "USER: <video>\nWhat is happening in this video? ASSISTANT: A person is walking.",
    "USER: Describe the video in detail. ASSISTANT: The video shows a dog running in a park.",
    "What colour is the car? Which direction does it move? How many people are there?",
    "the a an is are was were in on at of to and or with what which where who why how many",
    "red green blue yellow white black orange purple left right up down circle square triangle",
    "one two three four five six seven eight nine ten yes no",
]


# The text decoders a tiny model can be built with (transformers model_type names); the CLI's --family choices.
TEXT_FAMILIES = ("llama", "qwen2", "mistral")


@dataclass
class TinyLMSizes:
    """The language model's sizes, the same in every family's tiny spec (keyword arguments only)."""

    hidden: int = 64
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    context: int = 4096
    vocab_size: int = 400


@dataclass
class TinyTowerSizes(TinyLMSizes):
    """A ViT tower's sizes over square frames (Video-LLaVA's and LLaVA-OneVision's tiny specs)."""

    image_size: int = 64  # pixels a side: the processor resizes every frame to it
    patch_size: int = 8  # so (64 / 8)² = 64 patch tokens a frame
    vision_hidden: int = 32
    vision_layers: int = 3
    vision_heads: int = 2


@dataclass
class TinySpec(TinyTowerSizes):
    """Sizes of a small Video-LLaVA. Defaults give a model that runs a full pipeline in well under a second."""

    family: str = "llama"  # text decoder family: one of TEXT_FAMILIES
    frames: int = 8


def build_tokenizer(corpus: list[str] | None = None, vocab_size: int = 400,
                    llava_tokens: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with Video-LLaVA's special tokens at fixed ids (0..5), BOS added.
    `llava_tokens=False`: only <unk> <s> </s>, as the original (LLaMA) tokenizer before conversion adds the rest."""
    specials = SPECIAL_TOKENS if llava_tokens else SPECIAL_TOKENS[:3]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus or BASE_CORPUS), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS_ID)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>" if llava_tokens else None,
        padding_side="left",  # batched generation needs left padding
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"} if llava_tokens else {},
    )
    assert not llava_tokens or fast.convert_tokens_to_ids(["<image>", "<video>", "<pad>"]) == [IMAGE_ID, VIDEO_ID,
                                                                                              PAD_ID]
    return fast


def build_processor(tokenizer, image_size: int, patch_size: int) -> VideoLlavaProcessor:
    from transformers import VideoLlavaImageProcessor, VideoLlavaProcessor, VideoLlavaVideoProcessor

    size = {"shortest_edge": image_size}
    crop = {"height": image_size, "width": image_size}
    return VideoLlavaProcessor(
        image_processor=VideoLlavaImageProcessor(size=size, crop_size=crop),
        video_processor=VideoLlavaVideoProcessor(size=size, crop_size=crop),
        tokenizer=tokenizer,
        patch_size=patch_size,
    )


def build_config(spec: TinySpec, vocab_size: int) -> VideoLlavaConfig:
    from transformers import AutoConfig, CLIPVisionConfig, VideoLlavaConfig

    from ..errors import InputError

    if spec.family not in TEXT_FAMILIES:  # transformers would list every model type it knows, 13 KB
        raise InputError(f"unknown text decoder family {spec.family!r}; choose {', '.join(TEXT_FAMILIES)}")

    vision = CLIPVisionConfig(
        hidden_size=spec.vision_hidden,
        intermediate_size=spec.vision_hidden * 4,
        num_hidden_layers=spec.vision_layers,
        num_attention_heads=spec.vision_heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        projection_dim=spec.vision_hidden,
    )
    text = AutoConfig.for_model(
        spec.family,
        hidden_size=spec.hidden,
        intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.context,
        vocab_size=vocab_size,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    grid = spec.image_size // spec.patch_size
    return VideoLlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_ID,
        video_token_index=VIDEO_ID,
        image_seq_length=grid * grid,
        video_seq_length=spec.frames * (grid * grid + 1),
    )


def make_tiny_model(
    out_dir: str | Path, spec: TinySpec | None = None, seed: int = 0, corpus: list[str] | None = None
) -> Path:
    """Build a random-weight Video-LLaVA of `spec`'s sizes and save model + processor to `out_dir`."""
    import torch
    from transformers import VideoLlavaForConditionalGeneration

    spec = spec or TinySpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus, spec.vocab_size)
    torch.manual_seed(seed)
    model = VideoLlavaForConditionalGeneration(build_config(spec, len(tokenizer))).eval()
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.save_pretrained(out)
    build_processor(tokenizer, spec.image_size, spec.patch_size).save_pretrained(out)
    # like the demo models: the plain conversation is the default prompt (videoqa.model_card)
    (out / "videoqa.json").write_text('{"conversation": "plain"}\n')
    return out
