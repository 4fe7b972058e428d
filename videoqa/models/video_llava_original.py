"""`videoqa convert video-llava`: the published Video-LLaVA (`LanguageBind/Video-LLaVA-7B`, LLaVA layout, plus
the video tower of `LanguageBind/LanguageBind_Video_merge`, temporal attention included) as a model folder videoqa
loads with `--model`.

The folder written is an ordinary `-hf` folder (config.json, model.safetensors, tokenizer, processor) whose
vision_config says `add_time_attn: true` and `num_frames`, plus TEMPORAL_FILE with the temporal weights, which
videoqa's loader reads strictly (models/languagebind.py). Every weight of the two inputs is either used or
reported as unused with the reason; a weight the model needs that neither input has stops the conversion.

As the original loader does (videollava/model/builder.py: the towers are built with delay_load and read from
`mm_video_tower`), the video tower comes from the tower folder; the copy of it in the Video-LLaVA checkpoint is
reported unused. The image tower (not used for video questions) comes from the Video-LLaVA checkpoint.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import InputError
from ..jsonio import JSONProblem, parse_json, read_bounded
from .languagebind import TEMPORAL_FILE, TEMPORAL_PARTS

ADDED_TOKENS = ("<image>", "<video>", "<pad>")  # the -hf checkpoint's ids 32000, 32001, 32002
VOCAB_MULTIPLE = 64  # the -hf checkpoint pads its vocabulary to 32064
TEXT_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
               "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "hidden_act", "vocab_size",
               "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "initializer_range",
               "attention_bias")
VISION_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "image_size",
                 "patch_size", "hidden_act", "layer_norm_eps", "projection_dim", "num_channels", "initializer_range")
UNUSED_WHY = {
    "video_tower_copy": "the Video-LLaVA checkpoint's copy of the video tower (the original loader, like this "
                        "converter, reads the tower from VIDEO_TOWER_DIR)",
    "inv_freq": "rotary frequencies (transformers recomputes them from the config)",
    "position_ids": "position ids (a buffer transformers rebuilds)",
    "languagebind_other": "LanguageBind's text encoder and projection heads (Video-LLaVA uses its vision encoder only)",
    "other": "not part of Video-LLaVA",
}


@dataclass
class Report:
    """What the conversion did with every weight of its two inputs."""

    used: int = 0
    unused: dict[str, str] = field(default_factory=dict)  # "FOLDER:key" -> reason (a key of UNUSED_WHY)
    missing: list[str] = field(default_factory=list)
    temporal: int = 0  # temporal weights written to TEMPORAL_FILE

    def lines(self) -> list[str]:
        """One line per kind of unused weight (count and an example), and the missing ones."""
        groups: dict[str, list[str]] = {}
        for key, why in sorted(self.unused.items()):
            groups.setdefault(why, []).append(key)
        out = [f"used {self.used} weights, {self.temporal} of them the temporal attention's"]
        out += [f"unused {len(keys)}: {UNUSED_WHY[why]}, e.g. {keys[0]}" for why, keys in groups.items()]
        out += [f"missing {len(self.missing)}: {', '.join(self.missing)}"] if self.missing else ["missing 0"]
        return out

    def to_dict(self) -> dict:
        return {"used": self.used, "temporal": self.temporal, "missing": self.missing,
                "unused": {key: UNUSED_WHY[why] for key, why in sorted(self.unused.items())}}


def read_json(path: Path, what: str) -> dict:
    try:
        return parse_json(read_bounded(path))
    except FileNotFoundError:
        raise InputError(f"{path.parent}: no config.json; is it {what}?") from None
    except (OSError, JSONProblem) as e:
        raise InputError(f"{path}: cannot read it ({e})") from None


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files: from its index when there is one, else every shard by name."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            weight_map = read_json(folder / index, "a checkpoint").get("weight_map", {})
            return [folder / name for name in sorted(set(weight_map.values()))]
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise InputError(f"{folder}: no weights (model*.safetensors or pytorch_model*.bin)")
    return files


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder; .bin shards with weights_only=True (no pickled code runs)."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in weight_files(folder):
        if not path.is_file():
            raise InputError(f"{path}: listed in the checkpoint's index but not there")
        try:
            part = (load_file(str(path)) if path.suffix == ".safetensors"
                    else torch.load(path, map_location="cpu", weights_only=True, mmap=True))
        except Exception as e:  # truncated, not a checkpoint, pickled objects other than tensors
            raise InputError(f"{path}: cannot read its weights ({str(e).strip().splitlines()[0]})") from None
        state.update(part)
    return state


def check_inputs(original: dict, tower: dict, original_dir: Path, tower_dir: Path) -> dict:
    """The tower's vision_config, once both configs are what the converter knows."""
    if "mm_video_tower" not in original:
        raise InputError(f"{original_dir}/config.json has no mm_video_tower: not an original Video-LLaVA folder "
                         f"(LanguageBind/Video-LLaVA-7B)")
    if original.get("mm_projector_type", "linear") != "mlp2x_gelu":
        raise InputError(f"{original_dir}: mm_projector_type {original.get('mm_projector_type')!r}; only Video-LLaVA's "
                         f"mlp2x_gelu is converted")
    vision = tower.get("vision_config")
    if not isinstance(vision, dict) or not vision.get("add_time_attn"):
        raise InputError(f"{tower_dir}/config.json: vision_config.add_time_attn is not true: not LanguageBind's video "
                         f"tower (LanguageBind/LanguageBind_Video_merge)")
    if original.get("mm_hidden_size", vision["hidden_size"]) != vision["hidden_size"]:
        raise InputError(f"{original_dir}: mm_hidden_size {original['mm_hidden_size']} is not the tower's hidden size "
                         f"{vision['hidden_size']}")
    return vision


