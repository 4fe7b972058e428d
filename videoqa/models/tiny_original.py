"""`videoqa make-tiny-model DIR --family video-llava-original`: small random-weight folders in the two published
layouts `videoqa convert video-llava` reads, with the published key names and config fields:

  DIR/Video-LLaVA-7B             LLaVA layout: config.json (llava, mm_video_tower, mm_vision_select_layer,
                                 mm_projector_type mlp2x_gelu, ...), pytorch_model-0000N-of-00002.bin shards and
                                 their index, the LLaMA tokenizer without <image>/<video>/<pad>
  DIR/LanguageBind_Video_merge   LanguageBindVideo: config.json (vision_config.add_time_attn, num_frames, ...),
                                 pytorch_model.bin (vision_model.* with the temporal weights, text_model.*, heads)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .languagebind import add_temporal_attention, encoder_layers
from .tiny import BOS_ID, EOS_ID, TinySpec, build_tokenizer

ORIGINAL = "Video-LLaVA-7B"
TOWER = "LanguageBind_Video_merge"


def _vision_fields(spec: TinySpec, frames: bool) -> dict:
    fields = {"hidden_size": spec.vision_hidden, "intermediate_size": spec.vision_hidden * 4,
              "num_attention_heads": spec.vision_heads, "num_hidden_layers": spec.vision_layers,
              "image_size": spec.image_size, "patch_size": spec.patch_size, "hidden_act": "gelu",
              "layer_norm_eps": 1e-5, "projection_dim": spec.vision_hidden, "num_channels": 3}
    if frames:  # LanguageBind's own fields (configuration_video.py)
        fields |= {"add_time_attn": True, "num_frames": spec.frames, "force_patch_dropout": 0.0, "lora_r": 0,
                   "lora_alpha": 16, "lora_dropout": 0.0, "video_decode_backend": "decord"}
    return fields


def _tower(spec: TinySpec, temporal: bool) -> dict[str, torch.Tensor]:
    """A random CLIP vision tower's weights under LanguageBind's `vision_model.` names (position_ids included, as
    checkpoints of that time saved them)."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    fields = _vision_fields(spec, frames=False)
    tower = CLIPVisionModel(CLIPVisionConfig(**fields))
    if temporal:
        add_temporal_attention(tower, spec.frames)
        for layer in encoder_layers(tower):  # LanguageBind's init; nn.Linear's own for the attention
            torch.nn.init.normal_(layer.temporal_embedding, std=spec.vision_hidden ** -0.5)
    n_pos = (spec.image_size // spec.patch_size) ** 2 + 1
    state = {f"vision_model.{k}": v for k, v in tower.state_dict().items()}
    state["vision_model.embeddings.position_ids"] = torch.arange(n_pos)[None]
    return state


def _text_tower(spec: TinySpec) -> dict[str, torch.Tensor]:
    from transformers import CLIPTextConfig, CLIPTextModel

    text = CLIPTextModel(CLIPTextConfig(hidden_size=spec.vision_hidden, intermediate_size=spec.vision_hidden * 2,
                                        num_hidden_layers=1, num_attention_heads=spec.vision_heads, vocab_size=64,
                                        bos_token_id=0, eos_token_id=1, pad_token_id=1, max_position_embeddings=16))
    return {f"text_model.{k}": v for k, v in text.state_dict().items()}


def _llava(spec: TinySpec, vocab: int) -> dict[str, torch.Tensor]:
    """LLaMA (model.*, lm_head) and the mlp2x_gelu projector (model.mm_projector.0/2) as LLaVA saved them."""
    from transformers import LlamaConfig, LlamaForCausalLM

    llm = LlamaForCausalLM(LlamaConfig(**_text_fields(spec, vocab)))
    state = dict(llm.state_dict())
    for i in range(spec.layers):  # transformers 4.31 saved the rotary buffer; the published shards have it
        state[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = 1.0 / 10000 ** (
            torch.arange(0, spec.hidden // spec.heads, 2).float() / (spec.hidden // spec.heads))
    projector = torch.nn.Sequential(torch.nn.Linear(spec.vision_hidden, spec.hidden), torch.nn.GELU(),
                                    torch.nn.Linear(spec.hidden, spec.hidden))
    state |= {f"model.mm_projector.{k}": v for k, v in projector.state_dict().items()}
    return state


def _text_fields(spec: TinySpec, vocab: int) -> dict:
    return {"hidden_size": spec.hidden, "intermediate_size": spec.ffn, "num_attention_heads": spec.heads,
            "num_hidden_layers": spec.layers, "num_key_value_heads": spec.kv_heads,
            "max_position_embeddings": spec.context, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "vocab_size": vocab, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": 0,
            "tie_word_embeddings": False, "initializer_range": 0.02}


def _save_shards(state: dict[str, torch.Tensor], folder: Path, shards: int = 2) -> None:
    keys = sorted(state)
    names = [f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin" for i in range(shards)]
    weight_map = {}
    for i, name in enumerate(names):
        part = keys[i::shards]
        torch.save({k: state[k].contiguous() for k in part}, folder / name)
        weight_map |= dict.fromkeys(part, name)
    size = sum(v.numel() * v.element_size() for v in state.values())
    (folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": size}, "weight_map": weight_map}, indent=1))


def make_original_pair(out_dir: str | Path, spec: TinySpec | None = None, seed: int = 0) -> tuple[Path, Path]:
    """Write DIR/Video-LLaVA-7B and DIR/LanguageBind_Video_merge; (their paths)."""
    spec = spec or TinySpec()
    out = Path(out_dir)
    original, tower_dir = out / ORIGINAL, out / TOWER
    original.mkdir(parents=True, exist_ok=True)
    tower_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(vocab_size=spec.vocab_size, llava_tokens=False)
    video = _tower(spec, temporal=True)
    image = _tower(spec, temporal=False)
    state = _llava(spec, len(tokenizer))
    state |= {f"model.video_tower.video_tower.{k.removeprefix('vision_model.')}": v for k, v in video.items()}
    state |= {f"model.image_tower.image_tower.{k.removeprefix('vision_model.')}": v for k, v in image.items()}
    _save_shards(state, original)
    config = {"architectures": ["LlavaLlamaForCausalLM"], "model_type": "llava", "torch_dtype": "float32",
              **_text_fields(spec, len(tokenizer)),
              "mm_video_tower": "LanguageBind/LanguageBind_Video_merge",
              "mm_image_tower": "LanguageBind/LanguageBind_Image", "mm_vision_select_layer": -2,
              "mm_vision_select_feature": "patch", "mm_projector_type": "mlp2x_gelu",
              "mm_hidden_size": spec.vision_hidden, "mm_use_im_start_end": False, "mm_use_im_patch_token": False,
              "image_aspect_ratio": "pad", "use_mm_proj": True, "tune_mm_mlp_adapter": False}
    (original / "config.json").write_text(json.dumps(config, indent=1))
    tokenizer.save_pretrained(original)

    tower_state = video | _text_tower(spec)
    tower_state |= {"visual_projection.weight": torch.randn(spec.vision_hidden, spec.vision_hidden) * 0.02,
                    "text_projection.weight": torch.randn(spec.vision_hidden, spec.vision_hidden) * 0.02,
                    "logit_scale": torch.tensor(4.6052)}
    torch.save(tower_state, tower_dir / "pytorch_model.bin")
    tower_config = {"architectures": ["LanguageBindVideo"], "model_type": "LanguageBindVideo",
                    "projection_dim": spec.vision_hidden, "logit_scale_init_value": 2.6592,
                    "text_config": {"hidden_size": spec.vision_hidden, "num_hidden_layers": 1, "vocab_size": 64},
                    "vision_config": _vision_fields(spec, frames=True)}
    (tower_dir / "config.json").write_text(json.dumps(tower_config, indent=1))
    return original, tower_dir
