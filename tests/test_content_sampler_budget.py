"""The content sampler's whole first pass is a long step (issue 37, finding 3): the demux pass that counts the
frames asks Stop and spends the scan's budget, and a scan whose pace would run past its budget gives up early
instead of spending the whole budget before the uniform frames it falls back to.

Clocks are injected (each reading advances a fixed step), so "how far the scan got" is exact and the tests say
nothing about this machine's speed; `progress` fractions show how much of the clip was decoded."""

from __future__ import annotations

import itertools

import pytest
from helpers import clipgen

from videoqa.errors import Cancelled
from videoqa.video import frame_indices, probe, probe_video, sample_frames
from videoqa.video.changes import ScanOverBudget, content_indices, scan_changes
from videoqa.video.probe import TICK_PACKETS

FRAMES = 1000  # 40 s at 25 fps: ~16 demux ticks, 40 progress checks (one per second of video)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return clipgen.write_clip(tmp_path_factory.mktemp("budget") / "c.mp4", n_frames=FRAMES, size=(32, 32), fps=25)


def _stepping_clock(step: float):
    """A clock that advances `step` seconds at every reading."""
    counter = itertools.count()
    return lambda: next(counter) * step


def _stop_after(n: int):
    """A cancel check that says stop from its (n + 1)-th question on; `.asked` counts the questions."""
    def cancel() -> bool:
        cancel.asked += 1
        return cancel.asked > n
    cancel.asked = 0
    return cancel


def test_stop_during_the_index_pass_stops_it_before_any_frame_is_decoded(clip):
    seen: list[float] = []
    cancel = _stop_after(2)
    with pytest.raises(Cancelled, match="reading the file's index"):
        scan_changes(clip, cancel=cancel, progress=seen.append)
    assert seen == []  # no frame of the clip was decoded
    assert cancel.asked == 3  # asked again every TICK_PACKETS packets; stopped at the first True
    assert FRAMES > 3 * TICK_PACKETS  # so the pass was cut short, not finished


def test_the_uniform_sampler_and_probe_video_ask_stop_during_their_index_pass(clip):
    with pytest.raises(Cancelled, match="reading the file's index"):
        sample_frames(clip, 8, cancel=_stop_after(2))  # the first question comes before the backend starts
    with pytest.raises(Cancelled, match="reading the file's index"):
        probe_video(clip, cancel=_stop_after(1))
    never = _stop_after(10**9)
    assert probe_video(clip, cancel=never).total_frames == FRAMES  # asking does not change what is counted
    assert never.asked == -(-FRAMES // TICK_PACKETS)


def test_the_index_pass_spends_the_scan_budget(clip):
    seen: list[float] = []
    with pytest.raises(ScanOverBudget, match=r"took over 5 s \(reading the file's index"):
        scan_changes(clip, budget_s=5, clock=_stepping_clock(1.0), progress=seen.append)
    assert seen == []  # gave up before decoding a frame
    # sample_frames makes the demux pass once, outside the budget, for the scan and the decoder
    out = sample_frames(clip, 8, sampler="content", scan_budget_s=1e-9)
    assert out.sampler == "uniform" and out.indices == frame_indices(FRAMES, 8)
    assert len(out.warnings) == 1 and out.warnings[0].startswith("frames chosen uniformly: the change scan took")


def test_sample_frames_makes_one_demux_pass_for_the_scan_and_the_decoder(clip, monkeypatch):
    passes: list[int] = []
    real = probe._scan

    def counted(container, stream, tick=None):
        passes.append(1)
        return real(container, stream, tick)

    monkeypatch.setattr(probe, "_scan", counted)
    content = sample_frames(clip, 8, sampler="content")
    assert len(passes) == 1 and content.sampler == "content"
    passes.clear()
    sample_frames(clip, 8, sampler="content", scan_budget_s=1e-9)  # the scan gave up: the same pass serves
    assert len(passes) == 1


def test_a_scan_whose_pace_runs_past_its_budget_gives_up_early(clip):
    # 0.3 s a reading: decoding alone takes 40 readings (12 s) > the 10 s budget. Without the pace the scan
    # would decode until 10 s had passed (~80 % of the clip) and then fall back to uniform frames anyway.
    seen: list[float] = []
    with pytest.raises(ScanOverBudget, match=r"would take about \d+ s, over its 10 s budget"):
        scan_changes(clip, budget_s=10, clock=_stepping_clock(0.3), progress=seen.append)
    assert seen and max(seen) <= 0.15


def test_a_scan_whose_pace_fits_its_budget_runs_to_the_end_with_the_same_choice(clip):
    seen: list[float] = []
    paced = scan_changes(clip, budget_s=100, clock=_stepping_clock(0.3), progress=seen.append)
    free = scan_changes(clip, budget_s=None)
    assert seen[-1] == 1.0
    uniform = frame_indices(FRAMES, 16)
    assert content_indices(paced, uniform) == content_indices(free, uniform)
    assert (paced.thumbs == free.thumbs).all() and list(paced.indices) == list(free.indices)
