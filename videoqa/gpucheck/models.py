"""What the check runs on: Video-LLaVA-7B's architecture with random weights (tiny shapes for the CPU dry run),
built through the real classes directly on the device, and prompts made by the pipeline's own stages."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..measure import device_clock
from ..models import VideoLlava
from ..models.languagebind import add_temporal_tower, encoder_layers, has_temporal_attention
from ..models.tiny import PAD_ID, TinySpec, build_processor, build_tokenizer
from ..models.tiny import build_config as tiny_config

FAMILY = VideoLlava()  # the family whose 7B-class shapes the check runs
QUESTION = "What is happening in this video? Describe the motion of every object."
OTHER_QUESTION = "Which colour is the moving shape?"  # shorter: left-padded next to QUESTION in a batch


@dataclass(frozen=True)
class Target:
    """Where and at which shapes the check runs."""

    name: str
    device: str
    dtype: torch.dtype
    spec: TinySpec | None  # None: VideoLlavaConfig()'s defaults, the 7B architecture
    frames: tuple[int, ...] = (8, 15)
    repeats: int = 5  # timed runs per prefill figure (after a warm-up)
    decode_tokens: int = 32  # timed decode steps
    compile: bool = True  # time the torch.compile'd decode step (inductor: minutes on a CPU)
    memory_new_tokens: int = 64  # tokens decoded in the memory check (the adaptive policy's new_tokens)
    clip: tuple[float, int, int] = (10.0, 30, 360)  # the answer check's mp4: seconds, fps, height (16:9)
    kernels: tuple[str, ...] = ("sdpa", "eager", "flash_attention_2")
    extra: dict = field(default_factory=dict)


def gpu_target() -> Target:
    return Target("video-llava-7b", "cuda", torch.bfloat16, None)


def cpu_target() -> Target:
    spec = TinySpec(hidden=64, layers=4, heads=4, kv_heads=2, ffn=172)
    return Target("tiny", "cpu", torch.float32, spec, repeats=2, decode_tokens=4, compile=False,
                  memory_new_tokens=4, clip=(2.0, 10, 90))


def build_config(target: Target):
    """The family's 7B-class config (Video-LLaVA-7B's architecture), or tiny shapes."""
    if target.spec is not None:
        return tiny_config(target.spec, target.spec.vocab_size)
    return FAMILY.reference_config()


def build_qa(target: Target):
    """(VideoQA over a random-weight model initialised on the device, seconds it took)."""
    from ..model import LoadedModel
    from ..pipeline import VideoQA

    clock = device_clock(torch.device(target.device))  # synced: the weights' initialisation is queued on CUDA
    t0 = clock()
    cfg = build_config(target)
    torch.manual_seed(0)
    with torch.device(target.device):
        model = FAMILY.classes()[0]._from_config(cfg, dtype=target.dtype, attn_implementation="sdpa")
    # the published Video-LLaVA's tower: LanguageBind's temporal attention in every layer (random weights too)
    add_temporal_tower(model, 8)
    for layer in encoder_layers(model.model.video_tower):
        torch.nn.init.normal_(layer.temporal_embedding, std=layer.embed_dim ** -0.5)
    model.eval().requires_grad_(False)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = None  # random weights: always decode the full length
    vision = cfg.vision_config
    processor = build_processor(build_tokenizer(), vision.image_size, vision.patch_size)
    loaded = LoadedModel(model, processor, torch.device(target.device), target.dtype, target.name)
    qa = VideoQA(loaded, max_new_tokens=8)
    return qa, clock() - t0


def shapes_of(qa) -> dict:
    """The built model's shapes, read back from its config (so the report shows what really ran)."""
    t, v = qa.model.config.text_config, qa.model.config.vision_config
    n_params = sum(p.numel() for p in qa.model.parameters())
    return {"text": {"layers": t.num_hidden_layers, "hidden": t.hidden_size, "ffn": t.intermediate_size,
                     "heads": t.num_attention_heads, "kv_heads": t.num_key_value_heads,
                     "context": t.max_position_embeddings, "vocab": t.vocab_size},
            "vision": {"layers": v.num_hidden_layers, "hidden": v.hidden_size, "image": v.image_size,
                       "patch": v.patch_size, "tokens_per_frame": (v.image_size // v.patch_size) ** 2 + 1,
                       "temporal_attention": has_temporal_attention(qa.model.model.video_tower)},
            "params": n_params, "dtype": str(qa.dtype).removeprefix("torch.")}


def synthetic_frames(n: int, size: int = 320, seed: int = 0) -> np.ndarray:
    """n RGB frames (uint8) of a square moving over a gradient: content the vision tower can tell apart."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    frames = []
    for i in range(n):
        img = np.stack([x * 255 // size, y * 255 // size, np.full_like(x, 40 * (i % 6))], -1).astype(np.uint8)
        s = size // 5
        x0 = (i * size // max(n, 1)) % (size - s)
        img[size // 3: size // 3 + s, x0: x0 + s] = (230, 40, 40)
        img = np.clip(img.astype(np.int16) + rng.integers(-8, 9, img.shape), 0, 255).astype(np.uint8)
        frames.append(img)
    return np.stack(frames)


def clip_of(frames: np.ndarray):
    """A Clip from in-memory frames (the pipeline accepts one in place of a file)."""
    from ..video import Clip, VideoInfo

    n, h, w, _ = frames.shape
    info = VideoInfo(path="<generated>", duration_s=n / 8.0, fps=8.0, total_frames=n, width=w, height=h,
                     codec="raw", container="memory")
    return Clip(frames=frames, indices=list(range(n)), timestamps=[i / 8.0 for i in range(n)], info=info,
                backend="memory")


@torch.inference_mode()
def prompt_batch(qa, frames: int, questions: tuple[str, ...] = (QUESTION,), seed: int = 0):
    """The pipeline's collated, left-padded prompt(s) for `frames` generated frames, no pruning before the LLM:
    (Collated, requests)."""
    from ..pruning import PruneConfig

    clip = clip_of(synthetic_frames(frames, seed=seed))
    cfg = PruneConfig(method="none", r=0.0).validate()
    reqs = [qa.prepare(clip, q, None, cfg, frames, 8) for q in questions]
    return qa.collate(reqs), reqs

