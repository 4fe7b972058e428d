"""DyCoke: TTM's kept set equals the official loops (KD-TAO/DyCoke, llava_arch.py `dycole_ttm`) recomputed here in
plain torch, and DP's decode steps equal transformers' own decoder over the whole sequence where each decoded
token's row, from layer L on, hides the visual keys it attended to least at layer L - 1 (eager attention weights)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.masked_reference import eager_prompt
from transformers import VideoLlavaForConditionalGeneration

from videoqa import llm
from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout
from videoqa.pruning.methods.dycoke.algorithm import DyCokePlan


def official_ttm(x: torch.Tensor, keep_share: float) -> dict[int, list[int]]:
    """Per frame, the patch positions `dycole_ttm` keeps (merging_ratio = keep_share): pairs (i, i+1), then
    (i, i+2) for i in range(0, F - 4, 4); a compared frame keeps its topk(largest=False) least similar."""
    f_n, n = x.shape[:2]
    k = int(keep_share * n)
    kept = {f: list(range(n)) for f in range(f_n)}
    for i in range(0, f_n - 1, 2):
        sim = torch.nn.functional.cosine_similarity(x[i], x[i + 1], dim=1)
        kept[i + 1] = sorted(sim.topk(k, largest=False).indices.tolist())
    for i in range(0, f_n - 4, 4):
        sim = torch.nn.functional.cosine_similarity(x[i], x[i + 2], dim=1)
        kept[i + 2] = sorted(sim.topk(k, largest=False).indices.tolist())
    return kept


@pytest.mark.parametrize("n_frames", [8, 9, 12])
def test_ttm_keeps_what_the_official_loops_keep(n_frames):
    torch.manual_seed(n_frames)
    layout = VisualLayout(n_frames=n_frames, grid=3, has_cls=True)
    feats = torch.randn(n_frames, 10, 16)
    feats[1:, 1:] = feats[:1, 1:] + 0.5 * torch.randn(n_frames - 1, 9, 16)  # frames resemble frame 0
    keep = n_frames * 5  # half the tokens: a compared frame keeps int(0.5 * 9) = 4 patches
    method = REGISTRY.get("dycoke")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(n_frames, 10), layout), keep, method.defaults())

    expected = official_ttm(feats[:, 1:], 0.5)
    # the official pairing never appends the last frame of an odd count; here it stays whole (see algorithm.py)
    want = sorted(f * 10 + i for f in range(n_frames) for i in [0] + [1 + p for p in expected[f]])
    assert sel.kept == want
    torch.testing.assert_close(sel.visual, feats.reshape(-1, 16)[want])
    assert sel.details["pruned_frames"] == sorted(f for f in expected if len(expected[f]) < 9)


N, VIS, LAYER, RATIO = 40, torch.arange(4, 30), 2, 0.5


def dp_kept(attention: torch.Tensor, previous: torch.Tensor | None, kept: torch.Tensor | None) -> torch.Tensor:
    """DP's choice for one step from its attention over the visual keys: the top int(n * (1 - P)), unless the
    attention is at least 0.9 cosine-similar to the previous step's (then the previous choice)."""
    if previous is not None and torch.nn.functional.cosine_similarity(attention, previous, dim=0) >= 0.9:
        return kept
    return attention.topk(int(len(attention) * (1 - RATIO))).indices


