"""FastVID: selection and merging against a transcription of the official routine, segmentation, budgets."""

import json

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa.cli import build_parser, main
from videoqa.cli.options import prune_from_args
from videoqa.errors import InputError
from videoqa.pruning import PruneConfig, keep_count
from videoqa.pruning.base import VisualLayout
from videoqa.pruning.methods.fastvid.algorithm import (
    FastVIDParams,
    density_peaks,
    frame_similarities,
    merge_into,
    segment_sizes,
    select_fastvid,
)


def _official(hidden, attn, global_feats, ratio, c=8, tau=0.9, d=0.4, p=4, beta=0.6):
    """LunarShen/FastVID's prefill pruning, transcribed for one video's patch tokens: the segment budget split
    of its Qwen2.5-VL code and the merge of its LLaVA-OneVision/LLaVA-Video code (the split is the same for
    single-frame segments; the Qwen2.5-VL merge leaves the anchor out of its own mean).

    hidden [F, P, D] (no newline tokens), attn [F, P], global_feats [F, G]. Returns the kept indices into the
    flattened F*P patches (ascending) and the features the LLM sees for them.
    """
    frame_num, frm_len, _ = hidden.shape
    g = global_feats / global_feats.norm(dim=1, keepdim=True)
    similarity = (g[:-1] * g[1:]).sum(dim=1)
    cut = torch.topk(similarity, c - 1, largest=False).indices
    cut = torch.unique(torch.cat([cut, torch.nonzero(similarity < tau).squeeze(1)])).sort().values
    sizes = [cut[0].item() + 1]
    sizes += [cut[i].item() - cut[i - 1].item() for i in range(1, len(cut))]
    sizes.append(frame_num - cut[-1].item() - 1)

    frame_retain = int(frm_len * ratio)
    out_idx, out_tok, seg_start = [], [], 0
    for seg_hidden, seg_attn in zip(torch.split(hidden, sizes), torch.split(attn, sizes), strict=True):
        n = seg_attn.shape[0]
        seg_retain = frame_retain * n
        n_ctx = int(seg_retain * d)
        n_sal = seg_retain - n_ctx
        if n == 1:
            sal_n, ctx_n = [n_sal], [n_ctx]
        else:
            sal_n = [n_sal // n + (1 if i < n_sal % n else 0) for i in range(n)]
            n_tmp = (n + p - 1) // p
            tmp = [n_ctx // n_tmp + (1 if i < n_ctx % n_tmp else 0) for i in range(n_tmp)]
            ctx_n, j = [], 0
            for i in range(n):
                if i % p == 0:
                    ctx_n.append(tmp[j])
                    j += 1
                else:
                    ctx_n.append(0)
            ctx_n.reverse()

        sal_idx, ctx_idx = [], []
        for i in range(n):
            top = torch.topk(seg_attn[i], sal_n[i]).indices if sal_n[i] > 0 else None
            if ctx_n[i] > 0:
                every = torch.arange(frm_len)
                rest = every[~torch.isin(every, top)] if top is not None else every
                x = seg_hidden[i][rest].unsqueeze(0)
                dist = torch.cdist(x.float(), x.float()) / (x.shape[-1] ** 0.5)
                near, _ = torch.topk(dist, k=4, dim=-1, largest=False)
                density = (-(near**2).mean(dim=-1)).exp()
                density = density + torch.rand(density.shape, dtype=density.dtype) * 1e-6
                mask = (density[:, None, :] > density[:, :, None]).type(x.dtype)
                dmax = dist.flatten(1).max(dim=-1)[0][:, None, None]
                parent, _ = (dist * mask + dmax * (1 - mask)).min(dim=-1)
                picked = torch.topk(parent * density, k=ctx_n[i], dim=-1).indices[0].sort().values
                ctx = rest[picked]
            else:
                ctx = None
            if top is not None:
                sal_idx.append(top + i * frm_len)
            if ctx is not None:
                ctx_idx.append(ctx + i * frm_len)

        flat = seg_hidden.reshape(n * frm_len, -1)
        sal = torch.cat(sal_idx)
        unit = flat / flat.norm(dim=-1, keepdim=True)
        every = torch.arange(n * frm_len)
        ctx_tok = []
        for ctx in ctx_idx:
            # LLaVA-OneVision/LLaVA-Video: every non-salient token of the segment is assigned, the anchor's own
            # context tokens included (each joins itself), so a context token is in its own mean.
            merge = every[~torch.isin(every, sal)]
            onehot = torch.zeros(len(merge), len(ctx))
            onehot.scatter_(1, (unit[merge] @ unit[ctx].T).argmax(dim=1).unsqueeze(-1), 1)
            w = (1 / (onehot.sum(dim=0).unsqueeze(-1) + 1)).clamp(min=beta)
            counts = onehot.sum(dim=0).clamp(min=1).unsqueeze(-1)
            ctx_tok.append(w * flat[ctx] + (1 - w) * (onehot.T @ flat[merge]) / counts)
        idx = torch.cat([sal, torch.cat(ctx_idx)])
        tok = torch.cat([flat[sal], torch.cat(ctx_tok)])
        order = torch.argsort(idx)
        out_idx.append(idx[order] + seg_start)
        out_tok.append(tok[order])
        seg_start += n * frm_len
    return torch.cat(out_idx), torch.cat(out_tok), sizes


def _scenes(lengths, dim, spread=0.05, seed=0):
    """Global features of consecutive scenes: one random direction per scene plus a little per-frame noise."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for n in lengths:
        base = torch.randn(dim, generator=gen)
        rows += [base + spread * torch.randn(dim, generator=gen) for _ in range(n)]
    return torch.stack(rows)


CASES = [
    # frames, grid, retention, params, scene lengths
    (8, 4, 0.25, FastVIDParams(), [8]),  # Video-LLaVA's 8 frames: every frame is its own segment
    (32, 4, 0.25, FastVIDParams(), [3, 9, 6, 14]),  # the official setting: long segments, several anchors
    (12, 4, 0.5, FastVIDParams(min_segments=3, context_share=0.5, anchor_stride=2, beta=0.3), [5, 7]),
]


@pytest.mark.parametrize("has_cls", [True, False])
@pytest.mark.parametrize("frames,grid,ratio,params,scenes", CASES)
def test_matches_official_routine(frames, grid, ratio, params, scenes, has_cls):
    torch.manual_seed(frames)
    n_patch = grid * grid
    patches = torch.randn(frames, n_patch, 8)
    attn = torch.rand(frames, n_patch)
    global_feats = _scenes(scenes, 16, seed=frames)
    ref_idx, ref_tok, ref_sizes = _official(patches, attn, global_feats, ratio, params.min_segments,
                                            params.tau, params.context_share, params.anchor_stride, params.beta)

    layout = VisualLayout(n_frames=frames, grid=grid, has_cls=has_cls)
    first = int(has_cls)
    features = torch.cat([torch.randn(frames, first, 8), patches], dim=1)
    attention = torch.cat([torch.full((frames, first), 5.0), attn], dim=1)  # the CLS column is ignored
    keep = frames * (int(n_patch * ratio) + first)
    sel = select_fastvid(features, keep, layout, attention, global_feats, params)

    assert sel.details["segments"] == ref_sizes
    assert len(ref_sizes) > 1 and (max(ref_sizes) > params.anchor_stride or frames == 8)
    patch_kept = [i for i in sel.kept if i % layout.tokens_per_frame >= first]
    expected = [f * layout.tokens_per_frame + first + j for f, j in (divmod(i, n_patch) for i in ref_idx.tolist())]
    assert patch_kept == expected
    rows = torch.stack([sel.merged[sel.kept.index(i)] for i in patch_kept])
    torch.testing.assert_close(rows, ref_tok, atol=1e-5, rtol=1e-5)
    assert sel.details["cls"] == ([f * layout.tokens_per_frame for f in range(frames)] if has_cls else [])


def test_density_peaks_pick_cluster_centres():
    # A tight cluster around (0, 0), a looser one around (4, 0) and one outlier far away.
    ring = torch.tensor([[0.0, 0.0], [1, 0], [-1, 0], [0, 1], [0, -1]])
    x = torch.cat([0.1 * ring, 0.3 * ring + torch.tensor([4.0, 0]), torch.tensor([[0.0, 40]])])
    assert density_peaks(x[:10], 1).tolist() == [0]  # the densest point gets the largest distance of all
    assert density_peaks(x, 2).tolist() == [0, 5]  # one centre per cluster; the outlier is not dense
    assert density_peaks(x, 11).tolist() == list(range(11))
    assert density_peaks(x, 0).tolist() == []
    # Exact duplicates: equal densities resolve by position, so the first copy stands for its cluster.
    twins = torch.tensor([[0.0, 0], [0, 0], [5, 5], [5, 5]])
    assert density_peaks(twins, 2, k=2).tolist() == [0, 2]


def test_segments_split_exactly_at_scene_cuts():
    feats = _scenes([5, 7, 4], 32)  # cuts after frames 4 and 11
    sims = frame_similarities(feats)
    assert segment_sizes(sims, min_segments=1, tau=0.9) == [5, 7, 4]  # only the similarity threshold
    assert segment_sizes(sims, min_segments=3, tau=-1.0) == [5, 7, 4]  # the two least similar transitions
    assert segment_sizes(sims, min_segments=4, tau=0.9) != [5, 7, 4]  # a third cut falls inside a scene
    one_scene = _scenes([16], 32)
    assert segment_sizes(frame_similarities(one_scene), min_segments=1, tau=0.9) == [16]
    assert len(segment_sizes(frame_similarities(one_scene), min_segments=8, tau=0.9)) == 8  # at least c

    # Through the whole selection: the frames' CLS tokens carry the scenes, nothing merges across a cut.
    layout = VisualLayout(n_frames=16, grid=3, has_cls=True)
    features = torch.randn(16, 10, 32)
    features[:, 0] = feats
    sel = select_fastvid(features, 16 * 4, layout, torch.rand(16, 10), params=FastVIDParams(min_segments=1))
    assert sel.details["segments"] == [5, 7, 4]
    bounds = [0, 5, 12, 16]
    for i, group in zip(sel.kept, sel.absorbed, strict=True):
        seg = next(s for s in range(3) if bounds[s] <= i // 10 < bounds[s + 1])
        assert all(bounds[seg] <= j // 10 < bounds[seg + 1] for j in group)


def test_merge_weights_sum_to_one_and_follow_the_official_rule():
    # Every feature row sums to one, so a merged row sums to one exactly when its weights do.
    layout = VisualLayout(n_frames=6, grid=4, has_cls=True)  # 17 tokens per frame
    torch.manual_seed(5)
    features = torch.rand(6, 17, 10)
    features = features / features.sum(-1, keepdim=True)
    params = FastVIDParams(min_segments=2, tau=-1.0)
    sel = select_fastvid(features, 30, layout, torch.rand(6, 17), torch.randn(6, 4), params)
    flat = features.reshape(-1, 10)
    merged_any = False
    for row, i, group in zip(sel.merged, sel.kept, sel.absorbed, strict=True):
        if not group:
            torch.testing.assert_close(row, flat[i])
            continue
        merged_any = True
        assert i in sel.details["context"] and i not in group
        # the official rule: the token's mean includes itself, w = max(1 / (members + 1), beta)
        own = max(1 / (len(group) + 2), params.beta)
        expected = own * flat[i] + (1 - own) * flat[[i, *group]].mean(dim=0)
        torch.testing.assert_close(row, expected)
        torch.testing.assert_close(row.sum(), torch.tensor(1.0))
    assert merged_any
    salient = set(sel.details["salient"])
    assert all(not group for i, group in zip(sel.kept, sel.absorbed, strict=True) if i in salient)


def _official_merge(x, targets, members, beta):
    """The LLaVA-Video code's merge, one target at a time: every member (the targets included) joins its most
    cosine-similar target, first on ties; a target becomes w * itself + (1 - w) * mean(its members), w =
    max(1 / (members + 1), beta)."""
    unit = x / x.norm(dim=-1, keepdim=True)
    rows = []
    for j, t in enumerate(targets):
        mine = [m for m in members if int(torch.argmax(unit[m] @ unit[targets].T)) == j]
        w = max(1 / (len(mine) + 1), beta)
        rows.append(w * x[t] + (1 - w) * x[mine].mean(dim=0) if mine else x[t])
    return torch.stack(rows)


@pytest.mark.parametrize("beta", [0.6, 0.3, 0.0])
def test_merge_includes_the_anchor_in_its_own_mean_like_the_official_code(beta):
    torch.manual_seed(11)
    x = torch.randn(40, 8)
    targets = torch.tensor([3, 17, 30])
    members = torch.tensor([i for i in range(40) if i not in (5, 6, 7)])  # 5-7 salient: never merged
    merged, groups = merge_into(x, torch.nn.functional.normalize(x, dim=-1), targets, members, beta)
    torch.testing.assert_close(merged, _official_merge(x, targets.tolist(), members.tolist(), beta))
    assert sorted(i for g in groups for i in g) == sorted(set(members.tolist()) - set(targets.tolist()))

    # By hand: target e0 absorbs two tokens; at beta 0.6 they weigh 0.4 * 2/3 together, not 0.4.
    e = torch.eye(6)
    x = torch.stack([e[0], e[1], e[0] + 0.5 * e[2], e[0] + 0.5 * e[3], e[1] + 0.5 * e[4]])
    merged, groups = merge_into(x, torch.nn.functional.normalize(x, dim=-1), torch.tensor([0, 1]),
                                torch.arange(5), 0.6)
    assert groups == [[2, 3], [4]]
    torch.testing.assert_close(merged[0], e[0] + 0.4 / 3 * 0.5 * (e[2] + e[3]))  # e0: 0.6 + 0.4 * 3/3
    torch.testing.assert_close(merged[1], e[1] + 0.4 / 2 * 0.5 * e[4])


def test_every_dropped_patch_is_absorbed_once_per_anchor_of_its_segment():
    layout = VisualLayout(n_frames=8, grid=4, has_cls=True)
    torch.manual_seed(6)
    features = torch.randn(8, 17, 12)
    params = FastVIDParams(min_segments=2, tau=-1.0, anchor_stride=2)
    sel = select_fastvid(features, 8 * 5, layout, torch.rand(8, 17), params=params)
    sizes = sel.details["segments"]
    assert len(sizes) == 2 and max(sizes) > 2
    start = 0
    for size in sizes:
        frames = range(start, start + size)
        anchors = [a for a in sel.details["anchors"] if a in frames]
        assert anchors[-1] == frames[-1]  # the segment's last frame is always an anchor
        kept = set(sel.kept)
        for i in (f * 17 + j for f in frames for j in range(1, 17)):
            holders = [k for k, g in zip(sel.kept, sel.absorbed, strict=True) if i in g]
            if i in kept and i not in sel.details["context"]:
                assert holders == []  # salient (and CLS) tokens are never merged
            elif i not in kept:
                assert sorted({h // 17 for h in holders}) == anchors
        start += size


@pytest.mark.parametrize("frames", [1, 2, 3, 5, 8, 13])
def test_budget_exact_sorted_in_range_for_any_frame_count(frames):
    layout = VisualLayout(n_frames=frames, grid=3, has_cls=True)  # 10 tokens per frame
    torch.manual_seed(frames)
    features = torch.randn(frames, 10, 6)
    attention = torch.rand(frames, 10)
    for keep in sorted({0, 1, frames, 2 * frames + 1, layout.n_tokens // 2, layout.n_tokens - 1, layout.n_tokens}):
        sel = select_fastvid(features, keep, layout, attention)
        assert len(sel.kept) == keep and sel.kept == sorted(set(sel.kept))
        assert all(0 <= i < layout.n_tokens for i in sel.kept)
        assert sel.merged.shape == (keep, 6) and len(sel.absorbed) == keep
        assert sum(sel.details["segment_budgets"]) == keep
        assert sum(sel.details["segments"]) == frames
    full = select_fastvid(features, layout.n_tokens, layout, attention)
    torch.testing.assert_close(full.merged, features.reshape(-1, 6))  # nothing dropped, nothing merged


def test_mild_pruning_over_long_segments_keeps_the_budget():
    # One 8-frame segment (identical frames) at R=0.25: the anchor frame cannot hold all context tokens.
    layout = VisualLayout(n_frames=8, grid=4, has_cls=True)
    torch.manual_seed(7)
    features = torch.randn(1, 17, 8).expand(8, 17, 8) + 1e-3 * torch.randn(8, 17, 8)
    for keep in (102, 68, 34):
        sel = select_fastvid(features, keep, layout, torch.rand(8, 17), params=FastVIDParams(min_segments=1))
        assert sel.details["segments"] == [8]
        assert len(sel.kept) == keep == len(set(sel.kept))
    without_attention = select_fastvid(features, 34, layout, None, params=FastVIDParams(min_segments=1))
    assert len(without_attention.kept) == 34


def test_deterministic_and_independent_of_the_global_rng():
    layout = VisualLayout(n_frames=8, grid=8, has_cls=True)  # the tiny and demo models' layout
    torch.manual_seed(8)
    features = torch.randn(8, 65, 16)
    features[:, 1:33] = features[:, 1:2]  # many exact density ties
    attention = torch.rand(8, 65).round(decimals=1)  # many attention ties
    first = select_fastvid(features, 52, layout, attention)
    torch.manual_seed(123)
    torch.rand(1000)
    again = select_fastvid(features.clone(), 52, layout, attention.clone())
    assert first.kept == again.kept and first.absorbed == again.absorbed and first.details == again.details
    assert torch.equal(first.merged, again.merged)
    assert first.merged.dtype == features.dtype
    half = select_fastvid(features.half(), 52, layout, attention)
    assert half.merged.dtype == torch.float16


def test_shape_and_argument_errors():
    layout = VisualLayout(n_frames=2, grid=2, has_cls=True)
    features, attention = torch.randn(2, 5, 4), torch.rand(2, 5)
    with pytest.raises(ValueError, match="layout"):
        select_fastvid(features[:, :4], 3, layout, attention)
    with pytest.raises(ValueError, match="attention"):
        select_fastvid(features, 3, layout, attention[:, :4])
    with pytest.raises(ValueError, match="keep"):
        select_fastvid(features, 11, layout, attention)
    with pytest.raises(ValueError, match="frame_features"):
        select_fastvid(features, 3, layout, attention, torch.randn(3, 4))
    with pytest.raises(ValueError, match="context_share"):
        select_fastvid(features, 3, layout, attention, params=FastVIDParams(context_share=1.5))


# -- behind the pipeline's interface --------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("fastvid-clips") / "moving.mp4", n_frames=16)


def test_config_defaults_to_original_positions_for_fastvid_only():
    assert PruneConfig(method="fastvid", r=0.5).validate().keep_positions is True
    assert PruneConfig(method="fastvid", r=0.5, keep_positions=False).validate().keep_positions is False
    assert PruneConfig(method="vispruner", r=0.5).validate().keep_positions is False
    assert PruneConfig(method="random", r=0.5, keep_positions=True).validate().keep_positions is True
    assert PruneConfig(method="fastvid").layer == 0
    with pytest.raises(InputError, match="context_share"):
        PruneConfig(method="fastvid", context_share=1.5).validate()
    parser = build_parser()
    for flags, expected in (([], True), (["--no-keep-positions"], False), (["--keep-positions"], True)):
        args = parser.parse_args(["ask", "clip.mp4", "What?", "--prune", "fastvid", "--r", "0.9", *flags])
        assert prune_from_args(args).keep_positions is expected
    args = parser.parse_args(["ask", "clip.mp4", "What?", "--prune", "fastv", "--no-keep-positions"])
    with pytest.raises(InputError, match="--no-keep-positions: not used by --prune fastv"):
        prune_from_args(args)


def test_the_llm_sees_merged_features_at_original_positions(tiny_qa, clip_path):
    cfg = PruneConfig(method="fastvid", r=0.75).validate()
    req = tiny_qa.prepare(clip_path, "Which way does it move?", None, cfg, None, 4)
    enc = req.enc
    sel = select_fastvid(enc.features, keep_count(520, 0.75), enc.layout, enc.cls_attention,
                         enc.vision_features[:, 0])
    assert req.kept == sel.kept and len(req.kept) == 130
    torch.testing.assert_close(req.visual, sel.merged)
    flat = enc.features.reshape(520, -1)
    merged = [n for n, group in enumerate(sel.absorbed) if group]
    assert merged and not torch.allclose(req.visual[merged], flat[[sel.kept[n] for n in merged]])
    untouched = [n for n, group in enumerate(sel.absorbed) if not group]
    torch.testing.assert_close(req.visual[untouched], flat[[sel.kept[n] for n in untouched]])

    batch = tiny_qa.collate([req])  # what prefill receives: merged features, unpruned positions
    vis = batch.visual_mask[0]
    torch.testing.assert_close(batch.embeds[0, vis], sel.merged.to(batch.embeds.dtype))
    start = int(vis.nonzero()[0])
    assert batch.position_ids[0, vis].tolist() == [start + i for i in sel.kept]
    renumbered = tiny_qa.prepare(clip_path, "Which way does it move?", None,
                                 PruneConfig(method="fastvid", r=0.75, keep_positions=False).validate(), None, 4)
    assert renumbered.kept == req.kept
    positions = tiny_qa.collate([renumbered]).position_ids[0]
    assert positions.tolist() == list(range(len(renumbered.ids)))


def test_answer_record_flops_and_adaptive_r(tiny_qa, clip_path):
    answer = tiny_qa.ask(clip_path, "What colour is it?", prune=PruneConfig(method="fastvid", r=0.9),
                         max_new_tokens=2)
    kept = answer.kept
    assert kept.method == "fastvid" and kept.layer == 0 and kept.n_kept == keep_count(520, 0.9)
    assert len(kept.absorbed) == kept.n_kept and kept.details["segments"]
    record = kept.to_dict()
    assert record["absorbed"] and all(int(i) in kept.kept and group for i, group in record["absorbed"].items())
    dropped = set(range(520)) - set(kept.kept)
    assert record["n_merged_dropped"] == len({i for g in kept.absorbed for i in g} & dropped) > 0
    masks = kept.frame_masks()
    assert sum(len(m["merged"]) for m in masks) == record["n_merged_dropped"]
    assert f"visual tokens 520 -> 52 ({record['n_merged_dropped']} dropped merged in) |" in answer.summary()
    assert not any(set(m["merged"]) & set(m["patches"]) for m in masks)
    assert json.loads(json.dumps(answer.to_dict()))["prune"]["keep_positions"] is True
    same = tiny_qa.ask(clip_path, "What colour is it?", prune=PruneConfig(method="vispruner", r=0.9),
                       max_new_tokens=2)
    assert answer.flops == same.flops  # the same kept count before the LLM costs the same
    auto = tiny_qa.ask(clip_path, "What colour is it?", prune=PruneConfig(method="fastvid", r="auto"),
                       max_new_tokens=2)
    assert auto.decision is not None and auto.kept.n_kept == auto.decision.kept
    again = tiny_qa.ask(clip_path, "What colour is it?", prune=PruneConfig(method="fastvid", r=0.9),
                        max_new_tokens=2)
    assert again.text == answer.text and again.kept.kept == kept.kept and again.kept.absorbed == kept.absorbed


def test_ask_json_with_fastvid(capsys, tiny_model_dir, clip_path):
    code = main(["ask", str(clip_path), "What is shown?", "--model", str(tiny_model_dir), "--json",
                 "--prune", "fastvid", "--r", "0.9", "--max-new-tokens", "2"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and record["kept"]["method"] == "fastvid" and record["kept"]["n_kept"] == 52
    assert record["prune"]["keep_positions"] is True and record["kept"]["absorbed"]


def test_switching_method_keeps_only_a_chosen_positions_rule():
    fastv = PruneConfig(method="fastv", r=0.5).validate()  # resolved: False, fastv's own rule
    assert fastv.for_method("fastvid").validate().keep_positions is True
    assert fastv.for_method("vispruner").validate().keep_positions is False
    chosen = PruneConfig(method="vispruner", r=0.5, keep_positions=True).validate()
    assert chosen.for_method("random").validate().keep_positions is True
    renumbered = PruneConfig(method="fastvid", r=0.5, keep_positions=False).validate()
    assert renumbered.for_method("vispruner").validate().keep_positions is False
    assert PruneConfig(method="fastvid").validate().for_method("random").validate().keep_positions is False
    # R carries over; K is FastV's own option, which FastVID does not have
    assert fastv.for_method("fastvid").r == 0.5 and fastv.for_method("fastvid").k is None
    assert fastv.for_method("fastvid").for_method("fastv").validate().k == fastv.k


def test_batch_keys_name_the_fields_fastvid_reads():
    from videoqa.batch.worklist import answer_options, fingerprint

    def options(**kw):
        own = {k: v for k, v in kw.items() if k in ("keep_positions", "context_share")}
        # A spec may hold options of other methods (one written by hand, or before the registry): not keys.
        others = {k: v for k, v in kw.items() if k not in own}
        spec = {"model": "demo", "prune": {**PruneConfig(method="fastvid", r=0.9, **own).validate().to_dict(),
                                           **others}}
        return answer_options(spec)

    assert options()["prune"] == {"method": "fastvid", "r": 0.9, "context_share": 0.4, "keep_positions": True}
    keys = {fingerprint(options()), fingerprint(options(keep_positions=False)), fingerprint(options(context_share=1.0))}
    assert len(keys) == 3
    assert fingerprint(options()) == fingerprint(options(seed=5, k=7, important_ratio=0.1))  # not read by fastvid


def test_bench_accuracy_measures_fastvid_both_ways_at_every_r_in_its_own_folders():
    from videoqa.bench.accuracy import FASTVID_RATIOS, configs, run_name

    cfgs = [c.validate() for c in configs(k=2)]
    names = [run_name(c) for c in cfgs]
    assert len(set(names)) == len(names)  # a run folder holds one configuration
    for r in FASTVID_RATIOS:
        assert {c.keep_positions for c in cfgs if c.method == "fastvid" and c.r == r and c.context_share == 0.4} \
            == {True, False}
    assert FASTVID_RATIOS == (0.5, 0.75, 0.9, 0.95)
