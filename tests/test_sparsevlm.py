"""SparseVLM inside the LLM: the raters, the kept set and the recycled tokens (density-peak clusters of the best
deleted tokens, averaged) equal a plain recomputation of the published steps on small tensors; inside the tiny
model, each rating keeps the top of the raters' attention recomputed from transformers' eager weights under the
earlier ratings' masks, and the pruned logits equal that masked-attention reference."""

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
from videoqa.pruning.hook import LayerView
from videoqa.pruning.methods.sparsevlm.algorithm import SparseVLMPlan
from videoqa.pruning.registry import REGISTRY


def reference_raters(embeds, vis, text):
    """Text tokens whose mean (over visual tokens) softmax relevance V·Tᵀ exceeds the mean."""
    rel = torch.softmax(embeds[vis] @ embeds[text].T, dim=1).mean(0)
    return text[rel > rel.mean()]


def reference_clusters(x, k):
    """DPC-kNN by the paper's formulas, one token at a time: local density from the k nearest distances (self
    included), distance to the nearest denser token (else the largest distance), centres = top density x distance,
    each token to its nearest centre."""
    n = len(x)
    dist = [[float((x[i] - x[j]).norm()) / x.shape[1] ** 0.5 for j in range(n)] for i in range(n)]
    density = [torch.exp(-torch.tensor(sorted(row)[:k]).pow(2).mean()).item() for row in dist]
    top = max(max(row) for row in dist)
    # equal densities (mutual nearest neighbours) are ordered by index, where the official code adds 1e-6 noise
    denser = [[density[j] > density[i] or density[j] == density[i] and j < i for j in range(n)] for i in range(n)]
    delta = [min([dist[i][j] for j in range(n) if denser[i][j]], default=top) for i in range(n)]
    centres = sorted(sorted(range(n), key=lambda i: -density[i] * delta[i])[:k])  # placed in token order
    groups = {c: [] for c in centres}
    for i in range(n):
        groups[i if i in centres else min(centres, key=lambda c: dist[c][i])].append(i)
    return centres, groups


def view_of(layer, hidden, attention, n_vis_before, n_vis, positions):
    n = hidden.shape[1]
    visual = torch.zeros(1, n, dtype=torch.bool)
    visual[0, n_vis_before:n_vis_before + n_vis] = True
    return LayerView(layer=layer, hidden=hidden, hidden_prev=hidden, positions=positions,
                     key_mask=torch.ones(1, n, dtype=torch.bool), visual_mask=visual,
                     visual_index=[torch.arange(n_vis)], r=[0.5], n_layers=32,
                     attention_rows=lambda rows: attention[:, rows])


def test_raters_kept_set_and_recycled_tokens_match_the_published_steps():
    g = torch.Generator().manual_seed(3)
    before, n_vis, after, d = 3, 200, 6, 16
    n = before + n_vis + after
    embeds, hidden = torch.randn(1, n, d, generator=g), torch.randn(1, n, d, generator=g)
    attention = torch.randn(1, n, n, generator=g).softmax(-1)
    positions = torch.arange(n)[None] * 2 + 5  # positions with gaps, as after earlier pruning
    plan = SparseVLMPlan(2, [0.5], recycle=0.3)
    assert plan.layers_for(32) == (0, 3, 7, 16)  # rates after layers 2, 6 and 15 of 32, as published
    assert plan.at_layer(view_of(0, embeds, attention, before, n_vis, positions)) is None
    keep = plan.at_layer(view_of(3, hidden, attention, before, n_vis, positions))

    vis, text = torch.arange(before, before + n_vis), torch.arange(before + n_vis, n)
    raters = reference_raters(embeds[0], vis, text)
    score = attention[0][raters][:, vis].mean(0)
    n_keep = int(n_vis * 0.5 ** (1 / 3))  # 158: the first of three ratings on the way to 1 - R
    kept = torch.topk(score, n_keep).indices.sort().values
    deleted = [i for i in range(n_vis) if i not in set(kept.tolist())]
    m = int(len(deleted) * 0.3) + 1
    best = sorted(deleted, key=lambda i: -score[i].item())[:m]
    centres, groups = reference_clusters(hidden[0, vis][best], int(m / 10) + 1)

    assert keep.kept[0].tolist() == kept.tolist()
    assert len(centres) == 2 and all(len(g) >= 1 for g in groups.values())
    merged = torch.stack([hidden[0, vis][[best[j] for j in groups[c]]].mean(0) for c in centres])
    torch.testing.assert_close(keep.added[0], merged, rtol=1e-5, atol=1e-5)
    assert keep.added_index[0].tolist() == [best[c] for c in centres]
    assert keep.added_positions[0].tolist() == [int(positions[0, before + best[c]]) for c in centres]
    absorbed = {k: sorted(v) for k, v in keep.absorbed[0].items()}
    assert absorbed == {best[c]: sorted(best[j] for j in groups[c] if j != c) for c in centres}


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("sparsevlm") / "c.mp4", n_frames=16)


