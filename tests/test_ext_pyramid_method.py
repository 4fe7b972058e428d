"""A pruning method defined here, acting inside the LLM at two layers (PyramidDrop-style), runs end to end through
VideoQA with no edit outside this file: its registration below is the only line that adds it. Its pruned logits
equal an independent masked-attention reference (transformers' own decoder forward, each layer's mask hiding
the tokens dropped before it), and its kept set is what its own rule picks from eager attention weights."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa import llm
from videoqa.pruning import REGISTRY, Acts, Method, Option, PruneConfig, keep_count
from videoqa.pruning.hook import LayerKeep, LayerView


class PyramidPlan:
    """Before each of its layers, keep the visual tokens the last prompt token attends to most (previous
    layer's attention), dropping the same share of those present at each stage."""

    def __init__(self, layers: tuple[int, ...], r: list[float]):
        self.layers, self.r, self.stages = layers, r, []

    def at_layer(self, view: LayerView) -> LayerKeep:
        rows = torch.tensor([view.hidden.shape[1] - 1])
        weights = view.attention_rows(rows)[:, 0]  # [B, n]
        kept, scores = [], []
        for s in range(weights.shape[0]):
            vis = view.visual_mask[s].nonzero().squeeze(-1)
            score = weights[s, vis]
            stage_r = 1 - math.sqrt(1 - view.r[s])  # two stages drop R overall
            n_keep = keep_count(len(vis), stage_r)
            kept.append(torch.sort(torch.topk(score, n_keep).indices).values)
            scores.append(score)
        self.stages.append([view.visual_index[s][kept[s]].tolist() for s in range(len(kept))])
        return LayerKeep(kept, scores)


PLANS: list[PyramidPlan] = []  # the plans the pipeline built, in order (to read the stages each one kept)


def _plan(params, rs, tokens_per_frame):
    PLANS.append(PyramidPlan((params["pd_first"], params["pd_second"]), rs))
    return PLANS[-1]


METHOD = Method(name="pyramid", help="drop visual tokens at two layers", acts=Acts.IN_LLM,
                options=(Option("pd_first", int, 1, "first layer", low=1), Option("pd_second", int, 3, "second layer",
                                                                                  low=2)),
                plan=_plan, layer_option="pd_first")


@pytest.fixture(scope="module")
def registered():
    REGISTRY.register(METHOD)  # the one registration line
    yield
    REGISTRY.unregister("pyramid")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("pyr") / "c.mp4", n_frames=16)


def masked_reference(model, embeds, stages, vis_mask, layers):
    """Every token runs through every layer (no cache, no slicing); a layer from stage g on hides, as keys, the
    visual tokens dropped at or before stage g: transformers' own decoder forward with a per-layer mask."""
    dec = model.model.language_model
    n = embeds.shape[1]
    causal = torch.ones(n, n).tril().bool()
    vis = vis_mask[0].nonzero().squeeze(-1)
    masks = [causal]
    for kept in stages:
        dropped = torch.ones(n, dtype=torch.bool)
        dropped[vis[kept]] = False
        dropped &= vis_mask[0]
        masks.append(causal & ~dropped[None, :] | torch.eye(n, dtype=torch.bool))

    def additive(allowed):
        return torch.zeros(n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]

    def swap(i):
        def hook(module, args, kwargs):
            kwargs["attention_mask"] = additive(masks[sum(b <= i for b in layers)])
            return args, kwargs
        return hook

    handles = [layer.register_forward_pre_hook(swap(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    try:
        h = dec(inputs_embeds=embeds, position_ids=torch.arange(n)[None]).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()
    return model.lm_head(h)[:, -1].float()


@torch.no_grad()
def test_two_layer_method_answers_and_matches_masked_attention(registered, tiny_qa, clip):
    cfg = PruneConfig(method="pyramid", r=0.75, params=(("pd_first", 1), ("pd_second", 3)))
    answer = tiny_qa.ask(clip, "What colour is the shape?", prune=cfg, max_new_tokens=4)
    stages = PLANS[-1].stages
    assert [len(s[0]) for s in stages] == [keep_count(520, 0.5), keep_count(keep_count(520, 0.5), 0.5)]
    assert set(stages[1][0]) <= set(stages[0][0])
    assert answer.kept.kept == stages[1][0] and answer.kept.method == "pyramid" and answer.kept.layer == 1

    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg.validate(4), None, 4)
    batch = tiny_qa.collate([req])
    state = tiny_qa.prefill([req], batch)
    stages = PLANS[-1].stages
    ref = masked_reference(tiny_qa.model, batch.embeds, [s[0] for s in stages], batch.visual_mask, (1, 3))
    assert torch.allclose(state.logits, ref, atol=1e-4), (state.logits - ref).abs().max()

    # three groups of cache: decoding on it (eager and static) gives the same tokens
    static = llm.decode_loop_for(tiny_qa.model, "static")
    eager_tokens = [t.tolist() for t in llm.decode_n_tokens(tiny_qa.model, tiny_qa.prefill([req], batch), 4, set())]
    static_tokens = [t.tolist() for t in static.decode_n_tokens(tiny_qa.prefill([req], batch), 4, set())]
    assert eager_tokens == static_tokens and len(state.masks) == 3


def test_first_stage_keeps_the_top_of_eager_attention(registered, tiny_qa, clip):
    """Stage one's kept set is the top of layer 0's eager attention from the last prompt token (an independent
    computation of the rule: transformers' own weights)."""
    cfg = PruneConfig(method="pyramid", r=0.75, params=(("pd_first", 1), ("pd_second", 3))).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    tiny_qa.prefill([req], batch)
    dec = tiny_qa.model.model.language_model
    with llm.adapt(tiny_qa.model).using_kernel("eager"):
        att = dec(inputs_embeds=batch.embeds, position_ids=batch.position_ids, output_attentions=True).attentions[0]
    score = att[0].mean(0)[-1][batch.visual_mask[0]]
    expected = sorted(torch.topk(score, keep_count(520, 0.5)).indices.tolist())
    assert PLANS[-1].stages[0][0] == expected
