"""Stage 1 of scripts/train_long_frozen_tower.py: a vision tower that localises what the questions ask about,
then frozen.

The tower (a small CLIP, 64 px frames cut into 16 px patches: 16 patch tokens + [CLS] = 17 tokens a frame)
is trained on single frames with per-patch targets read from the scene description: what covers the patch
(background, the moving shape, the brief haloed object), and that thing's colour and shape; [CLS] learns the
frame-level facts (a flash, the moving shape's colour and shape, the brief object's colour and shape or none).
The brief object is the rare thing, so half the frames shown are event frames.

Then every frame of every training clip goes through the frozen tower once and its feature-layer states
(hidden_states[vision_feature_layer], [17, d] a frame, exactly what the projector reads) are cached, so the
language stage can draw any frame count from any clip at every step.

Frames take the inference path: rendered, written to H.264 mp4, decoded by videoqa.video.sample_frames,
resized by the model's processor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

from videoqa.synth import long as synth_long
from videoqa.synth import short as synth
from videoqa.video import sample_frames

SIZE = synth.CLIP_SIZE
COLOURS = list(synth.COLOURS)
COVER = 0.15  # a patch belongs to a shape when the shape covers this share of it
# per-patch heads (index 0 = none / background) and per-frame heads on [CLS]
PATCH_HEADS = {"kind": 3, "colour": len(COLOURS) + 1, "shape": len(synth.SHAPES) + 1}
FRAME_HEADS = {"flash": 2, "colour": len(COLOURS), "shape": len(synth.SHAPES),
               "brief_colour": len(COLOURS) + 1, "brief_shape": len(synth.SHAPES) + 1}


@dataclass
class Clip:
    """Every frame of one clip as the model's processor gives it, or its cached tower features."""

    frames: torch.Tensor  # [n, 3, 64, 64] float16 pixels, or [n, 17, d] float16 features
    indices: list[int]  # which frames of the clip these are


def _cover(shape: str, cx: float, cy: float, r: float, grid: int) -> np.ndarray:
    img = Image.new("L", (SIZE, SIZE), 0)
    synth.draw_shape(ImageDraw.Draw(img), shape, cx, cy, r, 255)
    cell = SIZE // grid
    return (np.asarray(img) > 0).reshape(grid, cell, grid, cell).mean((1, 3)).reshape(-1)


def frame_targets(scene, i: int, grid: int) -> tuple[np.ndarray, list[float]]:
    """([grid*grid, 3] per-patch classes, [5] frame classes + the moving shape's centre x, y in [0, 1]) of frame
    `i` of a long or short scene. The centre is what direction is read from: a 4x4 grid alone is too coarse."""
    long_ = isinstance(scene, synth_long.LongScene)
    main = scene.main if long_ else scene
    n = scene.n_frames if long_ else synth.CLIP_FRAMES
    t = np.linspace(0.0, 1.0, n)[i]
    on = [e for e in scene.events if e.start <= i < e.stop] if long_ else []
    cx, cy = (main.start[k] + t * (main.end[k] - main.start[k]) for k in range(2))
    patch = np.zeros((grid * grid, 3), np.int64)
    m = _cover(main.shape, cx, cy, main.radius, grid) >= COVER
    patch[m] = [1, COLOURS.index(main.colour) + 1, synth.SHAPES.index(main.shape) + 1]
    obj = next((e for e in on if e.kind == "object"), None)
    if obj is not None:  # drawn over the moving shape
        b = _cover(obj.shape, *obj.centre, obj.radius * synth_long.HALO_SCALE, grid) >= COVER
        patch[b] = [2, COLOURS.index(obj.colour) + 1, synth.SHAPES.index(obj.shape) + 1]
    frame = [int(any(e.kind == "flash" for e in on)), COLOURS.index(main.colour), synth.SHAPES.index(main.shape),
             COLOURS.index(obj.colour) + 1 if obj else 0, synth.SHAPES.index(obj.shape) + 1 if obj else 0,
             cx / SIZE, cy / SIZE]
    return patch, frame


