"""The static-cache decode path against the eager one (the prefill's own cache): same logits and tokens, pruned or
not, batched."""

from __future__ import annotations

import inspect
import os
from types import SimpleNamespace

import pytest
import torch
from conftest import SAMPLE_CLIPS
from transformers import VideoLlavaForConditionalGeneration

from videoqa import llm
from videoqa.cli import build_parser
from videoqa.cli.options import model_spec_from_args
from videoqa.errors import InputError
from videoqa.llm import BUCKET, DecodeLoop, StaticKVCache, decode_loop_for
from videoqa.llm.decode import GrowingCache
from videoqa.model import LoadedModel
from videoqa.pipeline import VideoQA
from videoqa.pruning import keep_count
from videoqa.pruning.methods.fastv.algorithm import FastVPlan

N, PAD = 60, 9  # prompt length; the second sample of a batch is PAD tokens shorter (left-padded)


@pytest.fixture(scope="module")
def model(tiny_qa):
    return tiny_qa.model  # Llama decoder with grouped-query attention (4 heads, 2 kv heads)


@pytest.fixture(scope="module")
def eager_model(tiny_model_dir):
    """The same checkpoint with eager attention, which applies no causality of its own: masks decide everything."""
    return VideoLlavaForConditionalGeneration.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()


def prompt(model, seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 300, (1, n), generator=g)
    vis = torch.zeros(1, n, dtype=torch.bool)
    vis[0, 6: n - 14] = True
    embeds = model.get_input_embeddings()(ids).detach().clone()
    embeds[vis] = torch.randn(int(vis.sum()), embeds.shape[-1], generator=g) * 0.05
    return embeds, torch.ones(1, n, dtype=torch.long), vis


def batch_of_two(model):
    a, b = prompt(model, 3, N), prompt(model, 4, N - PAD)
    return tuple(torch.cat([x, torch.cat([torch.zeros_like(y[:, :1]).expand(1, PAD, *y.shape[2:]), y], 1)])
                 for x, y in zip(a, b, strict=True))


CASES = [(plan, batch) for plan in (None, FastVPlan(k=2, r=0.5)) for batch in (1, 2)]
IDS = [f"{'fastv' if p else 'none'}-batch{b}" for p, b in CASES]


def assert_static_steps_equal_eager_steps(model, inputs, plan, steps: int) -> None:
    """Step by step from the same prefill: the static decoder's logits and tokens equal the eager loop's."""
    eager = llm.prefill(model, *inputs, plan)
    cache = StaticKVCache.from_prefill(llm.prefill(model, *inputs, plan),
                                       model.config.text_config.num_hidden_layers, 8)
    decoder = DecodeLoop(model, "static")
    tokens = eager.logits.argmax(-1)
    embed = model.get_input_embeddings()
    for step in range(steps):
        ref = llm.decode_one_token(model, eager, embed(tokens[:, None]))
        logits, nxt = decoder.step(cache, tokens, torch.tensor([step]))
        assert torch.allclose(logits, ref, atol=1e-5), (logits - ref).abs().max()
        assert nxt.tolist() == ref.argmax(-1).tolist()
        tokens = nxt


@pytest.mark.slow
@torch.no_grad()
@pytest.mark.parametrize("plan,batch", CASES, ids=IDS)
def test_static_steps_equal_eager_steps(model, plan, batch):
    inputs = prompt(model, 1, N) if batch == 1 else batch_of_two(model)
    assert_static_steps_equal_eager_steps(model, inputs, plan, steps=6)


@pytest.mark.slow
@torch.no_grad()
@pytest.mark.parametrize("plan,batch", CASES, ids=IDS)
def test_static_decode_gives_the_eager_tokens(model, plan, batch):
    inputs = prompt(model, 2, N) if batch == 1 else batch_of_two(model)
    eager = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 12, None))
    static = list(DecodeLoop(model, "static").decode_n_tokens(llm.prefill(model, *inputs, plan), 12, None))
    assert torch.stack(static).tolist() == torch.stack(eager).tolist()
    # EOS: the same stopping point (all samples done at the token each of them produced first)
    eos = int(eager[0][0])
    stop_e = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 12, eos))
    stop_s = list(DecodeLoop(model, "static").decode_n_tokens(llm.prefill(model, *inputs, plan), 12, eos))
    assert torch.stack(stop_s).tolist() == torch.stack(stop_e).tolist()


