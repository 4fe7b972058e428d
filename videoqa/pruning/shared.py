"""Pieces every method may use (no method imports another's helpers): how many tokens R keeps, how a
budget is split over frames, the [CLS] rule, shape checks, merged selections, density peaks, and the top-k and
stage counts of the methods that prune inside the LLM.

Importable without torch (the declarations in each method's __init__.py import from here); the functions
that compute import it when called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import VisualLayout

if TYPE_CHECKING:
    from torch import Tensor


def keep_count(n_visual: int, r: float) -> int:
    """FastV's rule: keep round(n_vis * (1 - R)) visual tokens (at least one when there are any)."""
    if n_visual == 0:
        return 0
    return max(1, min(n_visual, round(n_visual * (1.0 - r))))


def frame_budgets(keep: int, n_frames: int) -> list[int]:
    """Split `keep` equally over frames; the remainder goes to frames spread evenly over the clip."""
    base, rem = divmod(keep, n_frames)
    extra = {i * n_frames // rem for i in range(rem)} if rem else set()
    return [base + (f in extra) for f in range(n_frames)]


def cls_and_patch_budgets(layout: VisualLayout, keep: int) -> tuple[list[int], list[int]]:
    """The [CLS] tokens kept and each frame's patch budget, for `keep` tokens of the clip.

    The rule of VisPruner and FastVID here: a frame's [CLS] (Video-LLaVA's frame summary, always seen in
    training) is kept whenever its frame's share of `keep` is at least one, and counts against that share.
    A tower without [CLS] (layout.has_cls False) gives every frame its whole share in patches."""
    budgets = frame_budgets(keep, layout.n_frames)
    t = layout.tokens_per_frame
    cls = [f * t for f, b in enumerate(budgets) if layout.has_cls and b > 0]
    return cls, [b - int(layout.has_cls and b > 0) for b in budgets]


def check_shapes(layout: VisualLayout, keep: int, *tensors: Tensor) -> None:
    """Refuse tensors whose first two dims are not (frames, tokens per frame), or a `keep` out of range."""
    shape = (layout.n_frames, layout.tokens_per_frame)
    for x in tensors:
        if tuple(x.shape[:2]) != shape:
            raise ValueError(f"a tensor of shape {tuple(x.shape)} does not match the layout "
                             f"({shape[0]} frames x {shape[1]} tokens)")
    if not 0 <= keep <= layout.n_tokens:
        raise ValueError(f"keep must be in [0, {layout.n_tokens}], got {keep}")


@dataclass(frozen=True)
class Patches:
    """A clip's patches under the [CLS] rule, as the merging methods read them."""

    x: Tensor  # [F, N, d] the patches' features, float32
    attn: Tensor  # [F, N] their [CLS] attention, float32
    cls: list[int]  # the [CLS] tokens kept (visual-span indices)
    budgets: list[int]  # each frame's patch budget
    per_frame: int  # tokens a frame holds in the visual span, [CLS] included
    first: int  # where a frame's patches start: 1 after a [CLS], else 0

    def index(self, frame: int, patch: int) -> int:
        """The visual-span index of patch `patch` of frame `frame`."""
        return frame * self.per_frame + self.first + patch

    def kept_cls(self, features: Tensor) -> dict[int, tuple[Tensor, list[int]]]:
        """The kept [CLS] tokens as the start of a merged selection (see `merged_selection`), each absorbing none."""
        return {i: (features[i // self.per_frame, 0].float(), []) for i in self.cls}


def patch_inputs(layout: VisualLayout, keep: int, features: Tensor, attention: Tensor) -> Patches:
    """Checked inputs of a method that works on patches under the [CLS] rule (`cls_and_patch_budgets`)."""
    check_shapes(layout, keep, features, attention)
    first = int(layout.has_cls)
    cls, budgets = cls_and_patch_budgets(layout, keep)
    return Patches(features[:, first:].float(), attention[:, first:].float(), cls, budgets, layout.tokens_per_frame,
                   first)


def merged_selection(out: dict, features: Tensor) -> tuple[list[int], Tensor, list[list[int]]]:
    """{visual-span index: (feature, absorbed indices)} -> kept indices (ascending), their features [n, d] in the
    dtype of `features`, and what each absorbed."""
    import torch

    kept = sorted(out)
    if not kept:
        return [], features.reshape(-1, features.shape[-1])[:0], []
    return kept, torch.stack([out[i][0] for i in kept]).to(features.dtype), [out[i][1] for i in kept]


def density_peaks(x: Tensor, n_pick: int, k: int = 4) -> Tensor:
    """Indices (ascending) of the `n_pick` rows of x [N, D] with the highest density-peak score."""
    import torch

    n, d = x.shape
    if n_pick >= n:
        return torch.arange(n, device=x.device)
    if n_pick <= 0:
        return torch.arange(0, device=x.device)
    dist = torch.cdist(x[None].float(), x[None].float())[0] / d**0.5
    nearest = dist.topk(min(k, n), dim=-1, largest=False).values
    density = (-(nearest**2).mean(dim=-1)).exp()
    idx = torch.arange(n, device=x.device)
    denser = (density[None, :] > density[:, None]) | (
        (density[None, :] == density[:, None]) & (idx[None, :] < idx[:, None])
    )  # denser[i, j]: j is denser than i
    parent = torch.where(denser, dist, dist.max()).min(dim=-1).values  # the densest point gets the max
    score = parent * density
    return torch.sort(score, descending=True, stable=True).indices[:n_pick].sort().values


def dpc_clusters(x: Tensor, n_clusters: int, k: int) -> tuple[Tensor, Tensor]:
    """Density-peak centres (ascending local indices) of x [n, d] and each row's cluster (nearest centre)."""
    import torch

    centres = density_peaks(x, n_clusters, min(k, n_clusters))
    dist = torch.cdist(x[None].float(), x[centres][None].float())[0]
    assign = dist.argmin(dim=1)
    assign[centres] = torch.arange(centres.numel())
    return centres, assign


def top_k_sorted(score: Tensor, k: int) -> Tensor:
    """Ascending indices of the k best scores (ties: the lower index first, so identical inputs keep identical
    tokens)."""
    import torch

    order = torch.sort(score.float(), descending=True, stable=True).indices
    return torch.sort(order[:k]).values


def stage_keep(n_first: int, r: float, stage: int, stages: int) -> int:
    """Tokens kept after drop `stage` (1-based) of `stages` equal-share drops that leave 1 - r of `n_first`:
    int(n_first * (1 - r)^(stage / stages)), truncated as PyramidDrop's and SparseVLM's code, at least one (1e-9
    keeps a root like 0.125^(1/3) = 0.4999... from truncating a whole count away)."""
    return max(1, int(n_first * (1.0 - r) ** (stage / stages) + 1e-9)) if n_first else 0
