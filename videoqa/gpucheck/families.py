"""The accelerator check for today's families: LLaVA-OneVision-7B (Qwen2-7B LM, SigLIP-so400m, 32 frames x 196
tokens) and Qwen2.5-VL-7B (32 frames at 448x448), random weights of the real classes.

`dry_run(family)` builds the 7B architecture on the meta device (no memory, seconds on a CPU) and reads back what
the GPU run will meet: parameters, visual tokens, prompt length, KV bytes, the FLOPs ratio of FastV K=2 R=0.5.
`check(family, device, shapes)` runs the same correctness comparisons as the tests on a model built on the device
(7B on a GPU, the tiny models on a CPU): our unpruned prefill against transformers' forward, FastV's logits against
transformers' forward with the dropped tokens masked from layer K, and the two prefill times.
"""

from __future__ import annotations

import time

import torch

from ..models import llava_onevision, qwen_vl
from ..models.prepared import generate
from ..models.tiny_chatml import OV_MEDIA, QWEN_MEDIA, chatml_tokenizer
from ..pruning import keep_count
from ..pruning.flops import estimate_flops
from ..pruning.methods.fastv.algorithm import FastVPlan
from .families_shapes import FRAMES, SIZE, config_7b, dims_7b
from .models import synthetic_frames

QUESTION = "What is happening in this video? Describe the motion of every object."


def visual_tokens(family: str, config, frames: int, size: int) -> int:
    """Visual tokens of `frames` square frames of `size` px, by the family's processor rules."""
    v = config.vision_config
    if family == "llava-onevision":
        rows, cols = llava_onevision.pooled_grid(config)
        return frames * rows * cols + 1  # + the newline after the frames
    side = size // (v.patch_size * v.spatial_merge_size)
    return -(-frames // v.temporal_patch_size) * side * side


def dry_run(family: str) -> dict:
    """The 7B architecture on the meta device: what the GPU check will run, with no weights allocated."""
    config = config_7b(family)
    model_cls = (llava_onevision.model_class() if family == "llava-onevision" else qwen_vl._classes(family)[1])
    with torch.device("meta"):
        model = model_cls._from_config(config, dtype=torch.bfloat16)
    n_vis = visual_tokens(family, config, FRAMES, SIZE[family])
    n_text = 40
    dims = dims_7b(family)
    fastv = estimate_flops(dims, n_text, n_vis, keep_count(n_vis, 0.5), 2)
    kv_per_token = 2 * dims.n_layers * dims.n_kv_heads * dims.head_dim * 2  # bf16
    return {"family": family, "params": sum(p.numel() for p in model.parameters()), "frames": FRAMES,
            "frame_size": SIZE[family], "visual_tokens": n_vis, "prompt_tokens": n_vis + n_text,
            "kv_bytes_unpruned": kv_per_token * (n_vis + n_text), "fastv_k2_r05_flops_ratio": round(fastv.ratio, 4),
            "layers": dims.n_layers, "context": dims.context}


def build(family: str, device: str, dtype: torch.dtype, tiny_dir=None):
    """(model, processor): random 7B weights on `device`, or the tiny model saved in `tiny_dir`."""
    if tiny_dir is not None:
        if family == "llava-onevision":
            llava_onevision.make_tiny_onevision(tiny_dir)
            model, processor, _ = llava_onevision.load(tiny_dir, dtype)
        else:
            qwen_vl.make_tiny_qwen(tiny_dir, qwen_vl.TinyQwenSpec(family=family))
            model, processor, _ = qwen_vl.load(tiny_dir, family, dtype)
        return model.to(device), processor
    config = config_7b(family)
    tokenizer = chatml_tokenizer(400, OV_MEDIA if family == "llava-onevision" else QWEN_MEDIA)
    with torch.device(device):
        model_cls = (llava_onevision.model_class() if family == "llava-onevision" else qwen_vl._classes(family)[1])
        model = model_cls._from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    if family == "llava-onevision":
        spec = llava_onevision.TinyOneVisionSpec(image_size=config.vision_config.image_size,
                                                 patch_size=config.vision_config.patch_size)
        processor = llava_onevision.tiny_processor(spec, tokenizer)
    else:
        pixels = SIZE[family] ** 2
        spec = qwen_vl.TinyQwenSpec(family=family, max_pixels=pixels, min_pixels=pixels, max_frames=FRAMES)
        processor = qwen_vl.tiny_processor(spec, tokenizer)
    return model, processor


@torch.inference_mode()
def check(family: str, model, processor, frames: int, size: int) -> dict:
    """Unpruned and FastV (K=2, R=0.5) prefill against transformers' own forward; both prefill times."""
    from ..models.reference import forward_with_dropped_keys

    clip = synthetic_frames(frames, size)
    if family == "llava-onevision":
        inputs = llava_onevision.processor_inputs(processor, clip, QUESTION)
    else:
        inputs = qwen_vl.processor_inputs(processor, clip, QUESTION, 8.0, list(range(frames)))
    inputs = inputs.to(model.device)
    prepared = (llava_onevision if family == "llava-onevision" else qwen_vl).prepare(model, inputs)
    out = {"family": family, "frames": frames, "visual_tokens": int(prepared.visual_mask.sum()),
           "prompt_tokens": len(prepared.ids)}
    for name, plan in (("unpruned", None), ("fastv", FastVPlan(k=2, r=0.5))):
        t0 = time.perf_counter()
        _, state = generate(model, [prepared], max_new_tokens=1, plan=plan)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        out[f"{name}_prefill_s"] = round(time.perf_counter() - t0, 4)
        dropped = torch.zeros_like(prepared.visual_mask)
        if plan is not None:
            vis = prepared.visual_mask.nonzero().squeeze(-1)
            dropped[vis] = True
            dropped[vis[state.kept[0].cpu()]] = False
        ref = forward_with_dropped_keys(model, inputs, 2 if plan else len(model.model.language_model.layers),
                                        dropped.to(model.device))
        out[f"{name}_max_abs_dlogit"] = float((state.logits[0] - ref).abs().max())
        out[f"{name}_same_top1"] = int(state.logits[0].argmax()) == int(ref.argmax())
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m videoqa.gpucheck.families [--cpu]`: the 7B dry run, then the check (7B on CUDA; tiny on CPU)."""
    import argparse
    import json
    import tempfile

    p = argparse.ArgumentParser(prog="python -m videoqa.gpucheck.families", description=__doc__)
    p.add_argument("--cpu", action="store_true", help="run the check on the tiny models on the CPU")
    args = p.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check families: no CUDA device; use --cpu for the dry run")
        return 2
    for family in ("llava-onevision", "qwen2.5-vl"):
        print(json.dumps(dry_run(family)))
        if args.cpu:
            with tempfile.TemporaryDirectory() as tmp:
                model, processor = build(family, "cpu", torch.float32, tiny_dir=tmp)
                print(json.dumps(check(family, model, processor, frames=8, size=112)))
        else:
            model, processor = build(family, "cuda", torch.bfloat16)
            print(json.dumps(check(family, model, processor, FRAMES, SIZE[family])))
            del model
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
