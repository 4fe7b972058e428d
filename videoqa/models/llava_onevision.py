"""LLaVA-OneVision and LLaVA-Video (`LlavaOnevisionForConditionalGeneration`): a SigLIP tower (no [CLS]) over
each frame, 27×27 patches at 384 px bilinearly pooled to 14×14 = 196 tokens a frame, one `image_newline` token
after all frames, and a Qwen2 LM with 1-D RoPE (positions 0..n-1). The prompt is the processor's chat template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .base import Family, chat_prompt
from .tiny import TinyTowerSizes
from .tiny_chatml import OV_MEDIA, OV_TEMPLATE, chatml_tokenizer

if TYPE_CHECKING:  # torch is imported where a model runs: the registry lists families without it
    import torch
    from torch import nn

    from .prepared import Prepared

FAMILY = "llava-onevision"
MODEL_TYPE = "llava_onevision"  # config.json's model_type


@dataclass
class TinyOneVisionSpec(TinyTowerSizes):
    """Sizes of a small random-weight LLaVA-OneVision: 56 px frames of 8 px patches, 7×7 pooled to 4×4 (the
    real 27×27 → 14×14 rounds up the same way)."""

    image_size: int = 56
    vision_layers: int = 2


def tiny_config(spec: TinyOneVisionSpec, tokenizer):
    from transformers import LlavaOnevisionConfig

    vision = dict(model_type="siglip_vision_model", hidden_size=spec.vision_hidden,
                  intermediate_size=2 * spec.vision_hidden, num_hidden_layers=spec.vision_layers,
                  num_attention_heads=spec.vision_heads, image_size=spec.image_size, patch_size=spec.patch_size)
    text = dict(model_type="qwen2", vocab_size=len(tokenizer), hidden_size=spec.hidden, intermediate_size=spec.ffn,
                num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                max_position_embeddings=spec.context, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=False)
    return LlavaOnevisionConfig(
        vision_config=vision, text_config=text, image_token_index=tokenizer.convert_tokens_to_ids(OV_MEDIA[0]),
        video_token_index=tokenizer.convert_tokens_to_ids(OV_MEDIA[1]), vision_feature_layer=-1,
        vision_feature_select_strategy="full", image_grid_pinpoints=[[spec.image_size, spec.image_size]],
        tie_word_embeddings=False)


def tiny_processor(spec: TinyOneVisionSpec, tokenizer):
    from transformers import LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor

    size = {"height": spec.image_size, "width": spec.image_size}
    return LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=[[spec.image_size] * 2]),
        video_processor=LlavaOnevisionVideoProcessor(size=size), tokenizer=tokenizer,
        num_image_tokens=(spec.image_size // spec.patch_size) ** 2, vision_feature_select_strategy="full",
        chat_template=OV_TEMPLATE)


def make_tiny_onevision(out_dir: str | Path, spec: TinyOneVisionSpec | None = None, seed: int = 0) -> Path:
    """Build a random-weight LLaVA-OneVision of `spec`'s sizes; save model + processor to `out_dir`."""
    import torch
    from transformers import LlavaOnevisionForConditionalGeneration

    spec = spec or TinyOneVisionSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = chatml_tokenizer(spec.vocab_size, OV_MEDIA)
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(tiny_config(spec, tokenizer)).eval()
    model.generation_config.eos_token_id = model.config.text_config.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tiny_processor(spec, tokenizer).save_pretrained(out)
    return out


def model_class():
    from transformers import LlavaOnevisionForConditionalGeneration

    return LlavaOnevisionForConditionalGeneration


def load(path: str | Path, dtype: torch.dtype | None = None, attn: str = "sdpa", local_files_only: bool = False):
    """Model and processor of a saved LLaVA-OneVision (never running code from the folder; float32 by default)."""
    import torch

    dtype = dtype or torch.float32
    from transformers import LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor

    from ..safe_load import LOAD_KWARGS

    processor = LlavaOnevisionProcessor.from_pretrained(path, local_files_only=local_files_only, **LOAD_KWARGS)
    model, info = LlavaOnevisionForConditionalGeneration.from_pretrained(
        path, dtype=dtype, attn_implementation=attn, local_files_only=local_files_only, output_loading_info=True,
        **LOAD_KWARGS)
    return model.eval(), processor, info


def processor_inputs(processor, frames: np.ndarray, question: str):
    """The processor's inputs for one question about `frames` [T, H, W, 3] uint8 (the chat template's prompt,
    the video placeholder expanded to frames × pooled grid + 1 newline tokens)."""
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    return processor(text=[text], videos=[frames], return_tensors="pt")


