"""The one entry point: video + question -> Answer(text, kept tokens, stats).

    qa = VideoQA.from_pretrained("demo")
    answer = qa.ask("clip.mp4", "What colour is the shape?")

One straight path, each stage a small function: sample -> encode -> prune -> prefill -> decode.
"""

from __future__ import annotations

import hashlib
import os
import resource
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from . import engine
from .errors import InputError
from .model import LoadedModel, build_prompt, load_model
from .pruning import KeptTokens, ModelDims, PruneConfig, VisualLayout, keep_count
from .pruning.flops import FlopsEstimate, estimate_flops
from .video import Clip, probe_video, sample_frames

DEFAULT_FRAMES = 8  # what Video-LLaVA was trained with
CACHE_SIZE = 8  # encoded videos kept per pipeline (follow-up questions reuse them)


@dataclass
class EncodedVideo:
    """The vision tower's output for one clip: what follow-up questions reuse."""

    features: Tensor  # [F, T, d_llm] after the projector; T = tokens per frame, CLS at index 0
    vision_features: Tensor  # [F, T, d_vis] tower output at the feature layer
    cls_attention: Tensor  # [F, T] [CLS] -> token attention at the feature layer, mean over heads
    layout: VisualLayout


@dataclass
class Stats:
    frames: int
    visual_tokens: int
    kept_visual_tokens: int
    prompt_tokens: int  # tokens the LLM's first layer sees
    new_tokens: int
    t_sample: float  # decoding the video file into frames
    t_encode: float  # preprocessing + vision tower + projector (0 when cached)
    t_prefill: float
    t_rank: float  # part of prefill spent ranking (FastV)
    t_generate: float  # decoding new tokens after the first
    t_total: float
    tokens_per_s: float
    peak_memory_bytes: int
    peak_memory_kind: str  # "cuda" (this call) or "cpu-rss" (process high-water mark)
    cache_bytes: int
    encode_cached: bool
    device: str
    dtype: str


@dataclass
class Answer:
    text: str
    question: str
    clip: Clip
    kept: KeptTokens
    decision: object | None  # pruning.adaptive.Decision when R or frames were chosen automatically
    stats: Stats
    flops: FlopsEstimate
    prune: PruneConfig = field(default_factory=PruneConfig)

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "answer": self.text,
            "video": self.clip.to_dict(),
            "prune": asdict(self.prune),
            "kept": self.kept.to_dict(),
            "decision": None if self.decision is None else self.decision.to_dict(),
            "flops": self.flops.to_dict(),
            "stats": asdict(self.stats),
        }

    def summary(self) -> str:
        s, k = self.stats, self.kept
        return (
            f"{k.method} K={k.layer} R={k.r:.2f} | frames {s.frames} | visual tokens {k.n_visual} -> {k.n_kept} "
            f"| FLOPs {100 * self.flops.ratio:.1f}% | sample {s.t_sample:.2f}s encode {s.t_encode:.2f}s"
            f"{' (cached)' if s.encode_cached else ''} prefill {s.t_prefill:.2f}s generate {s.t_generate:.2f}s "
            f"| {s.new_tokens} tokens, {s.tokens_per_s:.1f} tok/s"
        )


def frames_hash(frames: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(frames).data, usedforsecurity=False).hexdigest() + str(frames.shape)


