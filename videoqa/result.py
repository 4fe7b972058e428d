"""What one question produced: the answer text, the kept visual tokens, what they cost, and timings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .pruning import KeptTokens, PruneConfig, format_r
from .pruning.adaptive import Decision
from .pruning.flops import FlopsEstimate
from .video import Clip


@dataclass(frozen=True)
class Stats:
    """Sizes, timings (seconds) and memory of one answer."""

    frames: int
    sampler: str  # what chose the frames: "uniform" or "content" (their timestamps: Answer.clip)
    distinct_frames: int  # different frames of the file among them (a short or damaged clip repeats frames)
    visual_tokens: int
    kept_visual_tokens: int
    prompt_tokens: int  # tokens the LLM's first layer sees
    new_tokens: int
    max_new_tokens: int  # the cap this answer ran under: the one asked for, or the room left in the context
    context_capped: bool  # the context's end, not the asked cap, set max_new_tokens
    t_sample: float  # decoding the video file into frames
    t_encode: float  # preprocessing + vision tower + projector (0 when cached)
    t_prefill: float
    t_rank: float  # part of prefill spent ranking (FastV); every timing is read after synchronising the device
    t_generate: float  # decoding new tokens after the first
    t_total: float
    tokens_per_s: float
    peak_memory_bytes: int  # the peak while this answer's batch ran through the LLM (prefill + decoding)
    peak_memory_kind: str  # "cuda-max-allocated" (allocator peak) or "cpu-rss-sampled" (process resident set)
    cache_bytes: int
    encode_cached: bool
    device: str
    dtype: str
    temporal_attention: bool = False  # the video tower lets frames attend to each other (published Video-LLaVA)
    history_dropped: int = 0  # oldest (question, answer) turns the model did not see: they left no room for the frames
    t_select: float = 0.0  # choosing the visual tokens before the LLM (FastV's ranking is t_rank, inside t_prefill)
    prefix_cached: bool = False  # the prompt's prefix (everything up to the last visual token) came from the cache

    def stages(self) -> dict[str, float]:
        """Seconds per stage of this answer; "other" is the rest of t_total (Python, tokenising, batching)."""
        parts = {"frames": self.t_sample, "vision": self.t_encode, "select": self.t_select,
                 "prefill": self.t_prefill, "decode": self.t_generate}
        parts["other"] = max(0.0, self.t_total - sum(parts.values()))
        return parts


@dataclass(frozen=True)
class Answer:
    """One answer: `text`, the `kept` visual tokens, the adaptive `decision` (if any), `stats` and `flops`."""

    text: str
    question: str
    clip: Clip
    kept: KeptTokens
    decision: Decision | None  # when R or frames were chosen automatically (the adaptive policy)
    stats: Stats
    flops: FlopsEstimate
    prune: PruneConfig = field(default_factory=PruneConfig)
    prompt: str = "plain"  # the prompt template (model.PROMPT_TEMPLATES)

    @property
    def warnings(self) -> list[str]:
        """What the video file could not give (frames lost to damage, a single image): the clip's warnings.
        The adaptive choice's own warnings are in `decision.warnings`. Also an answer cut by the context's end."""
        s = self.stats
        cut = [f"the answer stopped at the end of the model's context after {s.new_tokens} new tokens"
               ] if s.context_capped and s.new_tokens >= s.max_new_tokens else []
        return list(self.clip.warnings) + cut

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "answer": self.text,
            "warnings": self.warnings,
            "video": self.clip.to_dict(),
            "prune": self.prune.to_dict(),
            "prompt": self.prompt,
            "kept": self.kept.to_dict(),
            "decision": None if self.decision is None else self.decision.to_dict(),
            "flops": self.flops.to_dict(),
            "stats": asdict(self.stats),
        }

    def summary(self) -> str:
        s, k = self.stats, self.kept
        distinct = f" ({s.distinct_frames} distinct)" if s.distinct_frames < s.frames else ""
        merged = f" ({len(k.merged_dropped())} dropped merged in)" if k.absorbed is not None else ""
        # frames placed by something other than Video-LLaVA's uniform rule: say where
        placed = (f" {s.sampler} at {', '.join(f'{t:.1f}' for t in self.clip.timestamps)} s"
                  if s.sampler != "uniform" else "")
        return (
            f"{k.method} K={k.layer} R={format_r(k.r)} | frames {s.frames}{distinct}{placed} "
            f"| visual tokens {k.n_visual} -> {k.n_kept}{merged} | FLOPs {100 * self.flops.ratio:.1f}% "
            f"| sample {s.t_sample:.2f}s encode {s.t_encode:.2f}s"
            f"{' (cached)' if s.encode_cached else ''} prefill {s.t_prefill:.2f}s generate {s.t_generate:.2f}s "
            f"| {s.new_tokens} tokens, {s.tokens_per_s:.1f} tok/s"
            f"{' | tower: temporal attention' if s.temporal_attention else ''}"
        )
