"""HoliTom (before the LLM): the windows, kept set and merged features equal the official routine
(cokeshao/HoliTom, holitom/llava_arch.py: select_static_windows, get_static_dynamic_features,
merge_tokens_by_attention_density with D = 0, merge_tokens_by_density) recomputed here in plain torch; its stage
inside the LLM (--llm-merge) equals modeling_qwen2.py's merge recomputed here, and a decoder forward merging the
same way at layer K with the merged-away tokens masked from there on."""

import math

import torch

from videoqa.pruning import REGISTRY, EncodedVideo, VisualLayout


def _windows(sim, tau):
    """The official dynamic programme over saved[s, e] = static positions of s..e times (e - s)."""
    n = sim.shape[0] + 1
    same = torch.ones(n, n, sim.shape[1])
    for s in range(n - 1):
        run = torch.cumprod((sim[s:] > tau).float(), dim=0)
        same[s, s + 1:s + 1 + len(run)] = run
    lengths = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).clamp(min=0)
    saved = same.sum(dim=-1) * lengths
    dp, prev = torch.zeros(n), [0] * n
    for i in range(n):
        best, start = (dp[i - 1] if i > 0 else 0), i
        for size in range(2, i + 2):
            j = i - size
            value = (dp[j] if j >= 0 else 0) + saved[j + 1, i]
            if value > best:
                best, start = value, j + 1
        dp[i], prev[i] = best, start
    out, i = [], n - 1
    while i >= 0:
        out.append((prev[i], i))
        i = prev[i] - 1
    return out[::-1], float(dp[-1])


def _clusters(x, n_clusters, k, beta):
    """merge_tokens_by_density: DPC-kNN centres (sorted), the rest to the nearest centre, beta-weighted merge.
    Equal densities: the earlier token counts as denser (the official code breaks ties with noise)."""
    dist = torch.cdist(x[None], x[None])[0] / x.shape[-1] ** 0.5
    density = (-(dist.topk(k, dim=-1, largest=False).values ** 2).mean(dim=-1)).exp()
    idx = torch.arange(len(x))
    tie = (density[None, :] == density[:, None]) & (idx[None] < idx[:, None])
    higher = (density[None, :] > density[:, None]) | tie
    parent = torch.where(higher, dist, dist.max()).min(dim=-1).values
    centres = (parent * density).topk(n_clusters).indices.sort().values
    others = [i for i in range(len(x)) if i not in centres.tolist()]
    nearest = dist[others][:, centres].argmin(dim=-1)
    out = []
    for c in range(n_clusters):
        members = [o for o, m in zip(others, nearest.tolist(), strict=True) if m == c]
        out.append(beta * x[centres[c]] + (1 - beta) * x[members].mean(dim=0) if members else x[centres[c]])
    return centres, out


def test_matches_the_official_routine():
    torch.manual_seed(3)
    layout = VisualLayout(n_frames=5, grid=4, has_cls=True)
    feats = torch.randn(5, 17, 8)
    feats[:3, 1:10] = torch.randn(1, 9, 8) + 0.05 * torch.randn(3, 9, 8)  # positions 0-8 static over frames 0-2
    feats[3:, 5:12] = torch.randn(1, 7, 8) + 0.05 * torch.randn(2, 7, 8)  # 4-10 static over frames 3-4
    attn = torch.rand(5, 17).softmax(dim=-1)
    keep = 5 + 30  # a [CLS] a frame and 30 patches
    method = REGISTRY.get("holitom")
    sel = method.select(EncodedVideo(feats, feats, attn, layout), keep, method.defaults())

    x, a = feats[:, 1:], attn[:, 1:]
    normed = torch.nn.functional.normalize(x, dim=-1)
    sim = torch.nn.functional.cosine_similarity(normed[:-1], normed[1:], dim=-1)
    windows, saved = _windows(sim, 0.8)
    assert windows == [(0, 2), (3, 4)] and sel.details["windows"] == windows
    ratio = min((30 / 80) / ((80 - saved) / 80), 1)
    expected = {f * 17: feats[f, 0] for f in range(5)}
    for s, e in windows:
        static = torch.all(sim[s:e] > 0.8, dim=0)
        pos = torch.nonzero(static).flatten()
        n_clusters = round(len(pos) * ratio)
        centres, rows = _clusters(x[s:e + 1, static].mean(dim=0), n_clusters, min(7, n_clusters), 0.6)
        expected.update({s * 17 + 1 + int(pos[c]): r for c, r in zip(centres, rows, strict=True)})
        dyn = torch.nonzero(~static).flatten()
        n_dom = round(math.ceil(len(dyn) * ratio) * (1 - 0))
        for f in range(s, e + 1):
            for i in dyn[a[f, dyn].topk(n_dom).indices].tolist():
                expected[f * 17 + 1 + i] = x[f, i]
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, torch.stack([expected[i] for i in sel.kept]))


