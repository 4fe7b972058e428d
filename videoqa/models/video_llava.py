"""Video-LLaVA (transformers' VideoLlavaForConditionalGeneration): the first model family.

A clip is F frames through the video tower at once; each frame gives grid x grid patches plus its CLS token
(`VisualLayout(F, grid, has_cls=True)`); the saliency is the CLS row of the feature layer's attention. The
prompt is Vicuna v1's `USER: <video>\\n{question} ASSISTANT:` (the checkpoint's processor has no chat template),
after the `llava_v1` system line in the "official" template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .base import Family

# `official` is the `llava_v1` conversation Video-LLaVA's evaluation scripts use: its system preamble, then the
# same turns after a " " separator (SeparatorStyle.TWO: " " after a user turn, "</s>" after an assistant turn).
LLAVA_V1_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)


class VideoLlava(Family):
    name = "video-llava"
    model_types = ("video_llava",)
    templates = {"plain": "", "official": LLAVA_V1_SYSTEM + " "}

    def classes(self) -> tuple[type, type]:
        from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

        return VideoLlavaForConditionalGeneration, VideoLlavaProcessor

    def load(self, path: str, dtype, attn: str, local_only: bool):
        """The checkpoint; a `videoqa convert video-llava` folder (config says `add_time_attn`) also gets
        LanguageBind's temporal tower, its weights read strictly. A card-less folder without it (the -hf
        checkpoint) is named once: its tower has no temporal attention."""
        import logging
        from pathlib import Path

        from ..model_card import CARD_FILE
        from .languagebind import attach_temporal_tower

        model, processor, info = super().load(path, dtype, attn, local_only)
        carded = (Path(path) / CARD_FILE).exists()  # whether it has a card at all: the loader reads it, once
        if not attach_temporal_tower(model, path, path, local_only=local_only) and not carded:
            logging.getLogger("videoqa").warning(
                f"videoqa: note: {path}'s video tower has no temporal attention (the -hf conversion dropped it); "
                f"`videoqa convert video-llava` builds the published model")
        return model, processor, info

    def prompt(self, question: str, history: list[tuple[str, str]] | None = None, template: str = "plain") -> str:
        """`[preamble ]USER: <video>\\n{question} ASSISTANT:`; earlier turns come first, their answers ending
        with `</s>` as in the Vicuna v1 conversation format the model was trained on."""
        return self.preamble(template) + vicuna_turns(question, history, "<video>")

    def encode(self, model, processor, frames, device, dtype, cancel: Callable[[], None]):
        """Preprocess the frames and run the video tower and projector. The tower takes all frames at once, so its
        numbers never depend on how a clip was split."""
        from ..pruning import EncodedVideo, VisualLayout
        from .clip_tower import cls_attention

        cancel()
        pixels = processor.video_processor(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"]
        cancel()
        pixels = pixels[0].to(device, dtype)  # [F, 3, H, W]
        tower = model.model.video_tower
        out = tower(pixels, output_hidden_states=True)
        cfg = model.config
        layer = cfg.vision_feature_layer
        idx = layer if layer >= 0 else len(out.hidden_states) + layer  # hidden_states[0] is the embeddings
        vision_features = out.hidden_states[idx]
        attn = cls_attention(tower.encoder.layers[idx - 1], out.hidden_states[idx - 1])
        features = model.model.multi_modal_projector(vision_features)
        grid = cfg.vision_config.image_size // cfg.vision_config.patch_size
        return EncodedVideo(features, vision_features, attn, VisualLayout(n_frames=len(frames), grid=grid))

    def dims(self, config, dtype_bytes: int = 2):
        from ..pruning import ModelDims

        v = config.vision_config
        return ModelDims.from_text_config(config.text_config, v.image_size // v.patch_size, dtype_bytes)

    def reference_config(self):
        """Video-LLaVA-7B's architecture: VideoLlavaConfig()'s defaults with the checkpoint's context (its default
        LlamaConfig has 2048 positions where LanguageBind/Video-LLaVA-7B-hf's config says 4096) and vocabulary."""
        from transformers import VideoLlavaConfig

        from .tiny import BOS_ID, EOS_ID, IMAGE_ID, PAD_ID, VIDEO_ID

        cfg = VideoLlavaConfig(image_token_index=IMAGE_ID, video_token_index=VIDEO_ID)
        t = cfg.text_config
        t.max_position_embeddings, t.vocab_size = 4096, 32064
        t.pad_token_id, t.bos_token_id, t.eos_token_id = PAD_ID, BOS_ID, EOS_ID
        return cfg


def vicuna_turns(question: str, history: list[tuple[str, str]] | None, placeholder: str) -> str:
    """`USER: {placeholder}\\n{q} ASSISTANT: {a}</s>...USER: {question} ASSISTANT:` (the placeholder in the first)."""
    turns = list(history or []) + [(question, None)]
    parts = []
    for i, (q, a) in enumerate(turns):
        user = f"USER: {placeholder}\n{q}" if i == 0 else f"USER: {q}"
        parts.append(f"{user} ASSISTANT:" + ("" if a is None else f" {a}</s>"))
    return "".join(parts)


def video_llava_7b_dims():
    """Video-LLaVA-7B's dimensions (bf16) without weights."""
    return replace(VideoLlava().dims(VideoLlava().reference_config(), dtype_bytes=2), context=4096)
