"""videoqa.llm's prefill (FastV) and decoding against independent references: the unpruned model, eager attention
and masking."""

from __future__ import annotations

import pytest
import torch
from transformers import VideoLlavaForConditionalGeneration

from videoqa import llm
from videoqa.errors import InputError
from videoqa.models.tiny import TinySpec, make_tiny_model
from videoqa.pruning import PruneConfig, keep_count
from videoqa.pruning.methods.fastv.algorithm import FastVPlan

FAMILIES = ["llama", "qwen2", "mistral"]
N, VIS = (60, slice(6, 46))  # a prompt of 60 tokens whose positions 6..45 are visual


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request, tmp_path_factory):
    path = make_tiny_model(tmp_path_factory.mktemp(request.param), TinySpec(family=request.param))
    sdpa = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="sdpa").eval()
    eager = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    return sdpa, eager


def make_inputs(model, seed: int = 0, n: int = N):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 300, (1, n), generator=g)
    vis = torch.zeros(1, n, dtype=torch.bool)
    vis[0, VIS] = True
    # Visual slots get random features, as the projector would give, not token embeddings.
    embeds = model.get_input_embeddings()(ids).detach().clone()
    embeds[vis] = torch.randn(int(vis.sum()), embeds.shape[-1], generator=g) * 0.05
    return embeds, torch.ones(1, n, dtype=torch.long), vis


def decoder_of(model):
    return model.model.language_model


def masked_reference(model, embeds, k, kept_visual_idx, vis_mask):
    """FastV's attention-mask variant: the full sequence runs through every layer; in layers >= K the
    pruned visual tokens are masked out as keys. No cache, no slicing: an independent computation."""
    dec = decoder_of(model)
    n = embeds.shape[1]
    pos = torch.arange(n)[None]
    pos_emb = dec.rotary_emb(embeds, position_ids=pos)
    causal = torch.ones(n, n).tril().bool()
    dropped = vis_mask[0].clone()
    dropped[vis_mask[0].nonzero().squeeze(-1)[kept_visual_idx]] = False
    pruned_keys = causal & ~dropped[None, :]
    pruned_keys |= torch.eye(n, dtype=torch.bool)  # a dropped token still sees itself (its row is unused)

    def additive(allowed):
        m = torch.zeros(n, n)
        m.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        return m[None, None]

    h = embeds
    for i, layer in enumerate(dec.layers):
        mask = additive(causal if i < k else pruned_keys)
        out = layer(h, attention_mask=mask, position_embeddings=pos_emb, position_ids=pos)
        h = out[0] if isinstance(out, tuple) else out
    return model.lm_head(dec.norm(h))[:, -1].float()


