"""Qwen2.5-VL and Qwen3-VL: a vision tower over 14 px (Qwen3: 16 px) patches, 2×2 patches merged into one token,
two frames per temporal patch, and M-RoPE: each token has a (temporal, height, width) position triple, computed
by the model's own `get_rope_index`. Qwen3-VL puts a timestamp as text before each pair of frames and adds
"deepstack" features of earlier tower layers to the LLM's hidden states after its first layers.

The processor is told the frames' real timing (`video_metadata`: the source fps and the sampled frame indices,
with `do_sample_frames=False`): without it transformers assumes 24 fps, and the time axis of M-RoPE and Qwen3's
timestamps are wrong for the clip.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .base import Family, chat_prompt
from .tiny import TinyLMSizes
from .tiny_chatml import QWEN3_TEMPLATE, QWEN25_TEMPLATE, chatml_tokenizer

if TYPE_CHECKING:  # torch is imported where a model runs: the registry lists families without it
    import torch
    from torch import nn

    from .prepared import Prepared

FAMILIES = {"qwen2.5-vl": "qwen2_5_vl", "qwen3-vl": "qwen3_vl"}  # family name -> config.json model_type


@dataclass
class TinyQwenSpec(TinyLMSizes):
    """Sizes of a small random-weight Qwen-VL. Defaults answer a few frames in well under a second."""

    family: str = "qwen2.5-vl"  # qwen2.5-vl | qwen3-vl
    vision_hidden: int = 32
    vision_depth: int = 2
    vision_heads: int = 2
    max_pixels: int = 128 * 128  # frames are resized within [min_pixels, max_pixels]
    min_pixels: int = 56 * 56
    max_frames: int = 16  # Qwen3-VL's processor bounds the pixels of all frames together: max_frames × max_pixels


def _classes(family: str):
    import transformers as tf

    if family == "qwen2.5-vl":
        return (tf.Qwen2_5_VLConfig, tf.Qwen2_5_VLForConditionalGeneration, tf.Qwen2_5_VLProcessor,
                tf.Qwen2VLImageProcessor, tf.Qwen2VLVideoProcessor)
    if family == "qwen3-vl":
        return (tf.Qwen3VLConfig, tf.Qwen3VLForConditionalGeneration, tf.Qwen3VLProcessor,
                tf.Qwen2VLImageProcessor, tf.Qwen3VLVideoProcessor)
    raise ValueError(f"unknown Qwen-VL family {family!r}; choose one of {', '.join(FAMILIES)}")


def tiny_config(spec: TinyQwenSpec, tokenizer):
    """The real config class at `spec`'s sizes, with the tokenizer's special-token ids."""
    config_cls = _classes(spec.family)[0]
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    head_dim = spec.hidden // spec.heads
    # mrope_section splits head_dim / 2 rotary frequencies between t, h and w (the published 16/24/24 of 64)
    quarter = head_dim // 8
    section = [head_dim // 2 - 2 * (3 * quarter // 2), 3 * quarter // 2, 3 * quarter // 2]
    text = dict(vocab_size=len(tokenizer), hidden_size=spec.hidden, intermediate_size=spec.ffn,
                num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                max_position_embeddings=spec.context, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section})
    vision = dict(depth=spec.vision_depth, hidden_size=spec.vision_hidden, intermediate_size=2 * spec.vision_hidden,
                  num_heads=spec.vision_heads, out_hidden_size=spec.hidden)
    if spec.family == "qwen2.5-vl":
        vision.update(fullatt_block_indexes=[spec.vision_depth - 1], window_size=56)
    else:
        text.update(head_dim=head_dim)
        rope = dict(text["rope_parameters"], mrope_interleaved=True)
        text["rope_parameters"] = rope
        vision.update(deepstack_visual_indexes=list(range(min(2, spec.vision_depth))), num_position_embeddings=64)
    return config_cls(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)


def tiny_processor(spec: TinyQwenSpec, tokenizer):
    _, _, proc_cls, image_cls, video_cls = _classes(spec.family)
    pixels = dict(min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    size = {"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels * spec.max_frames}
    template = QWEN25_TEMPLATE if spec.family == "qwen2.5-vl" else QWEN3_TEMPLATE
    video = video_cls(size=size) if spec.family == "qwen3-vl" else video_cls(**pixels)
    return proc_cls(image_processor=image_cls(**pixels), video_processor=video, tokenizer=tokenizer,
                    chat_template=template)


def make_tiny_qwen(out_dir: str | Path, spec: TinyQwenSpec | None = None, seed: int = 0) -> Path:
    """Build a random-weight Qwen2.5-VL or Qwen3-VL of `spec`'s sizes; save model + processor to `out_dir`."""
    import torch

    spec = spec or TinyQwenSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = chatml_tokenizer(spec.vocab_size)
    torch.manual_seed(seed)
    model = _classes(spec.family)[1](tiny_config(spec, tokenizer)).eval()
    model.generation_config.eos_token_id = model.config.text_config.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tiny_processor(spec, tokenizer).save_pretrained(out)
    return out


