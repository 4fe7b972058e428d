"""Offline pieces of the tiny random-weight models of today's families (LLaVA-OneVision, Qwen2.5-VL, Qwen3-VL):
a byte-level BPE tokenizer with the ChatML special tokens those checkpoints use, and their chat templates.

The templates are written here to render the conversation format of the published checkpoints (ChatML turns;
LLaVA-OneVision puts `<video>` right after the role, Qwen wraps the video pad in vision start/end markers), so a
tiny model's prompt has the layout of the real one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .tiny import BASE_CORPUS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                   "<|image_pad|>", "<|video_pad|>", "<image>", "<video>"]

# LLaVA-OneVision: "<|im_start|>user <video>\nQ<|im_end|>\n<|im_start|>assistant\n"
OV_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + ' ' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] if c['type'] == 'image' %}<image>{% endfor %}"
    "{% for c in m['content'] if c['type'] == 'video' %}<video>{% endfor %}"
    "{% for c in m['content'] if c['type'] == 'text' %}{{ '\\n' + c['text'] }}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen2.5-VL / Qwen3-VL: contents in order, the video as <|vision_start|><|video_pad|><|vision_end|>.
def _qwen_body(video: str) -> str:
    return (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'video' %}" + video +
    "{% elif c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )


# Qwen2.5-VL adds a default system turn when the conversation has none; Qwen3-VL does not.
QWEN25_TEMPLATE = ("{% if messages[0]['role'] != 'system' %}"
                   "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                   + _qwen_body("<|vision_start|><|video_pad|><|vision_end|>"))
# transformers 5.24's Qwen3-VL processor writes "<t seconds><|vision_start|>pads<|vision_end|>" per pair of frames
# in place of the bare video pad, so the template leaves the markers to it (the published prompt has one pair each).
QWEN3_TEMPLATE = _qwen_body("<|video_pad|>")


QWEN_MEDIA = ("<|image_pad|>", "<|video_pad|>")  # (image, video) placeholder tokens of Qwen-VL
OV_MEDIA = ("<image>", "<video>")  # of LLaVA-OneVision


def chatml_tokenizer(vocab_size: int = 400, media: tuple[str, str] = QWEN_MEDIA) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ChatML's special tokens (ids 0..8, in CHATML_SPECIALS' order), no BOS;
    `media` names its (image, video) placeholder tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=CHATML_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(BASE_CORPUS), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left",
        extra_special_tokens={"image_token": media[0], "video_token": media[1],
                              "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
    )