def check_temporal(tower_state: dict, vision: dict, tower_dir: Path) -> None:
    """Refuse a tower without its temporal weights: one line naming what is missing."""
    n = vision["num_hidden_layers"]
    want = [f"vision_model.encoder.layers.{i}.{part}" for i in range(n) for part in TEMPORAL_PARTS]
    missing = [k for k in want if k not in tower_state]
    if missing:
        parts = sorted({k.split(".", 4)[4].split(".")[0] for k in missing})
        raise InputError(f"{tower_dir}: the video tower's temporal weights are missing ({len(missing)} of {len(want)}: "
                         f"{', '.join(parts)}, e.g. {missing[0]}); use LanguageBind/LanguageBind_Video_merge as "
                         f"published")


def build_config(original: dict, vision: dict, token_ids: dict[str, int], vocab: int):
    from transformers import AutoConfig, CLIPVisionConfig, VideoLlavaConfig

    text = AutoConfig.for_model("llama", **{k: original[k] for k in TEXT_FIELDS if k in original})
    text.vocab_size, text.pad_token_id = vocab, token_ids["<pad>"]
    vcfg = CLIPVisionConfig(**{k: vision[k] for k in VISION_FIELDS if k in vision})
    vcfg.add_time_attn, vcfg.num_frames = True, int(vision.get("num_frames", 8))
    grid = vcfg.image_size // vcfg.patch_size
    cfg = VideoLlavaConfig(vision_config=vcfg, text_config=text, image_token_index=token_ids["<image>"],
                           video_token_index=token_ids["<video>"], projector_hidden_act="gelu",
                           vision_feature_layer=original.get("mm_vision_select_layer", -2),
                           vision_feature_select_strategy="default", image_seq_length=grid * grid,
                           video_seq_length=vcfg.num_frames * (grid * grid + 1))
    cfg.pad_token_id = token_ids["<pad>"]
    return cfg


def map_original(state: dict, report: Report) -> dict[str, torch.Tensor]:
    """Video-LLaVA's LLaVA layout -> transformers' VideoLlavaForConditionalGeneration names."""
    out = {}
    for key, value in state.items():
        if key.endswith(".inv_freq"):
            report.unused[f"original:{key}"] = "inv_freq"
        elif key.startswith("model.video_tower."):
            report.unused[f"original:{key}"] = "video_tower_copy"
        elif key.endswith("position_ids"):
            report.unused[f"original:{key}"] = "position_ids"
        elif key.startswith("model.image_tower.image_tower."):
            out["model.image_tower." + key.removeprefix("model.image_tower.image_tower.")] = value
        elif key.startswith("model.mm_projector."):
            index, rest = key.removeprefix("model.mm_projector.").split(".", 1)
            out[f"model.multi_modal_projector.linear_{1 if index == '0' else 2}.{rest}"] = value
        elif key == "lm_head.weight":
            out[key] = value
        elif key.startswith("model."):
            out["model.language_model." + key.removeprefix("model.")] = value
        else:
            report.unused[f"original:{key}"] = "other"
    return out


