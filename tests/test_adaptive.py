"""The adaptive policy: frames from length, R from a token budget and the memory left."""

from dataclasses import replace
from pathlib import Path

import pytest

from videoqa.bench.policy_table import main
from videoqa.errors import InputError
from videoqa.measure import free_memory_bytes
from videoqa.models.video_llava import video_llava_7b_dims
from videoqa.pruning.adaptive import (
    AdaptivePolicy,
    Decision,
    decide,
    describe,
    frames_for_duration,
)
from videoqa.pruning.base import ModelDims
from videoqa.pruning.flops import estimate_flops
from videoqa.pruning.memory import memory_need
from videoqa.pruning.shared import keep_count

GiB = 1 << 30
DIMS = video_llava_7b_dims()  # 32 layers, d=4096, 257 tokens per frame, context 4096, bf16
TEXT = 64
AMPLE = 80 * GiB
EVERY_3S = AdaptivePolicy(seconds_per_frame=3.0)  # the worked figures below use one frame per 3 s


def _fits(d: Decision) -> bool:
    return d.memory["need_bytes"] <= d.memory["usable_bytes"]


def test_eight_frames_with_ample_memory_is_the_paper_default():
    for duration in (None, 2.0, 10.0, 24.0):
        d = decide(duration, DIMS, TEXT, AMPLE, k=2)
        assert (d.frames, d.visual_tokens, d.r, d.kept, d.bound) == (8, 2056, 0.5, 1028, "default")
        assert d.warnings == []


def test_frames_grow_with_length_and_stop_at_the_context():
    frames = [frames_for_duration(s, DIMS, TEXT, EVERY_3S) for s in (5, 24, 25, 30, 42, 45, 180, 3600)]
    assert frames == [8, 8, 9, 10, 14, 15, 15, 15]
    # 15 x 257 + text + answer fits 4096; 16 frames would not
    assert 15 * 257 + TEXT + AdaptivePolicy().new_tokens <= DIMS.context < 16 * 257 + TEXT
    # a longer prompt leaves room for fewer frames
    assert frames_for_duration(3600, DIMS, 400) == (4096 - 400 - 64) // 257


def test_longer_video_more_frames_and_higher_r():
    ds = [decide(s, DIMS, TEXT, AMPLE, k=2, policy=EVERY_3S) for s in (5, 30, 180)]
    assert [d.frames for d in ds] == [8, 10, 15]
    assert ds[0].r < ds[1].r < ds[2].r
    # the kept count grows, but slower than the frame count
    assert ds[0].kept < ds[1].kept < ds[2].kept
    assert ds[2].kept / ds[0].kept < ds[2].frames / ds[0].frames
    assert ds[1].bound == "budget" and ds[2].bound == "context"
    expected = 1028 * (15 / 8) ** AdaptivePolicy().budget_exponent  # independent budget figure
    assert ds[2].kept == int(expected)


def test_auto_r_keeps_a_long_clip_no_costlier_than_unpruned_eight_frames():
    # The benchmark's target, checked on FLOPs: 7B (K=2 of 32) and an 8-layer bench-size model.
    mid = ModelDims(
        n_layers=8,
        hidden=1024,
        ffn=2816,
        n_heads=16,
        n_kv_heads=16,
        head_dim=64,
        context=4096,
        tokens_per_frame=257,
        grid=16,
        dtype_bytes=4,
    )
    for dims in (DIMS, mid):
        d = decide(180, dims, 60, AMPLE, k=2)
        pruned = estimate_flops(dims, 60, d.visual_tokens, d.kept, 2).pruned
        assert d.frames == 15
        assert pruned <= estimate_flops(dims, 60, 2056, 2056, None).full


def test_less_memory_higher_r():
    rs = []
    for gb in (80, 8, 1.5, 1.25, 1.1):
        d = decide(180, DIMS, TEXT, int(gb * GiB), k=2)
        assert _fits(d)
        rs.append(d.r)
    assert rs[0] == rs[1] < rs[2] < rs[3] < rs[4]
    tight = decide(5, DIMS, TEXT, int(1.25 * GiB), k=2)
    assert tight.bound == "memory" and tight.r > 0.5 and tight.frames == 8


def test_memory_figures_match_an_independent_kv_count():
    d = decide(30, DIMS, TEXT, AMPLE, k=2)
    per_token_layer = 2 * 32 * 128 * 2  # k and v, kv heads, head dim, bf16
    new = AdaptivePolicy().new_tokens
    full_len, kept_len = TEXT + d.visual_tokens + new, TEXT + d.kept + new
    assert d.memory["kv_bytes"] == per_token_layer * (2 * full_len + 30 * kept_len)
    assert d.memory["kv_bytes_full"] == per_token_layer * 32 * full_len
    assert d.memory["free_bytes"] == AMPLE


