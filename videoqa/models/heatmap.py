"""Per-frame pictures of the kept tokens of today's families, one per sampled frame.

LLaVA-OneVision: the frame as its tower sees it (resized to the processor's square), cut into the pooled 14×14
grid (a cell is the bilinear pool of about 2×2 patches); the newline after the frames is a summary token, said in
the caption. Qwen-VL: the frame resized as the processor resized it, cut into the merged grid (a cell is 2×2
patches); two consecutive frames share every token, so both frames of a pair show the same cells and the caption
says so. Dropped cells are greyed out and hatched, kept ones outlined (the colours of videoqa.heatmap).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torchvision.transforms.v2.functional as tvF
from einops import rearrange
from PIL import Image

from ..heatmap import (
    DROP_BASE,
    DROP_GAIN,
    HATCH,
    HATCH_PERIOD,
    HATCH_WIDTH,
    KEPT_OUTLINE,
    MIN_DISPLAY,
    OUTLINE_WIDTH,
    _cell_edges,
    _edge,
    _upscale,
)
from .prepared import VideoLayout


def view(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Frames (N, H, W, 3) uint8 resized (bicubic, antialiased) to the model's height x width."""
    x = rearrange(torch.from_numpy(np.ascontiguousarray(frames)), "n h w c -> n c h w")
    x = tvF.resize(x, [height, width], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
    return rearrange(x, "n c h w -> n h w c").numpy()


def render(frames: np.ndarray, layout: VideoLayout, kept: list[int] | None, view_hw: tuple[int, int],
           timestamps: list[float] | None = None) -> list[tuple[Image.Image, str]]:
    """One (image, caption) per source frame. `kept`: indices into the visual span (None: all kept); the
    layout's summary tokens are the last `layout.summary` of the span."""
    rows, cols = layout.grid
    per = layout.tokens_per_group
    kept_set = set(range(layout.n_tokens)) if kept is None else set(kept)
    n_frame_tokens = layout.n_tokens - layout.summary
    summary_kept = any(i in kept_set for i in range(n_frame_tokens, layout.n_tokens))
    pixels = view(frames, *view_hw)
    height, width = view_hw
    row_of = np.repeat(np.arange(rows), np.diff(_cell_edges(height, rows)))
    col_of = np.repeat(np.arange(cols), np.diff(_cell_edges(width, cols)))
    scale = max(1, math.ceil(MIN_DISPLAY / max(height, width)))
    out = []
    for f in range(len(frames)):
        group = min(f // layout.frames_per_group, layout.groups - 1)
        cells = np.array([i in kept_set for i in range(group * per, (group + 1) * per)]).reshape(rows, cols)
        kept_px = cells[row_of][:, col_of]
        img = pixels[f].astype(np.float32)
        grey = DROP_BASE + DROP_GAIN * img.mean(axis=-1, keepdims=True)
        img[~kept_px] = np.broadcast_to(grey, img.shape)[~kept_px]
        img = img.clip(0, 255).astype(np.uint8)
        if scale > 1:
            img, kept_px = _upscale(img, scale), _upscale(kept_px, scale)
        yy, xx = np.indices(kept_px.shape)
        img[~kept_px & ((yy + xx) % HATCH_PERIOD < HATCH_WIDTH)] = HATCH
        if not kept_px.all():
            img[_edge(kept_px, OUTLINE_WIDTH)] = KEPT_OUTLINE
        t = f" · {timestamps[f]:.2f} s" if timestamps is not None and f < len(timestamps) else ""
        caption = f"#{f + 1}{t} · kept {int(cells.sum())}/{per}"
        if layout.frames_per_group > 1:
            first = group * layout.frames_per_group
            others = [i + 1 for i in range(first, first + layout.frames_per_group) if i != f and i < len(frames)]
            caption += f" · tokens shared with #{', #'.join(map(str, others))}" if others else ""
        if layout.summary:
            caption += " + newline (summary)" if summary_kept else ""
        out.append((Image.fromarray(img), caption))
    return out
