"""How many frames and which R a question gets: the user's fixed choice, or the adaptive policy's decision.
`prepare`, the Ray actor, the web chat and the command line all plan through here, so they agree."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .adaptive import AdaptivePolicy, Decision, decide, resolution_knob
from .base import ModelDims
from .budget import ANSWER_RESERVE, only_kept_count
from .config import PruneConfig
from .shared import keep_count


@dataclass(frozen=True)
class Plan:
    """Frames to sample and R for one question; `decision` says why, when the adaptive policy chose them."""

    frames: int
    r: float
    decision: Decision | None = None
    full_frames: int | None = None  # a method sampling fewer frames: the frames R was applied to
    max_pixels: int | None = None  # a frame's pixel bound the adaptive policy lowered to (Qwen-VL)


def fewer_frames(tokens_per_frame: int, frames: int, r: float, decision: Decision | None = None) -> Plan:
    """The plan of a method that samples fewer frames at R (the `frames` baseline): as many frames as the tokens
    R keeps of `frames` frames fill, at least one, each seen whole (R=0 inside)."""
    kept = keep_count(frames * tokens_per_frame, r)
    return Plan(max(1, round(kept / tokens_per_frame)), 0.0, decision, full_frames=frames)


def at_resolution(sizes: list[int], plan_at: Callable[[int | None], Plan], wanted: int) -> Plan:
    """The plan at the processor's resolution or, where memory or the context cut its frames, at the largest
    lower one of `sizes` that keeps them (adaptive.resolution_knob), its decision saying so."""
    planned, pixels = resolution_knob(sizes, plan_at, lambda p: p.full_frames or p.frames, wanted)
    if pixels is None:
        return planned
    planned.decision.reason += f"; frames at most {pixels} pixels (lowered from {sizes[0]}) before dropping frames"
    return replace(planned, max_pixels=pixels)


def whole_groups(planned: Plan, group: int) -> Plan:
    """A fewer-frames plan rounded to whole temporal groups of `group` frames (Qwen-VL: 2 frames a temporal patch,
    so the tokens of every sampled frame are its own), at least one group and no more than it was applied to."""
    if planned.full_frames is None or planned.frames % group == 0:
        return planned
    frames = max(group, round(planned.frames / group) * group)
    return replace(planned, frames=min(frames, max(group, planned.full_frames)))


def plan(dims: ModelDims, cfg: PruneConfig, n_text: int, duration_s: float | None, frames: int | None,
         max_new: int, free_bytes: Callable[[], int] | int, policy: AdaptivePolicy, share: int = 1) -> Plan:
    """Frames and R for one question with `n_text` prompt tokens about a clip of `duration_s` seconds.

    With R=auto both come from the clip's length, the prompt and the free memory (`free_bytes`: bytes, or a
    function reading them; `share`: requests of one batch planned together, each with that part of it).
    Planning assumes at most ANSWER_RESERVE tokens of answer room; the answer may run on to the context's
    end. The caller then checks the frames it samples with `check_context`."""
    reserve = min(max_new, ANSWER_RESERVE)
    if cfg.adaptive:
        free = free_bytes() if callable(free_bytes) else free_bytes
        decision = decide(duration_s, dims, n_text, free, k=cfg.layer or 0, frames=frames,
                          policy=replace(policy, new_tokens=reserve), share=share,
                          renumbered=only_kept_count(cfg))
        planned = Plan(decision.frames, decision.r, decision)
    else:
        planned = Plan(frames or policy.base_frames, 0.0 if cfg.layer is None else float(cfg.r))
    if cfg.method_spec.reduces_frames:
        return fewer_frames(dims.tokens_per_frame, planned.frames, planned.r, planned.decision)
    return planned
