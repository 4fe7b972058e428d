"""The one entry point: video + question -> Answer(text, kept tokens, stats).

    qa = VideoQA.from_pretrained("demo")
    answer = qa.ask("clip.mp4", "What colour is the shape?")

One straight path, each stage a small function: sample -> encode -> prune -> prefill -> decode.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from einops import rearrange
from torch import Tensor

from . import engine, static_decode
from .answer import Answer, Stats
from .errors import InputError
from .measure import Clock, PeakMemory, device_clock
from .model import PROMPT_TEMPLATES, LoadedModel, build_prompt, load_model
from .prompt_tokens import prompt_ids
from .pruning import KeptTokens, ModelDims, PruneConfig, VisualLayout, keep_count
from .pruning.adaptive import AdaptivePolicy, decide, free_memory_bytes
from .pruning.fastv import FastVPlan
from .pruning.flops import estimate_flops
from .video import Clip, probe_video, sample_frames

DEFAULT_FRAMES = 8  # what Video-LLaVA was trained with
CACHE_SIZE = 8  # encoded videos kept per pipeline (follow-up questions reuse them)
ANSWER_RESERVE = 64  # context room an answer gets when frames are planned; a larger cap runs on to the end


@dataclass
class EncodedVideo:
    """The vision tower's output for one clip: what follow-up questions reuse."""

    features: Tensor  # [F, T, d_llm] after the projector; T = tokens per frame, CLS at index 0
    vision_features: Tensor  # [F, T, d_vis] tower output at the feature layer
    cls_attention: Tensor  # [F, T] [CLS] -> token attention at the feature layer, mean over heads
    layout: VisualLayout


@dataclass(frozen=True)
class Selection:
    """Visual tokens chosen before the LLM and the features it sees for them."""

    kept: list[int] | None  # indices into the visual span, ascending; None: all (FastV, if any, prunes later)
    visual: Tensor  # [n_kept, d_llm]: the kept tokens' features, or their merged features (FastVID)
    scores: list[float] | None = None  # a score per visual token, for heatmaps
    details: dict = field(default_factory=dict)
    absorbed: list[list[int]] | None = None  # FastVID: per kept token, the tokens merged into it


@dataclass
class Request:
    """One question made ready for the LLM (internal to the pipeline; see prepare/generate)."""

    question: str
    clip: Clip
    enc: EncodedVideo
    encode_cached: bool
    ids: Tensor  # [n] prompt ids with the (kept) video tokens expanded
    visual: Tensor  # [n_visual_in_prompt, d] features scattered into the video-token slots
    cfg: PruneConfig
    r: float
    decision: object | None
    kept: list[int] | None  # chosen before the LLM (vispruner, random, fastvid); None: all, or FastV decides later
    scores: list[float] | None
    details: dict
    absorbed: list[list[int]] | None
    max_new: int  # the asked cap, or less where the context ends first
    context_capped: bool
    t_start: float
    t_sample: float
    t_encode: float


@dataclass(frozen=True)
class Collated:
    """Prompts as one left-padded batch: what the LLM's prefill takes."""

    embeds: Tensor  # [B, n, d] token embeddings with the visual features in the video-token slots
    attention_mask: Tensor  # [B, n] 1 = real token, 0 = padding
    visual_mask: Tensor  # [B, n] True = visual token
    position_ids: Tensor  # [B, n] RoPE positions


@dataclass(frozen=True)
class TextDelta:
    """New answer text of sample `index` of a batch, as decoding produces it."""

    index: int
    text: str


def frames_hash(frames: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(frames).data, usedforsecurity=False).hexdigest() + str(frames.shape)