def test_ratings_inside_the_llm_match_a_masked_attention_reference(tiny_qa, clip):
    """Without recycling (the recycled tokens have no place in a fixed-length reference), each rating keeps the
    top of the raters' mean attention of the rating layer, and the logits equal the masked reference's."""
    cfg = PruneConfig(method="sparsevlm", r=0.75, params=(("recycle", 0.0),)).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    plan = Recorder(REGISTRY.get("sparsevlm").plan(cfg.options, [0.75], 65))
    state = llm.prefill(tiny_qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)

    embeds, vis = batch.embeds, batch.visual_mask[0].nonzero().squeeze(-1)
    raters = reference_raters(embeds[0], vis, torch.arange(int(vis[-1]) + 1, embeds.shape[1]))
    rating_layers = (0, 1, 2)  # 2, 6, 15 of 32, on this 4-layer model; each prunes before the next layer
    dropped_at: dict[int, list[int]] = {}

    def present_before(i):
        return present_before_layer(embeds.shape[1], dropped_at, i)

    expected = []
    for stage, layer in enumerate(rating_layers, start=1):
        _, weights = masked_forward(tiny_qa.model, embeds, lambda i, h, w: (present_before(i), None))
        still = [p for p in vis.tolist() if present_before(layer)[p]]
        score = weights[layer].mean(0)[raters][:, still].mean(0)
        top = {still[j] for j in torch.topk(score, int(len(vis) * 0.25 ** (stage / 3))).indices.tolist()}
        dropped_at[layer + 1] = [p for p in still if p not in top]
        expected.append(sorted(p - int(vis[0]) for p in top))
    ref, _ = masked_forward(tiny_qa.model, embeds, lambda i, h, w: (present_before(i), None))

    assert [s[0] for s in plan.stages] == [1, 2, 3]
    assert [len(s[1]) for s in plan.stages] == [327, 206, 130]
    assert [s[1] for s in plan.stages] == expected
    torch.testing.assert_close(state.logits, ref, atol=1e-4, rtol=1e-4)


def test_recycled_tokens_are_the_mean_of_their_cluster_and_follow_the_kept_ones(tiny_qa, clip):
    cfg = PruneConfig(method="sparsevlm", r=0.75).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    plan = Recorder(REGISTRY.get("sparsevlm").plan(cfg.options, [0.75], 65))
    state = llm.prefill(tiny_qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)
    layer, kept, keep, view = plan.stages[0]
    present = view.visual_index[0].tolist()
    hidden = view.hidden[0, view.visual_mask[0]]
    for token, centre in zip(keep.added[0], keep.added_index[0].tolist(), strict=True):
        members = [centre, *keep.absorbed[0][centre]]
        torch.testing.assert_close(token, hidden[[present.index(m) for m in members]].mean(0), rtol=1e-5, atol=1e-5)
    # in the end: the last rating's kept tokens, then every recycled token still present
    n_recycled = sum(len(s[2].added[0]) for s in plan.stages)
    assert len(state.kept[0]) == 130 + len(plan.stages[-1][2].added[0]) and n_recycled > 3


@pytest.mark.slow
def test_ask_json_reports_the_recycled_tokens(capsys, tiny_model_dir, clip):
    code = main(["ask", str(clip), "What is shown?", "--model", str(tiny_model_dir), "--json", "--prune",
                 "sparsevlm", "--r", "0.75", "--max-new-tokens", "2"])
    kept = json.loads(capsys.readouterr().out)["kept"]
    assert code == 0 and kept["method"] == "sparsevlm" and kept["n_merged_dropped"] > 0 and kept["absorbed"]
    assert kept["n_kept"] > 130  # the last rating's 130 and its recycled tokens