@pytest.mark.slow
@torch.no_grad()
@pytest.mark.parametrize("plan", [None, FastVPlan(k=2, r=0.5)], ids=["none", "fastv"])
def test_static_steps_equal_eager_steps_with_eager_attention(eager_model, plan):
    assert_static_steps_equal_eager_steps(eager_model, batch_of_two(eager_model), plan, steps=5)


@pytest.mark.slow
@torch.no_grad()
def test_static_decode_stops_on_any_eos_id(model):
    """Several EOS ids, in the forms callers pass them (the pipeline: a set): any of them ends a sample, and
    the static path stops where the eager loop does."""
    inputs = batch_of_two(model)
    plan = FastVPlan(k=2, r=0.5)
    free = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 10, None))
    # sample 0 ends at its 3rd token, sample 1 at its 5th; 0 never occurs (prompt ids start at 6)
    hit0, hit1 = int(free[2][0]), int(free[4][1])
    for eos in ({0, hit0, hit1}, [hit1, hit0], (hit0, hit1)):
        stop_e = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 10, eos))
        stop_s = list(DecodeLoop(model, "static").decode_n_tokens(llm.prefill(model, *inputs, plan), 10, eos))
        assert torch.stack(stop_s).tolist() == torch.stack(stop_e).tolist()
        assert len(stop_s) < 10


@torch.no_grad()
@pytest.mark.parametrize("plan,batch", CASES, ids=IDS)
def test_eager_decoding_writes_each_token_in_place_and_gives_the_concatenating_loops_tokens(model, plan, batch):
    """The eager loop moves the prefill's cache once into buffers with room for the answer and then writes a token
    per step in place (no copy of the cache a token); its tokens are those of stepping on the prefill's own
    DynamicCache, which concatenates."""
    inputs = prompt(model, 5, N) if batch == 1 else batch_of_two(model)
    ref_state = llm.prefill(model, *inputs, plan)
    tokens, ref = ref_state.logits.argmax(-1), []
    embed = model.get_input_embeddings()
    for step in range(8):
        ref.append(tokens.tolist())
        if step < 7:  # the last token is yielded, not fed
            tokens = llm.decode_one_token(model, ref_state, embed(tokens[:, None])).argmax(-1)
    state = llm.prefill(model, *inputs, plan)
    got, buffers = [], set()
    for tokens in llm.decode_n_tokens(model, state, 8, None):
        got.append(tokens.tolist())
        if len(got) > 1:
            buffers.add(tuple(layer._keys.data_ptr() for layer in state.cache.layers))
    assert got == ref
    assert len(buffers) == 1, "a decoding step reallocated the cache"
    assert [layer.keys.shape[2] for layer in state.cache.layers] == \
        [layer.keys.shape[2] for layer in ref_state.cache.layers]


def test_a_growing_cache_layer_past_its_room_keeps_every_token():
    keys, values = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    layer = GrowingCache(SimpleNamespace(layers=[SimpleNamespace(keys=keys, values=values)]), room=1).layers[0]
    new = [torch.randn(2, 3, 1, 4) for _ in range(4)] + [torch.randn(2, 3, 3, 4)]
    for t in new:
        k, v = layer.update(t, -t)
    assert torch.equal(k, torch.cat([keys, *new], 2)) and torch.equal(v, torch.cat([values, *(-t for t in new)], 2))


