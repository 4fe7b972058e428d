"""Pieces every method may use (no method imports another's helpers): how many tokens R keeps, and how a
budget is split over frames."""

from __future__ import annotations


def keep_count(n_visual: int, r: float) -> int:
    """FastV's rule: keep round(n_vis * (1 - R)) visual tokens (at least one when there are any)."""
    if n_visual == 0:
        return 0
    return max(1, min(n_visual, round(n_visual * (1.0 - r))))


def frame_budgets(keep: int, n_frames: int) -> list[int]:
    """Split `keep` equally over frames; the remainder goes to frames spread evenly over the clip."""
    base, rem = divmod(keep, n_frames)
    extra = {i * n_frames // rem for i in range(rem)} if rem else set()
    return [base + (f in extra) for f in range(n_frames)]
