"""The budget module: one positions rule for the context check (fixed R) and the adaptive plan (R=auto)."""

import pytest

from videoqa.errors import InputError
from videoqa.models.video_llava import video_llava_7b_dims
from videoqa.pruning import PruneConfig
from videoqa.pruning.adaptive import AdaptivePolicy, decide
from videoqa.pruning.budget import check_context, frame_cap, largest, only_kept_count
from videoqa.pruning.planner import plan

DIMS = video_llava_7b_dims()  # 4096 context, 257 tokens per frame
N_TEXT, ANSWER = 64, 64
ROOM = DIMS.context - N_TEXT - ANSWER
# An adaptive policy that settles on R=0.5 whatever the frame count, with no FLOPs cap and ample memory:
# what it may take must be what a fixed R=0.5 may take.
HALF = AdaptivePolicy(r_min=0.5, r_max=0.5, max_flops_ratio=None)


def most_frames(slots) -> int:
    """Independent count: the most frames whose context slots fit the room, by walking up."""
    f = 0
    while slots(f + 1) <= ROOM:
        f += 1
    return f


@pytest.mark.parametrize("method", ["vispruner", "random"])
def test_renumbered_pruning_before_the_llm_fits_the_same_frames_fixed_or_auto(method):
    """Renumbered positions: only the kept tokens take context slots, so about 31 frames fit at R=0.5
    (15 unpruned). A fixed R=0.5 and R=auto settling on 0.5 must agree on that cap (auto used to stop at 15)."""
    expected = most_frames(lambda f: round(f * DIMS.tokens_per_frame * 0.5))
    assert 29 <= expected <= 31

    fixed = PruneConfig(method=method, r=0.5, keep_positions=False).validate()
    assert frame_cap(DIMS, ROOM, only_kept_count(fixed), 0.5) == expected
    check_context(DIMS, expected, N_TEXT, fixed, 0.5, ANSWER)  # fits
    with pytest.raises(InputError, match=f"use at most {expected} frames"):
        check_context(DIMS, expected + 1, N_TEXT, fixed, 0.5, ANSWER)

    auto = PruneConfig(method=method, r="auto", keep_positions=False).validate()
    planned = plan(DIMS, auto, N_TEXT, 3600.0, None, ANSWER, 2**50, HALF)  # an hour: wants far more frames
    assert planned.frames == expected and planned.r == pytest.approx(0.5, abs=1e-3)
    check_context(DIMS, planned.frames, N_TEXT, auto, planned.r, ANSWER)
    assert planned.decision.kept + N_TEXT + ANSWER <= DIMS.context


@pytest.mark.parametrize("cfg", [PruneConfig(method="fastv", k=2, r="auto"),
                                 PruneConfig(method="vispruner", r="auto", keep_positions=True),
                                 PruneConfig(method="fastvid", r="auto")], ids=["fastv", "vispruner-pos", "fastvid"])
def test_methods_that_reach_the_unpruned_length_keep_the_unpruned_cap(cfg):
    """FastV's first K layers see every token; kept tokens at their original positions reach the unpruned
    last position: the cap is the unpruned one, fixed or auto."""
    cfg = cfg.validate()
    expected = most_frames(lambda f: f * DIMS.tokens_per_frame)
    assert expected == 15 and not only_kept_count(cfg)
    assert plan(DIMS, cfg, N_TEXT, 3600.0, None, ANSWER, 2**50, HALF).frames == expected
    assert frame_cap(DIMS, ROOM, only_kept_count(cfg), 0.5) == expected


def test_adaptive_default_policy_no_longer_caps_renumbered_methods_at_the_unpruned_length():
    """With the default policy, renumbered random pruning on an hour-long clip may take more than the 15 frames
    the unpruned length allows (the FLOPs cap and the budget decide), and what it keeps fits the context."""
    d = decide(3600.0, DIMS, N_TEXT, 2**50, k=0, policy=AdaptivePolicy(max_flops_ratio=None), renumbered=True)
    assert d.frames > 15 and d.kept + N_TEXT + ANSWER <= DIMS.context
    assert decide(3600.0, DIMS, N_TEXT, 2**50, k=0, policy=AdaptivePolicy(max_flops_ratio=None)).frames == 15


def test_largest_is_the_last_n_that_fits():
    for limit in range(-2, 12):
        assert largest(lambda n, limit=limit: n <= limit, 0, 10) == max(-1, min(limit, 10))
