"""The accelerator check of today's families: its 7B shapes, built on the meta device on a CPU, are the published
ones; its comparisons, run on the tiny models, find our prefill equal to transformers' forward."""

from __future__ import annotations

import pytest
import torch

from videoqa.gpucheck.families import build, check, dry_run

# Published sizes: llava-hf/llava-onevision-qwen2-7b-ov-hf and Qwen/Qwen2.5-VL-7B-Instruct list 8.03 B and 8.29 B.
PUBLISHED = {"llava-onevision": (8.03e9, 32 * 14 * 14 + 1), "qwen2.5-vl": (8.29e9, 32 // 2 * (448 // 28) ** 2)}


@pytest.mark.parametrize("family", sorted(PUBLISHED))
def test_dry_run_builds_the_published_7b_shapes(family):
    out = dry_run(family)
    params, tokens = PUBLISHED[family]
    assert abs(out["params"] - params) / params < 0.01
    assert out["visual_tokens"] == tokens
    assert 0.45 < out["fastv_k2_r05_flops_ratio"] < 0.55


@pytest.mark.parametrize("family", ["llava-onevision", "qwen2.5-vl", "qwen3-vl"])
def test_check_at_tiny_shapes_finds_our_prefill_equal_to_transformers(family, tmp_path):
    torch.set_num_threads(1)
    model, processor = build(family, "cpu", torch.float32, tiny_dir=tmp_path)
    out = check(family, model, processor, frames=8, size=112)
    for name in ("unpruned", "fastv"):
        assert out[f"{name}_max_abs_dlogit"] < 1e-5 and out[f"{name}_same_top1"], out