def load(path: str | Path, family: str, dtype: torch.dtype | None = None, attn: str = "sdpa",
         local_files_only: bool = False):
    """Model and processor of a saved Qwen-VL (never running code from the folder; float32 by default)."""
    import torch

    dtype = dtype or torch.float32
    model_cls, proc_cls = _classes(family)[1], _classes(family)[2]
    from ..safe_load import LOAD_KWARGS

    processor = proc_cls.from_pretrained(path, local_files_only=local_files_only, **LOAD_KWARGS)
    model, info = model_cls.from_pretrained(path, dtype=dtype, attn_implementation=attn,
                                            local_files_only=local_files_only, output_loading_info=True, **LOAD_KWARGS)
    return model.eval(), processor, info


def processor_inputs(processor, frames: np.ndarray, question: str, fps: float, indices: list[int]):
    """The processor's inputs for one question about `frames` [T, H, W, 3] uint8, sampled at source frame
    `indices` of a clip at `fps`: the chat template's prompt, the video placeholder expanded."""
    from transformers.video_utils import VideoMetadata

    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    meta = VideoMetadata(total_num_frames=max(indices) + 1, fps=fps, frames_indices=list(indices))
    return processor(text=[text], videos=[frames], video_metadata=[meta], do_sample_frames=False,
                     return_tensors="pt")


def rope_positions(model: nn.Module, inputs) -> torch.Tensor:
    """M-RoPE ids [3, B, n] from the model's own get_rope_index, given the processor's outputs."""
    get = model.model.get_rope_index
    wanted = inspect.signature(get).parameters
    kwargs = {k: v for k, v in inputs.items() if k in wanted and k != "input_ids"}
    positions, _ = get(inputs["input_ids"], **kwargs)
    return positions


def prepare(model: nn.Module, inputs, with_positions: bool = True) -> Prepared:
    """Encode the video of one processed prompt and make it ready for the LLM loops (`with_positions`: the
    inputs have the prompt's ids, and its M-RoPE ids are computed too)."""
    import torch

    from .prepared import Prepared, VideoLayout

    with torch.inference_mode():
        return _prepare(model, inputs, with_positions, Prepared, VideoLayout)