@torch.no_grad()
def test_layers_from_k_hold_only_the_kept_tokens(model):
    embeds, am, vis = batch_of_two(model)
    k, r, room = 2, 0.5, 20
    state = llm.prefill(model, embeds, am, vis, FastVPlan(k=k, r=r))
    before = [(layer.keys.clone(), layer.values.clone()) for layer in state.cache.layers]
    cache = StaticKVCache.from_prefill(state, len(before), room)
    # each row keeps its non-visual positions (padding included) and its kept visual tokens
    n_hat = max(N - int(vis[s].sum()) + keep_count(int(vis[s].sum()), r) for s in range(2))
    for i, layer in enumerate(cache.layers):
        n = N if i < k else n_hat
        assert before[i][0].shape[2] == n
        assert layer.keys.shape[2] == -(-(n + room) // BUCKET) * BUCKET
        assert torch.equal(layer.keys[:, :, :n], before[i][0]) and torch.equal(layer.values[:, :, :n], before[i][1])
    # padding and unwritten slots are not valid keys
    assert cache.valid[0][1].sum() == N - PAD and not cache.valid[0][:, N:].any()
    real = [int(am[s].sum()) - int(vis[s].sum()) + keep_count(int(vis[s].sum()), r) for s in range(2)]
    assert cache.valid[1].sum(1).tolist() == real


@pytest.mark.slow
@torch.no_grad()
def test_compiled_step_is_one_graph(model):
    """fullgraph=True fails on any graph break, i.e. on Python control flow that depends on data: what a CUDA
    graph cannot capture. (Dynamo's "eager" backend traces without inductor's code generation, which takes
    minutes on a small CPU; the inductor case below runs on request.)"""
    inputs = batch_of_two(model)
    plan = FastVPlan(k=2, r=0.5)
    eager = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 6, None))
    traced = DecodeLoop(model, "compiled", backend="eager")
    assert torch.stack(list(traced.decode_n_tokens(llm.prefill(model, *inputs, plan), 6, None))).tolist() == \
        torch.stack(eager).tolist()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("VIDEOQA_TEST_INDUCTOR"),
                    reason="inductor compiles for minutes on a 2-core CPU; set VIDEOQA_TEST_INDUCTOR=1")
@torch.no_grad()
def test_inductor_compiled_decode_gives_the_eager_tokens(model):
    inputs = batch_of_two(model)
    plan = FastVPlan(k=2, r=0.5)
    eager = list(llm.decode_n_tokens(model, llm.prefill(model, *inputs, plan), 6, None))
    compiled = DecodeLoop(model, "compiled")
    assert torch.stack(list(compiled.decode_n_tokens(llm.prefill(model, *inputs, plan), 6, None))).tolist() == \
        torch.stack(eager).tolist()


@torch.no_grad()
def test_model_internals_are_resolved_once_not_per_token(model, monkeypatch):
    """The decoder's parts, its layers' cache keyword among them (read with inspect.signature), are resolved once
    per DecodeLoop, or once per call given the bare model: never again for each decoded token."""
    layer_forward = type(llm.adapt(model).layers[0]).forward
    lookups = []
    signature = inspect.signature

    def counting(obj, *args, **kwargs):
        if obj is layer_forward:
            lookups.append(obj)
        return signature(obj, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counting)
    inputs = batch_of_two(model)
    plan = FastVPlan(k=2, r=0.5)
    decoders = [decode_loop_for(model, mode) for mode in ("eager", "static")]
    assert len(lookups) == 2
    for decoder in decoders:
        for n_tokens in (2, 9):
            state = llm.prefill(decoder.lm, *inputs, plan)
            assert len(list(decoder.decode_n_tokens(state, n_tokens, None))) == n_tokens
    assert len(lookups) == 2
    state = llm.prefill(model, *inputs, plan)
    assert len(list(llm.decode_n_tokens(model, state, 9, None))) == 9
    assert len(lookups) == 4


def test_pipeline_static_decode_answers_as_eager(tiny_qa):
    loaded = LoadedModel(tiny_qa.model, tiny_qa.processor, tiny_qa.device, tiny_qa.dtype, tiny_qa.name)
    static = VideoQA(loaded, prune=tiny_qa.prune, max_new_tokens=8, decode="static")
    clip = SAMPLE_CLIPS[0]
    for question in ("What colour is it?", "Which way does it move?"):
        a, b = tiny_qa.ask(clip, question), static.ask(clip, question)
        assert (b.text, b.kept.kept, b.stats.new_tokens) == (a.text, a.kept.kept, a.stats.new_tokens)
    with pytest.raises(InputError, match="unknown decode mode"):
        decode_loop_for(tiny_qa.model, "fast")


def test_compile_option_reaches_the_model_spec():
    args = build_parser().parse_args(["ask", "clip.mp4", "Q?", "--compile"])
    assert model_spec_from_args(args)["decode"] == "compiled"
    args = build_parser().parse_args(["ask", "clip.mp4", "Q?"])
    assert model_spec_from_args(args)["decode"] == "eager"