def map_tower(state: dict, report: Report) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """LanguageBind_Video_merge -> (the -hf video tower's weights, the temporal weights for TEMPORAL_FILE)."""
    spatial, temporal = {}, {}
    for key, value in state.items():
        if not key.startswith("vision_model."):
            report.unused[f"tower:{key}"] = "languagebind_other"
            continue
        rest = key.removeprefix("vision_model.")
        if rest.endswith("position_ids"):
            report.unused[f"tower:{key}"] = "position_ids"
        elif ".temporal_" in rest:
            temporal[rest] = value
        else:
            spatial["model.video_tower." + rest] = value
    return spatial, temporal


def grow_vocab(weights: dict, token_ids: dict[str, int]) -> int:
    """Room for the added tokens, padded as the -hf checkpoint is; new rows are the mean row (<image> and <video>
    are replaced by visual features before the LLM reads them, <pad> is masked, the padding rows never occur)."""
    vocab = math.ceil((max(token_ids.values()) + 1) / VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    for key in ("model.language_model.embed_tokens.weight", "lm_head.weight"):
        old = weights.get(key)
        if old is not None and old.shape[0] < vocab:
            rows = old.float().mean(0, keepdim=True).to(old.dtype).expand(vocab - old.shape[0], -1)
            weights[key] = torch.cat([old, rows])
    return vocab


def convert(original_dir: str | Path, tower_dir: str | Path, out_dir: str | Path) -> Report:
    """Write the converted model folder to out_dir (new or empty); the report of every weight."""
    from safetensors.torch import save_file
    from transformers import AddedToken, AutoTokenizer, VideoLlavaForConditionalGeneration

    from .tiny import build_processor

    original_dir, tower_dir, out = Path(original_dir), Path(tower_dir), Path(out_dir)
    for folder in (original_dir, tower_dir):
        if not folder.is_dir():
            raise InputError(f"{folder}: no such folder")
    if out.exists() and (not out.is_dir() or out.is_symlink() or any(out.iterdir())):
        raise InputError(f"{out}: exists and is not an empty folder; pass a new one")
    original = read_json(original_dir / "config.json", "LanguageBind/Video-LLaVA-7B")
    vision = check_inputs(original, read_json(tower_dir / "config.json", "LanguageBind/LanguageBind_Video_merge"),
                          original_dir, tower_dir)
    tower_state = read_weights(tower_dir)
    check_temporal(tower_state, vision, tower_dir)

    report = Report()
    spatial, temporal = map_tower(tower_state, report)
    weights = map_original(read_weights(original_dir), report)
    weights.update(spatial)
    try:
        tokenizer = AutoTokenizer.from_pretrained(original_dir, trust_remote_code=False)
    except Exception as e:
        raise InputError(f"{original_dir}: cannot load its tokenizer ({str(e).strip().splitlines()[0]})") from None
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in ADDED_TOKENS[:2]],
                         special_tokens=True)
    tokenizer.add_special_tokens({"pad_token": ADDED_TOKENS[2]})
    tokenizer.padding_side = "left"
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ADDED_TOKENS}
    config = build_config(original, vision, token_ids, grow_vocab(weights, token_ids))

    with torch.device("meta"):
        model = VideoLlavaForConditionalGeneration(config)
    want = set(model.state_dict())
    for key in sorted(set(weights) - want):
        report.unused[f"original:{key}"] = "other"
        del weights[key]
    report.missing = sorted(want - set(weights))
    if report.missing:
        raise InputError(f"the inputs lack {len(report.missing)} weights the model needs, e.g. "
                         f"{', '.join(report.missing[:3])}")
    try:
        model.load_state_dict(weights, strict=True, assign=True)
    except RuntimeError as e:  # a shape the configs do not describe
        raise InputError(f"the weights do not fit the configs: {str(e).strip().splitlines()[-1].strip()}") from None
    report.used, report.temporal = len(weights) + len(temporal), len(temporal)

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = token_ids["<pad>"]
    model.save_pretrained(out)
    save_file({k: v.contiguous() for k, v in temporal.items()}, str(out / TEMPORAL_FILE))
    build_processor(tokenizer, config.vision_config.image_size, config.vision_config.patch_size).save_pretrained(out)
    # Video-LLaVA was trained and evaluated with the llava_v1 conversation (videoqa.model_card: "official")
    (out / "videoqa.json").write_text('{"conversation": "official"}\n')
    (out / "conversion.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    return report