@torch.no_grad()
def test_dp_decode_steps_equal_a_forward_masking_the_least_attended_visual_keys(tiny_model_dir):
    model, embeds, vis = eager_prompt(tiny_model_dir, N, VIS, seed=1)
    state = llm.prefill(model, embeds, torch.ones(1, N, dtype=torch.long), vis, DyCokePlan(LAYER, RATIO))
    embed = model.get_input_embeddings()
    tokens, ours = [embed(state.logits.argmax(-1)[:, None])], []
    for _ in range(3):
        ours.append(llm.decode_one_token(model, state, tokens[-1]))
        tokens.append(embed(ours[-1].argmax(-1)[:, None]))

    seq = torch.cat([embeds, *tokens[:3]], dim=1)
    n = seq.shape[1]
    dec = model.model.language_model
    pos = torch.arange(n)[None]
    weights = dec(inputs_embeds=seq, position_ids=pos, output_attentions=True).attentions[LAYER - 1][0].mean(0)
    causal = torch.ones(n, n).tril().bool()
    deep = causal.clone()
    previous = kept = None
    for row in range(N, n):
        attention = weights[row, VIS]
        kept = dp_kept(attention, previous, kept)
        previous = attention
        hidden = torch.ones(len(VIS), dtype=torch.bool)
        hidden[kept] = False
        deep[row, VIS[hidden]] = False

    def additive(allowed):
        return torch.zeros(n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]

    def swap(i):
        def hook(module, args, kwargs):
            kwargs["attention_mask"] = additive(deep if i >= LAYER else causal)
            return args, kwargs
        return hook

    handles = [layer.register_forward_pre_hook(swap(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    try:
        ref = model.lm_head(dec(inputs_embeds=seq, position_ids=pos).last_hidden_state)[0, N:].float()
    finally:
        for handle in handles:
            handle.remove()
    assert torch.allclose(torch.cat(ours), ref, atol=1e-4), (torch.cat(ours) - ref).abs().max()
    unpruned = model.lm_head(dec(inputs_embeds=seq, position_ids=pos).last_hidden_state)[0, N:].float()
    assert not torch.allclose(torch.cat(ours), unpruned, atol=1e-4)  # DP changed what the steps saw
    assert state.plan.attended == [[int(len(VIS) * (1 - RATIO))] * 3]


def test_dp_needs_eager_decoding(tiny_model_dir):
    model = VideoLlavaForConditionalGeneration.from_pretrained(tiny_model_dir).eval()
    embeds = torch.randn(1, N, model.config.text_config.hidden_size) * 0.05
    vis = torch.zeros(1, N, dtype=torch.bool)
    vis[0, VIS] = True
    state = llm.prefill(model, embeds, torch.ones(1, N, dtype=torch.long), vis, DyCokePlan(LAYER, RATIO))
    with pytest.raises(Exception, match="use --decode eager"):
        list(llm.decode_loop_for(model, "static").decode_n_tokens(state, 3, set()))


def test_ask_json_reports_ttm_and_the_decode_steps(tiny_model_dir, tmp_path, capsys):
    from helpers.clipgen import write_clip

    from videoqa.cli import main

    clip = write_clip(tmp_path / "c.mp4", n_frames=16)
    code = main(["ask", str(clip), "What is shown?", "--model", str(tiny_model_dir), "--json", "--prune", "dycoke",
                 "--r", "0.75", "--max-new-tokens", "3"])
    record = json.loads(capsys.readouterr().out)
    kept, details = record["kept"], record["kept"]["details"]
    assert code == 0 and kept["method"] == "dycoke"
    assert kept["n_kept"] == 8 + 3 * 64 + 5 * int(0.25 * 64)  # frames 1, 2, 3, 5 and 7 keep a quarter of 64 patches
    assert details["decode_visual"] == kept["n_kept"] and details["decode_layer"] == 1
    steps = details["decode_visual_attended"]  # one entry per token fed back (the official int(n * (1 - P)))
    assert 1 <= len(steps) <= 2 and set(steps) == {int(kept["n_kept"] * (1 - 0.8))}


def test_decode_flops_count_the_entries_each_step_reads():
    from videoqa.pruning.base import ModelDims
    from videoqa.pruning.flops import decode_flops

    dims = ModelDims(n_layers=4, hidden=8, ffn=20, n_heads=2, n_kv_heads=2, head_dim=4, context=512,
                     tokens_per_frame=10,
                     grid=3)
    per_layer = [4 * 64 + 2 * n * 8 + 2 * 8 * 20 for n in (300, 300, 120, 120)]  # one query; layers >= 2 read 120
    assert decode_flops(dims, 300, 120, 2) == sum(per_layer)


def test_layer_defaults_are_the_published_layers_scaled_to_the_depth():
    from videoqa.errors import InputError
    from videoqa.pruning import PruneConfig

    published = {("dycoke", "dp_layer"): (28, 3), ("prunevid", "vtp_layer"): (32, 11),
                 ("holitom", "merge_layer"): (28, 18)}
    for (method, option), (depth, layer) in published.items():
        assert getattr(PruneConfig(method, r=0.5).validate(depth), option) == layer  # on the published model
        assert getattr(PruneConfig(method, r=0.5).validate(4), option) == max(1, round(layer / depth * 4))
        assert getattr(PruneConfig(method, r=0.5, **{option: 2}).validate(4), option) == 2  # given: kept
        with pytest.raises(InputError, match="out of range"):
            PruneConfig(method, r=0.5, **{option: 4}).validate(4)
