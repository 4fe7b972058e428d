"""FrameFusion inside the LLM: which tokens merge (cosine similarity to the same patch of the previous frame, runs
averaged into the token before them), when merging stops, the pruning ratio its budget leaves and what pruning
keeps all equal a plain recomputation of the published steps, on small tensors and inside the tiny model, where the
logits also equal a masked-attention reference that merges and hides tokens the same way."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.clipgen import write_clip
from helpers.masked_reference import Recorder, masked_forward

from videoqa import llm
from videoqa.cli import main
from videoqa.pruning import PruneConfig
from videoqa.pruning.hook import LayerView
from videoqa.pruning.methods.framefusion.algorithm import FrameFusionPlan
from videoqa.pruning.registry import REGISTRY


def budget_ratio(sparsity, cost, n_layers):
    """What the layers left must drop: the visual work (share of tokens summed over layers) must be cost·n_layers;
    layer j worked on prod_{i<=j}(1 - s_i) of the tokens."""
    shares, share = [], 1.0
    for s in sparsity:
        share *= 1 - s
        shares.append(share)
    rest = n_layers * cost - sum(shares)
    return max(0.0, 1 - rest / ((n_layers - len(shares)) * share))


def merge_step(h, visual, tpf, start, threshold, upper):
    """One merging step on the visual positions present (sequence order): (merged hidden, positions merged away,
    share alike, whether the budget cut it to the most alike)."""
    last, prev, sim = {}, {}, {}
    for p in visual:
        patch = (p - start) % tpf
        if patch in last:
            prev[p] = last[patch]
            sim[p] = torch.nn.functional.cosine_similarity(h[p].float(), h[last[patch]].float(), dim=0).item()
        last[patch] = p
    chosen = {p for p, s in sim.items() if s >= threshold}
    share = len(chosen) / len(visual)
    cut = share >= upper
    if cut:
        chosen = set(sorted(sim, key=lambda p: (-sim[p], p))[:int(upper * len(visual))])
    root = {}
    for p in visual:
        if p in chosen:
            root[p] = root.get(prev[p], prev[p])
    h = h.clone()
    for target in set(root.values()):
        members = [target, *(p for p in root if root[p] == target)]
        h[target] = h[members].float().mean(0).to(h.dtype)
    return h, chosen, share, cut


def view_of(hidden, n_layers, tpf, text_before):
    n = hidden.shape[1]
    visual = torch.zeros(1, n, dtype=torch.bool)
    visual[0, text_before:n - 2] = True
    return LayerView(layer=0, hidden=hidden, hidden_prev=hidden, positions=torch.arange(n)[None],
                     key_mask=torch.ones(1, n, dtype=torch.bool), visual_mask=visual,
                     visual_index=[torch.arange(int(visual.sum()))], r=[0.5], n_layers=n_layers,
                     attention_rows=lambda rows: None, tokens_per_frame=tpf)


@pytest.mark.parametrize("static_patches", [3, 6])  # 40% alike: all merged; 80%: cut to the budget's 50%
def test_merging_on_small_tensors_matches_the_published_step(static_patches):
    g = torch.Generator().manual_seed(1)
    frames, tpf, d, before = 5, 6, 8, 2
    base = torch.randn(tpf, d, generator=g)
    noise = torch.randn(frames, tpf, d, generator=g)
    noise[:, :static_patches] *= 0.05  # these patches barely change from frame to frame
    hidden = torch.cat([torch.randn(before, d, generator=g), (base + noise).reshape(-1, d),
                        torch.randn(2, d, generator=g)])[None]
    plan = FrameFusionPlan([0.5], tokens_per_frame=tpf)
    keep = plan.at_layer(view_of(hidden, 8, tpf, before))

    visual = list(range(before, before + frames * tpf))
    upper = budget_ratio([], 0.5, 8)
    merged, gone, share, cut = merge_step(hidden[0], visual, tpf, before, 0.6, upper)
    assert upper == 0.5 and cut == (static_patches == 6)
    assert keep.kept[0].tolist() == [p - before for p in visual if p not in gone]
    torch.testing.assert_close(keep.hidden[0], merged)
    assert len(gone) == 15 if cut else len(gone) >= 12  # the budget's 50% of 30; else at least the 12 static


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("framefusion") / "c.mp4", n_frames=16)


@pytest.mark.parametrize("r, threshold", [(0.75, 0.6), (0.5, 0.9999)])  # published threshold; a strict one
def test_inside_the_llm_matches_a_merging_masked_attention_reference(tiny_qa, clip, r, threshold):
    cfg = PruneConfig(method="framefusion", r=r, params=(("ff_threshold", threshold),)).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    plan = Recorder(REGISTRY.get("framefusion").plan(cfg.options, [r], 65))
    state = llm.prefill(tiny_qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)

    embeds, start = batch.embeds, int(batch.visual_mask[0].nonzero()[0])
    present = torch.ones(embeds.shape[1], dtype=torch.bool)
    vis = batch.visual_mask[0].nonzero().squeeze(-1).tolist()
    st = {"sparsity": [], "merging": True, "pruning": True, "acted": []}

    def before_layer(i, h, weights):
        visual = [p for p in vis if present[p]]
        if st["merging"]:
            upper = budget_ratio(st["sparsity"], 1 - r, 4)
            h0, gone, share, cut = merge_step(h[0], visual, 65, start, threshold, upper)
            if cut:
                st["merging"] = st["pruning"] = False
            else:
                st["sparsity"].append(share)
                st["merging"] = share >= 0.1
            present[sorted(gone)] = False
            st["acted"].append(i)
            return present.clone(), h0[None]
        if st["pruning"]:
            rows = present.nonzero().squeeze(-1)
            score = weights[i - 1].mean(0)[rows].mean(0)  # heads, then every query row present
            n_keep = round(len(visual) * (1 - budget_ratio(st["sparsity"], 1 - r, 4)))
            top = set(sorted(visual, key=lambda p: (-score[p].item(), p))[:n_keep])
            present[[p for p in visual if p not in top]] = False
            st["pruning"] = False
            st["acted"].append(i)
        return present.clone(), None

    ref, _ = masked_forward(tiny_qa.model, embeds, before_layer)
    assert [s[0] for s in plan.stages] == st["acted"]
    assert state.kept[0].tolist() == [p - start for p in vis if present[p]]
    torch.testing.assert_close(state.logits, ref, atol=1e-4, rtol=1e-4)
    if threshold > 0.99:  # merging stopped below the floor, then pruning ran
        assert len(st["acted"]) >= 2 and not st["pruning"]


@pytest.mark.slow
def test_ask_json_reports_the_merged_tokens(capsys, tiny_model_dir, clip):
    code = main(["ask", str(clip), "What is shown?", "--model", str(tiny_model_dir), "--json", "--prune",
                 "framefusion", "--r", "0.75", "--max-new-tokens", "2"])
    kept = json.loads(capsys.readouterr().out)["kept"]
    assert code == 0 and kept["method"] == "framefusion" and kept["n_merged_dropped"] > 0 and kept["absorbed"]