@torch.no_grad()
def test_r0_equals_unpruned_model(family_model):
    sdpa, _ = family_model
    embeds, am, vis = make_inputs(sdpa)
    reference = sdpa(inputs_embeds=embeds, attention_mask=am).logits[:, -1]
    for k in (1, 2, 3):
        out = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=k, r=0.0))
        assert out.kept[0].tolist() == list(range(VIS.stop - VIS.start))
        assert torch.allclose(out.logits, reference, atol=1e-5), (out.logits - reference).abs().max()
    unpruned = llm.prefill(sdpa, embeds, am, vis, None)
    assert torch.allclose(unpruned.logits, reference, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("rank_by", ["last", "text"])
def test_kept_set_is_topk_of_eager_attention(family_model, rank_by):
    sdpa, eager = family_model
    embeds, am, vis = make_inputs(sdpa, seed=1)
    k, r = 2, 0.5
    att = eager(inputs_embeds=embeds, attention_mask=am, output_attentions=True).attentions[k - 1]  # [1,H,n,n]
    rows = att[0].mean(0)  # mean over heads
    rows = rows[-1:] if rank_by == "last" else rows[VIS.stop:]
    scores = rows.mean(0)[VIS]
    expected = set(torch.topk(scores, keep_count(len(scores), r)).indices.tolist())
    out = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=k, r=r, rank_by=rank_by))
    assert set(out.kept[0].tolist()) == expected
    assert torch.allclose(out.scores[0], scores, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("k,r", [(1, 0.5), (2, 0.75), (3, 0.25)])
def test_prefill_and_decode_match_masked_reference(family_model, k, r):
    model, _ = family_model
    embeds, am, vis = make_inputs(model, seed=2)
    state = llm.prefill(model, embeds, am, vis, FastVPlan(k=k, r=r))
    kept = state.kept[0]
    ref = masked_reference(model, embeds, k, kept, vis)
    assert torch.allclose(state.logits, ref, atol=1e-4), (state.logits - ref).abs().max()
    logits = state.logits
    embed = model.get_input_embeddings()
    for _ in range(4):  # several decoded tokens on the pruned cache
        token = logits.argmax(-1)
        new = embed(token[:, None])
        embeds = torch.cat([embeds, new], dim=1)
        vis = torch.cat([vis, torch.zeros(1, 1, dtype=torch.bool)], dim=1)
        logits = llm.decode_one_token(model, state, new)
        ref = masked_reference(model, embeds, k, kept, vis)
        assert torch.allclose(logits, ref, atol=1e-4), (logits - ref).abs().max()


@torch.no_grad()
def test_left_padded_batch_equals_single_runs(family_model):
    model, _ = family_model
    a = make_inputs(model, seed=3, n=N)
    b = make_inputs(model, seed=4, n=N - 9)  # shorter: left-padded in the batch
    pad = N - b[0].shape[1]
    embeds = torch.cat([a[0], torch.cat([torch.zeros(1, pad, a[0].shape[-1]), b[0]], 1)])
    am = torch.cat([a[1], torch.cat([torch.zeros(1, pad, dtype=torch.long), b[1]], 1)])
    vis = torch.cat([a[2], torch.cat([torch.zeros(1, pad, dtype=torch.bool), b[2]], 1)])
    plan = FastVPlan(k=2, r=0.5)
    batch = llm.prefill(model, embeds, am, vis, plan)
    singles = [llm.prefill(model, *x, plan) for x in (a, b)]
    eos = None
    batch_tokens = torch.stack(list(llm.decode_n_tokens(model, batch, 5, eos)), 1)
    for i, single in enumerate(singles):
        assert batch.kept[i].tolist() == single.kept[0].tolist()
        assert torch.allclose(batch.logits[i], single.logits[0], atol=1e-4)
        tokens = torch.stack(list(llm.decode_n_tokens(model, single, 5, eos)), 1)
        assert batch_tokens[i].tolist() == tokens[0].tolist()


@torch.no_grad()
def test_pruned_cache_is_smaller_by_the_expected_amount(family_model):
    model, _ = family_model
    embeds, am, vis = make_inputs(model)
    full = llm.prefill(model, embeds, am, vis, None)
    k, r = 2, 0.5
    pruned = llm.prefill(model, embeds, am, vis, FastVPlan(k=k, r=r))
    cfg = decoder_of(model).config
    per_token_layer = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    n_vis = VIS.stop - VIS.start
    n_hat = N - n_vis + keep_count(n_vis, r)
    assert llm.cache_bytes(full.cache) == cfg.num_hidden_layers * N * per_token_layer
    assert llm.cache_bytes(pruned.cache) == (k * N + (cfg.num_hidden_layers - k) * n_hat) * per_token_layer


@torch.no_grad()
def test_prompt_without_visual_tokens_is_a_no_op(family_model):
    model, _ = family_model
    embeds, am, _ = make_inputs(model)
    none = torch.zeros(1, N, dtype=torch.bool)
    out = llm.prefill(model, embeds, am, none, FastVPlan(k=2, r=0.5))
    assert out.kept[0].numel() == 0
    assert torch.allclose(out.logits, llm.prefill(model, embeds, am, none, None).logits, atol=1e-5)


@pytest.mark.parametrize("cfg,msg", [
    (PruneConfig(method="fastv", k=4, r=0.5), "out of range"),
    (PruneConfig(method="fastv", k=0, r=0.5), "K must be"),
    (PruneConfig(method="fastv", k=2, r=1.0), "R must be in"),
    (PruneConfig(method="fastv", k=2, r=-0.1), "R must be in"),
    (PruneConfig(method="fastv", k=2, r="half"), "R must be a number"),
    (PruneConfig(method="magic"), "unknown pruning method"),
])
def test_out_of_range_settings_are_clear_errors(cfg, msg):
    with pytest.raises(InputError, match=msg):
        cfg.validate(n_layers=4)


@torch.no_grad()
def test_pruning_before_the_llm_with_original_positions_matches_masking(family_model):
    """Dropping visual tokens before layer 0 but keeping their RoPE positions (`keep_positions`) is the
    masked reference with K=0: the same logits as running everything and masking the dropped keys."""
    model, _ = family_model
    embeds, am, vis = make_inputs(model, seed=5)
    n_vis = VIS.stop - VIS.start
    kept = torch.tensor(sorted(torch.randperm(n_vis, generator=torch.Generator().manual_seed(0))[:12].tolist()))
    keep = ~vis[0]
    keep[VIS.start + kept] = True
    pruned = embeds[:, keep]
    positions = torch.arange(N)[keep][None]
    out = llm.prefill(model, pruned, torch.ones_like(positions), vis[:, keep], None, positions)
    ref = masked_reference(model, embeds, 0, kept, vis)
    assert torch.allclose(out.logits, ref, atol=1e-4), (out.logits - ref).abs().max()


def _needs_flash_attention() -> None:
    """Skip, saying why, where FlashAttention-2 cannot run."""
    if not torch.cuda.is_available():
        pytest.skip("FlashAttention-2 needs a CUDA GPU; none here")
    pytest.importorskip("flash_attn", reason="FlashAttention-2 needs the flash-attn package; not installed")


@torch.no_grad()
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_every_kernel_gives_the_unpruned_forward_and_the_same_kept_set(family_model, kernel):
    """Unpruned prefill and decode with each attention kernel equal transformers' own forward of the whole
    sequence (which builds its causal mask itself), and FastV keeps the same tokens whatever the kernel."""
    sdpa, eager = family_model
    model = {"sdpa": sdpa, "eager": eager}[kernel]
    embeds, am, vis = make_inputs(sdpa, seed=6)
    state = llm.prefill(model, embeds, am, vis, None)
    reference = sdpa(inputs_embeds=embeds, attention_mask=am).logits[:, -1]
    assert torch.allclose(state.logits, reference, atol=1e-5), (state.logits - reference).abs().max()
    embed = model.get_input_embeddings()
    logits = state.logits
    for _ in range(3):  # decoding (one query) against the cache
        new = embed(logits.argmax(-1)[:, None])
        embeds = torch.cat([embeds, new], dim=1)
        logits = llm.decode_one_token(model, state, new)
        reference = sdpa(inputs_embeds=embeds).logits[:, -1]
        assert torch.allclose(logits, reference, atol=1e-5), (logits - reference).abs().max()
    embeds, am, vis = make_inputs(sdpa, seed=6)
    plan = FastVPlan(k=2, r=0.5)
    kept = llm.prefill(model, embeds, am, vis, plan)
    assert kept.kept[0].tolist() == llm.prefill(sdpa, embeds, am, vis, plan).kept[0].tolist()
    ref = masked_reference(sdpa, embeds, 2, kept.kept[0], vis)  # layers >= K: causal by sequence order
    assert torch.allclose(kept.logits, ref, atol=1e-5), (kept.logits - ref).abs().max()


@torch.no_grad()
def test_eager_left_padded_batch_equals_single_runs(family_model):
    _, model = family_model
    a, b = make_inputs(model, seed=7), make_inputs(model, seed=8, n=N - 9)
    pad = N - b[0].shape[1]
    batch = [torch.cat([a[j], torch.cat([torch.zeros_like(b[j][:, :pad]), b[j]], 1)]) for j in range(3)]
    plan = FastVPlan(k=2, r=0.5)
    out = llm.prefill(model, *batch, plan)
    for i, single in enumerate(llm.prefill(model, *x, plan) for x in (a, b)):
        assert out.kept[i].tolist() == single.kept[0].tolist()
        assert torch.allclose(out.logits[i], single.logits[0], atol=1e-4)


@torch.no_grad()
def test_flash_attention_2_gives_the_unpruned_forward_and_the_same_kept_set(tiny_model_dir):
    _needs_flash_attention()
    cpu = VideoLlavaForConditionalGeneration.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    embeds, am, vis = make_inputs(cpu, seed=6)
    embeds, am, vis = embeds.to("cuda", torch.bfloat16), am.to("cuda"), vis.to("cuda")
    flash, sdpa = (VideoLlavaForConditionalGeneration.from_pretrained(
        tiny_model_dir, attn_implementation=kernel, dtype=torch.bfloat16).to("cuda").eval()
        for kernel in ("flash_attention_2", "sdpa"))
    reference = sdpa(inputs_embeds=embeds, attention_mask=am).logits[:, -1].float()
    state = llm.prefill(flash, embeds, am, vis, None)
    assert torch.allclose(state.logits, reference, atol=2e-2), (state.logits - reference).abs().max()  # bf16
    plan = FastVPlan(k=2, r=0.5)
    a, b = (llm.prefill(m, embeds, am, vis, plan) for m in (flash, sdpa))
    assert torch.allclose(a.scores[0].float(), b.scores[0].float(), atol=1e-2)
    # bf16: the kept sets may differ only by tokens whose scores tie within that tolerance at the cut
    cut = b.scores[0].float().sort(descending=True).values[len(b.kept[0]) - 1]
    differ = set(a.kept[0].tolist()) ^ set(b.kept[0].tolist())
    assert all(abs(float(b.scores[0][i]) - cut) < 1e-2 for i in differ)


@torch.no_grad()
def test_a_kernel_the_masks_are_not_written_for_is_refused(tiny_model_dir):
    model = VideoLlavaForConditionalGeneration.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    decoder_of(model).config._attn_implementation = "flex_attention"
    with pytest.raises(InputError, match="'flex_attention' is not supported; use one of sdpa, eager"):
        llm.prefill(model, *make_inputs(model), None)