def decode_clip(scene, processor, workdir, erase: bool = False, indices: list[int] | None = None) -> Clip:
    """Frames of a long clip (all of them, or `indices`) or the 8 inference frames of a short clip."""
    if isinstance(scene, synth_long.LongScene):
        shown = synth_long.erased(scene) if erase else scene
        path = synth.write_mp4(synth_long.render(shown), workdir / f"{scene.name}.mp4", fps=scene.fps)
        clip = sample_frames(path, scene.n_frames)
        assert clip.indices == list(range(scene.n_frames)), scene.name
        frames, idx = clip.frames, clip.indices
        if indices is not None:
            frames, idx = frames[indices], list(indices)
    else:
        path = synth.write_mp4(synth.render(scene), workdir / f"{scene.name}.mp4")
        clip = sample_frames(path, 8)
        frames, idx = clip.frames, clip.indices
    path.unlink()
    pv = processor.video_processor(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"][0]
    return Clip(pv.half(), idx)


class TowerHeads(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.patch = torch.nn.Linear(d, sum(PATCH_HEADS.values()))
        self.frame = torch.nn.Linear(d, sum(FRAME_HEADS.values()))
        self.pos = torch.nn.Linear(d, 2)

    def loss(self, states: torch.Tensor, patch_t: torch.Tensor, frame_t: torch.Tensor, brief_weight: float,
             pos_weight: float = 0.0):
        """Cross-entropy of every head; accuracies, among them the brief object's patch recall."""
        total, acc = 0.0, {}
        p_logits = self.patch(states[:, 1:]).split(list(PATCH_HEADS.values()), dim=-1)
        for j, (name, lg) in enumerate(zip(PATCH_HEADS, p_logits, strict=True)):
            target = patch_t[..., j].reshape(-1)
            w = torch.ones(lg.shape[-1])
            if name == "kind":
                w[2] = brief_weight  # the brief object covers few patches of few frames
            total = total + F.cross_entropy(lg.reshape(-1, lg.shape[-1]), target, weight=w)
            hit = lg.reshape(-1, lg.shape[-1]).argmax(-1) == target
            acc[f"patch_{name}"] = hit.float().mean().item()
        brief = patch_t[..., 0].reshape(-1) == 2
        if brief.any():
            kind_pred = p_logits[0].reshape(-1, 3).argmax(-1)
            acc["brief_patch_recall"] = (kind_pred[brief] == 2).float().mean().item()
        f_logits = self.frame(states[:, 0]).split(list(FRAME_HEADS.values()), dim=-1)
        for j, (name, lg) in enumerate(zip(FRAME_HEADS, f_logits, strict=True)):
            target = frame_t[:, j].long()
            total = total + F.cross_entropy(lg, target)
            acc[f"cls_{name}"] = (lg.argmax(-1) == target).float().mean().item()
        if pos_weight:
            err = self.pos(states[:, 0]) - frame_t[:, len(FRAME_HEADS):]
            total = total + pos_weight * 100 * err.pow(2).mean()  # x100: in units of 10 % of the frame
            acc["cls_pos_rmse"] = err.pow(2).mean().sqrt().item()
        return total, acc


def tower_data(long_scenes, short_scenes, processor, workdir, grid: int, rng: np.random.Generator):
    """(pixels [N,3,64,64] f16, patch targets [N,grid*grid,3], frame targets [N,5], clip of each frame [N]) for
    tower training: every event frame of the long clips, as many other frames of them, and the 8 frames of each
    short clip."""
    pix, pt, ft, clips = [], [], [], []
    for c, scene in enumerate(long_scenes):
        on = sorted({i for e in scene.events for i in range(e.start, e.stop)})
        off = [i for i in range(scene.n_frames) if i not in set(on)]
        picked = sorted(on + [int(i) for i in rng.choice(off, size=min(len(off), max(4, len(on))), replace=False)])
        clip = decode_clip(scene, processor, workdir, indices=picked)
        pix.append(clip.frames)
        clips += [c] * len(picked)
        for i in picked:
            p, f = frame_targets(scene, i, grid)
            pt.append(p)
            ft.append(f)
    for c, scene in enumerate(short_scenes, start=len(long_scenes)):
        clip = decode_clip(scene, processor, workdir)
        pix.append(clip.frames)
        clips += [c] * len(clip.indices)
        for i in clip.indices:
            p, f = frame_targets(scene, i, grid)
            pt.append(p)
            ft.append(f)
    return torch.cat(pix), torch.from_numpy(np.stack(pt)), torch.tensor(ft, dtype=torch.float32), np.array(clips)


def split_by_clip(clips: np.ndarray, rng: np.random.Generator, share: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-back) frame indices, holding back every frame of a `share` of the clips."""
    ids = np.unique(clips)
    held = np.isin(clips, rng.permutation(ids)[: max(1, int(len(ids) * share))])
    return np.flatnonzero(~held), np.flatnonzero(held)


def train_tower(tower, layer: int, data, steps: int, batch: int, lr: float, brief_weight: float,
                rng: np.random.Generator, log=print, pos_weight: float = 0.0) -> dict:
    """Train the tower and throwaway heads on per-patch/per-frame targets; returns accuracies on the frames of
    held-back clips (a tenth of the clips: frames of a training clip would flatter it, its neighbours look alike)."""
    pix, pt, ft, clips = data
    train, val = split_by_clip(clips, rng)
    heads = TowerHeads(tower.config.hidden_size)
    opt = torch.optim.AdamW([*tower.parameters(), *heads.parameters()], lr=lr, weight_decay=0.01)
    tower.train()
    t0 = time.time()
    for step in range(1, steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, step / 30) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * step / steps)))
        idx = torch.from_numpy(rng.choice(train, size=batch))
        states = tower(pix[idx].float(), output_hidden_states=True).hidden_states[layer]
        loss, acc = heads.loss(states, pt[idx], ft[idx], brief_weight, pos_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps:
            log(f"tower step {step} loss {loss.item():.3f} brief recall {acc.get('brief_patch_recall', -1):.2f} "
                f"{(time.time() - t0) / step:.2f}s/step")
    tower.eval()
    with torch.no_grad():
        idx = torch.from_numpy(val)
        states = tower(pix[idx].float(), output_hidden_states=True).hidden_states[layer]
        _, acc = heads.loss(states, pt[idx], ft[idx], brief_weight, pos_weight)
    for p in tower.parameters():
        p.requires_grad_(False)
    return acc


@torch.no_grad()
def features(tower, layer: int, clip: Clip, chunk: int = 256) -> Clip:
    """The frozen tower's feature-layer states of every frame of `clip`, float16."""
    out = [tower(clip.frames[k : k + chunk].float(), output_hidden_states=True).hidden_states[layer].half()
           for k in range(0, len(clip.frames), chunk)]
    return Clip(torch.cat(out), clip.indices)
