"""The random-weight decoder the `llm`, `frames`, `decode` and memory suites run, and its synthetic prompts."""

from __future__ import annotations

import torch

from ..models.video_llava import video_llava_7b_dims
from ..pruning import REGISTRY, Acts, EncodedVideo, ModelDims, PruneConfig, VisualLayout, keep_count
from .setup import PRESETS, Setup

TOKENS_PER_FRAME = video_llava_7b_dims().tokens_per_frame  # 257: 16x16 patches + the frame's CLS
TEXT_BEFORE, TEXT_AFTER = 35, 25  # "USER: " + system prefix before the video, the question after it



def build_lm(setup: Setup):
    """A random-weight causal LM of the preset's shape (Llama, the Video-LLaVA-7B decoder family)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", **PRESETS[setup.preset], attn_implementation=setup.attn)
    torch.manual_seed(setup.seed)
    dtype = getattr(torch, setup.dtype)
    with torch.device(setup.device):
        model = AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    return model


def dims_of(model, dtype: torch.dtype) -> ModelDims:
    return ModelDims.from_text_config(model.config, grid=16, dtype_bytes=torch.finfo(dtype).bits // 8)


def make_prompt(model, frames: int, n_keep: int | None = None, seed: int = 0):
    """Embeddings of [text | frames*257 visual | text]; with n_keep, only that many visual tokens."""
    g = torch.Generator().manual_seed(seed)
    n_vis = frames * TOKENS_PER_FRAME if n_keep is None else n_keep
    n = TEXT_BEFORE + n_vis + TEXT_AFTER
    p = next(model.parameters())
    embeds = (torch.randn(1, n, model.config.hidden_size, generator=g) * 0.02).to(p.device, p.dtype)
    vis = torch.zeros(1, n, dtype=torch.bool, device=p.device)
    vis[0, TEXT_BEFORE:TEXT_BEFORE + n_vis] = True
    return embeds, torch.ones(1, n, dtype=torch.long, device=p.device), vis


def bench_config(method: str, r: float | str, k: int) -> PruneConfig:
    """A registered method at R, at layer `k` when it has FastV's K (as the pipeline gives a model's K); its other
    options, and the layers of other in-LLM methods, at their defaults."""
    spec = REGISTRY.get(method)
    layer = {"k": k} if spec.option("k") is not None else {}
    return PruneConfig(method, r=r if spec.uses_r else 0.0, **layer).validate()


def llm_inputs(model, frames: int, cfg: PruneConfig, r: float) -> tuple[tuple, object, int]:
    """(prefill inputs, the in-LLM ranking plan or None, kept visual tokens) of `frames` frames under `cfg`:
    a method acting before the LLM simply leaves the LLM `kept` visual tokens from layer 0; one acting before and
    inside it leaves what its selection kept, with its plan."""
    spec = cfg.method_spec
    n_vis = frames * TOKENS_PER_FRAME
    kept = n_vis if spec.acts is Acts.NEVER else keep_count(n_vis, r)
    if spec.acts is Acts.IN_LLM:
        return make_prompt(model, frames), spec.plan(cfg.options, [r], TOKENS_PER_FRAME), kept
    if spec.two_stage(cfg.options):  # its selection on a random encoding, then its stage inside the LLM
        cfg = cfg.validate(model.config.num_hidden_layers)  # its layer scaled to this depth
        p = next(model.parameters())
        sel = spec.select(random_encoding(frames, model.config.hidden_size, p.device), kept, cfg.options)
        plan = spec.llm_plan(cfg.options, [r], TOKENS_PER_FRAME, [sel])
        return make_prompt(model, frames, n_keep=len(sel.visual)), plan, len(sel.visual)
    return make_prompt(model, frames, n_keep=None if spec.acts is Acts.NEVER else kept), None, kept


def random_encoding(frames: int, hidden: int, device: str | torch.device = "cpu") -> EncodedVideo:
    """A seeded random encoding of `frames` frames with LLM-sized features (what a before-the-LLM method chooses
    among here)."""
    g = torch.Generator().manual_seed(0)
    return EncodedVideo(features=torch.randn(frames, TOKENS_PER_FRAME, hidden, generator=g).to(device),
                        vision_features=torch.randn(frames, TOKENS_PER_FRAME, 1024, generator=g).to(device),
                        cls_attention=torch.rand(frames, TOKENS_PER_FRAME, generator=g).softmax(-1).to(device),
                        layout=VisualLayout(frames, 16))
