"""The plain baselines: `pool` averages each frame's patch grid into the grid nearest its budget (recomputed
here cell by cell), `frames` samples fewer whole frames with the same visual-token count."""

import pytest
import torch

from videoqa.pruning import REGISTRY, EncodedVideo, ModelDims, PruneConfig, VisualLayout
from videoqa.pruning.adaptive import AdaptivePolicy
from videoqa.pruning.planner import plan


@pytest.mark.parametrize("grid,keep,side", [(6, 3 * 10, 3), (7, 3 * 17, 4), (8, 3 * 65, 8)])
def test_pool_averages_each_cell(grid, keep, side):
    torch.manual_seed(grid)
    t = grid * grid + 1
    feats = torch.randn(3, t, 5)
    method = REGISTRY.get("pool")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(3, t), VisualLayout(3, grid)), keep, method.defaults())
    expected = {}
    for f in range(3):
        expected[f * t] = (feats[f, 0], [])  # the frame's [CLS], as it is
        patches = feats[f, 1:].reshape(grid, grid, 5)
        for i in range(side):  # cell i spans rows floor(i*G/s) .. ceil((i+1)*G/s) - 1
            rows = range(i * grid // side, -(-(i + 1) * grid // side))
            for j in range(side):
                cols = range(j * grid // side, -(-(j + 1) * grid // side))
                mean = patches[rows.start:rows.stop, cols.start:cols.stop].reshape(-1, 5).mean(dim=0)
                centre = f * t + 1 + rows[(len(rows) - 1) // 2] * grid + cols[(len(cols) - 1) // 2]
                members = {f * t + 1 + r * grid + c for r in rows for c in cols} - {centre}
                expected[centre] = (mean, sorted(members))
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, torch.stack([expected[i][0] for i in sel.kept]))
    assert sel.absorbed == [expected[i][1] for i in sel.kept]


@pytest.mark.parametrize("rows,cols,budget,cells", [(4, 6, 6, (2, 3)), (6, 4, 6, (3, 2)), (3, 8, 2, (1, 2)),
                                                     (2, 9, 14, (2, 8)), (2, 9, 17, (2, 9))])
def test_pool_keeps_a_wide_frames_aspect(rows, cols, budget, cells):
    """Qwen-VL's frames are rows x cols patches (96x128 px: 3x4 merged tokens): each is pooled to the rows' and
    columns' share of the budget, sr x sc with sr/sc = rows/cols (sr = round(sqrt(b*rows/cols)), clamped)."""
    torch.manual_seed(rows * cols)
    feats = torch.randn(2, rows * cols, 5)
    layout = VisualLayout(2, rows, has_cls=False, cols=cols)
    method = REGISTRY.get("pool")
    sel = method.select(EncodedVideo(feats, feats, torch.rand(2, rows * cols), layout), 2 * budget, method.defaults())
    sr, sc = cells
    expected = {}
    for f in range(2):
        patches = feats[f].reshape(rows, cols, 5)
        for i in range(sr):
            rr = range(i * rows // sr, -(-(i + 1) * rows // sr))
            for j in range(sc):
                cc = range(j * cols // sc, -(-(j + 1) * cols // sc))
                centre = f * rows * cols + rr[(len(rr) - 1) // 2] * cols + cc[(len(cc) - 1) // 2]
                expected[centre] = patches[rr.start:rr.stop, cc.start:cc.stop].reshape(-1, 5).mean(dim=0)
    assert sel.kept == sorted(expected)
    torch.testing.assert_close(sel.visual, torch.stack([expected[i] for i in sel.kept]))


@pytest.mark.parametrize("r,frames", [(0.5, 4), (0.55, 4), (0.75, 2), (0.9, 1), (0.0, 8)])
def test_frames_plans_fewer_whole_frames(r, frames):
    dims = ModelDims(2, 8, 16, 2, 2, 4, 4096, 65, 8)
    cfg = PruneConfig(method="frames", r=r).validate()
    planned = plan(dims, cfg, 20, None, 8, 16, 1 << 30, AdaptivePolicy())
    assert (planned.frames, planned.r, planned.full_frames) == (frames, 0.0, 8)
    assert frames == max(1, round(8 * 65 * (1 - r) / 65))


def test_frames_answers_with_fewer_frames_and_full_clip_flops(tiny_qa, tmp_path):
    from helpers.clipgen import write_clip

    clip = write_clip(tmp_path / "clip.mp4", n_frames=16)
    answer = tiny_qa.ask(clip, "What colour is it?", prune=PruneConfig(method="frames", r=0.75), max_new_tokens=2)
    assert answer.stats.frames == 2 and answer.kept.n_kept == answer.stats.visual_tokens == 130
    same = tiny_qa.ask(clip, "What colour is it?", prune=PruneConfig(method="random", r=0.75), max_new_tokens=2)
    assert answer.flops.ratio == pytest.approx(same.flops.ratio)  # 130 tokens of a full 8-frame clip either way
    sampled = tiny_qa.sample(clip, 8)[0]
    fewer = tiny_qa.prepare(sampled, "What colour is it?", None, PruneConfig(method="frames", r=0.75).validate(),
                            None, 2)  # a clip given as frames: two of its frames, evenly spaced
    assert fewer.clip.indices == [sampled.indices[0], sampled.indices[7]] and len(fewer.visual) == 130
