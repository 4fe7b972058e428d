"""Per-frame pictures of which visual tokens a pruning method kept.

Each sampled frame is shown *as the model saw it*: resized on its shortest edge and center-cropped with the
same operations as the Video-LLaVA video processor (torchvision resize on uint8, bicubic with antialias,
then a center crop), so a highlighted patch is exactly the 14x14 (real model) or 8x8 (tiny) pixel square
that became that token. Kept patches keep their colours and are outlined where they meet dropped ones;
dropped patches are greyed out and hatched (so kept and dropped differ even on a dark frame); dropped ones
whose content was merged into a kept token (token-merging methods) are tinted blue instead. The frame's
summary token (CLS) has no place on the grid, so the caption says whether it was kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
import torchvision.transforms.v2.functional as tvF
from einops import rearrange
from PIL import Image

from .pruning.base import KeptTokens, VisualLayout

# A dropped patch: dimmed, its content faintly visible, with light diagonal hatching at display resolution.
DROP_BASE, DROP_GAIN = 40.0, 0.3  # level = DROP_BASE + DROP_GAIN * (luma, mixed with DROP_COLOUR of the colour)
DROP_COLOUR = 0.5  # some of its colour stays: a dropped object still shows where it was (fully grey, it vanished)
HATCH = (175, 175, 175)
HATCH_PERIOD, HATCH_WIDTH = 8, 2  # display pixels
KEPT_OUTLINE = (255, 205, 0)  # amber: where kept patches border dropped ones
OUTLINE_WIDTH = 2  # display pixels
SCORE_MAP = "inferno"
MERGED_TINT = (40, 110, 255)  # colour mixed into a patch merged into a kept token
MERGED_MIX = 0.45  # share of the tint in such a patch: clearly not kept, clearly not just dropped
MIN_DISPLAY = 256  # frames are upscaled (nearest) to at least this: 224 px -> 448, tiny 64 px -> 256


def _field(d, key: str):
    """Read `key` from a plain dict or from transformers' SizeDict (attributes, not a Mapping)."""
    if isinstance(d, Mapping):
        return d.get(key)
    return getattr(d, key, None)


def _resized_hw(height: int, width: int, size) -> tuple[int, int]:
    """Output (h, w) of the processor's resize for `size` (shortest_edge, or an explicit height/width)."""
    short = _field(size, "shortest_edge")
    if short:
        # transformers' get_resize_output_image_size(default_to_square=False): long edge truncated by int()
        if width <= height:
            return int(short * height / width), short
        return short, int(short * width / height)
    h, w = _field(size, "height"), _field(size, "width")
    if h and w:
        return int(h), int(w)
    raise ValueError(f"size must have 'shortest_edge' or 'height' and 'width', got {size}")


