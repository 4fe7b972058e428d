"""The `laptop` suite: LLaVA-OneVision-0.5B's real shapes (Qwen2-0.5B LM, SigLIP-so400m at 384 px; random
weights, ≈0.9 B parameters) on this machine's CPU, 8 and 32 frames, unpruned vs FastV K=2 R=0.5 vs adaptive R:
time to first token (the tower's encode plus the prefill) and peak memory, next to the FLOPs ratio."""

from __future__ import annotations

import time

import torch

from ..measure import PeakMemory, free_memory_bytes
from ..models import llava_onevision
from ..models.prepared import generate
from ..models.tiny_chatml import OV_MEDIA, chatml_tokenizer
from ..pruning import PruneConfig, keep_count
from ..pruning.flops import estimate_flops
from ..pruning.methods.fastv.algorithm import FastVPlan
from ..pruning.planner import plan

CHECKPOINT = "llava-hf/llava-onevision-qwen2-0.5b-ov-hf"
QUESTION = "What is happening in this video? Describe the motion of every object."


def config_0p5b():
    """The 0.5B checkpoint's architecture (its config.json's sizes), our tokenizer's special-token ids."""
    from transformers import LlavaOnevisionConfig

    from ..gpucheck.families_shapes import _id

    vision = dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304, num_hidden_layers=26,
                  num_attention_heads=16, image_size=384, patch_size=14)
    text = dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                rope_theta=1000000.0, tie_word_embeddings=True, eos_token_id=_id("<|im_end|>"),
                pad_token_id=_id("<|endoftext|>"))
    return LlavaOnevisionConfig(vision_config=vision, text_config=text, image_token_index=_id("<image>"),
                                video_token_index=_id("<video>"), vision_feature_layer=-1,
                                vision_feature_select_strategy="full", tie_word_embeddings=True)


def run_laptop(frame_counts: tuple[int, ...] = (8, 32), dtype: torch.dtype = torch.float32, config=None) -> str:
    """The table; `config`: another LLaVA-OneVision architecture (the tests' tiny one), default the 0.5B one."""
    from ..gpucheck.models import synthetic_frames
    from ..model_policy import model_policy
    from ..models.families import card_of

    config = config or config_0p5b()
    side = config.vision_config.image_size
    torch.manual_seed(0)
    model = llava_onevision.model_class()._from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    n_params = sum(p.numel() for p in model.parameters())
    spec = llava_onevision.TinyOneVisionSpec(image_size=side, patch_size=config.vision_config.patch_size)
    processor = llava_onevision.tiny_processor(spec, chatml_tokenizer(400, OV_MEDIA))
    dims = llava_onevision.LlavaOnevision().dims(config, torch.finfo(dtype).bits // 8)
    policy = model_policy(card_of(CHECKPOINT)).policy
    rows = []
    for frames in frame_counts:
        inputs = llava_onevision.processor_inputs(processor, synthetic_frames(frames, side), QUESTION)
        t0 = time.perf_counter()
        with torch.inference_mode():
            prepared = llava_onevision.prepare(model, inputs)
        t_encode = time.perf_counter() - t0
        n_vis = int(prepared.visual_mask.sum())
        n_text = len(prepared.ids) - n_vis
        auto = plan(dims, PruneConfig(method="fastv", r="auto", k=2).validate(), n_text, frames / 2.0, frames, 16,
                    free_memory_bytes(torch.device("cpu")), policy)
        for name, r in (("unpruned", None), ("fastv K=2 R=0.5", 0.5), (f"adaptive (R={auto.r:.2f})", auto.r)):
            fastv = None if r is None else FastVPlan(k=2, r=r)
            memory = PeakMemory("cpu").start()
            t0 = time.perf_counter()
            generate(model, [prepared], max_new_tokens=1, plan=fastv)
            t_prefill = time.perf_counter() - t0
            peak, _ = memory.stop()
            flops = estimate_flops(dims, n_text, n_vis, n_vis if r is None else keep_count(n_vis, r),
                                   None if r is None else 2)
            rows.append((frames, n_vis, name, t_encode + t_prefill, t_prefill, peak / 2**30, flops.ratio))
    shapes = "LLaVA-OneVision-0.5B shapes" if side == 384 else f"LLaVA-OneVision at {side} px"
    lines = [f"{shapes}, random weights ({n_params / 1e9:.2f} B parameters, "
             f"{str(dtype).removeprefix('torch.')}, {torch.get_num_threads()} threads), one run each",
             "", "| frames | visual tokens | run | TTFT s | of it prefill s | peak RSS GiB | FLOPs ratio |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {f} | {n} | {name} | {ttft:.1f} | {pre:.1f} | {peak:.2f} | {ratio:.3f} |"
              for f, n, name, ttft, pre, peak, ratio in rows]
    return "\n".join(lines)
