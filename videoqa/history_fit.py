"""How much of a conversation goes with the next question: the latest turns that fit without costing frames."""

from __future__ import annotations

from collections.abc import Callable

from .errors import InputError
from .pruning import ModelDims, PruneConfig
from .pruning.budget import fits_context, largest


def turns_that_fit(n_history: int, frames_for: Callable[[int], tuple[int, float]], text_tokens: Callable[[int], int],
                   dims: ModelDims, cfg: PruneConfig, reserve: int) -> int:
    """How many of the latest `n_history` turns the model can see without costing the video frames: the frames
    planned for the question alone (`frames_for(text tokens) -> (frames, R)`, InputError when none fit) must still
    be planned and fit the context with `text_tokens(n_turns)` prompt tokens. Chat products keep a long
    conversation going the same way, dropping its oldest turns; never the video's frames."""
    if not n_history:
        return 0
    try:
        wanted, _ = frames_for(text_tokens(0))
    except InputError:
        return 0  # not even the question alone fits: preparing it raises the error for it

    def fits(n_turns: int) -> bool:
        n_text = text_tokens(n_turns)
        try:
            f, r = frames_for(n_text)
        except InputError:
            return False
        return f >= wanted and fits_context(dims, f, n_text, cfg, r, reserve)

    return max(0, largest(fits, 0, n_history))
