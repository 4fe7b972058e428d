"""PruneVid: the segments, kept set and merged features before the LLM equal the official routine (Visual-AI/PruneVid,
modeling_pllava.py: cluster_dpc_knn, refine_clusters, segment_lengths, merge_frames_dynamic) recomputed here in
plain torch; inside the LLM, the kept set is the official `process_attention` on transformers' eager attention
weights, the prefill's logits equal a forward masking the pruned tokens from layer K on, and a decoded token sees
them in no layer (the official code trims them from the cache of the layers below too)."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa import llm
from videoqa.pruning import REGISTRY, EncodedVideo, PruneConfig, VisualLayout
from videoqa.pruning.methods.prunevid.algorithm import refine


def dpc(x, n_clusters, k):
    """cluster_dpc_knn: (centres in score order, each row's cluster). Equal densities: the earlier row counts as
    denser (the official code breaks ties with noise)."""
    dist = torch.cdist(x[None].float(), x[None].float())[0] / x.shape[-1] ** 0.5
    density = (-(dist.topk(k, dim=-1, largest=False).values ** 2).mean(dim=-1)).exp()
    idx = torch.arange(len(x))
    same = density[None, :] == density[:, None]
    higher = (density[None, :] > density[:, None]) | (same & (idx[None] < idx[:, None]))
    parent = torch.where(higher, dist, dist.max()).min(dim=-1).values
    centres = (parent * density).topk(n_clusters).indices
    assign = dist[:, centres].argmin(dim=1)
    assign[centres] = torch.arange(n_clusters)
    return centres, assign


def official_refine(labels):
    """refine_clusters, one sample: keep each label's longest runs (none if 1 long), relabel the rest by the longer
    neighbouring run (left on ties, label 0 with none)."""
    runs = []
    start = 0
    for label, group in itertools.groupby(labels):
        n = len(list(group))
        runs.append([label, start, start + n - 1])
        start += n
    out = list(labels)
    for label in set(labels):
        lengths = [e - s + 1 for lab, s, e in runs if lab == label]
        for lab, s, e in runs:
            if lab == label and (max(lengths) == 1 or e - s + 1 < max(lengths)):
                out[s:e + 1] = [-1] * (e - s + 1)
    i = 0
    while i < len(out):
        if out[i] != -1:
            i += 1
            continue
        j = i
        while j < len(out) and out[j] == -1:
            j += 1
        left = out[i - 1] if i > 0 else None
        right = out[j] if j < len(out) else None
        left_len = next((i - 1 - a for a in range(i - 1, -2, -1) if a < 0 or out[a] != left), 0) \
            if left is not None else 0
        right_len = next((b - j for b in range(j, len(out) + 1) if b == len(out) or out[b] != right), 0) \
            if right is not None else 0
        if left_len > right_len:
            new = left
        elif right_len > left_len:
            new = right
        else:
            new = left if left is not None else right
        out[i:j] = [0 if new is None else new] * (j - i)
        i = j
    return out


def test_refine_relabels_as_the_official_routine():
    rng = random.Random(0)
    cases = [[0, 0, 1, 0, 0, 0, 1, 1, 2, 1], [1, 0, 1, 0], [2, 2, 2, 2], [0, 1, 2, 3]]
    cases += [[rng.randrange(3) for _ in range(rng.randrange(1, 16))] for _ in range(200)]
    for labels in cases:
        assert refine(labels) == official_refine(labels), labels


def merged(rows, k=7):
    """A set of tokens as merge_frames_dynamic leaves it: clustered (cluster means) above 14, else as they are;
    (centre row, members) per output token."""
    if len(rows) <= 14:
        return [(i, [i]) for i in range(len(rows))]
    centres, assign = dpc(rows, int(len(rows) * 0.5), k)
    return [(int(c), (assign == a).nonzero().flatten().tolist()) for a, c in enumerate(centres)]


def test_before_the_llm_matches_the_official_routine():
    torch.manual_seed(5)
    f_n, t, d = 8, 17, 8
    layout = VisualLayout(n_frames=f_n, grid=4, has_cls=True)
    feats = torch.randn(f_n, t, d)
    feats[:4, 1:] = torch.randn(1, 16, d) + 0.02 * torch.randn(4, 16, d)  # scene A: every position static
    feats[4:, 1:] = torch.randn(1, 16, d) + 0.02 * torch.randn(4, 16, d)  # scene B ...
    feats[4:, 1:7] = torch.randn(4, 6, d)  # ... but for 6 dynamic positions
    method = REGISTRY.get("prunevid")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(f_n, t), layout), 50, method.defaults())

    x = feats[:, 1:]
    _, labels = dpc(x.mean(dim=1), int(f_n * 0.25), 7)
    windows, start = [], 0
    for _, group in itertools.groupby(official_refine(labels.tolist())):
        n = len(list(group))
        windows.append((start, start + n - 1))
        start += n
    assert windows == [(0, 3), (4, 7)] and sel.details["segments"] == windows
    expected = {f * t: feats[f, 0] for f in range(f_n)}
    for s, e in windows:
        w = e - s + 1
        normed = torch.nn.functional.normalize(x[s:e + 1], dim=-1)
        pair = sum((normed[i] * normed[j]).sum(-1) for i in range(w) for j in range(w) if i != j) / (w * (w - 1))
        static = pair > 0.8
        pos, dyn = static.nonzero().flatten(), (~static).nonzero().flatten()
        rows = x[s:e + 1, pos].mean(dim=0)
        for centre, members in merged(rows):
            expected[s * t + 1 + int(pos[centre])] = rows[members].mean(dim=0)
        for f in range(s, e + 1):
            for centre, members in merged(x[f, dyn]):
                expected[f * t + 1 + int(dyn[centre])] = x[f, dyn][members].mean(dim=0)
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, torch.stack([expected[i] for i in sel.kept]))
    assert len(sel.kept) == 8 + 8 + 10 + 4 * 6  # [CLS]s, A's 16 static clustered to 8, B's 10 static, B's dynamic


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("prunevid") / "c.mp4", n_frames=16)


K = 2


def masked_forward(model, seq, position_ids, masks):
    """transformers' decoder over `seq`, layer i with the boolean [n, n] mask masks[i]; the last rows' logits."""
    dec = model.model.language_model
    n = seq.shape[1]

    def hook_for(i):
        def hook(module, args, kwargs):
            low = torch.finfo(torch.float32).min
            kwargs["attention_mask"] = torch.zeros(n, n).masked_fill(~masks[i], low)[None, None]
            return args, kwargs
        return hook

    handles = [layer.register_forward_pre_hook(hook_for(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    try:
        h = dec(inputs_embeds=seq, position_ids=position_ids).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()
    return model.lm_head(h).float()


@torch.no_grad()
def test_inside_the_llm_keeps_the_questions_best_and_hides_the_rest_everywhere_while_decoding(tiny_qa, clip):
    cfg = PruneConfig("prunevid", r=0.5, vtp_layer=K).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    state = tiny_qa.prefill([req], batch)
    model, lm = tiny_qa.model, llm.adapt(tiny_qa.model)

    vis = batch.visual_mask[0].nonzero().flatten()
    n = batch.embeds.shape[1]
    with lm.using_kernel("eager"):
        att = model.model.language_model(inputs_embeds=batch.embeds, position_ids=batch.position_ids,
                                         output_attentions=True).attentions[K - 1][0]  # [H, n, n]
    score = att[:, int(vis.max()) + 1:][..., vis].max(dim=0).values.max(dim=0).values
    groups = torch.tensor(req.selection.details["groups"])
    expected = set((groups < 0).nonzero().flatten().tolist())
    for label in set(groups.tolist()) - {-1}:
        members = (groups == label).nonzero().flatten()
        expected |= set(members[score[members].topk(int(len(members) * 0.5)).indices].tolist())
    assert state.kept[0].tolist() == sorted(expected) and len(expected) < len(vis)

    dropped = torch.zeros(n, dtype=torch.bool)
    dropped[vis] = True
    dropped[vis[sorted(expected)]] = False
    causal = torch.ones(n, n).tril().bool()
    pruned = causal & ~dropped[None] | torch.eye(n, dtype=torch.bool)
    ref = masked_forward(model, batch.embeds, batch.position_ids, [causal] * K + [pruned] * (4 - K))[:, -1]
    assert torch.allclose(state.logits, ref, atol=1e-4), (state.logits - ref).abs().max()

    token = lm.embed_tokens(state.logits.argmax(-1)[:, None])
    ours = llm.decode_one_token(lm, state, token)
    seq = torch.cat([batch.embeds, token], dim=1)
    grown = torch.ones(n + 1, n + 1).tril().bool()
    low, high = grown.clone(), grown & ~torch.cat([dropped, torch.tensor([False])])[None] | torch.eye(n + 1).bool()
    low[n, :n] &= ~dropped  # the decoded token sees no pruned token in the layers below K either
    positions = torch.cat([batch.position_ids, batch.position_ids[:, -1:] + 1], dim=1)
    ref = masked_forward(model, seq, positions, [low] * K + [high] * (4 - K))[:, -1]
    assert torch.allclose(ours, ref, atol=1e-4), (ours - ref).abs().max()


def test_ask_json_reports_both_stages(tiny_model_dir, clip, capsys):
    from videoqa.cli import main

    code = main(["ask", str(clip), "What is shown?", "--model", str(tiny_model_dir), "--json", "--prune", "prunevid",
                 "--r", "0.75", "--max-new-tokens", "2"])
    record = json.loads(capsys.readouterr().out)
    kept = record["kept"]
    assert code == 0 and kept["method"] == "prunevid" and kept["details"]["llm_layer"] == 1  # 11/32 of 4 layers
    groups = kept["details"]["groups"]  # the selection's tokens; a quarter of each group survives the LLM's stage
    assert kept["n_kept"] == 8 + sum(int(groups.count(g) * 0.25) for g in set(groups) - {-1})
    n_text = record["stats"]["prompt_tokens"] - len(groups)
    assert record["flops"]["n_tokens_pruned"] == n_text + kept["n_kept"]
    # FLOPs by stage (FastV's per-layer formula): layer 0 at the selection's tokens, layers 1-3 at those kept there
    config = json.loads((tiny_model_dir / "config.json").read_text())["text_config"]
    d, m = config["hidden_size"], config["intermediate_size"]

    def layer(n):
        return 4 * n * d * d + 2 * n * n * d + 2 * n * d * m
    assert record["flops"]["pruned"] == layer(n_text + len(groups)) + 3 * layer(n_text + kept["n_kept"])
    assert record["flops"]["full"] == 4 * layer(n_text + 520)
