"""The token budget: how many context slots a method's visual tokens occupy, whether a prompt fits, the
bisection both use (planner.py chooses a question's frames and R from them).

The positions rule. FastV's first K layers see every visual token, and a method that prunes before the LLM
but keeps the original RoPE positions puts its last kept token where the unpruned one was: both reach the
unpruned length. Only pruning before the LLM with renumbered positions shortens what the context must hold.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InputError
from .base import ModelDims
from .config import PruneConfig
from .shared import keep_count

DEFAULT_FRAMES = 8  # what Video-LLaVA was trained with
ANSWER_RESERVE = 64  # context room an answer gets when frames are planned; a larger cap runs on to the end


def largest(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with fits(n), for a `fits` that holds up to some n and not after it;
    lo - 1 when not even lo fits. The one bisection of the budget (context, memory, FLOPs)."""
    if not fits(lo):
        return lo - 1
    while lo < hi:  # fits(lo) holds; fits(hi + 1) does not (or hi + 1 is past the range)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def context_room(dims: ModelDims, n_text: int, answer: int) -> int:
    """Context slots left for visual tokens after the prompt's text and `answer` tokens of answer."""
    return dims.context - n_text - answer


def only_kept_count(cfg: PruneConfig) -> bool:
    """Whether only the kept visual tokens occupy context slots (pruned before the LLM, renumbered)."""
    return cfg.layer == 0 and not cfg.original_positions


def context_slots(n_visual: int, n_kept: int, renumbered: bool) -> int:
    """Context slots (RoPE positions) `n_visual` visual tokens of which `n_kept` are kept occupy."""
    return n_kept if renumbered else n_visual


def frame_cap(dims: ModelDims, room: int, renumbered: bool, r: float) -> int:
    """The most frames whose visual tokens fit `room` context slots at ratio `r` (0: not even one)."""
    def fits(f: int) -> bool:
        n = f * dims.tokens_per_frame
        return context_slots(n, keep_count(n, r), renumbered) <= room

    # Slots never decrease with frames, and never exceed `room` frames' worth of tokens once a frame takes one.
    return max(0, largest(fits, 1, max(1, room)))


def fits_context(dims: ModelDims, frames: int, n_text: int, cfg: PruneConfig, r: float, max_new: int) -> bool:
    """Whether `frames` frames at ratio `r`, `n_text` prompt tokens and `max_new` answer tokens fit the context."""
    n = frames * dims.tokens_per_frame
    return context_slots(n, keep_count(n, r), only_kept_count(cfg)) <= context_room(dims, n_text, max_new)


def check_context(dims: ModelDims, frames: int, n_text: int, cfg: PruneConfig, r: float, max_new: int) -> None:
    """Refuse a frame count whose prompt cannot fit the context window, before any frame is decoded."""
    if fits_context(dims, frames, n_text, cfg, r, max_new):
        return
    room = context_room(dims, n_text, max_new)
    renumbered = only_kept_count(cfg)

    def visual(f: int) -> int:
        n = f * dims.tokens_per_frame
        return context_slots(n, keep_count(n, r), renumbered)
    most = frame_cap(dims, room, renumbered, r)
    if most < 1:
        raise InputError(f"the question and history need {n_text} tokens + {max_new} new tokens, which leaves "
                         f"no room for a frame in the model's context of {dims.context}; shorten them")
    n = frames * dims.tokens_per_frame
    tokens = f"{n} visual tokens" if visual(frames) == n else f"{visual(frames)} visual tokens (of {n}, R={r:.2f})"
    raise InputError(f"{frames} frames need {tokens} + {n_text} prompt and {max_new} answer tokens, more than "
                     f"the model's context of {dims.context}; use at most {most} frames")
