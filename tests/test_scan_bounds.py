"""The content sampler's change scan is a long step: cancellable, budgeted, with progress (issue 37, finding 3).

Rule for every long step (scans, decodes, future prefix-cache builds): it takes `cancel` and asks it at least
once a second of work, it has a time budget with a documented fallback, and it reports progress."""

from __future__ import annotations

import pytest
from helpers import clipgen

from videoqa.errors import Cancelled
from videoqa.video import frame_indices, sample, sample_frames
from videoqa.video.changes import ScanOverBudget, scan_changes


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return clipgen.write_clip(tmp_path_factory.mktemp("scan") / "c.mp4", n_frames=120, fps=10)


def test_the_scan_asks_cancel_and_stops(clip):
    asked = []

    def cancel() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(Cancelled):
        scan_changes(clip, cancel=cancel)
    assert len(asked) == 4  # stopped at the first True, not after reading the whole clip


def test_sample_frames_hands_its_cancel_to_the_scan(clip, monkeypatch):
    seen = {}
    real = sample.scan_changes

    def spy(path, **kw):
        seen.update(kw)
        return real(path, **kw)

    monkeypatch.setattr(sample, "scan_changes", spy)

    def never() -> bool:
        return False

    sample_frames(clip, 8, sampler="content", cancel=never)
    assert seen["cancel"] is never


def test_a_scan_over_its_budget_falls_back_to_uniform_frames_with_one_notice(clip):
    ticks = iter(range(10_000))
    with pytest.raises(ScanOverBudget, match="took over 3 s"):
        scan_changes(clip, budget_s=3, clock=lambda: float(next(ticks)))  # one second per reading
    out = sample_frames(clip, 8, sampler="content", scan_budget_s=1e-9)
    assert out.sampler == "uniform" and out.indices == frame_indices(120, 8)
    assert len(out.warnings) == 1 and out.warnings[0].startswith("frames chosen uniformly: the change scan took")


def test_the_scan_reports_its_progress(clip):
    seen: list[float] = []
    scan_changes(clip, progress=seen.append)
    assert seen[-1] == 1.0 and seen == sorted(seen) and len(seen) >= 10  # about once a second of video
