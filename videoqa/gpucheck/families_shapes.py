"""The published 7B shapes of today's families, for the accelerator check: LLaVA-OneVision-7B / LLaVA-Video-7B
(Qwen2-7B LM, SigLIP-so400m at 384 px, the last layer dropped) and Qwen2.5-VL-7B (its 32-block tower, windows of
112 px, full attention in blocks 7, 15, 23, 31), with the special-token ids of our offline ChatML tokenizer."""

from __future__ import annotations

from dataclasses import replace

from ..models.tiny_chatml import CHATML_SPECIALS
from ..pruning import ModelDims

FRAMES = 32
SIZE = {"llava-onevision": 384, "qwen2.5-vl": 448, "qwen3-vl": 448}  # frame side in pixels
QWEN2_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                num_key_value_heads=4, vocab_size=152064, rope_theta=1000000.0)


def _id(token: str) -> int:
    return CHATML_SPECIALS.index(token)


def config_7b(family: str):
    """The 7B architecture's config (random weights are built from it)."""
    import transformers as tf

    if family == "llava-onevision":
        vision = dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                      num_hidden_layers=26, num_attention_heads=16, image_size=384, patch_size=14)
        text = dict(model_type="qwen2", max_position_embeddings=32768, tie_word_embeddings=False,
                    eos_token_id=_id("<|im_end|>"), pad_token_id=_id("<|endoftext|>"), **QWEN2_7B)
        return tf.LlavaOnevisionConfig(vision_config=vision, text_config=text, image_token_index=_id("<image>"),
                                       video_token_index=_id("<video>"), vision_feature_layer=-1,
                                       vision_feature_select_strategy="full", tie_word_embeddings=False)
    if family == "qwen2.5-vl":
        qwen = dict(QWEN2_7B)
        theta = qwen.pop("rope_theta")
        text = dict(max_position_embeddings=128000, eos_token_id=_id("<|im_end|>"),
                    pad_token_id=_id("<|endoftext|>"), bos_token_id=None,
                    rope_parameters={"rope_type": "default", "rope_theta": theta, "mrope_section": [16, 24, 24]},
                    **qwen)
        vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                      window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2)
        return tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=_id("<|image_pad|>"),
                                   video_token_id=_id("<|video_pad|>"), vision_start_token_id=_id("<|vision_start|>"),
                                   vision_end_token_id=_id("<|vision_end|>"), tie_word_embeddings=False)
    raise ValueError(f"no 7B shapes for {family!r}; the check covers llava-onevision and qwen2.5-vl")


def dims_7b(family: str) -> ModelDims:
    text = config_7b(family).text_config
    return replace(ModelDims.from_text_config(text, 0, 2), tokens_per_frame=0)
