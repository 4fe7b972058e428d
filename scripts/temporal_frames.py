"""Which way LanguageBind's temporal tower should take a clip of other than its 8 frames: "groups" of 8 with the
embedding per group, or one "interpolate"d clip (videoqa/models/languagebind.py), measured on a tower trained here.

A small temporal CLIP tower (64 px, patch 8, 3 layers, num_frames 8) learns, at 8 frames, the direction a square
moves over the clip (4 classes) from the mean of its frames' [CLS] features at the feature layer -2: a pooled
per-frame tower cannot tell the directions apart, so what it learns is the temporal attention's. Then, on held-out
clips sampled at other frame counts over the same motion, each mode's accuracy, and how far the features of the
frames an 8-frame sample shares with the longer one move (1 - cosine: what the LLM, trained at 8 frames, would see
change). One CPU thread, about two minutes.

    python scripts/temporal_frames.py [--steps 300] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch.nn import functional as F
from transformers import CLIPVisionConfig, CLIPVisionModel

from videoqa.models.languagebind import add_temporal_attention, encoder_layers

SIZE, PATCH, FRAMES = 64, 8, 8
DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1))  # right, left, down, up


def clips(n: int, n_frames: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n clips [n, F, 3, S, S] of a square crossing 24 px in one direction over the clip; labels [n]."""
    labels = rng.integers(0, len(DIRECTIONS), n)
    video = np.full((n, n_frames, 3, SIZE, SIZE), -1.0, dtype=np.float32)
    for i, label in enumerate(labels):
        dx, dy = DIRECTIONS[label]
        x0, y0 = rng.integers(20, 36, 2)
        colour = rng.uniform(0.2, 1.0, 3)
        for t in range(n_frames):
            step = 24 * (t / (n_frames - 1) - 0.5)
            x, y = int(x0 + dx * step), int(y0 + dy * step)
            video[i, t, :, max(0, y - 5):y + 5, max(0, x - 5):x + 5] = colour[:, None, None]
    return torch.from_numpy(video), torch.from_numpy(labels)


def build(seed: int) -> tuple[CLIPVisionModel, torch.nn.Linear]:
    torch.manual_seed(seed)
    tower = CLIPVisionModel(CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                             num_attention_heads=4, image_size=SIZE, patch_size=PATCH,
                                             hidden_act="gelu"))
    add_temporal_attention(tower, FRAMES)
    for layer in encoder_layers(tower):
        torch.nn.init.normal_(layer.temporal_embedding, std=64 ** -0.5)  # LanguageBind's initialisation
    return tower, torch.nn.Linear(64, len(DIRECTIONS))


def features(tower: CLIPVisionModel, video: torch.Tensor) -> torch.Tensor:
    """[n, F, 3, S, S] -> [n, F, T, D] at the feature layer -2, one clip at a time through the tower."""
    return torch.stack([tower(v, output_hidden_states=True).hidden_states[-2] for v in video])


def set_mode(tower: CLIPVisionModel, mode: str) -> None:
    for layer in encoder_layers(tower):
        layer.frame_mode = mode


def train(tower, head, steps: int, rng: np.random.Generator) -> None:
    opt = torch.optim.AdamW([*tower.parameters(), *head.parameters()], lr=1e-3)
    for step in range(steps):
        video, labels = clips(16, FRAMES, rng)
        loss = F.cross_entropy(head(features(tower, video)[:, :, 0].mean(1)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)


@torch.no_grad()
def evaluate(tower, head, n_frames: int, mode: str, seed: int) -> tuple[float, float]:
    """(accuracy over 100 held-out clips at n_frames, mean 1 - cosine between the features of the frames shared
    with an 8-frame sample of the same clip: frame 0 and the last, where n_frames - 1 is a multiple of 7)."""
    set_mode(tower, mode)
    video, labels = clips(100, n_frames, np.random.default_rng(10_000 + seed))
    feats = features(tower, video)
    accuracy = (head(feats[:, :, 0].mean(1)).argmax(-1) == labels).float().mean().item()
    drift = float("nan")
    if (n_frames - 1) % (FRAMES - 1) == 0:  # the 8-frame sample is every k-th frame of this one
        k = (n_frames - 1) // (FRAMES - 1)
        set_mode(tower, "groups")  # at 8 frames both modes are the published tower
        base = features(tower, video[:, ::k])
        drift = (1 - F.cosine_similarity(feats[:, ::k], base, dim=-1)).mean().item()
    return accuracy, drift


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    tower, head = build(args.seed)
    train(tower, head, args.steps, np.random.default_rng(args.seed))
    tower.eval()
    print("| frames | groups: accuracy | interpolate: accuracy | groups: feature drift | interpolate: feature drift |")
    print("|---|---|---|---|---|")
    for n in (8, 5, 12, 15, 16, 24, 29):
        (ga, gd), (ia, idr) = (evaluate(tower, head, n, mode, args.seed) for mode in ("groups", "interpolate"))
        print(f"| {n} | {100 * ga:.1f}% | {100 * ia:.1f}% | {gd:.5f} | {idr:.5f} |", flush=True)


if __name__ == "__main__":
    main()
