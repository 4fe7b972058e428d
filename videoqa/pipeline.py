"""The one entry point: video + question -> Answer(text, kept tokens, stats).

    qa = VideoQA.from_pretrained("demo")
    answer = qa.ask("clip.mp4", "What colour is the shape?")

One straight path of small stages: sample -> encode -> select -> tokenise (once) -> prefill -> decode ->
answer. `prepare` runs the stages before the LLM, `generate` the rest; the Ray actor calls the same ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from . import llm
from .answering import BatchRun, Setting, TextDelta, assemble, drain, stream_text
from .clip_cache import content_key, frames_bytes, new_clip_cache, processor_edge, shares_host_memory
from .errors import InputError
from .history_fit import turns_that_fit
from .llm.prefix_cache import PrefixCache, default_bytes
from .measure import Clock, PeakMemory, device_clock, free_memory_bytes
from .model import LoadedModel, load_model
from .model_card import ModelCard
from .model_policy import ModelPolicy, set_on_pipeline
from .model_policy import model_policy as policy_of_card
from .models.languagebind import has_temporal_attention
from .prefix_reuse import prefill_cached
from .prompt_tokens import prompt_ids
from .pruning import EncodedVideo, ModelDims, PruneConfig, Selection
from .pruning.adaptive import frames_wanted
from .pruning.budget import ANSWER_RESERVE, DEFAULT_FRAMES, check_context
from .pruning.planner import Plan, at_resolution, fewer_frames, plan, whole_groups
from .request import Collated, Request, collate
from .result import Answer
from .video import Clip, probe_video, sample_frames
from .video.changes import SCAN_BUDGET_S
from .video.clip import DECODE_EDGE
from .video.samplers import check_sampler
from .vision import LRU, encode_frames, feature_cache, frame_timing, frames_hash, select_tokens

__all__ = ["ANSWER_RESERVE", "CACHE_SIZE", "DEFAULT_FRAMES", "Collated", "EncodedVideo", "Request", "TextDelta",
           "VideoQA", "frames_hash"]

CACHE_SIZE = 8  # encoded videos (and decoded clips, tokenised prompts) kept per pipeline


class VideoQA:
    """A loaded video LLM (any registered family) with pruning defaults and a small cache of encoded videos.

    Safe to share between threads: `ask`, `stream` and `ask_batch` hold a lock for the whole call, so calls
    from several threads run one after another. A `stream` holds it until it is exhausted or closed, so do
    not ask again from inside a loop over a stream.

    `free_memory(device)` (bytes a new allocation can use; adaptive R) and `clock()` (seconds; every timing,
    read after synchronising the device) can be replaced, e.g. to plan for a given memory size.
    """

    def __init__(self, loaded: LoadedModel, prune: PruneConfig | None = None, frames: int | None = None,
                 max_new_tokens: int = 64, prompt: str | None = None, *, decode: str = "eager",
                 sampler: str | None = None, free_memory: Callable[[torch.device], int] | None = None,
                 clock: Clock | None = None, prefix_cache_bytes: int | None = None,
                 model_policy: ModelPolicy | None = None):
        llm.check_kernel(loaded.model)
        self.model, self.processor = loaded.model, loaded.processor
        self.device, self.dtype, self.name = loaded.device, loaded.dtype, loaded.name
        self.family = loaded.family
        self.temporal_attention = has_temporal_attention(getattr(self.model.model, "video_tower", None))
        self.visual_token_id = self.family.visual_token_id(self.model.config)
        self.dims = self.family.dims_for(self.model.config, self.processor, torch.finfo(self.dtype).bits // 8)
        # The model's own policy constants (its videoqa.json, else Video-LLaVA-7B's defaults): FastV's K when none
        # is asked for, the adaptive policy; replace `policy` to try others (the long-clip benchmark's sweep does).
        self.model_policy = model_policy or policy_of_card(loaded.card)  # given: built from the same card
        self.policy = self.model_policy.policy
        # keep_others: the web page's first settings may hold another method's options (see cli/options.py)
        self.prune = self._with_model_k(prune or PruneConfig()).validate(self.dims.n_layers, keep_others=True)
        self.frames = frames
        self.sampler = check_sampler(sampler or self.model_policy.sampler)  # None: the model card's
        self.max_new_tokens = max_new_tokens
        self.prompt = prompt or loaded.conversation()  # the template's name (None: the model's), in every answer
        self.family.preamble(self.prompt)  # InputError for a template the family does not have
        # "static": a preallocated KV cache; "compiled": that step under torch.compile (a CUDA graph on GPUs)
        self.decoder = llm.decode_loop_for(self.model, decode)
        self.encode_count = 0  # vision-tower runs: follow-ups on a cached clip do not add to it
        self._encoded, self._selections = feature_cache(CACHE_SIZE), feature_cache(CACHE_SIZE)  # bounded in bytes too
        self._clips, self._digests, self._prompts = new_clip_cache(CACHE_SIZE), LRU(64), LRU(CACHE_SIZE)  # clip_cache
        # Frames are decoded no larger than needed: the processor's size, or DECODE_EDGE for the page's frames.
        self.decode_edge = max(DECODE_EDGE, processor_edge(self.processor))
        self.free_memory = free_memory or free_memory_bytes
        # The content scan's time budget (then uniform frames, with a warning); its progress (the CLI draws it).
        self.scan_budget_s: float | None = SCAN_BUDGET_S
        self.scan_progress: Callable[[float], None] | None = None
        self.clock = clock or device_clock(self.device)
        # Each clip's prompt-prefix KV cache, reused by its later questions (llm/prefix_cache.py); 0 bytes: off.
        limit = default_bytes(self.device, self.free_memory(self.device)) if prefix_cache_bytes is None \
            else prefix_cache_bytes
        self.prefix_cache = PrefixCache(limit) if limit > 0 else None
        # A plain Lock, not an RLock: Gradio advances a streaming handler from whichever worker thread is free,
        # so a stream may finish (and release) on another thread than the one it started on.
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, model: str = "demo", device: str | None = None, dtype: str | None = None,
                        attn_implementation: str = "sdpa", prune: PruneConfig | None = None,
                        frames: int | None = None, max_new_tokens: int = 64, prompt: str | None = None,
                        decode: str = "eager", sampler: str | None = None,
                        prefix_cache_bytes: int | None = None, card: ModelCard | None = None,
                        model_policy: ModelPolicy | None = None) -> VideoQA:
        """`card`, `model_policy`: the model's videoqa.json and its policy, when the caller has them already."""
        return cls(load_model(model, device, dtype, attn_implementation, card), prune, frames, max_new_tokens,
                   prompt, decode=decode, sampler=sampler, prefix_cache_bytes=prefix_cache_bytes,
                   model_policy=model_policy)

    @classmethod
    def from_spec(cls, spec: dict, prune: PruneConfig | None = None, **known) -> VideoQA:
        """Load from plain data: `from_pretrained`'s arguments with `prune` as a dict (`PruneConfig.to_dict`: the
        form the command line builds, Ray actors receive and eval runs record); `known`: its card and policy.
        `prune`: the checked configuration the dict was written from, when the caller has it (not checked again)."""
        kw = dict(spec)
        kw["prune"] = prune if prune is not None and prune.to_dict() == kw["prune"] else PruneConfig(**kw["prune"])
        return cls.from_pretrained(kw.pop("model"), **kw, **known)

    # -- the stages before the LLM ------------------------------------------------------------------

    def sample(self, video: str | Path | Clip, num_frames: int, sampler: str | None = None,
               cancel: Callable[[], bool] | None = None) -> tuple[Clip, float]:
        """Frames of `video` (decoded once per file version, frame count and sampler; default: the pipeline's);
        `cancel`: see `stream`."""
        if isinstance(video, Clip):
            return video, 0.0
        sampler = check_sampler(sampler or self.sampler)
        t0 = self.clock()
        path = Path(video)
        digest = content_key(path, self._digests, cancel)  # None: sample_frames raises the user-facing error
        key = (digest, num_frames, sampler, self.decode_edge) if digest else None
        clip = (self._clips.get_fresh(key) if key else None) or sample_frames(
            path, num_frames, sampler=sampler, cancel=cancel, scan_budget_s=self.scan_budget_s,
            progress=self.scan_progress, max_edge=self.decode_edge)
        if key:
            self._clips.put(key, clip)
        return clip, self.clock() - t0

    def encode(self, frames: np.ndarray, cancel: Callable[[], bool] | None = None,
               key: str | None = None, clip: Clip | None = None,
               max_pixels: int | None = None) -> tuple[EncodedVideo, bool]:
        """The vision tower's output for `frames`, and whether it came from the cache (keyed by content; `key`:
        `frames_hash(frames)` when the caller has it). A family with M-RoPE's time axis also gets the frames'
        timing from `clip` (the frames' file order when none) and may be encoded at fewer `max_pixels`."""
        timing = frame_timing(clip, len(frames)) if self.family.uses_timing else None
        key = (key or frames_hash(frames)) + (f"|{timing}|{max_pixels}" if timing else "")
        enc = self._encoded.get_fresh(key)
        if enc is not None:
            return enc, True
        enc = encode_frames(self.family, self.model, self.processor, frames, self.device, self.dtype, cancel,
                            timing=timing, max_pixels=max_pixels)
        self.encode_count += 1
        self._encoded.put(key, enc)
        return enc, False

    def select(self, enc: EncodedVideo, cfg: PruneConfig, r: float, frames_key: str | None = None) -> Selection:
        """The visual tokens the LLM will see (vision.select_tokens; cached by `frames_key` where it can be)."""
        return select_tokens(enc, cfg, r, self._selections, frames_key)

    def prompt_ids(self, question: str, history: list[tuple[str, str]] | None = None) -> list[int]:
        """The prompt's ids with one video-token slot (cached: a question is tokenised once); the question and
        history stay plain text even where they look like special tokens."""
        key = (question, tuple(history or ()))
        ids = self._prompts.get_fresh(key)
        if ids is None:
            ids = prompt_ids(self.processor.tokenizer,
                             lambda q, h: self.family.render(self.processor, q, h, self.prompt), question,
                             history, self.visual_token_id, 1)
            self._prompts.put(key, ids)
        return ids

    def text_tokens(self, question: str, history: list[tuple[str, str]] | None = None) -> int:
        """Tokens of the prompt besides the visual ones."""
        return len(self.prompt_ids(question, history)) - 1

    def plan(self, duration_s: float | None, n_text: int, cfg: PruneConfig, frames: int | None, max_new: int,
             free_bytes: int | None = None, share: int = 1, frame_px: int | None = None) -> Plan:
        """Frames and R for one question (pruning/budget.py); `free_bytes` default: read now; `frame_px`: the clip's
        pixels a frame, where a frame's tokens depend on them (Qwen-VL), whose resolution the plan may lower before
        it drops frames (`at_resolution`). A method sampling fewer frames samples whole temporal groups."""
        if cfg.adaptive and free_bytes is None:
            free_bytes = self.free_memory(self.device)  # read once: every resolution is planned with the same
        free = (lambda: self.free_memory(self.device)) if free_bytes is None else free_bytes

        sizes = self.family.resolutions(self.processor) if cfg.adaptive else []
        planned = at_resolution(sizes, lambda pixels: plan(self.dims_at(pixels, frame_px), cfg, n_text, duration_s,
                                                           frames, max_new, free, self.policy, share),
                                frames or frames_wanted(duration_s, self.policy))
        planned = whole_groups(planned, self.family.frames_per_group)
        if planned.decision is not None:
            planned.decision.constants = set_on_pipeline(self.policy, self.model_policy)
        return planned

    def dims_at(self, max_pixels: int | None, frame_px: int | None = None) -> ModelDims:
        """The model's sizes with frames of at most `max_pixels` (None: the processor's bound) of `frame_px`."""
        pixels = min((p for p in (max_pixels, frame_px) if p), default=None)
        return self.dims if pixels is None else \
            self.family.dims_for(self.model.config, self.processor, self.dims.dtype_bytes, pixels)

    def frames_to_sample(self, question: str, duration_s: float | None) -> int:
        """The frames `ask` would sample for a clip of `duration_s` seconds (the Ray actor decodes them first)."""
        return self.plan(duration_s, self.text_tokens(question.strip()), self.prune, self.frames,
                         self.max_new_tokens).frames

    def prepare(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None,
                cfg: PruneConfig, frames: int | None, max_new: int, free_bytes: int | None = None,
                share: int = 1, sampler: str | None = None, cancel: Callable[[], bool] | None = None) -> Request:
        """The stages before the LLM for one question: plan, sample, encode, select, the prompt's ids.
        `free_bytes`, `share`: see `plan`; `sampler`: how frames are placed (default: the pipeline's)."""
        t_start = self.clock()
        if not question or not question.strip():
            raise InputError("the question is empty")
        frames = frames or self.frames
        if frames is not None and frames < 1:
            raise InputError(f"frames must be >= 1, got {frames}")
        duration = frame_px = None
        if cfg.adaptive or self.family.resolutions(self.processor):  # Qwen: a frame's tokens follow its size
            info = video.info if isinstance(video, Clip) else probe_video(video, cancel)
            frame_px = info.width * info.height
        if cfg.adaptive:
            duration = info.duration_s
            frames = len(video.frames) if isinstance(video, Clip) else frames
            if free_bytes is None:  # read once: every plan below must see the same memory
                free_bytes = self._free_after_frames(video, info, cfg, frames, max_new)
        history = list(history or [])
        kept_turns = self.turns_that_fit(video, question.strip(), history, cfg, frames, max_new, duration,
                                         free_bytes, share, frame_px)
        text_ids = self.prompt_ids(question.strip(), history[len(history) - kept_turns:])
        n_text = len(text_ids) - 1
        planned = self.plan(duration, n_text, cfg, frames, max_new, free_bytes, share, frame_px)
        if isinstance(video, Clip) and planned.full_frames is not None:  # fewer of the given clip's frames
            if not cfg.adaptive:
                planned = whole_groups(fewer_frames(self.dims.tokens_per_frame, len(video.frames), float(cfg.r)),
                                       self.family.frames_per_group)
            video = video.subsample(planned.frames)
        n_frames = len(video.frames) if isinstance(video, Clip) else planned.frames
        check_context(self.dims_at(planned.max_pixels, frame_px), n_frames, n_text, cfg, planned.r,
                      min(max_new, ANSWER_RESERVE))
        clip, t_sample = self.sample(video, n_frames, sampler, cancel)

        t0 = self.clock()
        frames_key = clip.frames_key
        enc, cached = self.encode(clip.frames, cancel, frames_key, clip, planned.max_pixels)
        t_encode = 0.0 if cached else self.clock() - t0
        t0 = self.clock()
        sel = self.select(enc, cfg, planned.r, frames_key)
        t_select = self.clock() - t0
        ids = torch.tensor(self.family.expand(self.processor, self.model.config, text_ids, enc, sel.kept),
                           device=self.device)
        hidden = enc.layout.n_tokens - len(sel.visual) if cfg.original_positions else 0  # positions pruned ones hold
        room = self.dims.context - len(ids) - hidden
        return Request(question=question, clip=clip, enc=enc, encode_cached=cached, ids=ids, cfg=cfg, plan=planned,
                       selection=sel, max_new=min(max_new, room), context_capped=room < max_new, t_start=t_start,
                       t_sample=t_sample, t_encode=t_encode, history_dropped=len(history) - kept_turns,
                       t_select=t_select, frames_key=frames_key, history_turns=kept_turns)

    def _free_after_frames(self, video, info, cfg: PruneConfig, frames: int | None, max_new: int) -> int:
        """Free memory for the plan, less what the frames about to be decoded will hold where they share
        memory with the KV cache (the frames the plan would choose with all of it: an upper bound)."""
        free = self.free_memory(self.device)
        if isinstance(video, Clip) or not shares_host_memory(self.device.type):
            return free
        upper = self.plan(info.duration_s, 0, cfg, frames, max_new, free).frames
        return max(0, free - frames_bytes(info.width, info.height, self.decode_edge, upper))

    def turns_that_fit(self, video, question: str, history: list[tuple[str, str]], cfg: PruneConfig,
                       frames: int | None, max_new: int, duration: float | None, free_bytes: int | None,
                       share: int, frame_px: int | None = None) -> int:
        """How many of the latest `history` turns go with the question (history_fit.py)."""

        def frames_for(n_text: int) -> tuple[int, float]:
            planned = self.plan(duration, n_text, cfg, frames, max_new, free_bytes, share, frame_px)
            return (len(video.frames) if isinstance(video, Clip) else planned.frames), planned.r

        return turns_that_fit(len(history), frames_for,
                              lambda n: self.text_tokens(question, history[len(history) - n:]),
                              self.dims_at(None, frame_px), cfg, min(max_new, ANSWER_RESERVE))

    # -- the LLM ------------------------------------------------------------------------------------

    def collate(self, requests: list[Request]) -> Collated:
        batch = collate(self.model, requests, self.device, self.dtype, self.visual_token_id)
        positions = self.family.positions(self.model, batch, requests)  # None: 1-D RoPE, as collated
        return batch if positions is None else replace(batch, position_ids=positions)

    def prefill(self, requests: list[Request], batch: Collated) -> llm.PrefillResult:
        """Run the prompts through the LLM; a method acting inside it (FastV) ranks and prunes each sample."""
        cfg = requests[0].cfg
        method = cfg.method_spec
        plan = method.llm_plan(cfg.options, [req.r for req in requests], requests[0].enc.layout.tokens_per_frame,
                               [req.selection for req in requests])  # FastV's; PruneVid's after its selection
        additions = self.family.layer_additions(self.model, batch, requests)  # Qwen3-VL's deepstack
        if self.prefix_cache is not None and (method.question_independent or plan is not None):
            room = self.decoder.room(plan, max(req.max_new for req in requests))
            state = prefill_cached(self.prefix_cache, self.decoder.lm, requests, batch, plan, self.dims.n_layers,
                                   self.clock, additions, room)
            if state is not None:
                return state
        return llm.prefill(self.decoder.lm, batch.embeds, batch.attention_mask, batch.visual_mask, plan,
                           batch.position_ids, clock=self.clock, layer_additions=additions or None)

    def decode(self, requests: list[Request], state: llm.PrefillResult) -> Generator[TextDelta, None, list]:
        """Greedy decoding. Yields each sample's new text as it completes; returns the new token ids."""
        eos = llm.eos_ids(self.model.generation_config.eos_token_id)
        max_new = max(req.max_new for req in requests)
        steps = self.decoder.decode_n_tokens(state, max_new, eos)
        return (yield from stream_text(self.processor.tokenizer, steps, requests, eos))

    def generate(self, requests: list[Request]) -> Generator[TextDelta, None, list[Answer]]:
        """Collate, prefill and decode the requests as one batch.

        Yields `TextDelta`s as text is produced and returns the Answers (the generator's return value:
        `answers = yield from qa.generate(requests)`).
        """
        if any(req.cfg != requests[0].cfg for req in requests):
            raise InputError("a batch must use one pruning configuration")
        memory = PeakMemory(self.device).start()
        try:
            t0 = self.clock()
            with torch.inference_mode():
                state = self.prefill(requests, self.collate(requests))
            t_prefill = self.clock() - t0
            t0 = self.clock()
            new_ids = yield from self.decode(requests, state)
            t_generate = self.clock() - t0
        finally:
            peak = memory.stop()
        s = state if state.k is not None else None  # chosen inside the LLM
        kept, scores, stages, absorbed = (s.kept, s.scores, s.stages, s.absorbed) if s else [None] * 4
        run = BatchRun(kept=kept, scores=scores, visual_offsets=state.visual_offsets, t_rank=state.t_rank,
                       cache_bytes=llm.cache_bytes(state.cache), t_prefill=t_prefill, t_generate=t_generate,
                       peak=peak, t_end=self.clock(), prefix_hits=state.prefix_hits, stages=stages, absorbed=absorbed,
                       plan=s.plan if s else None)
        setting = Setting(self.processor.tokenizer, self.dims, str(self.device),
                          str(self.dtype).removeprefix("torch."), self.prompt, self.temporal_attention)
        return assemble(setting, requests, run, new_ids)

    # -- public API ---------------------------------------------------------------------------------

    def _with_model_k(self, cfg: PruneConfig) -> PruneConfig:
        """`cfg` with the model's K where its method has a K and none was given."""
        if cfg.method_spec.option("k") is None or "k" in dict(cfg.params):
            return cfg
        return PruneConfig(cfg.method, r=cfg.r, params=(*cfg.params, ("k", self.model_policy.k)))

    def _config(self, prune: PruneConfig | None, max_new_tokens: int | None) -> tuple[PruneConfig, int]:
        cfg = self.prune if prune is None else self._with_model_k(prune).validate(self.dims.n_layers)
        max_new = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if max_new < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new}")
        return cfg, max_new

    def ask(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
            prune: PruneConfig | None = None, frames: int | None = None,
            max_new_tokens: int | None = None, sampler: str | None = None) -> Answer:
        """Answer one question about one video (history: earlier (question, answer) turns on it; `sampler`:
        "uniform" or "content" frames, default the pipeline's)."""
        answer = None
        for item in self.stream(video, question, history, prune, frames, max_new_tokens, sampler):
            answer = item
        return answer

    def stream(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
               prune: PruneConfig | None = None, frames: int | None = None,
               max_new_tokens: int | None = None, sampler: str | None = None,
               cancel: Callable[[], bool] | None = None) -> Iterator[str | Answer]:
        """Yields the answer text as it is generated (str deltas), then the final Answer.

        `cancel`, asked between decoded frames and before encoding: True stops with `Cancelled` (closing the
        generator stops generation). Holds the pipeline's lock until the generator is exhausted or closed."""
        with self._lock:
            cfg, max_new = self._config(prune, max_new_tokens)
            events = self.generate([self.prepare(video, question, history, cfg, frames, max_new, sampler=sampler,
                                                 cancel=cancel)])
            while True:
                try:
                    yield next(events).text
                except StopIteration as finished:
                    yield finished.value[0]
                    return

    def ask_batch(self, items: list[tuple[str | Path | Clip, str]], prune: PruneConfig | None = None,
                  frames: int | None = None, max_new_tokens: int | None = None,
                  sampler: str | None = None) -> list[Answer]:
        """Answer several (video, question) pairs in one left-padded batch; each sample is ranked and pruned
        on its own, so every answer equals the one `ask` gives for it alone, except that adaptive R plans each
        sample with its share of the free memory (read once for the batch), which may prune more."""
        with self._lock:
            cfg, max_new = self._config(prune, max_new_tokens)
            free = self.free_memory(self.device) if cfg.adaptive else None
            requests = [self.prepare(v, q, None, cfg, frames, max_new, free, len(items), sampler) for v, q in items]
            return drain(self.generate(requests))
