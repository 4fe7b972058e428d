"""Adaptive R: choose the frame count and FastV's ratio from the video's length and the memory left.

Video length decides the frames (8 by default, more for long clips, capped by the context window),
frames decide the visual tokens, and R is the smallest ratio meeting both

- a token budget that grows slower than the frame count (kept ∝ frames^γ with γ < 1: a longer clip
  is more redundant), anchored so that the training setting — 8 frames — gets the paper's R = 0.5;
- a FLOPs cap: prefill FLOPs at most `max_flops_ratio` times those of base_frames unpruned. FastV's first
  K layers see every token, so on a shallow model many frames cost more there alone than the cap allows:
  then fewer frames are taken (never fewer than asked for explicitly);
- the memory left on the device (weights are already resident): the KV cache (full length for layers
  < K, pruned after) plus a prefill-activation estimate must fit in the free memory minus a margin.

R is clamped to [r_min, r_max]; if even r_max does not fit, fewer frames are used, with a warning.
`decide` is a pure function of its arguments and returns a Decision saying which limit bound it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from ..errors import InputError
from .base import ModelDims
from .budget import DEFAULT_FRAMES, context_room, frame_cap, largest
from .flops import estimate_flops
from .memory import memory_need

GiB = 1 << 30
MiB = 1 << 20
T = TypeVar("T")  # a plan, as the caller makes it


@dataclass(frozen=True)
class AdaptivePolicy:
    """The policy's constants. Every decision can be recomputed from these plus decide()'s arguments."""

    # Video-LLaVA was trained on 8 uniformly sampled frames: clips up to base_frames * seconds_per_frame
    # (48 s: most MSVD/MSRVTT/TGIF clips) keep the training setting.
    base_frames: int = DEFAULT_FRAMES
    # Longer clips get one frame per 6 s (a 60 s clip 10, 90 s and longer hit a 4096 context's 15). Measured on
    # the long-clip validation split (`videoqa bench long --sweep`, both demo-long models): denser uniform sampling
    # (1.5-4 s per frame) saw more brief events but, paid for with a higher R under the FLOPs cap, lost more of
    # everything else; placing the 8 frames where the video changes is what paid (docs/long-clips.md).
    seconds_per_frame: float = 6.0
    max_frames: int | None = None  # an extra hard cap; None = the context window alone decides
    # The paper's default (FastV K=2 R=50%), given to base_frames with ample memory.
    base_r: float = 0.5
    # kept tokens ∝ frames^γ. γ = 0.25 keeps a 15-frame clip's prefill FLOPs at or below an unpruned
    # 8-frame clip's even when K is a quarter of the layers (the 8-layer bench config, K=2);
    # on Video-LLaVA-7B (K=2 of 32) it is far below.
    budget_exponent: float = 0.25
    # Never prune below r_min; r_max = 0.9 keeps >= 10%: published video results fall off steeply past
    # that (FastV at 114 of 2048 tokens: TGIF 19.8 -> 10.6).
    r_min: float = 0.0
    r_max: float = 0.9
    # Prefill FLOPs stay at or below this multiple of base_frames unpruned (None: no cap).
    max_flops_ratio: float | None = 1.0
    new_tokens: int = 64  # room for the answer, in the context window and in the KV cache
    # Plan with 80% of the free memory, less a fixed reserve for allocator fragmentation, kernel
    # workspaces and the vision tower's run: the activation figure below is an estimate.
    memory_margin: float = 0.2
    reserve_bytes: int = 512 * MiB


@dataclass
class Decision:
    """What the policy chose and why. `r` is the fraction of visual tokens dropped; `kept` how many stay."""

    frames: int
    visual_tokens: int
    r: float
    kept: int
    bound: str  # 'default' | 'budget' | 'flops' | 'memory' | 'context' | 'r_max'
    reason: str
    memory: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # each policy constant -> {"value", "source"}: the model's videoqa.json or Video-LLaVA-7B's default
    # (videoqa/model_policy.py); empty when decide() is called directly
    constants: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def max_frames_for_context(dims: ModelDims, text_tokens: int, policy: AdaptivePolicy | None = None,
                           renumbered: bool = False) -> int:
    """The most frames whose visual tokens fit the context with the text and the answer.

    The positions rule (budget.py): the unpruned length counts except for tokens pruned before the LLM with
    renumbered positions (`renumbered`), where only the kept ones do, at most pruning (r_max).
    """
    policy = policy or AdaptivePolicy()
    room = context_room(dims, text_tokens, policy.new_tokens)
    cap = frame_cap(dims, room, renumbered, policy.r_max if renumbered else 0.0)
    return cap if policy.max_frames is None else min(cap, policy.max_frames)


def frames_wanted(duration_s: float | None, policy: AdaptivePolicy) -> int:
    """The frames the policy wants for a clip of `duration_s` seconds, before any budget."""
    if duration_s is None or duration_s <= 0:  # unknown length (an image sequence, a stream): the default
        return policy.base_frames
    return max(policy.base_frames, math.ceil(duration_s / policy.seconds_per_frame))


def frames_for_duration(
    duration_s: float | None, dims: ModelDims, text_tokens: int, policy: AdaptivePolicy | None = None
) -> int:
    """base_frames for short clips, one frame per seconds_per_frame beyond, capped by the context window."""
    policy = policy or AdaptivePolicy()
    return min(frames_wanted(duration_s, policy), max_frames_for_context(dims, text_tokens, policy))


def resolution_knob(sizes: list[int], replan: Callable[[int | None], T], frames_of: Callable[[T], int],
                    wanted: int) -> tuple[T, int | None]:
    """The third knob, beside frames and R, of a family whose frame size can be lowered (Qwen-VL's max pixels):
    (the plan, the pixel bound it needs or None for the processor's own). When the plan at the processor's
    resolution samples fewer than the `wanted` frames (memory or the context cut them), the largest of `sizes`
    (pixel bounds, largest first) whose plan keeps them is used, else the smallest, which keeps the most."""
    planned = replan(None)
    if frames_of(planned) >= wanted or len(sizes) < 2:
        return planned, None
    for pixels in sizes[1:]:
        planned = replan(pixels)
        if frames_of(planned) >= wanted:
            break
    return planned, pixels


def _usable(free_bytes: int, policy: AdaptivePolicy) -> int:
    return max(0, int(free_bytes * (1.0 - policy.memory_margin)) - policy.reserve_bytes)


def _max_kept_for_memory(dims: ModelDims, text_tokens: int, n_visual: int, k: int, usable: int,
                         policy: AdaptivePolicy) -> int:
    """The most visual tokens that can be kept within `usable` bytes (-1: not even zero fits); the need never
    decreases as more tokens are kept."""
    return largest(lambda kept: memory_need(dims, text_tokens, n_visual, kept, k, policy.new_tokens)["need_bytes"]
                   <= usable, 0, n_visual)


def decide(
    duration_s: float | None,
    dims: ModelDims,
    text_tokens: int,
    free_bytes: int,
    k: int,
    frames: int | None = None,
    policy: AdaptivePolicy | None = None,
    share: int = 1,
    renumbered: bool = False,
) -> Decision:
    """Frames and R for one clip. Pure: the same arguments always give the same Decision.

    duration_s: clip length (None: unknown, use base_frames); text_tokens: prompt tokens besides the
    visual ones; free_bytes: device memory left with the weights loaded (free_memory_bytes());
    k: FastV's layer (0 for methods that prune before the LLM); frames: the user's override;
    share: how many requests of one batch the free memory is for (each plans with an equal part of it);
    renumbered: pruned before the LLM with renumbered positions, so only kept tokens fill the context.
    Raises InputError when not even one frame fits the context window or the memory.
    """
    policy = policy or AdaptivePolicy()
    warnings: list[str] = []
    n_frames, context_capped = _frames_in_context(duration_s, dims, text_tokens, frames, policy, warnings,
                                                  renumbered)
    if share < 1:
        raise InputError(f"share must be >= 1, got {share}")
    cap = flops_cap(dims, text_tokens, policy)
    wanted = n_frames
    if frames is None:
        n_frames = _frames_in_flops(n_frames, dims, text_tokens, k, cap, policy)
    usable = _usable(free_bytes, policy) // share
    free = f"{free_bytes / MiB:.0f} MiB free" + (f", shared by a batch of {share}" if share > 1 else "")
    f, max_kept_mem = _frames_in_memory(n_frames, dims, text_tokens, k, usable, free, policy)
    memory_cut = f < n_frames
    if memory_cut:
        warnings.append(f"not enough memory for {n_frames} frames even at R={policy.r_max}: "
                        f"using {f} frames ({usable / MiB:.0f} MiB usable of {free})")
    n_vis = f * dims.tokens_per_frame
    room = context_room(dims, text_tokens, policy.new_tokens)
    limits = Limits(max_kept_mem, _max_kept_for_flops(dims, text_tokens, n_vis, k, cap), memory_cut,
                    n_frames < wanted, context_capped, wanted, room if renumbered else n_vis)
    kept, bound, why = _kept_tokens(f, dims.tokens_per_frame, limits, policy)
    r = 1.0 - kept / n_vis

    mem = memory_need(dims, text_tokens, n_vis, kept, k, policy.new_tokens)
    mem.update(free_bytes=int(free_bytes), usable_bytes=usable, k=k, share=share)
    if frames is not None:
        src = "override"
    else:
        src = "unknown length" if duration_s is None else f"{duration_s:g} s"
    reason = f"{f} frames ({src}) -> {n_vis} visual tokens; keep {kept} (R={r:.3f}): {why}"
    return Decision(frames=f, visual_tokens=n_vis, r=r, kept=kept, bound=bound, reason=reason,
                    memory=mem, warnings=warnings)


def _frames_in_context(duration_s: float | None, dims: ModelDims, text_tokens: int, frames: int | None,
                       policy: AdaptivePolicy, warnings: list[str], renumbered: bool) -> tuple[int, bool]:
    """(frames wanted, capped by the context window; whether the cap applied). A cap on frames the user
    asked for adds a warning."""
    tpf = dims.tokens_per_frame
    cap = max_frames_for_context(dims, text_tokens, policy, renumbered)
    if cap < 1:
        raise InputError(f"the prompt ({text_tokens} text tokens) leaves no room for a single frame of "
                         f"{tpf} tokens in the {dims.context}-token context")
    wanted = frames_wanted(duration_s, policy) if frames is None else frames
    if wanted < 1:
        raise InputError(f"frames must be >= 1, got {wanted}")
    n_frames = min(wanted, cap)
    context_capped = n_frames < wanted
    if context_capped and frames is not None:  # the user asked for them: say so
        warnings.append(f"{wanted} frames x {tpf} tokens + {text_tokens} text + {policy.new_tokens} answer tokens "
                        f"exceed the {dims.context}-token context; using {n_frames} frames")
    return n_frames, context_capped


def _frames_in_memory(n_frames: int, dims: ModelDims, text_tokens: int, k: int, usable: int, free: str,
                      policy: AdaptivePolicy) -> tuple[int, int]:
    """(frames that fit the memory at R <= r_max, the most visual tokens the memory allows for them).

    Fewer frames only when even r_max does not fit the memory."""
    tpf = dims.tokens_per_frame
    for f in range(n_frames, 0, -1):
        n_vis = f * tpf
        max_kept_mem = _max_kept_for_memory(dims, text_tokens, n_vis, k, usable, policy)
        if max_kept_mem >= round(n_vis * (1.0 - policy.r_max)):
            return f, max_kept_mem
    need = memory_need(dims, text_tokens, tpf, round(tpf * (1.0 - policy.r_max)), k, policy.new_tokens)
    raise InputError(f"not enough memory for even one frame at R={policy.r_max}: needs about "
                     f"{need['need_bytes'] / MiB:.0f} MiB, {usable / MiB:.0f} MiB usable of {free}")


def flops_cap(dims: ModelDims, text_tokens: int, policy: AdaptivePolicy) -> float | None:
    """The most prefill FLOPs allowed: max_flops_ratio x base_frames unpruned with the same prompt."""
    if policy.max_flops_ratio is None:
        return None
    base = policy.base_frames * dims.tokens_per_frame
    return policy.max_flops_ratio * estimate_flops(dims, text_tokens, base, base, None).full


def _max_kept_for_flops(dims: ModelDims, text_tokens: int, n_visual: int, k: int, cap: float | None) -> int:
    """The most visual tokens kept whose prefill FLOPs stay within `cap` (-1: not even none); FLOPs grow with
    the kept count."""
    if cap is None:
        return n_visual
    return largest(lambda kept: estimate_flops(dims, text_tokens, n_visual, kept, k).pruned <= cap, 0, n_visual)


def _frames_in_flops(n_frames: int, dims: ModelDims, text_tokens: int, k: int, cap: float | None,
                     policy: AdaptivePolicy) -> int:
    """The most frames, up to n_frames, whose FLOPs fit the cap at R <= r_max (at least one)."""
    for f in range(n_frames, 1, -1):
        n_vis = f * dims.tokens_per_frame
        if _max_kept_for_flops(dims, text_tokens, n_vis, k, cap) >= round(n_vis * (1.0 - policy.r_max)):
            return f
    return 1


@dataclass(frozen=True)
class Limits:
    """What bounds the kept count besides the token budget."""

    max_kept_memory: int
    max_kept_flops: int  # -1: over the FLOPs cap even with nothing kept
    memory_cut: bool  # fewer frames than wanted: the memory
    flops_cut: bool  # fewer frames than wanted: the FLOPs cap
    context_capped: bool
    frames_wanted: int  # after the context cap
    max_kept_context: int  # the kept tokens the context holds (renumbered positions), else every token


def _kept_tokens(f: int, tpf: int, limits: Limits, policy: AdaptivePolicy) -> tuple[int, str, str]:
    """(visual tokens to keep, the limit that bound it, why) for `f` frames of `tpf` tokens each.

    The token budget is base_frames at base_r, growing as frames^budget_exponent; the FLOPs cap, memory and
    r_min cap it, r_max floors it."""
    n_vis = f * tpf
    growth = (f / policy.base_frames) ** policy.budget_exponent
    budget = policy.base_frames * tpf * (1.0 - policy.base_r) * growth
    max_kept_budget = min(n_vis, math.floor(budget + 1e-9))  # tolerance: 8 frames must give exactly base_r
    max_kept_rmin = round(n_vis * (1.0 - policy.r_min))
    min_kept = round(n_vis * (1.0 - policy.r_max))
    others = min(max_kept_budget, max_kept_rmin)
    kept = min(others, limits.max_kept_memory, limits.max_kept_flops, limits.max_kept_context)
    if kept < min_kept:  # memory was checked above; the budget or the FLOPs cap asks for more than r_max
        if limits.max_kept_flops < min(others, min_kept):
            return min_kept, "flops", f"the FLOPs cap asks for more than R={policy.r_max}"
        return min_kept, "r_max", f"the token budget ({budget:.0f}) asks for more than R={policy.r_max}"
    if limits.memory_cut:
        return kept, "memory", "memory does not fit more frames even at r_max"
    if limits.max_kept_memory < min(others, limits.max_kept_flops):
        return kept, "memory", f"memory allows at most {limits.max_kept_memory} visual tokens"
    if limits.flops_cut or limits.max_kept_flops < others:
        cut = f"{f} of {limits.frames_wanted} frames and " if limits.flops_cut else ""
        return kept, "flops", (f"{cut}{limits.max_kept_flops} visual tokens at most keep the prefill within "
                               f"{policy.max_flops_ratio:g}x the FLOPs of {policy.base_frames} unpruned frames")
    if limits.max_kept_context < others:
        return kept, "context", f"the context holds at most {limits.max_kept_context} visual tokens"
    if limits.context_capped:
        return kept, "context", f"the context allows at most {f} frames; token budget {budget:.0f}"
    if f == policy.base_frames and kept == max_kept_budget:
        paper = " (the paper's)" if policy.base_r == AdaptivePolicy.base_r else ""  # FastV's R=0.5
        return kept, "default", f"{f} frames as in training, this model's base R={policy.base_r}{paper}"
    return kept, "budget", f"token budget {budget:.0f} for {f} frames (∝ frames^{policy.budget_exponent})"


def describe(decision: Decision) -> str:
    """One line for the CLI and the UI."""
    d, m = decision, decision.memory
    line = (f"{d.frames} frames, {d.visual_tokens} visual tokens -> keep {d.kept} "
            f"(R={d.r:.2f}, bound: {d.bound}); KV {m.get('kv_bytes', 0) / GiB:.2f} GiB, "
            f"usable {m.get('usable_bytes', 0) / GiB:.1f} GiB")
    if d.warnings:
        line += f"; warning: {'; '.join(d.warnings)}"
    return line