def test_memory_need_is_the_largest_of_three_moments():
    """The cache fills layer by layer: at layer K-1 only the first K layers hold (full-length) keys while the
    activations are full-length; at the last layer the whole prompt's KV is there but activations cover only
    the kept tokens; decoding adds the answer's KV. The need is the largest of the three, not their sum."""
    per_token_layer = 2 * 32 * 128 * 2
    act_per_token = (6 * 4096 + 3 * 11008) * 2
    n_vis, kept, new = 15 * 257, 1203, 64
    n, n_hat = TEXT + n_vis, TEXT + kept
    moments = {"layer K-1": per_token_layer * 2 * n + act_per_token * n,
               "last layer": per_token_layer * (2 * n + 30 * n_hat) + act_per_token * n_hat,
               "decode": per_token_layer * (2 * n + 30 * n_hat + 32 * new)}
    need = memory_need(DIMS, TEXT, n_vis, kept, 2, new)
    assert need["need_bytes"] == max(moments.values())
    assert need["peak_phase"] == max(moments, key=moments.get) == "last layer"
    assert need["kv_bytes"] == moments["decode"]
    # unpruned (K = all layers): the last layer's activations on top of the whole prompt's KV
    full = memory_need(DIMS, TEXT, n_vis, n_vis, 32, new)
    assert full["need_bytes"] == max(per_token_layer * 32 * n + act_per_token * n, per_token_layer * 32 * (n + new))


def test_when_r_max_does_not_fit_fewer_frames_with_a_warning():
    d = decide(180, DIMS, TEXT, int(1.25 * GiB), k=2)
    assert d.frames < 15 and d.warnings and d.bound == "memory"
    assert d.r <= AdaptivePolicy().r_max and _fits(d)
    # one more frame would not fit even at r_max
    more = memory_need(DIMS, TEXT, (d.frames + 1) * 257, keep_count((d.frames + 1) * 257, 0.9), 2, 64)
    assert more["need_bytes"] > d.memory["usable_bytes"]
    with pytest.raises(InputError, match="memory"):
        decide(5, DIMS, TEXT, 600 << 20, k=2)


def test_k_is_used_for_memory():
    low = int(1.25 * GiB)
    rs = [decide(5, DIMS, TEXT, low, k=k).r for k in (0, 2, 8)]
    assert rs[0] < rs[1] < rs[2]  # more unpruned layers leave less room for kept tokens
    assert decide(5, DIMS, TEXT, AMPLE, k=8).r == 0.5  # with ample memory k does not matter


def test_frames_override_respected_and_capped_by_context():
    d = decide(5, DIMS, TEXT, AMPLE, k=2, frames=12)
    assert d.frames == 12 and d.warnings == [] and d.bound == "budget"
    few = decide(600, DIMS, TEXT, AMPLE, k=2, frames=4)
    assert few.frames == 4 and few.r < 0.5  # fewer frames than training: prune less
    over = decide(5, DIMS, TEXT, AMPLE, k=2, frames=40)
    assert over.frames == 15 and over.bound == "context" and "context" in over.warnings[0]


def test_never_over_the_context_window():
    for text in (0, 64, 500, 3000):
        for duration in (1, 60, 10_000):
            for frames in (None, 1, 8, 100):
                try:
                    d = decide(duration, DIMS, text, AMPLE, k=2, frames=frames)
                except InputError:
                    assert text + 257 + 64 > DIMS.context
                    continue
                assert text + d.visual_tokens + AdaptivePolicy().new_tokens <= DIMS.context
    with pytest.raises(InputError, match="context"):
        decide(5, DIMS, 3900, AMPLE, k=2)


def test_reproducible_consistent_and_clamped():
    small_policy = AdaptivePolicy(r_max=0.6)
    for args in [(5, AMPLE), (30, 8 * GiB), (180, 2 * GiB), (None, int(1.3 * GiB))]:
        a = decide(args[0], DIMS, TEXT, args[1], k=2)
        assert a == decide(args[0], DIMS, TEXT, args[1], k=2)
        assert keep_count(a.visual_tokens, a.r) == a.kept  # the pipeline's rule gives the same count
        assert 0.0 <= a.r <= 0.9
    clamped = decide(180, DIMS, TEXT, AMPLE, k=2, policy=small_policy)
    assert clamped.r == pytest.approx(0.6, abs=1 / clamped.visual_tokens) and clamped.bound == "r_max"
    floor = decide(5, DIMS, TEXT, AMPLE, k=2, frames=4, policy=replace(small_policy, r_min=0.45))
    assert floor.r == pytest.approx(0.45, abs=1 / floor.visual_tokens)


