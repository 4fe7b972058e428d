"""VidCom2 (arXiv 2505.14454, EMNLP 2025; official code xuyang-liu16/VidCom2), before the LLM.

The official current code (token_compressor/vidcom2/vidcom2.py), on the projected tokens of the clip:
1. Keep the half of the channels with the lowest variance over all tokens (`channel_share` = 0.5, int()).
2. Normalise each token over those channels; score every token by its similarity to the video's centre
   (the mean of all tokens) and to its frame's centre (the mean of its frame's tokens), each a sum of Gaussian
   kernels exp(-|x - c|^2 / (2a)) over a in {1/8, 1/4, 1/2, 1, 2}.
3. Frame budgets from distinctiveness: s_f = -(mean video-centre similarity of the frame's tokens),
   p = softmax((s - max s) / 0.01), scale_f = base * (1 + p_f - mean p), at most 1; the frame keeps
   k_f = round(scale_f * tokens per frame) tokens, at least 1 (`round` half to even, as torch's).
4. Per frame, the k_f tokens with the lowest video + frame similarity (the most distinct) are kept.

`base` is the share of the patches the budget leaves. The official rounding makes the total differ from the
budget by a few tokens (a fraction of a token per frame); it is kept as published. Adaptations: the [CLS]
rule of VisPruner (kept per frame, counted against `keep`; the scores cover patches only, the official models
having no [CLS]); equal scores resolve by position (stable sort), the official `topk` leaves them to the kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import check_shapes, cls_and_patch_budgets

KERNEL_WIDTHS = (0.125, 0.25, 0.5, 1.0, 2.0)  # the a's of the multi-scale Gaussian kernel
TEMPERATURE = 0.01  # of the softmax over frame distinctiveness


def _similarity(x: Tensor, centre: Tensor) -> Tensor:
    d2 = ((x - centre) ** 2).sum(dim=-1)
    return sum(torch.exp(-d2 / (2 * a)) for a in KERNEL_WIDTHS)


def frame_keeps(video_similarity: Tensor, base: float) -> list[int]:
    """Tokens each frame keeps: [F, N] video-centre similarities -> round(scale_f * N), >= 1, <= N."""
    n = video_similarity.shape[1]
    s = -video_similarity.mean(dim=-1)
    p = torch.softmax((s - s.max()) / TEMPERATURE, dim=0)
    scales = (base * (1 + p - p.mean())).clamp(max=1.0)
    return (scales * n).round().long().clamp(min=1, max=n).tolist()


@torch.no_grad()
def select_vidcom2(features: Tensor, keep: int, layout: VisualLayout,
                   channel_share: float = 0.5) -> tuple[list[int], list[float], dict]:
    """Kept visual-span indices (ascending), a distinctiveness score per visual token (for heatmaps; [CLS] 0)
    and details; features [F, T, d]: the projected tokens."""
    check_shapes(layout, keep, features)
    f, t, first = layout.n_frames, layout.tokens_per_frame, int(layout.has_cls)
    cls, patch_budgets = cls_and_patch_budgets(layout, keep)
    x = features[:, first:].float()  # [F, N, d]
    n = x.shape[1]
    flat = x.reshape(-1, x.shape[-1])
    variance = flat.var(dim=0, unbiased=False)
    channels = torch.sort(variance, stable=True).indices[: int(x.shape[-1] * channel_share)]
    y = torch.nn.functional.normalize(x[..., channels], dim=-1)
    video_sim = _similarity(y, y.mean(dim=(0, 1), keepdim=True))
    frame_sim = _similarity(y, y.mean(dim=1, keepdim=True))
    base = sum(patch_budgets) / (f * n) if n else 0.0
    ks = frame_keeps(video_sim, base) if sum(patch_budgets) else [0] * f
    score = video_sim + frame_sim
    kept = list(cls)
    for frame, k in enumerate(ks):
        order = torch.sort(score[frame], stable=True).indices[:k]
        kept += (order + frame * t + first).tolist()
    scores = torch.zeros(f, t)
    scores[:, first:] = -score
    return sorted(kept), scores.flatten().tolist(), {"cls": cls, "frame_keeps": ks, "base": round(base, 4)}
