"""Pruning before the LLM on today's families: the two positions rules against transformers' own position ids,
the kept tokens' logits against transformers' forward with the dropped tokens masked out in every layer, the
saliency fallback against SigLIP's own eager attention, and `videoqa ask` on each family with every method."""

from __future__ import annotations

import json
import time

import pytest
import torch
from helpers.clipgen import write_clip
from test_families_parity import FAMILIES, FPS, INDICES, Family, frames, reference_with_dropped_keys

from videoqa.cli import main
from videoqa.models import llava_onevision as ov
from videoqa.models import qwen_vl
from videoqa.models.families import CHECKPOINTS
from videoqa.models.prepared import generate
from videoqa.models.select import apply_selection
from videoqa.pruning import REGISTRY, PruneConfig, keep_count
from videoqa.pruning.method import Acts, Positions, Selection


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tmp_path_factory):
    torch.set_num_threads(1)
    return Family(request.param, tmp_path_factory.mktemp(request.param))


def random_selection(p, keep: int, seed: int = 0) -> Selection:
    n = p.layout.n_tokens - p.layout.summary
    kept = sorted(torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:keep].tolist())
    return Selection(kept, p.features[kept])


@torch.no_grad()
def test_original_positions_equal_masking_the_dropped_tokens_in_every_layer(fam):
    """Dropping tokens before the LLM with their original positions is FastV at K=0: transformers' forward on the
    whole prompt, the dropped tokens masked out as keys from the first layer, gives the same logits."""
    inputs = fam.inputs(seed=6)
    p = fam.prepare(inputs)
    sel = random_selection(p, keep=len(p.features) // 3)
    pruned = apply_selection(p, sel, Positions.ORIGINAL)
    _, state = generate(fam.model, [pruned], max_new_tokens=1)
    vis = p.visual_mask.nonzero().squeeze(-1)
    dropped = torch.zeros_like(p.visual_mask)
    dropped[vis[: p.layout.n_tokens - p.layout.summary]] = True
    dropped[vis[sel.kept]] = False
    ref = reference_with_dropped_keys(fam.model, inputs, 0, dropped)
    assert (state.logits[0] - ref).abs().max() < 1e-5


@torch.no_grad()
def test_renumbered_positions_are_the_unpruned_rule_on_the_shorter_prompt(fam):
    """Keeping the tokens of the first frames (Qwen: temporal patches) only, the renumbered positions are those
    transformers computes for a clip of just those frames: 0..n-1 (1-D), or get_rope_index's M-RoPE ids."""
    full = fam.inputs(seed=7)
    p = fam.prepare(full)
    per = p.layout.tokens_per_group
    keep_groups = p.layout.groups // 2
    sel = Selection(list(range(keep_groups * per)), p.features[: keep_groups * per])
    pruned = apply_selection(p, sel, Positions.RENUMBERED)
    short = frames(7)[: keep_groups * p.layout.frames_per_group]
    if fam.name == "llava-onevision":
        ref_inputs = ov.processor_inputs(fam.processor, short, "What colour is the shape?")
    else:
        ref_inputs = qwen_vl.processor_inputs(fam.processor, short, "What colour is the shape?", FPS,
                                              INDICES[: len(short)])
        if "second_per_grid_ts" in full:  # the same time per temporal patch (read from the full clip's timing)
            ref_inputs["second_per_grid_ts"] = full["second_per_grid_ts"]
    ref = fam.prepare(ref_inputs)
    if fam.name == "qwen3-vl":
        # The dropped pairs' timestamps and vision markers are text and stay; up to them the prompts are the same.
        same = int((pruned.ids[: len(ref.ids)] == ref.ids[: len(pruned.ids)]).long().cumprod(0).sum())
        end = fam.model.config.vision_end_token_id
        assert same == int((ref.ids == end).nonzero()[-1]) + 1  # through the kept pairs' closing marker
        assert pruned.positions[:, :same].tolist() == ref.positions[:, :same].tolist()
        return
    assert pruned.ids.tolist() == ref.ids.tolist()
    assert pruned.positions.tolist() == ref.positions.tolist()


@torch.no_grad()
def test_onevision_saliency_is_the_attention_siglip_pays_each_patch(fam):
    if fam.name != "llava-onevision":
        pytest.skip("SigLIP: LLaVA-OneVision's tower")
    inputs = fam.inputs(seed=8)
    p = fam.prepare(inputs)
    pixels = inputs["pixel_values_videos"][0]
    att = fam.eager.model.vision_tower(pixels, output_attentions=True).attentions[-1]  # [F, H, T, T]
    received = att.mean(dim=(1, 2))  # mean over heads and queries: [F, T]
    side = int(received.shape[1] ** 0.5)
    pooled = torch.nn.functional.interpolate(received.view(-1, 1, side, side), size=p.layout.grid, mode="bilinear")
    assert torch.allclose(p.saliency, pooled.flatten(), atol=1e-6)


EXACT_COUNT = ("none", "fastv", "vispruner", "random", "fastvid")  # keep exactly keep_count(n, R)


@pytest.fixture(scope="module")
def family_qa(fam, tmp_path_factory):
    from videoqa.models.families import make_tiny
    from videoqa.pipeline import VideoQA

    folder = make_tiny(fam.name, tmp_path_factory.mktemp(f"{fam.name}-qa"))
    return VideoQA.from_pretrained(str(folder), max_new_tokens=3, prefix_cache_bytes=0)


@torch.no_grad()
def test_every_method_answers_on_every_family(fam, family_qa, tmp_path):
    """Every registered method runs on the family through VideoQA and keeps what it says: all tokens (none), or
    R's share of the frame tokens (LLaVA-OneVision's newline is always kept); the frames baseline samples whole
    temporal patches (Qwen: an even count)."""
    clip = write_clip(tmp_path / "clip.mp4", n_frames=30, size=(112, 112))
    for method in REGISTRY:
        out = family_qa.ask(clip, "What colour is the shape?", prune=PruneConfig(method=method.name, r=0.5),
                            frames=8)
        layout = out.kept.layout
        n_visual, summary = out.kept.n_visual, layout.summary
        assert isinstance(out.text, str), method.name
        record = json.loads(json.dumps(out.to_dict()))  # `ask --json`: a merging method's record too
        absorbed = {int(i): group for i, group in record["kept"].get("absorbed", {}).items()}
        assert set(absorbed) <= set(out.kept.kept), method.name
        assert not set(range(n_visual - summary, n_visual)) & set(absorbed), method.name  # a summary absorbs nothing
        if method.reduces_frames:
            per = 8 * layout.tokens_per_frame // layout.frames_per_token  # the 8 frames' tokens, R=0.5 of them
            assert out.stats.frames % layout.frames_per_token == 0 and out.kept.n_kept == n_visual, method.name
            assert out.stats.frames == 4 and n_visual == keep_count(per, 0.5) + summary, method.name
            continue
        if method.two_stage(method.defaults()):  # their counts are their own (PruneVid merges past R's share,
            # DyCoke's TTM prunes only some frames); the summary tokens stay through both stages
            assert 0 < out.kept.n_kept < n_visual, method.name
            assert set(range(n_visual - summary, n_visual)) <= set(out.kept.kept), method.name
            continue
        expected = n_visual if method.acts is Acts.NEVER else keep_count(n_visual - summary, 0.5)
        if method.acts is Acts.BEFORE_LLM:
            expected += summary
        if method.acts is Acts.IN_LLM:  # FastV ranks the whole visual span, the newline included
            expected = keep_count(n_visual, 0.5)
        if method.name in EXACT_COUNT:
            assert out.kept.n_kept == expected and out.stats.frames == 8, method.name
        else:  # methods that round as their official code does (or drop whole frames) keep about R's share
            assert abs(out.kept.n_kept - expected) <= max(8, expected // 10), method.name


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_cli_make_tiny_model_then_ask_json(family, tmp_path, capsys):
    clip = write_clip(tmp_path / "clip.mp4", n_frames=30, size=(112, 112))
    assert main(["make-tiny-model", str(tmp_path / "m"), "--family", family]) == 0
    assert main(["ask", str(clip), "What colour is it?", "--model", str(tmp_path / "m"), "--prune", "fastv",
                 "--r", "0.5", "--max-new-tokens", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["prune"]["method"] == "fastv" and out["prune"]["k"] == 2
    assert out["kept"]["n_kept"] == keep_count(out["kept"]["n_visual"], 0.5)


@pytest.mark.parametrize("hub_id", sorted(CHECKPOINTS))
def test_offline_hub_id_of_each_named_checkpoint_stops_with_the_download_advice(hub_id, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    clip = write_clip(tmp_path / "clip.mp4", n_frames=10, size=(64, 48))
    import transformers  # the libraries' import time is the machine's, not the hub's wait: load them first

    transformers.LlavaOnevisionProcessor, transformers.Qwen2_5_VLProcessor, transformers.Qwen3VLProcessor  # noqa: B018
    t0 = time.monotonic()
    assert main(["ask", str(clip), "What is it?", "--model", hub_id, "--json"]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"hf download {hub_id} --local-dir DIR" in err


@pytest.mark.parametrize("hub_id", sorted(CHECKPOINTS))
def test_each_named_checkpoint_has_a_card_with_its_frames(hub_id):
    from videoqa.model_policy import model_policy
    from videoqa.models.families import CARDS, card_of

    policy = model_policy(card_of(hub_id))
    assert policy.policy.base_frames == CARDS[hub_id]["frames"] and policy.k == 2
    assert hub_id in policy.constants["frames"]["source"]  # each adaptive decision names where its frames came from


@pytest.mark.slow
def test_batch_on_a_family_folder_answers_every_clip_as_ask_does(tmp_path, capsys):
    clips = [write_clip(tmp_path / f"c{i}.mp4", n_frames=20 + 5 * i, size=(112, 112)) for i in range(2)]
    assert main(["make-tiny-model", str(tmp_path / "m"), "--family", "qwen2.5-vl"]) == 0
    out = tmp_path / "out.jsonl"
    common = ["--model", str(tmp_path / "m"), "--prune", "fastv", "--r", "0.5", "--max-new-tokens", "3"]
    assert main(["batch", *map(str, clips), "--question", "What colour is it?", "--out", str(out), *common]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and all(r["error"] is None for r in records)
    for clip, rec in zip(clips, sorted(records, key=lambda r: r["video"]), strict=True):
        capsys.readouterr()
        assert main(["ask", str(clip), "What colour is it?", *common, "--json"]) == 0
        alone = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert rec["answer"] == alone["answer"] and rec["prune"] == alone["prune"]


@torch.no_grad()
def test_qwen_saliency_is_the_attention_the_last_block_pays_each_token(fam, monkeypatch):
    """Against the tower's own eager attention weights in its last block (recorded as transformers computes them),
    averaged over heads, queries and each merged token's 2x2 patches, and put in the LLM's order by matching the
    merger's outputs to the features (not by the window index our code uses)."""
    if fam.name == "llava-onevision":
        pytest.skip("Qwen's tower")
    import inspect

    visual = fam.eager.model.visual
    last = visual.blocks[-1].attn
    module = inspect.getmodule(type(last))
    recorded = []
    original = module.eager_attention_forward

    def recording(attn, *args, **kwargs):
        out, weights = original(attn, *args, **kwargs)
        if attn is last:
            recorded.append(weights[0].mean(dim=(0, 1)))  # [chunk]: mean over heads and queries
        return out, weights

    monkeypatch.setattr(module, "eager_attention_forward", recording)
    inputs = fam.inputs(seed=9)
    p = fam.prepare(inputs, fam.eager)
    recorded.clear()  # prepare ran the tower once; record the run below
    out = fam.eager.model.visual(inputs["pixel_values_videos"], grid_thw=inputs["video_grid_thw"])
    merged = torch.cat(recorded).reshape(-1, visual.spatial_merge_size ** 2).mean(-1)  # the tower's order
    tower_order = visual.merger(out.last_hidden_state)
    llm_order = torch.cdist(out.pooler_output, tower_order).argmin(-1)  # row of each LLM token in tower order
    assert sorted(llm_order.tolist()) == list(range(len(merged)))
    # tiny random towers attend almost uniformly (spread ~5e-5): a tolerance far below it, so order matters
    assert torch.allclose(p.saliency, merged[llm_order], rtol=0, atol=1e-7)