def official_merge(hidden, score, r):
    """HoliTom's merge inside the LLM (modeling_qwen2.py): keep the round(n * (1 - r)) best scores; every other
    token, in ascending order, is averaged into the kept one of highest cosine similarity (similarities taken
    before any merge)."""
    top = score.topk(round(len(score) * (1 - r))).indices
    others = [i for i in range(len(score)) if i not in top.tolist()]
    sim = torch.nn.functional.cosine_similarity(hidden[others][:, None], hidden[top][None], dim=-1)
    out = hidden.clone()
    for o, j in zip(others, sim.max(dim=-1).indices.tolist(), strict=True):
        out[top[j]] = (out[top[j]] + out[o]) / 2
    return sorted(top.tolist()), out


def test_llm_merge_averages_each_other_token_into_its_most_similar_kept_one():
    from videoqa.pruning.methods.holitom.llm_merge import merge_into_kept

    torch.manual_seed(0)
    hidden, score = torch.randn(12, 6), torch.rand(12)
    kept, out, merged = merge_into_kept(hidden, score, 0.5)
    want_kept, want = official_merge(hidden, score, 0.5)
    assert kept.tolist() == want_kept
    torch.testing.assert_close(out, want)
    assert sorted(sum(merged.values(), [])) == sorted(set(range(12)) - set(want_kept))


@torch.no_grad()
def test_llm_merge_logits_equal_a_forward_merging_at_layer_k(tiny_qa, tmp_path):
    """The prefill with --llm-merge equals transformers' decoder where, before layer K, the kept tokens' hidden
    states are merged as the official code does and the others are masked as keys from layer K on."""
    from helpers.clipgen import write_clip

    from videoqa import llm
    from videoqa.pruning import PruneConfig

    k = 2
    clip = write_clip(tmp_path / "c.mp4", n_frames=16)
    cfg = PruneConfig("holitom", r=0.5, llm_merge=True, merge_layer=k).validate(4)
    req = tiny_qa.prepare(clip, "What colour is the shape?", None, cfg, None, 4)
    batch = tiny_qa.collate([req])
    state = tiny_qa.prefill([req], batch)
    model, lm = tiny_qa.model, llm.adapt(tiny_qa.model)
    dec = model.model.language_model
    vis = batch.visual_mask[0].nonzero().flatten()
    n = batch.embeds.shape[1]
    with lm.using_kernel("eager"):
        att = dec(inputs_embeds=batch.embeds, position_ids=batch.position_ids, output_attentions=True).attentions
    score = att[k - 1][0].mean(0)[-1, vis]
    kept = sorted(score.topk(round(len(vis) * 0.5)).indices.tolist())
    assert state.kept[0].tolist() == kept

    dropped = torch.zeros(n, dtype=torch.bool)
    dropped[vis] = True
    dropped[vis[kept]] = False
    causal = torch.ones(n, n).tril().bool()
    pruned = causal & ~dropped[None] | torch.eye(n, dtype=torch.bool)

    def hook_for(i):
        def hook(module, args, kwargs):
            allowed = pruned if i >= k else causal
            low = torch.finfo(torch.float32).min
            kwargs["attention_mask"] = torch.zeros(n, n).masked_fill(~allowed, low)[None, None]
            if i == k:  # the merge, on the hidden states entering layer K
                h = args[0].clone()
                h[0, vis] = official_merge(h[0, vis], score, 0.5)[1]
                args = (h, *args[1:])
            return args, kwargs
        return hook

    handles = [layer.register_forward_pre_hook(hook_for(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    try:
        ref = model.lm_head(dec(inputs_embeds=batch.embeds, position_ids=batch.position_ids).last_hidden_state)
    finally:
        for handle in handles:
            handle.remove()
    ref = ref[:, -1].float()
    assert torch.allclose(state.logits, ref, atol=1e-4), (state.logits - ref).abs().max()