class VideoQA:
    """A loaded Video-LLaVA with pruning defaults and a small cache of encoded videos."""

    def __init__(self, loaded: LoadedModel, prune: PruneConfig | None = None, frames: int | None = None,
                 max_new_tokens: int = 64):
        self.model = loaded.model
        self.processor = loaded.processor
        self.device = loaded.device
        self.dtype = loaded.dtype
        self.name = loaded.name
        self.dims = ModelDims.from_config(self.model.config, dtype_bytes=torch.finfo(self.dtype).bits // 8)
        self.prune = (prune or PruneConfig()).validate(self.dims.n_layers)
        self.frames = frames
        self.max_new_tokens = max_new_tokens
        self.encode_count = 0  # vision-tower runs: follow-ups on a cached clip do not add to it
        self._encoded: OrderedDict[str, EncodedVideo] = OrderedDict()
        self._clips: OrderedDict[tuple, Clip] = OrderedDict()

    @classmethod
    def from_pretrained(cls, model: str = "demo", device: str | None = None, dtype: str | None = None,
                        attn_implementation: str = "sdpa", prune: PruneConfig | None = None,
                        frames: int | None = None, max_new_tokens: int = 64) -> VideoQA:
        return cls(load_model(model, device, dtype, attn_implementation), prune, frames, max_new_tokens)

    # -- the stages ---------------------------------------------------------------------------------

    def sample(self, video: str | Path | Clip, num_frames: int) -> tuple[Clip, float]:
        """Frames of `video` (decoded once per file version and frame count)."""
        if isinstance(video, Clip):
            return video, 0.0
        t0 = time.perf_counter()
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
        return clip, time.perf_counter() - t0

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

    def select_before_llm(self, enc: EncodedVideo, cfg: PruneConfig, r: float) -> tuple[list[int], list | None, dict]:
        """VisPruner / random: which visual tokens the LLM will see at all."""
        n_vis = enc.layout.n_tokens
        keep = keep_count(n_vis, r)
        if cfg.method == "random":
            from .pruning.random import select_random

            return select_random(n_vis, keep, cfg.seed), None, {"seed": cfg.seed}
        if cfg.method == "vispruner":
            from .pruning.vispruner import select_vispruner

            kept, details = select_vispruner(enc.cls_attention.float(), enc.vision_features.float(), keep,
                                             cfg.important_ratio, enc.layout)
            return kept, enc.cls_attention.flatten().float().tolist(), details
        return list(range(n_vis)), None, {}

    def tokenize(self, prompt: str, n_visual: int) -> Tensor:
        """Prompt ids with `<video>` expanded to `n_visual` video tokens, as the processor does."""
        tok = self.processor.tokenizer
        text = prompt.replace(self.processor.video_token, self.processor.video_token * n_visual)
        return tok(text, return_tensors="pt").input_ids.to(self.device)

    def embed(self, ids: Tensor, visual: Tensor) -> tuple[Tensor, Tensor]:
        """Token embeddings with the visual features scattered into the video-token slots."""
        vis_mask = ids == self.model.config.video_token_id
        embeds = self.model.get_input_embeddings()(ids)
        embeds[vis_mask] = visual.to(embeds.dtype)
        return embeds, vis_mask

    # -- public API ---------------------------------------------------------------------------------

    def ask(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
            prune: PruneConfig | None = None, frames: int | None = None,
            max_new_tokens: int | None = None) -> Answer:
        answer = None
        for item in self.stream(video, question, history, prune, frames, max_new_tokens):
            answer = item
        return answer

    def stream(self, video: str | Path | Clip, question: str, history: list[tuple[str, str]] | None = None,
               prune: PruneConfig | None = None, frames: int | None = None,
               max_new_tokens: int | None = None) -> Iterator[str | Answer]:
        """Yields the answer text as it is generated (str deltas), then the final Answer."""
        t_start = time.perf_counter()
        if not question or not question.strip():
            raise InputError("the question is empty")
        cfg = PruneConfig(**asdict(prune or self.prune)).validate(self.dims.n_layers)
        max_new = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if max_new < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new}")
        frames = frames or self.frames
        if frames is not None and frames < 1:
            raise InputError(f"frames must be >= 1, got {frames}")
        prompt = build_prompt(question.strip(), history)
        text_tokens = len(self.tokenize(prompt, 0)[0]) + max_new

        decision = None
        if cfg.method != "none" and cfg.r == "auto":
            from .pruning.adaptive import decide, free_memory_bytes

            duration = video.info.duration_s if isinstance(video, Clip) else probe_video(video).duration_s
            if isinstance(video, Clip):
                frames = len(video.frames)
            decision = decide(duration, self.dims, text_tokens, free_memory_bytes(self.device),
                              k=cfg.layer or 0, frames=frames)
            frames, r = decision.frames, decision.r
        else:
            r = 0.0 if cfg.method == "none" else float(cfg.r)
        clip, t_sample = self.sample(video, frames or DEFAULT_FRAMES)

        t0 = time.perf_counter()
        enc, cached = self.encode(clip.frames)
        t_encode = 0.0 if cached else time.perf_counter() - t0
        n_vis = enc.layout.n_tokens
        kept_idx, scores, details = self.select_before_llm(enc, cfg, r) if cfg.layer == 0 else (None, None, {})
        visual = enc.features.flatten(0, 1)
        if kept_idx is not None:
            visual = visual[torch.as_tensor(kept_idx, device=visual.device)]
        ids = self.tokenize(prompt, len(visual))
        if ids.shape[1] + max_new > self.dims.context:
            raise InputError(
                f"the prompt needs {ids.shape[1]} tokens ({len(visual)} visual) + {max_new} new tokens, more than "
                f"the model's context of {self.dims.context}; shorten the question or history, or use fewer frames"
            )

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            embeds, vis_mask = self.embed(ids, visual)
            plan = engine.FastVPlan(cfg.k, r, cfg.rank_by) if cfg.method == "fastv" else None
            state = engine.prefill(self.model, embeds, torch.ones_like(ids), vis_mask, plan)
        t_prefill = time.perf_counter() - t0

        if plan is not None:
            kept_idx = state.kept[0].tolist()
            scores = state.scores[0].float().tolist()
        elif kept_idx is None:
            kept_idx = list(range(n_vis))
        kept = KeptTokens(method=cfg.method, layer=cfg.layer, n_visual=n_vis, kept=kept_idx, layout=enc.layout,
                          offset=state.visual_offsets[0], r=r, scores=scores, details=details)

        tok = self.processor.tokenizer
        eos = self.model.generation_config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        new_ids: list[int] = []
        text = ""
        t0 = time.perf_counter()
        for token in engine.decode_n_tokens(self.model, state, max_new, eos):
            token_id = int(token[0])
            if token_id == eos:
                break
            new_ids.append(token_id)
            full = tok.decode(new_ids, skip_special_tokens=True)
            # Hold back a trailing partial character (byte-level BPE) until it completes.
            if not full.endswith("\ufffd") and full != text:
                yield full[len(text):] if full.startswith(text) else full
                text = full
        t_generate = time.perf_counter() - t0
        text = tok.decode(new_ids, skip_special_tokens=True).strip()

        peak, kind = _peak_memory(self.device)
        stats = Stats(
            frames=len(clip.frames), visual_tokens=n_vis, kept_visual_tokens=len(kept_idx),
            prompt_tokens=ids.shape[1], new_tokens=len(new_ids), t_sample=t_sample, t_encode=t_encode,
            t_prefill=t_prefill, t_rank=state.t_rank, t_generate=t_generate,
            t_total=time.perf_counter() - t_start,
            tokens_per_s=len(new_ids) / t_generate if t_generate > 0 else 0.0,
            peak_memory_bytes=peak, peak_memory_kind=kind, cache_bytes=engine.cache_bytes(state.cache),
            encode_cached=cached, device=str(self.device), dtype=str(self.dtype).removeprefix("torch."),
        )
        flops = estimate_flops(self.dims, ids.shape[1] - len(visual), n_vis, len(kept_idx), cfg.layer)
        yield Answer(text=text, question=question, clip=clip, kept=kept, decision=decision, stats=stats,
                     flops=flops, prune=cfg)


def _lru_put(cache: OrderedDict, key, value) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


def _peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if os.uname().sysname == "Darwin" else 1024), "cpu-rss"