def pooled_grid(config) -> tuple[int, int]:
    """Tokens a frame as (rows, cols): the patch grid bilinearly pooled by 2, rounding up (27 → 14)."""
    side = math.ceil(config.vision_config.image_size // config.vision_config.patch_size / 2)
    return side, side


def prepare(model: nn.Module, inputs) -> Prepared:
    """Encode the video of one processed prompt and make it ready for the LLM loops (positions 0..n-1)."""
    import torch

    from .prepared import Prepared, VideoLayout

    cfg = model.config
    pixels = inputs["pixel_values_videos"]
    features, saliency = video_features(model, pixels)
    ids = inputs["input_ids"][0]
    layout = VideoLayout(frames=pixels.shape[1], groups=pixels.shape[1], grid=pooled_grid(cfg), summary=1)
    return Prepared(ids=ids, features=features, positions=torch.arange(len(ids))[None], layout=layout,
                    video_token_id=cfg.video_token_index, saliency=saliency)


def video_features(model: nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[frames * tokens + 1, d] LLM-space features of one clip's pixels [1, F, 3, H, W] (the newline last), and
    the tower saliency of its frame tokens."""
    import torch

    cfg = model.config
    with torch.inference_mode():
        out = model.model.get_video_features(pixels, vision_feature_layer=cfg.vision_feature_layer,
                                             vision_feature_select_strategy=cfg.vision_feature_select_strategy,
                                             output_hidden_states=True)
        return out.pooler_output[0], tower_saliency(model, out.hidden_states)


def tower_saliency(model: nn.Module, hidden_states: tuple) -> torch.Tensor:
    """SigLIP has no [CLS]: the attention each patch receives at the feature layer (mean over heads and
    queries), pooled to the frame's token grid as the features are (bilinear, 27 -> 14). [frames * tokens]."""
    import torch
    from torch import nn

    from .select import mean_attention_received

    cfg = model.config
    feature = cfg.vision_feature_layer
    layer_idx = feature if feature >= 0 else len(hidden_states) + feature  # hidden_states[0]: the embeddings
    layer = model.model.vision_tower.encoder.layers[layer_idx - 1]
    attn = layer.self_attn
    per_frame = []
    for x in hidden_states[layer_idx - 1]:  # one frame at a time: [T, T] weights per head, not [F, T, T]
        h = layer.layer_norm1(x[None])
        q = attn.q_proj(h).view(1, h.shape[1], -1, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(1, h.shape[1], -1, attn.head_dim).transpose(1, 2)
        per_frame.append(mean_attention_received(q, k, attn.scale)[0])
    side = cfg.vision_config.image_size // cfg.vision_config.patch_size
    grid = torch.stack(per_frame).view(-1, 1, side, side)
    pooled = nn.functional.interpolate(grid, size=pooled_grid(cfg), mode="bilinear")
    return pooled.flatten()


class LlavaOnevision(Family):
    """LLaVA-OneVision / LLaVA-Video on the VideoQA path: the processor's chat template, frames of 196 pooled
    tokens (no [CLS]: the saliency is the attention SigLIP pays each patch), the newline a summary token."""

    name = "llava-onevision"
    model_types = ("llava_onevision",)

    def classes(self) -> tuple[type, type]:
        from transformers import LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor

        return LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor

    def visual_token_id(self, config) -> int:
        return config.video_token_index

    def render(self, processor, question, history=None, template="plain") -> str:
        return chat_prompt(processor, question, history)

    def encode(self, model, processor, frames, device, dtype, cancel):
        from ..pruning import EncodedVideo, VisualLayout

        cancel()
        pixels = processor.video_processor(videos=[frames], return_tensors="pt")["pixel_values_videos"]
        cancel()
        features, saliency = video_features(model, pixels.to(device, dtype))
        rows, cols = pooled_grid(model.config)
        frame_tokens = features[:-1].view(len(frames), rows * cols, -1)
        layout = VisualLayout(len(frames), rows, has_cls=False, cols=cols, summary=1)
        return EncodedVideo(frame_tokens, frame_tokens, saliency.view(len(frames), -1), layout,
                            summary=features[-1:])

    def dims(self, config, dtype_bytes: int = 2):
        from dataclasses import replace

        from ..pruning import ModelDims

        rows, cols = pooled_grid(config)
        return replace(ModelDims.from_text_config(config.text_config, rows, dtype_bytes, cls_token=False),
                       tokens_per_frame=rows * cols)

    def reference_config(self):
        from ..gpucheck.families_shapes import config_7b

        return config_7b(self.name)