class VideoQA:
    """A loaded Video-LLaVA with pruning defaults and a small cache of encoded videos.

    Safe to share between threads: `ask`, `stream` and `ask_batch` hold a lock for the whole call, so calls
    from several threads run one after another. A `stream` holds it until it is exhausted or closed, so do
    not ask again from inside a loop over a stream.

    `free_memory(device)` (bytes a new allocation can use; adaptive R) and `clock()` (seconds; every timing,
    read after synchronising the device) can be replaced, e.g. to plan for a given memory size.
    """

    def __init__(self, loaded: LoadedModel, prune: PruneConfig | None = None, frames: int | None = None,
                 max_new_tokens: int = 64, prompt: str | None = None, *, decode: str = "eager",
                 free_memory: Callable[[torch.device], int] | None = None, clock: Clock | None = None):
        engine.check_kernel(loaded.model)
        self.model = loaded.model
        self.processor = loaded.processor
        self.device = loaded.device
        self.dtype = loaded.dtype
        self.name = loaded.name
        self.dims = ModelDims.from_config(self.model.config, dtype_bytes=torch.finfo(self.dtype).bits // 8)
        self.prune = (prune or PruneConfig()).validate(self.dims.n_layers)
        self.frames = frames
        self.max_new_tokens = max_new_tokens
        prompt = prompt or loaded.card.conversation  # None: the conversation the model was trained on
        if prompt not in PROMPT_TEMPLATES:
            raise InputError(f"unknown prompt template {prompt!r}; choose {' or '.join(PROMPT_TEMPLATES)}")
        self.prompt = prompt  # the template's name, recorded with every answer
        # The adaptive policy's constants; replace it to try others (the long-clip benchmark's sweep does).
        self.policy = AdaptivePolicy()
        # "static": a preallocated KV cache; "compiled": that step under torch.compile (a CUDA graph on GPUs)
        self.decoder = static_decode.decoder_for(self.model, decode)
        self.encode_count = 0  # vision-tower runs: follow-ups on a cached clip do not add to it
        self._encoded: OrderedDict[str, EncodedVideo] = OrderedDict()
        self._clips: OrderedDict[tuple, Clip] = OrderedDict()
        self.free_memory = free_memory or free_memory_bytes
        self.clock = clock or device_clock(self.device)
        # A plain Lock, not an RLock: Gradio advances a streaming handler from whichever worker thread is free,
        # so a stream may finish (and release) on another thread than the one it started on.
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, model: str = "demo", device: str | None = None, dtype: str | None = None,
                        attn_implementation: str = "sdpa", prune: PruneConfig | None = None,
                        frames: int | None = None, max_new_tokens: int = 64, prompt: str | None = None,
                        decode: str = "eager") -> VideoQA:
        return cls(load_model(model, device, dtype, attn_implementation), prune, frames, max_new_tokens, prompt,
                   decode=decode)

    @classmethod
    def from_spec(cls, spec: dict) -> VideoQA:
        """Load from plain data: `from_pretrained`'s arguments with `prune` as a dict (the form the command line
        builds, Ray actors receive and eval runs record)."""
        kw = dict(spec)
        kw["prune"] = PruneConfig(**kw["prune"]).validate()
        return cls.from_pretrained(kw.pop("model"), **kw)

    # -- the stages ---------------------------------------------------------------------------------

    def sample(self, video: str | Path | Clip, num_frames: int) -> tuple[Clip, float]:
        """Frames of `video` (decoded once per file version and frame count)."""
        if isinstance(video, Clip):
            return video, 0.0
        t0 = self.clock()
        path = Path(video)
        try:
            st = path.stat()
            key = (str(path.resolve()), st.st_mtime_ns, st.st_size, num_frames)
        except OSError:
            key = None  # sample_frames raises the user-facing error
        clip = self._clips.get(key) if key else None
        if clip is None:
            clip = sample_frames(path, num_frames)
        if key:
            _lru_put(self._clips, key, clip)
        return clip, self.clock() - t0

    @torch.inference_mode()
    def encode(self, frames: np.ndarray) -> tuple[EncodedVideo, bool]:
        """Preprocess frames and run the video tower + projector; cached by frame content."""
        key = frames_hash(frames)
        if key in self._encoded:
            self._encoded.move_to_end(key)
            return self._encoded[key], True
        from .pruning.vispruner import cls_attention

        pixels = self.processor.video_processor(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"]
        pixels = pixels[0].to(self.device, self.dtype)  # [F, 3, H, W]
        tower = self.model.model.video_tower
        out = tower(pixels, output_hidden_states=True)
        cfg = self.model.config
        layer = cfg.vision_feature_layer
        idx = layer if layer >= 0 else len(out.hidden_states) + layer  # hidden_states[0] is the embeddings
        vision_features = out.hidden_states[idx]
        attn = cls_attention(tower.encoder.layers[idx - 1], out.hidden_states[idx - 1])
        features = self.model.model.multi_modal_projector(vision_features)
        grid = cfg.vision_config.image_size // cfg.vision_config.patch_size
        enc = EncodedVideo(features, vision_features, attn, VisualLayout(n_frames=len(frames), grid=grid))
        self.encode_count += 1
        _lru_put(self._encoded, key, enc)
        return enc, False

    def select_before_llm(self, enc: EncodedVideo, cfg: PruneConfig, r: float) -> Selection:
        """VisPruner / random / FastVID: which visual tokens the LLM will see at all, and as what."""
        n_vis = enc.layout.n_tokens
        keep = keep_count(n_vis, r)
        features = rearrange(enc.features, "frame token d -> (frame token) d")
        if cfg.method == "fastvid":
            from .pruning.fastvid import FastVIDParams, select_fastvid

            # Density and merging on the LLM's input embeddings, segmentation on the tower's CLS features:
            # the spaces the official code uses (projected tokens; the vision tower's pooled output).
            sel = select_fastvid(enc.features, keep, enc.layout, enc.cls_attention, enc.vision_features[:, 0],
                                 FastVIDParams(context_share=cfg.context_share))
            return Selection(sel.kept, sel.merged, enc.cls_attention.flatten().float().tolist(), sel.details,
                             sel.absorbed)
        if cfg.method == "random":
            from .pruning.random import select_random

            kept, scores, details = select_random(n_vis, keep, cfg.seed), None, {"seed": cfg.seed}
        elif cfg.method == "vispruner":
            from .pruning.vispruner import select_vispruner

            kept, details = select_vispruner(enc.cls_attention.float(), enc.vision_features.float(), keep,
                                             cfg.important_ratio, enc.layout)
            scores = enc.cls_attention.flatten().float().tolist()
        else:
            kept, scores, details = list(range(n_vis)), None, {}
        return Selection(kept, features[torch.as_tensor(kept, device=features.device)], scores, details)

    def tokenize(self, question: str, history: list[tuple[str, str]] | None, n_visual: int) -> Tensor:
        """Prompt ids [1, n] with the video token expanded to `n_visual` slots; the question and history stay
        plain text even where they look like special tokens."""
        ids = prompt_ids(self.processor.tokenizer, lambda q, h: build_prompt(q, h, self.prompt), question, history,
                         self.model.config.video_token_id, n_visual)
        return torch.tensor([ids], device=self.device)

    def embed(self, ids: Tensor, visual: Tensor) -> tuple[Tensor, Tensor]:
        """Token embeddings with the visual features scattered into the video-token slots."""
        vis_mask = ids == self.model.config.video_token_id
        if int(vis_mask.sum()) != len(visual):
            raise InputError(f"the prompt has {int(vis_mask.sum())} video-token slots for {len(visual)} visual "
                             f"features; they must be equal")
        embeds = self.model.get_input_embeddings()(ids)
        embeds[vis_mask] = visual.to(embeds.dtype)
        return embeds, vis_mask

    def text_tokens(self, question: str, history: list[tuple[str, str]] | None = None) -> int:
        """Tokens of the prompt besides the visual ones."""
        return self.tokenize(question, history, 0).shape[1]

    def plan(self, duration_s: float | None, n_text: int, cfg: PruneConfig, frames: int | None,
             max_new: int, free_bytes: int | None = None, share: int = 1) -> tuple[int, float, object | None]:
        """(frames to sample, R, the adaptive decision or None) for one question with `n_text` prompt tokens
        about a clip of `duration_s` seconds. With R=auto both come from the clip's length, the prompt and the
        memory free on this model's device (so a caller can decode the clip itself, e.g. under a timeout):
        `free_bytes` (default: free now) split evenly between `share` requests, the batch this one runs in.
        A cap beyond the usual answer (the official protocol asks for 1024) must not cost frames: frames are
        planned with at most ANSWER_RESERVE tokens of answer room, and the answer runs on to the context's end."""
        max_new = min(max_new, ANSWER_RESERVE)
        if cfg.method != "none" and cfg.r == "auto":
            free = self.free_memory(self.device) if free_bytes is None else free_bytes
            decision = decide(duration_s, self.dims, n_text, free, k=cfg.layer or 0, frames=frames,
                              policy=replace(self.policy, new_tokens=max_new), share=share)
            return decision.frames, decision.r, decision
        return frames or DEFAULT_FRAMES, 0.0 if cfg.method == "none" else float(cfg.r), None

    def prepare(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None,
                cfg: PruneConfig, frames: int | None, max_new: int, free_bytes: int | None = None,
                share: int = 1) -> Request:
        """Everything before the LLM for one question: frames, encoding, pruning before the LLM, prompt ids.
        `free_bytes`, `share`: see `plan`."""
        t_start = self.clock()
        if not question or not question.strip():
            raise InputError("the question is empty")
        frames = frames or self.frames
        if frames is not None and frames < 1:
            raise InputError(f"frames must be >= 1, got {frames}")
        question_text = question.strip()
        n_text = self.text_tokens(question_text, history)
        duration = None
        if cfg.method != "none" and cfg.r == "auto":
            if isinstance(video, Clip):
                duration, frames = video.info.duration_s, len(video.frames)
            else:
                duration = probe_video(video).duration_s
        frames, r, decision = self.plan(duration, n_text, cfg, frames, max_new, free_bytes, share)
        frames = len(video.frames) if isinstance(video, Clip) else frames
        self.check_context(frames, n_text, cfg, r, min(max_new, ANSWER_RESERVE))
        clip, t_sample = self.sample(video, frames)

        t0 = self.clock()
        enc, cached = self.encode(clip.frames)
        t_encode = 0.0 if cached else self.clock() - t0
        if cfg.layer == 0:
            sel = self.select_before_llm(enc, cfg, r)
        else:
            sel = Selection(None, rearrange(enc.features, "frame token d -> (frame token) d"))
        visual = sel.visual
        ids = self.tokenize(question_text, history, len(visual))[0]
        hidden = enc.layout.n_tokens - len(visual) if cfg.original_positions else 0  # positions pruned ones hold
        room = self.dims.context - len(ids) - hidden
        return Request(question=question, clip=clip, enc=enc, encode_cached=cached, ids=ids, visual=visual,
                       cfg=cfg, r=r, decision=decision, kept=sel.kept, scores=sel.scores, details=sel.details,
                       absorbed=sel.absorbed, max_new=min(max_new, room), context_capped=room < max_new,
                       t_start=t_start, t_sample=t_sample, t_encode=t_encode)

    def check_context(self, frames: int, n_text: int, cfg: PruneConfig, r: float, max_new: int) -> None:
        """Refuse a frame count whose prompt cannot fit the context window, before any frame is decoded.

        Visual tokens count in full except when pruned before the LLM: FastV's first K layers see them all,
        and with original positions (fastvid's default) the kept ones reach the unpruned length."""
        room = self.dims.context - n_text - max_new

        def visual(f: int) -> int:
            n = f * self.dims.tokens_per_frame
            return keep_count(n, r) if cfg.layer == 0 and not cfg.original_positions else n

        if visual(frames) <= room:
            return
        if room < visual(1):
            raise InputError(f"the question and history need {n_text} tokens + {max_new} new tokens, which leaves "
                             f"no room for a frame in the model's context of {self.dims.context}; shorten them")
        most, over = 1, frames  # visual(most) fits, visual(over) does not
        while over - most > 1:
            mid = (most + over) // 2
            most, over = (mid, over) if visual(mid) <= room else (most, mid)
        n = frames * self.dims.tokens_per_frame
        tokens = f"{n} visual tokens" if visual(frames) == n else f"{visual(frames)} visual tokens (of {n}, R={r:.2f})"
        raise InputError(f"{frames} frames need {tokens} + {n_text} prompt and {max_new} answer tokens, more than "
                         f"the model's context of {self.dims.context}; use at most {most} frames")

    def collate(self, requests: list[Request]) -> Collated:
        """One left-padded batch: every prompt ends at the last position, so each sample's next token is there."""
        b, n = len(requests), max(len(req.ids) for req in requests)
        embed = self.model.get_input_embeddings()
        batch = Collated(
            embeds=torch.zeros(b, n, embed.embedding_dim, dtype=self.dtype, device=self.device),
            attention_mask=torch.zeros(b, n, dtype=torch.long, device=self.device),
            visual_mask=torch.zeros(b, n, dtype=torch.bool, device=self.device),
            position_ids=torch.zeros(b, n, dtype=torch.long, device=self.device),
        )
        for i, req in enumerate(requests):
            e, v = self.embed(req.ids[None], req.visual)
            start = n - len(req.ids)
            batch.embeds[i, start:], batch.visual_mask[i, start:] = e[0], v[0]
            batch.attention_mask[i, start:] = 1
            batch.position_ids[i, start:] = self.positions(req, v[0])
        return batch

    def prefill(self, requests: list[Request], batch: Collated) -> engine.PrefillResult:
        """Run the prompts through the LLM; FastV ranks and prunes each sample inside it."""
        cfg = requests[0].cfg
        plan = None
        if cfg.method == "fastv":
            plan = FastVPlan(cfg.k, [req.r for req in requests], cfg.rank_by, cfg.frame_floor,
                             requests[0].enc.layout.tokens_per_frame)
        return engine.prefill(self.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan,
                              batch.position_ids, clock=self.clock)

    def decode(self, requests: list[Request], state: engine.PrefillResult) -> Generator[TextDelta, None, list]:
        """Greedy decoding. Yields each sample's new text as it completes; returns the new token ids."""
        tok = self.processor.tokenizer
        eos = engine.eos_ids(self.model.generation_config.eos_token_id)
        new_ids: list[list[int]] = [[] for _ in requests]
        texts = ["" for _ in requests]
        done = [False] * len(requests)
        max_new = max(req.max_new for req in requests)
        steps = (engine.decode_n_tokens(self.model, state, max_new, eos) if self.decoder is None
                 else self.decoder.decode_n_tokens(state, max_new, eos))
        for tokens in steps:
            for i, token in enumerate(tokens.tolist()):
                if done[i]:
                    continue
                if token in eos or len(new_ids[i]) >= requests[i].max_new:
                    done[i] = True
                    continue
                new_ids[i].append(token)
                full = tok.decode(new_ids[i], skip_special_tokens=True)
                # Hold back a trailing partial character (byte-level BPE) until it completes.
                if not full.endswith("\ufffd") and full != texts[i]:
                    yield TextDelta(i, full[len(texts[i]):] if full.startswith(texts[i]) else full)
                    texts[i] = full
            if all(done):
                break
        return new_ids

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
        return self.assemble_answers(requests, state, new_ids, t_prefill, t_generate, peak)

    def assemble_answers(self, requests: list[Request], state: engine.PrefillResult, new_ids: list[list[int]],
                         t_prefill: float, t_generate: float, peak: tuple[int, str]) -> list[Answer]:
        """Text, kept tokens, stats and FLOPs of each sample, from the requests and what the LLM did;
        `peak`: (bytes, kind) of the batch's peak memory."""
        peak, kind = peak
        cache = engine.cache_bytes(state.cache)
        n = max(len(req.ids) for req in requests)
        answers = []
        for i, req in enumerate(requests):
            n_vis = req.enc.layout.n_tokens
            if state.k is not None:  # FastV chose inside the LLM
                kept_idx, scores = state.kept[i].tolist(), state.scores[i].float().tolist()
            else:
                kept_idx, scores = req.kept if req.kept is not None else list(range(n_vis)), req.scores
            kept = KeptTokens(method=req.cfg.method, layer=req.cfg.layer, n_visual=n_vis, kept=kept_idx,
                              layout=req.enc.layout, offset=state.visual_offsets[i] - (n - len(req.ids)), r=req.r,
                              scores=scores, details=req.details, absorbed=req.absorbed)
            stats = Stats(
                frames=len(req.clip.frames), distinct_frames=req.clip.distinct_frames, visual_tokens=n_vis,
                kept_visual_tokens=len(kept_idx),
                prompt_tokens=len(req.ids), new_tokens=len(new_ids[i]), max_new_tokens=req.max_new,
                context_capped=req.context_capped, t_sample=req.t_sample,
                t_encode=req.t_encode, t_prefill=t_prefill, t_rank=state.t_rank, t_generate=t_generate,
                t_total=self.clock() - req.t_start,
                tokens_per_s=len(new_ids[i]) / t_generate if t_generate > 0 else 0.0,
                peak_memory_bytes=peak, peak_memory_kind=kind, cache_bytes=cache // len(requests),
                encode_cached=req.encode_cached, device=str(self.device),
                dtype=str(self.dtype).removeprefix("torch."),
            )
            flops = estimate_flops(self.dims, len(req.ids) - len(req.visual), n_vis, len(kept_idx), req.cfg.layer)
            text = self.processor.tokenizer.decode(new_ids[i], skip_special_tokens=True).strip()
            answers.append(Answer(text=text, question=req.question, clip=req.clip, kept=kept,
                                  decision=req.decision, stats=stats, flops=flops, prune=req.cfg,
                                  prompt=self.prompt))
        return answers

    def positions(self, req: Request, vis_mask: Tensor) -> Tensor:
        """RoPE positions of a prompt: contiguous, or, for tokens kept before the LLM with original positions
        (`keep_positions`; fastvid's default), the positions they would have had in the unpruned prompt."""
        n = len(req.ids)
        pos = torch.arange(n, device=self.device)
        if req.kept is None or not req.cfg.original_positions or not bool(vis_mask.any()):
            return pos
        start = int(vis_mask.nonzero()[0])
        kept = torch.as_tensor(req.kept, device=self.device)
        pos[vis_mask] = start + kept
        after = torch.arange(n, device=self.device) > int(vis_mask.nonzero()[-1])
        pos[after] += req.enc.layout.n_tokens - len(kept)
        return pos

    # -- public API ---------------------------------------------------------------------------------

    def _config(self, prune: PruneConfig | None, max_new_tokens: int | None) -> tuple[PruneConfig, int]:
        cfg = (prune or self.prune).validate(self.dims.n_layers)
        max_new = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if max_new < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new}")
        return cfg, max_new

    def ask(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
            prune: PruneConfig | None = None, frames: int | None = None,
            max_new_tokens: int | None = None) -> Answer:
        """Answer one question about one video (history: earlier (question, answer) turns on it)."""
        answer = None
        for item in self.stream(video, question, history, prune, frames, max_new_tokens):
            answer = item
        return answer

    def stream(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
               prune: PruneConfig | None = None, frames: int | None = None,
               max_new_tokens: int | None = None) -> Iterator[str | Answer]:
        """Yields the answer text as it is generated (str deltas), then the final Answer.

        Holds the pipeline's lock until the generator is exhausted or closed."""
        with self._lock:
            cfg, max_new = self._config(prune, max_new_tokens)
            events = self.generate([self.prepare(video, question, history, cfg, frames, max_new)])
            while True:
                try:
                    yield next(events).text
                except StopIteration as finished:
                    yield finished.value[0]
                    return

    def ask_batch(self, items: list[tuple[str | Path | Clip, str]], prune: PruneConfig | None = None,
                  frames: int | None = None, max_new_tokens: int | None = None) -> list[Answer]:
        """Answer several (video, question) pairs in one left-padded batch; each sample is ranked and pruned
        on its own, so every answer equals the one `ask` gives for it alone, except that adaptive R plans each
        sample with its share of the free memory (read once for the batch), which may prune more."""
        with self._lock:
            cfg, max_new = self._config(prune, max_new_tokens)
            free = self.free_memory(self.device) if cfg.r == "auto" and cfg.method != "none" else None
            requests = [self.prepare(v, q, None, cfg, frames, max_new, free, len(items)) for v, q in items]
            events = self.generate(requests)
            while True:
                try:
                    next(events)
                except StopIteration as finished:
                    return finished.value


def _lru_put(cache: OrderedDict, key, value) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)
