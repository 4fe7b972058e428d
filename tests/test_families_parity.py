"""Today's families (LLaVA-OneVision, Qwen2.5-VL, Qwen3-VL) on tiny random models of the real classes, saved with
save_pretrained and loaded back, against transformers' own computations:

- unpruned: our prefill + greedy decode gives transformers' `generate()` answer and logits, both fed by the
  family's own processor on the same frames (Qwen: with the frames' real timing);
- FastV: the kept set is the top of the attention transformers' eager forward pays the visual tokens at layer K-1,
  and the logits equal transformers' own forward with the dropped tokens masked out as keys from layer K on (its
  own embeddings, M-RoPE positions and deepstack), K in {1, 2, 3} x R in {.25, .5, .75};
- a left-padded batch of two equals the two single runs; eager attention equals SDPA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from videoqa.models import llava_onevision as ov
from videoqa.models import qwen_vl
from videoqa.models.prepared import generate
from videoqa.models.reference import forward_with_dropped_keys
from videoqa.pruning import keep_count
from videoqa.pruning.methods.fastv.algorithm import FastVPlan

FAMILIES = ["llava-onevision", "qwen2.5-vl", "qwen3-vl"]
FPS, INDICES = 10.0, list(range(0, 80, 10))  # 8 frames sampled every second of a 10 fps clip
ATOL = 1e-5


def frames(seed: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 255, (8, 112, 112, 3), dtype=np.uint8)


class Family:
    """A saved tiny model of one family, loaded with SDPA and with eager attention."""

    def __init__(self, name: str, path):
        self.name = name
        if name == "llava-onevision":
            ov.make_tiny_onevision(path)
            (self.model, self.processor, _), (self.eager, _, _) = ov.load(path), ov.load(path, attn="eager")
        else:
            qwen_vl.make_tiny_qwen(path, qwen_vl.TinyQwenSpec(family=name))
            self.model, self.processor, _ = qwen_vl.load(path, name)
            self.eager, _, _ = qwen_vl.load(path, name, attn="eager")

    def inputs(self, question: str = "What colour is the shape?", seed: int = 0):
        if self.name == "llava-onevision":
            return ov.processor_inputs(self.processor, frames(seed), question)
        return qwen_vl.processor_inputs(self.processor, frames(seed), question, FPS, INDICES)

    def prepare(self, inputs, model=None):
        module = ov if self.name == "llava-onevision" else qwen_vl
        return module.prepare(model or self.model, inputs)


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tmp_path_factory):
    torch.set_num_threads(1)
    return Family(request.param, tmp_path_factory.mktemp(request.param))


def reference_with_dropped_keys(model, inputs, k: int, dropped: torch.Tensor) -> torch.Tensor:
    """transformers' own forward (its embeddings, positions, deepstack) where layers >= k may not attend to the
    `dropped` sequence positions: FastV's attention-mask form, with no cache and no slicing. Last-position logits."""
    return forward_with_dropped_keys(model, inputs, k, dropped)


@torch.no_grad()
def test_unpruned_answer_and_logits_equal_transformers_generate(fam):
    inputs = fam.inputs()
    ref = fam.model.generate(**inputs, max_new_tokens=8, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    expected = ref.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    tokens, state = generate(fam.model, [fam.prepare(inputs)], max_new_tokens=8)
    assert tokens[0] == expected[: len(tokens[0])] and len(tokens[0]) == len(expected)
    delta = (state.logits[0] - ref.logits[0][0].float()).abs().max()
    assert delta < ATOL, delta


@torch.no_grad()
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("r", [0.25, 0.5, 0.75])
def test_fastv_kept_set_and_logits_equal_masked_reference(fam, k, r):
    inputs = fam.inputs(seed=1)
    prepared = fam.prepare(inputs)
    vis = prepared.visual_mask
    att = fam.eager(**inputs, output_attentions=True, use_cache=False).attentions[k - 1][0]  # [H, n, n]
    scores = att.mean(0)[-1][vis]
    expected = set(torch.topk(scores, keep_count(len(scores), r)).indices.tolist())
    _, state = generate(fam.model, [prepared], max_new_tokens=1, plan=FastVPlan(k=k, r=r))
    assert set(state.kept[0].tolist()) == expected
    dropped = vis.clone()
    dropped[vis.nonzero().squeeze(-1)[state.kept[0]]] = False
    ref = reference_with_dropped_keys(fam.model, inputs, k, dropped)
    delta = (state.logits[0] - ref).abs().max()
    assert delta < ATOL, delta


@torch.no_grad()
def test_fastv_decoding_keeps_the_original_positions(fam):
    """Several tokens decoded on the pruned cache equal transformers' forward on the prompt plus those tokens,
    dropped keys masked from layer K: the next position after the prompt is one past its largest (M-RoPE) one."""
    inputs = fam.inputs(seed=2)
    prepared = fam.prepare(inputs)
    tokens, state = generate(fam.model, [prepared], max_new_tokens=4, plan=FastVPlan(k=2, r=0.5))
    vis = prepared.visual_mask
    dropped = vis.clone()
    dropped[vis.nonzero().squeeze(-1)[state.kept[0]]] = False
    ids = inputs["input_ids"]
    for step in range(1, len(tokens[0])):
        longer = dict(inputs)
        extra = torch.tensor([tokens[0][:step]])
        longer["input_ids"] = torch.cat([ids, extra], 1)
        longer["attention_mask"] = torch.ones_like(longer["input_ids"])
        if "mm_token_type_ids" in inputs:
            longer["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(extra)], 1)
        grown = torch.cat([dropped, torch.zeros(step, dtype=torch.bool)])
        ref = reference_with_dropped_keys(fam.model, longer, 2, grown)
        assert int(ref.argmax()) == tokens[0][step], step


@torch.no_grad()
@pytest.mark.parametrize("plan", [None, FastVPlan(k=2, r=0.5)], ids=["unpruned", "fastv"])
def test_padded_batch_of_two_equals_single_runs(fam, plan):
    a = fam.prepare(fam.inputs("What colour is the shape?", seed=3))
    b = fam.prepare(fam.inputs("Which way does the red circle move in this video?", seed=4))
    assert len(a.ids) != len(b.ids)  # one of them is left-padded in the batch
    batch_tokens, batch = generate(fam.model, [a, b], max_new_tokens=5, plan=plan)
    for i, p in enumerate((a, b)):
        tokens, single = generate(fam.model, [p], max_new_tokens=5, plan=plan)
        assert batch_tokens[i] == tokens[0]
        assert (batch.logits[i] - single.logits[0]).abs().max() < ATOL
        if plan is not None:
            assert batch.kept[i].tolist() == single.kept[0].tolist()


@torch.no_grad()
@pytest.mark.parametrize("plan", [None, FastVPlan(k=2, r=0.5)], ids=["unpruned", "fastv"])
def test_eager_attention_equals_sdpa(fam, plan):
    inputs = fam.inputs(seed=5)
    sdpa_tokens, sdpa = generate(fam.model, [fam.prepare(inputs)], max_new_tokens=5, plan=plan)
    eager_tokens, eager = generate(fam.eager, [fam.prepare(inputs, fam.eager)], max_new_tokens=5, plan=plan)
    assert sdpa_tokens == eager_tokens
    assert (sdpa.logits - eager.logits).abs().max() < ATOL
    if plan is not None:
        assert sdpa.kept[0].tolist() == eager.kept[0].tolist()