def test_describe_and_to_dict():
    d = decide(30, DIMS, TEXT, 24 * GiB, k=2, policy=EVERY_3S)
    line = describe(d)
    assert "\n" not in line and "10 frames" in line and f"keep {d.kept}" in line and "budget" in line
    assert d.to_dict()["memory"]["kv_bytes"] == d.memory["kv_bytes"]


def test_default_rate_is_one_frame_per_6_s():
    """The long-clip sweep's choice: clips up to 48 s keep the 8 training frames, a 60 s clip gets 10."""
    frames = [frames_for_duration(s, DIMS, TEXT) for s in (10, 48, 49, 60, 90, 3600)]
    assert frames == [8, 8, 9, 10, 15, 15]


def test_free_memory_bytes_cpu_is_what_the_kernel_says_is_available():
    """Adaptive R sizes the frames to what a new allocation can use now: Linux's MemAvailable (free pages plus
    reclaimable cache), read here independently; not the total, not the idle-page count alone."""
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("needs Linux /proc/meminfo for an independent reading")
    fields = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in meminfo.read_text().splitlines())}
    free = free_memory_bytes("cpu")
    # other processes on the machine move MemAvailable between the two readings: 2% of the total
    assert abs(free - fields["MemAvailable"]) < 0.02 * fields["MemTotal"]
    assert 0 < free < fields["MemTotal"]


def test_main_prints_the_table(capsys):
    main()
    out = capsys.readouterr().out
    assert out.count("default") >= 3 and "context" in out and "memory" in out


SMALL = ModelDims(n_layers=8, hidden=128, ffn=384, n_heads=4, n_kv_heads=4, head_dim=32, context=2048,
                  tokens_per_frame=65, grid=8, dtype_bytes=4)  # the long-clip demo model's shape


def _flops(dims: ModelDims, text: int, frames: int, kept: int, k: int | None) -> int:
    """FastV §4.2 written out: K layers at the full length, the rest at the kept length."""
    n, t = text + frames * dims.tokens_per_frame, dims.n_layers

    def f(x: int) -> int:
        return 4 * x * dims.hidden**2 + 2 * x * x * dims.hidden + 2 * x * dims.hidden * dims.ffn

    return t * f(n) if k is None else k * f(n) + (t - k) * f(text + kept)


def test_flops_cap_takes_fewer_frames_when_fastv_full_layers_would_exceed_it():
    policy = AdaptivePolicy(seconds_per_frame=2.0, new_tokens=8)
    cap = _flops(SMALL, TEXT, 8, 0, None)  # unpruned 8 frames
    d = decide(60, SMALL, TEXT, AMPLE, k=2, policy=policy)
    assert d.bound == "flops" and 8 < d.frames < 30 and "frames" in d.reason
    assert _flops(SMALL, TEXT, d.frames, d.kept, 2) <= cap < _flops(SMALL, TEXT, d.frames, d.kept + 1, 2)
    more = d.frames + 1  # one more frame would be over the cap even at r_max
    assert _flops(SMALL, TEXT, more, keep_count(more * 65, policy.r_max), 2) > cap
    # K=1 leaves one full-length layer: more frames fit; before the LLM (k=0) more still
    frames = [decide(60, SMALL, TEXT, AMPLE, k=k, policy=policy).frames for k in (2, 1, 0)]
    assert frames[0] < frames[1] < frames[2] == 30
    # without the cap the context alone decides, and the FLOPs go over
    free = decide(60, SMALL, TEXT, AMPLE, k=2, policy=replace(policy, max_flops_ratio=None))
    assert free.frames == 30 and _flops(SMALL, TEXT, 30, free.kept, 2) > cap


def test_flops_cap_never_cuts_frames_the_user_asked_for():
    d = decide(60, SMALL, TEXT, AMPLE, k=2, frames=28, policy=AdaptivePolicy(new_tokens=8))
    assert d.frames == 28 and d.bound == "flops" and d.r == pytest.approx(0.9, abs=1 / d.visual_tokens)


def test_short_clips_keep_the_paper_default_on_the_small_model():
    for duration in (4, 10, 16):
        d = decide(duration, SMALL, TEXT, AMPLE, k=2, policy=AdaptivePolicy(new_tokens=8))
        assert (d.frames, d.r, d.bound) == (8, 0.5, "default")