def _prepare(model, inputs, with_positions: bool, Prepared, VideoLayout):  # noqa: N803 (the classes, imported late)
    import torch

    thw = inputs["video_grid_thw"]
    last = model.model.visual.blocks[-1].attn
    seen = {}
    handle = last.register_forward_pre_hook(lambda _, args, kw: seen.update(args=args, kw=kw), with_kwargs=True)
    try:
        out = model.model.get_video_features(inputs["pixel_values_videos"], thw)
    finally:
        handle.remove()
    features = torch.cat(out.pooler_output)
    deepstack = [torch.cat(f) for f in getattr(out, "deepstack_features", None) or []]
    merge = model.config.vision_config.spatial_merge_size
    t, h, w = (int(x) for x in thw[0])
    temporal = model.config.vision_config.temporal_patch_size
    layout = VideoLayout(frames=t * temporal, groups=t, grid=(h // merge, w // merge), frames_per_group=temporal)
    ids = inputs["input_ids"][0] if with_positions else torch.zeros(0, dtype=torch.long)
    positions = rope_positions(model, inputs)[:, 0] if with_positions else torch.zeros(3, 0, dtype=torch.long)
    return Prepared(ids=ids, features=features, positions=positions,
                    layout=layout, video_token_id=model.config.video_token_id, layer_additions=deepstack,
                    saliency=tower_saliency(model, seen, thw))


def tower_saliency(model: nn.Module, seen: dict, thw: torch.Tensor) -> torch.Tensor:
    """The tower has no [CLS]: the attention each merged token's patches receive in its last block, mean over
    heads, queries (within the block's attention segments) and the 2x2 patches, in the LLM's token order."""
    import torch
    from transformers.vision_utils import get_vision_window_index

    from .select import mean_attention_received

    visual = model.model.visual
    attn = visual.blocks[-1].attn
    x = seen["args"][0] if seen["args"] else seen["kw"]["hidden_states"]
    cu, (cos, sin) = seen["kw"]["cu_seqlens"], seen["kw"]["position_embeddings"]
    n = x.shape[0]
    q, k, _ = attn.qkv(x).reshape(n, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    rotate = inspect.getmodule(type(attn)).apply_rotary_pos_emb_vision
    q, k = rotate(q, k, cos, sin)
    received = torch.empty(n)
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        received[s:e] = mean_attention_received(q[s:e].transpose(0, 1)[None], k[s:e].transpose(0, 1)[None],
                                                attn.scaling)[0]
    merged = received.reshape(-1, visual.spatial_merge_size ** 2).mean(-1)
    if hasattr(visual, "window_size"):  # Qwen2.5-VL runs its blocks in window order; the merger restores it
        window_index, _ = get_vision_window_index(thw, spatial_merge_size=visual.spatial_merge_size,
                                                  window_size=visual.window_size, patch_size=visual.patch_size,
                                                  kwargs={})
        merged = merged[torch.argsort(window_index)]
    return merged


class QwenVL(Family):
    """Qwen2.5-VL (and, subclassed, Qwen3-VL) on the VideoQA path: the processor's chat template, the frames'
    real timing, M-RoPE ids from the model's own get_rope_index for the unpruned prompt, each kept token keeping
    its own (both positions rules give it: see select.py), and resolution as the adaptive policy's third knob."""

    name = "qwen2.5-vl"
    model_types = ("qwen2_5_vl",)
    frames_per_group = 2
    uses_timing = True

    def classes(self) -> tuple[type, type]:
        return _classes(self.name)[1:3]

    def render(self, processor, question, history=None, template="plain") -> str:
        return chat_prompt(processor, question, history)

    def encode(self, model, processor, frames, device, dtype, cancel, timing=None, max_pixels=None):
        """The video processor at the frames' timing (and at most `max_pixels` a frame), then the tower: the
        merged tokens, the tower saliency, deepstack features and what get_rope_index needs later."""
        from transformers.video_utils import VideoMetadata

        from ..pruning import EncodedVideo, VisualLayout

        cancel()
        indices = list(timing.indices)
        meta = VideoMetadata(total_num_frames=max(indices) + 1, fps=timing.fps, frames_indices=indices)
        extra = {} if max_pixels is None else {"size": self.size_at(processor, max_pixels, len(frames))}
        inputs = processor.video_processor(videos=[frames], video_metadata=[meta], do_sample_frames=False,
                                           return_tensors="pt", **extra)
        cancel()
        inputs = {"pixel_values_videos": inputs["pixel_values_videos"].to(device, dtype),
                  "video_grid_thw": inputs["video_grid_thw"].to(device)}
        p = prepare(model, inputs, with_positions=False)
        t, rows, cols = p.layout.groups, *p.layout.grid
        extras = {"grid_thw": inputs["video_grid_thw"], "deepstack": p.layer_additions,
                  **self.time_axis(processor, meta)}
        features = p.features.view(t, rows * cols, -1)
        layout = VisualLayout(t, rows, has_cls=False, cols=cols, frames_per_token=p.layout.frames_per_group)
        return EncodedVideo(features, features, p.saliency.view(t, -1), layout, extras=extras)

    def time_axis(self, processor, meta) -> dict:
        """Qwen2.5-VL: seconds per temporal patch, M-RoPE's time step (the processor's second_per_grid_ts)."""
        import torch

        return {"second_per_grid_ts": torch.tensor([processor.video_processor.temporal_patch_size
                                                    / meta.sampled_fps])}

    def positions(self, model, batch, requests):
        """[3, B, n]: each prompt's unpruned ids through get_rope_index, the kept tokens' columns, left-padded."""
        import torch

        out = torch.zeros(3, *batch.ids.shape, dtype=torch.long, device=batch.ids.device)
        cfg = model.config
        for i, req in enumerate(requests):
            ids = req.ids.tolist()
            full, keep = unpruned(ids, cfg, req.enc.layout, req.kept)
            full_ids = torch.tensor([full], device=batch.ids.device)
            kwargs = {k: v.to(batch.ids.device) for k, v in req.enc.extras.items()
                      if k in ("grid_thw", "second_per_grid_ts")}
            kwargs["video_grid_thw"] = kwargs.pop("grid_thw")
            pos = rope_positions(model, {"input_ids": full_ids, "attention_mask": torch.ones_like(full_ids),
                                         "mm_token_type_ids": (full_ids == cfg.video_token_id).long() * 2,
                                         **kwargs})
            out[:, i, out.shape[-1] - len(ids):] = pos[:, 0, torch.tensor(keep, device=pos.device)]
        return out

    def dims(self, config, dtype_bytes: int = 2):
        from ..pruning import ModelDims

        return ModelDims.from_text_config(config.text_config, 0, dtype_bytes)

    def dims_for(self, config, processor, dtype_bytes: int = 2, max_pixels: int | None = None):
        """Tokens a source frame costs at most: a square frame of the pixel bound, merged, over two frames."""
        from dataclasses import replace

        vision = config.vision_config
        side = vision.patch_size * vision.spatial_merge_size
        pixels = min(max_pixels or self.frame_pixels(processor), self.frame_pixels(processor))
        groups_tokens = max(1, pixels // (side * side))
        return replace(self.dims(config, dtype_bytes), tokens_per_frame=-(-groups_tokens // self.frames_per_group))

    def frame_pixels(self, processor) -> int:
        """The processor's bound on a frame's pixels."""
        return int(processor.video_processor.size["longest_edge"])

    def size_at(self, processor, max_pixels: int, n_frames: int) -> dict:
        """The video processor's `size` for at most `max_pixels` a frame."""
        low = int(processor.video_processor.size["shortest_edge"])
        return {"shortest_edge": min(low, max_pixels), "longest_edge": max_pixels}

    def resolutions(self, processor) -> list[int]:
        """The processor's pixel bound, then halved while it stays above its lower bound (and 4 merged tokens)."""
        vision_side = 28 if self.name == "qwen2.5-vl" else 32
        floor = max(int(processor.video_processor.size["shortest_edge"]), 4 * vision_side * vision_side)
        sizes = [self.frame_pixels(processor)]
        while sizes[-1] // 2 >= floor:
            sizes.append(sizes[-1] // 2)
        return sizes

    def reference_config(self):
        from ..gpucheck.families_shapes import config_7b

        return config_7b(self.name)


class Qwen3VL(QwenVL):
    """Qwen3-VL: 16 px patches, a timestamp before each temporal patch's tokens, deepstack features."""

    name = "qwen3-vl"
    model_types = ("qwen3_vl",)

    def time_axis(self, processor, meta) -> dict:
        """The timestamps the processor writes before each temporal patch (`<t seconds>`, one decimal)."""
        return {"timestamps": processor._calculate_timestamps(meta.frames_indices, meta.fps,
                                                              processor.video_processor.temporal_patch_size)}

    def expand(self, processor, config, ids, enc, kept):
        """Per temporal patch: its timestamp text, then its kept tokens between the vision markers."""
        per = enc.layout.tokens_per_frame
        counts = [per] * enc.layout.n_frames
        if kept is not None:
            counts = [0] * enc.layout.n_frames
            for i in kept:
                counts[i // per] += 1
        slots = [i for i, t in enumerate(ids) if t == config.video_token_id]
        if len(slots) != 1:
            from ..errors import InputError

            raise InputError(f"the prompt template has {len(slots)} video tokens; it needs exactly one")
        at = slots[0]
        tok = processor.tokenizer
        middle = []
        for t, n in zip(enc.extras["timestamps"], counts, strict=True):
            middle += tok(f"<{t:.1f} seconds>", add_special_tokens=False)["input_ids"]
            middle += [config.vision_start_token_id] + [config.video_token_id] * n + [config.vision_end_token_id]
        return ids[:at] + middle + ids[at + 1:]

    def layer_additions(self, model, batch, requests):
        """Each deepstack level's features in the kept visual slots (a merged token gets its kept token's)."""
        import torch

        levels = len(requests[0].enc.extras.get("deepstack", []))
        additions = [torch.zeros_like(batch.embeds) for _ in range(levels)]
        for i, req in enumerate(requests):
            kept = torch.arange(req.enc.layout.n_tokens) if req.kept is None else torch.as_tensor(req.kept)
            for add, features in zip(additions, req.enc.extras["deepstack"], strict=True):
                add[i][batch.visual_mask[i]] = features[kept.to(features.device)].to(add)
        return additions

    def frame_pixels(self, processor) -> int:
        """Qwen3-VL's processor bounds all frames' pixels together: its budget over DEFAULT_FRAMES frames."""
        from ..pruning.budget import DEFAULT_FRAMES

        return int(processor.video_processor.size["longest_edge"]) // DEFAULT_FRAMES

    def size_at(self, processor, max_pixels: int, n_frames: int) -> dict:
        low = int(processor.video_processor.size["shortest_edge"])
        return {"shortest_edge": min(low, max_pixels * n_frames), "longest_edge": max_pixels * n_frames}


def unpruned(ids: list[int], config, layout, kept: list[int] | None) -> tuple[list[int], list[int]]:
    """A prompt's ids as the processor gave them before pruning (every visual slot), and the columns of the
    pruned prompt's tokens in it. Each pair of vision markers holds a temporal patch (Qwen3-VL) or all of them."""
    start, video = config.vision_start_token_id, config.video_token_id
    kept_set = set(range(layout.n_tokens)) if kept is None else set(kept)
    opens = [i for i, t in enumerate(ids) if t == start]
    per_pair = layout.n_tokens if len(opens) == 1 else layout.tokens_per_frame
    full, keep, visual, i = [], [], 0, 0
    while i < len(ids):
        if ids[i] == video:
            i += 1
            continue
        keep.append(len(full))
        full.append(ids[i])
        if ids[i] == start:
            for v in range(visual, visual + per_pair):
                if v in kept_set:
                    keep.append(len(full))
                full.append(video)
            visual += per_pair
        i += 1
    return full, keep
