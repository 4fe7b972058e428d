"""The decode and answer stages: greedy tokens -> streamed text, then each sample's Answer (text, kept
tokens, stats, FLOPs)."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass

from torch import Tensor

from .pruning import KeptTokens, ModelDims
from .pruning.flops import estimate_flops, staged_flops
from .request import Request
from .result import Answer, Stats


@dataclass(frozen=True)
class TextDelta:
    """New answer text of sample `index` of a batch, as decoding produces it."""

    index: int
    text: str


def stream_text(tokenizer, steps: Iterable[Tensor], requests: list[Request], eos: set[int] | list[int]
                ) -> Generator[TextDelta, None, list[list[int]]]:
    """Each sample's new text as the decoder's `steps` (one token per sample each) complete it; returns the
    new token ids. A sample stops at an end-of-sequence token or its own cap."""
    new_ids: list[list[int]] = [[] for _ in requests]
    texts = ["" for _ in requests]
    done = [False] * len(requests)
    for tokens in steps:
        for i, token in enumerate(tokens.tolist()):
            if done[i]:
                continue
            if token in eos or len(new_ids[i]) >= requests[i].max_new:
                done[i] = True
                continue
            new_ids[i].append(token)
            # lstrip: the first token's word-start space is not part of the answer (Answer.text is stripped too)
            full = tokenizer.decode(new_ids[i], skip_special_tokens=True).lstrip()
            # Hold back a trailing partial character (byte-level BPE) until it completes.
            if not full.endswith("\ufffd") and full != texts[i]:
                yield TextDelta(i, full[len(texts[i]):] if full.startswith(texts[i]) else full)
                texts[i] = full
        if all(done):
            break
    return new_ids


@dataclass(frozen=True)
class BatchRun:
    """What the LLM did for a batch, as the answers report it."""

    kept: list | None  # FastV: per sample, the kept indices (a tensor); None: chosen before the LLM
    scores: list | None
    visual_offsets: list[int]  # where each sample's visual span starts in the padded batch
    t_rank: float
    cache_bytes: int
    t_prefill: float
    t_generate: float
    peak: tuple[int, str]  # bytes, kind
    t_end: float  # the clock when decoding ended
    prefix_hits: list[bool] | None = None  # per sample: its prompt prefix came from the prefix cache
    # in-LLM methods: (layer, per-sample visual tokens from it on) where the plan acted (FLOPs), and per sample the
    # original index of a token present -> the indices merged into it (heatmaps)
    stages: list | None = None
    absorbed: list | None = None
    plan: object | None = None  # the in-LLM plan (two-stage methods: its `details`, where it reports them)


@dataclass(frozen=True)
class Setting:
    """What every answer of a pipeline reports besides its own figures."""

    tokenizer: object  # decodes the answer's ids
    dims: ModelDims  # the model's, for FLOPs
    device: str
    dtype: str  # "float32", "bfloat16", ...
    prompt: str  # the prompt template's name
    temporal_attention: bool = False  # the video tower lets frames attend to each other (published Video-LLaVA)


def assemble(setting: Setting, requests: list[Request], run: BatchRun, new_ids: list[list[int]]) -> list[Answer]:
    """Text, kept tokens, stats and FLOPs of each sample, from the requests and what the LLM did."""
    peak, kind = run.peak
    n = max(len(req.ids) for req in requests)
    answers = []
    for i, req in enumerate(requests):
        n_vis = req.enc.layout.n_tokens
        absorbed, details = req.selection.absorbed, req.selection.details
        stages = [(layer, counts[i]) for layer, counts in run.stages] if run.stages else []
        if run.kept is not None and req.kept is not None:  # two stages: the LLM kept some of the selection's
            inner = sorted(run.kept[i].tolist())
            kept_idx, scores = [req.kept[j] for j in inner], req.selection.scores
            absorbed = _absorbed(req, inner, run.absorbed[i] if run.absorbed else {})
            plan_details = getattr(run.plan, "details", None)
            details = {**details, "llm_layer": stages[0][0], **(plan_details[i] if plan_details else {})}
            stages = [(0, len(req.kept)), *stages]  # the selection's count before the LLM
        elif run.kept is not None:  # chosen inside the LLM (merged tokens stand at their original index)
            kept_idx, scores = sorted(run.kept[i].tolist()), run.scores[i].float().tolist()
            merged = run.absorbed[i] if run.absorbed else {}
            absorbed = [merged.get(k, []) for k in kept_idx] if merged else None
        else:
            kept_idx = req.kept if req.kept is not None else list(range(n_vis))
            scores = req.selection.scores
        kept = KeptTokens(method=req.cfg.method, layer=req.cfg.layer, n_visual=n_vis, kept=kept_idx,
                          layout=req.enc.layout, offset=run.visual_offsets[i] - (n - len(req.ids)), r=req.r,
                          scores=scores, details=details, absorbed=absorbed)
        stats = Stats(
            frames=len(req.clip.frames), sampler=req.clip.sampler, distinct_frames=req.clip.distinct_frames,
            visual_tokens=n_vis,
            kept_visual_tokens=len(kept_idx), prompt_tokens=len(req.ids), new_tokens=len(new_ids[i]),
            max_new_tokens=req.max_new, context_capped=req.context_capped, t_sample=req.t_sample,
            t_encode=req.t_encode, t_prefill=run.t_prefill, t_rank=run.t_rank, t_generate=run.t_generate,
            t_total=run.t_end - req.t_start,
            tokens_per_s=len(new_ids[i]) / run.t_generate if run.t_generate > 0 else 0.0,
            peak_memory_bytes=peak, peak_memory_kind=kind, cache_bytes=run.cache_bytes // len(requests),
            encode_cached=req.encode_cached, device=setting.device, dtype=setting.dtype,
            history_dropped=req.history_dropped, temporal_attention=setting.temporal_attention,
            t_select=req.t_select, prefix_cached=bool(run.prefix_hits and run.prefix_hits[i]),
        )
        # A method sampling fewer frames is measured against the frames R was applied to (all unpruned).
        layout = req.enc.layout  # a frame of tokens may stand for several source frames (Qwen-VL: 2)
        full = n_vis if req.plan.full_frames is None else \
            req.plan.full_frames // layout.frames_per_token * layout.tokens_per_frame + layout.summary
        if stages:  # per-layer counts of an in-LLM method (one stage: FastV's formula), after a selection's
            flops = staged_flops(setting.dims, len(req.ids) - len(req.visual), full, stages)
        else:
            flops = estimate_flops(setting.dims, len(req.ids) - len(req.visual), full, len(kept_idx), req.cfg.layer)
        text = setting.tokenizer.decode(new_ids[i], skip_special_tokens=True).strip()
        answers.append(Answer(text=text, question=req.question, clip=req.clip, kept=kept, decision=req.plan.decision,
                              stats=stats, flops=flops, prune=req.cfg, prompt=setting.prompt))
    return answers


def drain(events: Generator[TextDelta, None, list[Answer]]) -> list[Answer]:
    """A batch's generation run to its end, its text deltas unread: the Answers it returns."""
    while True:
        try:
            next(events)
        except StopIteration as finished:
            return finished.value


def _absorbed(req: Request, inner: list[int], merged: dict[int, list[int]]) -> list[list[int]] | None:
    """What each token kept by both stages took in, as visual-span indices: what it absorbed before the LLM, and
    the selection's tokens merged into it inside the LLM (`merged`: the prefill's `absorbed` of this sample, in
    indices into the selection) with what they had absorbed. Summary tokens, after the selection's, absorbed
    nothing before the LLM."""
    if req.selection.absorbed is None and not merged:  # nothing merged in either stage (DyCoke)
        return None
    before = req.selection.absorbed or []

    def took(j: int) -> list[int]:
        return before[j] if j < len(before) else []
    return [sorted(took(j) + [x for m in merged.get(j, []) for x in [req.kept[m], *took(m)]]) for j in inner]