def model_view(
    frames: np.ndarray, size, crop, resample: tvF.InterpolationMode = tvF.InterpolationMode.BICUBIC
) -> np.ndarray:
    """Frames (N, H, W, 3) uint8 -> the pixels the vision tower sees, (N, crop_h, crop_w, 3) uint8.

    `size` and `crop` are the video processor's `size` and `crop_size` (dicts or SizeDicts).
    """
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be (N, H, W, 3), got shape {frames.shape}")
    x = rearrange(torch.from_numpy(np.ascontiguousarray(frames)), "n h w c -> n c h w")  # uint8
    new_hw = _resized_hw(x.shape[-2], x.shape[-1], size)
    x = tvF.resize(x, list(new_hw), interpolation=resample, antialias=True)
    ch, cw = int(_field(crop, "height")), int(_field(crop, "width"))
    h, w = x.shape[-2:]
    if ch > h or cw > w:  # the processor pads with zeros before cropping when the crop is larger
        pad = [max(cw - w, 0) // 2, max(ch - h, 0) // 2, (max(cw - w, 0) + 1) // 2, (max(ch - h, 0) + 1) // 2]
        x = tvF.pad(x, pad, fill=0)
        h, w = x.shape[-2:]
    top, left = int((h - ch) / 2.0), int((w - cw) / 2.0)
    x = x[..., top : top + ch, left : left + cw]
    return rearrange(x, "n c h w -> n h w c").contiguous().numpy()


def _cell_edges(n_pixels: int, grid: int) -> list[int]:
    """Pixel boundaries of `grid` equal cells (exact when the crop is a multiple of the patch size)."""
    return [round(i * n_pixels / grid) for i in range(grid + 1)]


def _score_colours(scores: np.ndarray) -> np.ndarray:
    """Scores -> RGB uint8 through a perceptual colour map, normalised over all frames so they compare."""
    from matplotlib import colormaps  # heavy import, only when scores are shown

    lo, hi = float(np.nanmin(scores)), float(np.nanmax(scores))
    norm = (scores - lo) / (hi - lo) if hi > lo else np.zeros_like(scores)
    return (colormaps[SCORE_MAP](norm)[..., :3] * 255).astype(np.uint8)


def score_scale_css(steps: int = 8) -> str:
    """The colour map of `show_scores` as a CSS gradient, low scores on the left (the page's colour scale)."""
    from matplotlib import colormaps

    cmap = colormaps[SCORE_MAP]
    stops = ["#{:02x}{:02x}{:02x}".format(*(round(255 * v) for v in cmap(i / (steps - 1))[:3])) for i in range(steps)]
    return f"linear-gradient(to right, {', '.join(stops)})"


def render_heatmaps(
    clip, kept: KeptTokens, size, crop, show_scores: bool = False, short: bool = False
) -> list[tuple[Image.Image, str]]:
    """One (image, caption) per sampled frame of `clip`, showing the patches in `kept`.

    `clip` is a videoqa.video.Clip (frames, timestamps); `kept.layout` says how the visual span maps to
    frames and grid cells. With `show_scores` and `kept.scores`, patches are coloured by their ranking
    score (`score_scale_css`) instead of greyed out. Patches merged into a kept token (`kept.absorbed`, per
    frame in `kept.frame_masks()`) are tinted instead of greyed out, and counted in the caption. Kept
    patches are outlined where they border others. `short` captions say only the frame, its kept patches
    of all and how many were merged: '#3 · 40/64 +5 merged' (for narrow columns).
    """
    layout = kept.layout
    frames = np.asarray(clip.frames)
    if crop is None or layout.frames_per_token > 1 or layout.summary or layout.n_cols != layout.grid:
        return _family_heatmaps(clip, kept, size)  # today's families: pooled, merged or paired grids
    if len(frames) != layout.n_frames:
        raise ValueError(f"clip has {len(frames)} frames but the visual layout has {layout.n_frames}")
    view = model_view(frames, size, crop)
    g = layout.grid
    height, width = view.shape[1:3]
    rows, cols = _cell_edges(height, g), _cell_edges(width, g)

    masks = kept.frame_masks()
    kept_grid, merged_grid = _cell_grids(kept, masks)
    colours = _patch_colours(kept) if show_scores and kept.scores is not None else None

    scale = max(1, math.ceil(MIN_DISPLAY / max(height, width)))
    row_of, col_of = np.repeat(np.arange(g), np.diff(rows)), np.repeat(np.arange(g), np.diff(cols))
    out = []
    for f in range(layout.n_frames):
        img = view[f].astype(np.float32)
        kept_px = kept_grid[f][row_of][:, col_of]  # per pixel of the model's view
        merged_px = merged_grid[f][row_of][:, col_of]
        if colours is not None:
            shaded = 0.45 * img + 0.55 * colours[f][row_of][:, col_of]
        else:
            shaded = img.copy()
            shaded[merged_px] = (1 - MERGED_MIX) * img[merged_px] + MERGED_MIX * np.asarray(MERGED_TINT, np.float32)
            grey = DROP_BASE + DROP_GAIN * ((1 - DROP_COLOUR) * img.mean(axis=-1, keepdims=True) + DROP_COLOUR * img)
            dropped = ~kept_px & ~merged_px
            shaded[dropped] = np.broadcast_to(grey, img.shape)[dropped]
        pixels = shaded.clip(0, 255).astype(np.uint8)
        if scale > 1:
            pixels = _upscale(pixels, scale)
            kept_px, merged_px = _upscale(kept_px, scale), _upscale(merged_px, scale)
        if colours is None:
            yy, xx = np.indices(kept_px.shape)
            pixels[~kept_px & ~merged_px & ((yy + xx) % HATCH_PERIOD < HATCH_WIDTH)] = HATCH
        if not kept_px.all():
            pixels[_edge(kept_px, OUTLINE_WIDTH)] = KEPT_OUTLINE
        n_kept, n_merged = int(kept_grid[f].sum()), int(merged_grid[f].sum())
        if short:
            # no-break spaces: a narrow caption breaks only between its two parts, never inside one
            caption = f"#{f + 1}\u00a0·\u00a0{n_kept}/{g * g}" + (f" +{n_merged}\u00a0merged" if n_merged else "")
        else:
            caption = _caption(clip, f, n_kept, g * g, masks[f]["cls_kept"], layout)
            caption += f" · {n_merged} merged" if n_merged else ""
        out.append((Image.fromarray(pixels), caption))
    return out


def _family_heatmaps(clip, kept: KeptTokens, size) -> list[tuple[Image.Image, str]]:
    """`render_groups` on the frame resized to the processor's square or, where it resizes by pixel count, the
    frame's own shape."""
    frames = np.asarray(clip.frames)
    fixed = _field(size, "height") if size is not None else None
    view_hw = (int(fixed), int(_field(size, "width"))) if fixed else tuple(frames.shape[1:3])
    return render_groups(frames, kept.layout, kept.kept, view_hw, getattr(clip, "timestamps", None))


def _family_view(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Frames (N, H, W, 3) uint8 resized (bicubic, antialiased) to the model's height x width."""
    x = rearrange(torch.from_numpy(np.ascontiguousarray(frames)), "n h w c -> n c h w")
    x = tvF.resize(x, [height, width], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
    return rearrange(x, "n c h w -> n h w c").numpy()


def render_groups(frames: np.ndarray, layout: VisualLayout, kept: list[int] | None, view_hw: tuple[int, int],
                  timestamps: list[float] | None = None) -> list[tuple[Image.Image, str]]:
    """Today's families' layouts, one (image, caption) per source frame: LLaVA-OneVision's pooled grid (the
    newline after the frames a summary token, said in the caption), Qwen-VL's merged grid, whose two frames of a
    temporal patch share every token (both show the same cells and the caption says so). `kept`: indices into
    the visual span (None: all kept); the summary tokens are its last `layout.summary`."""
    rows, cols = layout.grid, layout.n_cols
    per = layout.tokens_per_frame
    kept_set = set(range(layout.n_tokens)) if kept is None else set(kept)
    n_frame_tokens = layout.n_tokens - layout.summary
    summary_kept = any(i in kept_set for i in range(n_frame_tokens, layout.n_tokens))
    pixels = _family_view(frames, *view_hw)
    height, width = view_hw
    row_of = np.repeat(np.arange(rows), np.diff(_cell_edges(height, rows)))
    col_of = np.repeat(np.arange(cols), np.diff(_cell_edges(width, cols)))
    scale = max(1, math.ceil(MIN_DISPLAY / max(height, width)))
    out = []
    for f in range(len(frames)):
        group = min(f // layout.frames_per_token, layout.n_frames - 1)
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
        if layout.frames_per_token > 1:
            first = group * layout.frames_per_token
            others = [i + 1 for i in range(first, first + layout.frames_per_token) if i != f and i < len(frames)]
            caption += f" · tokens shared with #{', #'.join(map(str, others))}" if others else ""
        if layout.summary:
            caption += " + newline (summary)" if summary_kept else ""
        out.append((Image.fromarray(img), caption))
    return out


def _upscale(a: np.ndarray, scale: int) -> np.ndarray:
    """Nearest-neighbour upscaling of an (H, W, ...) array."""
    return a.repeat(scale, axis=0).repeat(scale, axis=1)


def _edge(mask: np.ndarray, width: int) -> np.ndarray:
    """Pixels of `mask` within `width` pixels of a pixel outside it (the image border does not count)."""
    edge = np.zeros_like(mask)
    for d in range(1, width + 1):
        edge[d:] |= ~mask[:-d]
        edge[:-d] |= ~mask[d:]
        edge[:, d:] |= ~mask[:, :-d]
        edge[:, :-d] |= ~mask[:, d:]
    return mask & edge


def _cell_grids(kept: KeptTokens, masks: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """[frames, grid, grid] masks of the kept patches and of the patches merged into a kept token."""
    layout, g = kept.layout, kept.layout.grid
    kept_grid = np.zeros((layout.n_frames, g, g), dtype=bool)
    merged_grid = np.zeros_like(kept_grid)
    for f, m in enumerate(masks):
        for r, c in m["patches"]:
            kept_grid[f, r, c] = True
        for r, c in m["merged"]:
            merged_grid[f, r, c] = True
    return kept_grid, merged_grid


def _patch_colours(kept: KeptTokens) -> np.ndarray:
    """[frames, grid, grid, 3] colours of every patch's ranking score (the CLS tokens have no cell)."""
    layout = kept.layout
    scores = np.asarray(kept.scores, dtype=np.float64)
    if len(scores) != layout.n_tokens:
        raise ValueError(f"{len(scores)} scores for {layout.n_tokens} visual tokens")
    per_frame = rearrange(scores, "(frame token) -> frame token", frame=layout.n_frames)
    patch_scores = per_frame[:, 1:] if layout.has_cls else per_frame
    return _score_colours(rearrange(patch_scores, "frame (row col) -> frame row col", row=layout.grid))


def _caption(clip, f: int, n_kept: int, n_patches: int, cls_kept: bool, layout) -> str:
    """Short enough to fit under a gallery thumbnail: '#3 · 1.25 s · kept 40/256 + summary' (the frame's
    summary token, CLS, kept too; nothing said when it was dropped or the model has none)."""
    timestamps = getattr(clip, "timestamps", None)
    t = f" · {timestamps[f]:.2f} s" if timestamps is not None and f < len(timestamps) else ""
    summary = " + summary" if layout.has_cls and cls_kept else ""
    return f"#{f + 1}{t} · kept {n_kept}/{n_patches}{summary}"
