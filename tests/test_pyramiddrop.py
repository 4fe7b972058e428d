"""PyramidDrop inside the LLM: at each stage boundary the kept set is the top of that layer's own attention from the
last instruction token (recomputed here from transformers' eager weights under the earlier stages' masks), the
counts follow the published schedule (λ = 0.5: 50%, 25%, 12.5% of the tokens), and the pruned logits equal a
masked-attention reference."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.clipgen import write_clip
from helpers.masked_reference import Recorder, masked_forward
from helpers.masked_reference import present_before as present_before_layer

from videoqa import llm
from videoqa.cli import main
from videoqa.pruning import PruneConfig
from videoqa.pruning.registry import REGISTRY

R = 0.875  # with four stages: the published λ = 0.5


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("pdrop") / "c.mp4", n_frames=16)


def test_stages_keep_the_top_of_each_layers_own_attention_and_logits_match(tiny_qa, clip):
    cfg = PruneConfig(method="pyramiddrop", r=R).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    plan = Recorder(REGISTRY.get("pyramiddrop").plan(cfg.options, [R], 65))
    state = llm.prefill(tiny_qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)

    embeds, vis = batch.embeds, batch.visual_mask[0].nonzero().squeeze(-1)
    n_vis, layers = len(vis), (1, 2, 3)  # 8, 16, 24 of 32 layers, on this 4-layer model
    dropped_at: dict[int, list[int]] = {}  # layer -> sequence positions dropped before it

    def present_before(i):
        return present_before_layer(embeds.shape[1], dropped_at, i)

    expected = []
    for stage, layer in enumerate(layers, start=1):
        _, weights = masked_forward(tiny_qa.model, embeds, lambda i, h, w: (present_before(i), None))
        still = [p for p in vis.tolist() if present_before(layer - 1)[p]]
        score = weights[layer].mean(0)[-1][still]  # the layer's own heads, the last prompt token's row
        n_keep = int(n_vis * 0.5 ** stage)
        top = {still[j] for j in torch.topk(score, n_keep).indices.tolist()}
        dropped_at[layer] = [p for p in still if p not in top]
        expected.append(sorted(p - int(vis[0]) for p in top))
    ref, _ = masked_forward(tiny_qa.model, embeds, lambda i, h, w: (present_before(i), None))

    assert [s[0] for s in plan.stages] == list(layers)
    assert [len(s[1]) for s in plan.stages] == [260, 130, 65]  # 520 tokens: 50%, 25%, 12.5%
    assert [s[1] for s in plan.stages] == expected
    assert state.kept[0].tolist() == expected[-1]
    torch.testing.assert_close(state.logits, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_ask_json_reports_the_last_stage_and_the_flops_of_every_stage(capsys, tiny_model_dir, clip):
    code = main(["ask", str(clip), "What is shown?", "--model", str(tiny_model_dir), "--json", "--prune",
                 "pyramiddrop", "--r", "0.75", "--max-new-tokens", "2"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and record["kept"]["method"] == "pyramiddrop"
    # λ = 0.25^(1/3): int(520 λ) = 327, int(520 λ²) = 206, int(520 λ³) = 130 before layers 1, 2, 3 of 4
    assert record["kept"]["n_kept"] == 130
    d, m, n_text = 64, 128, record["flops"]["n_tokens"] - 520  # the tiny model's hidden and FFN sizes

    def f(n):
        return 4 * n * d * d + 2 * n * n * d + 2 * n * d * m
    pruned = f(n_text + 520) + f(n_text + 327) + f(n_text + 206) + f(n_text + 130)
    assert record["flops"]["pruned"] == pruned
