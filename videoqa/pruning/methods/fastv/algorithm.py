"""FastV's ranking: the attention the text pays each visual token at layer K-1, and the top tokens to keep.

`FastVPlan` is a client of the in-LLM hook (pruning/hook.py): the prefill calls `at_layer` before layer K, and it
asks the view for layer K-1's attention rows of the ranking queries only (the last prompt token, or every text
token after the visual span), so no n x n matrix is formed and every layer keeps its fast attention kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...hook import LayerKeep, LayerView
from ...shared import keep_count


@dataclass(frozen=True)
class FastVPlan:
    """Prune after layer `k - 1`: keep round(n_vis * (1 - r)) visual tokens of each sample.

    `r` may be one ratio for the batch or one per sample (adaptive R differs with each clip's length).
    `frame_floor` > 0 spreads that share of the kept tokens evenly over the frames (each frame's
    best-scoring ones, `tokens_per_frame` tokens a frame) before the rest go to the best scores anywhere.
    """

    k: int
    r: float | list[float]
    rank_by: str = "last"  # "last": last prompt token's row; "text": mean of the text rows after the video
    frame_floor: float = 0.0
    tokens_per_frame: int | None = None

    @classmethod
    def from_options(cls, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None) -> FastVPlan:
        return cls(params["k"], rs, params["rank_by"], params["frame_floor"], tokens_per_frame)

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.k,)

    def at_layer(self, view: LayerView) -> LayerKeep:
        """Rank by layer K-1's attention from the ranking queries; keep the best of each sample."""
        rows, rows_valid = ranking_rows(view.visual_mask, view.key_mask, self.rank_by)
        kept, scores = rank_visual_tokens(view.attention_rows(rows), view.visual_mask, self, rows_valid)
        return LayerKeep(kept, scores)


def ranking_rows(visual_mask: Tensor, key_mask: Tensor, rank_by: str) -> tuple[Tensor, Tensor]:
    """Query positions whose attention ranks the visual tokens, and [B, rows] which exist per sample."""
    b, n = key_mask.shape
    if rank_by == "last":
        rows = torch.tensor([n - 1], device=key_mask.device)
        return rows, torch.ones(b, 1, dtype=torch.bool, device=key_mask.device)
    # every text token after each sample's visual span
    last_vis = torch.where(visual_mask, torch.arange(n, device=key_mask.device), -1).max(-1).values  # [B]
    first = int(last_vis.min()) + 1 if bool((last_vis >= 0).any()) else 0
    rows = torch.arange(first, n, device=key_mask.device)
    return rows, (rows[None, :] > last_vis[:, None]) & key_mask[:, rows]


def rank_visual_tokens(weights: Tensor, visual_mask: Tensor, plan: FastVPlan, rows_valid: Tensor):
    """Per sample: (kept indices into its visual span, scores of its visual tokens)."""
    kept, scores = [], []
    for b in range(weights.shape[0]):
        vis = visual_mask[b].nonzero().squeeze(-1)
        w = weights[b][rows_valid[b]]  # text query rows that exist for this sample
        s = w.mean(0)[vis] if len(w) else torch.zeros(len(vis), device=weights.device)
        n_keep = keep_count(len(vis), plan.r[b] if isinstance(plan.r, list) else plan.r)
        kept.append(top_tokens(s, n_keep, plan.frame_floor, plan.tokens_per_frame))
        scores.append(s)
    return kept, scores


def top_tokens(scores: Tensor, n_keep: int, frame_floor: float = 0.0, tokens_per_frame: int | None = None) -> Tensor:
    """Sorted indices of the `n_keep` best scores; with a frame floor, each frame first gets
    floor(frame_floor * n_keep / frames) of its own best, and the rest go to the best remaining anywhere.

    FastV alone can leave a frame with no token at all (the ranking query favours some frames), which loses
    a brief event seen only there; the floor guarantees every frame a share. Ties break by index (stable
    sort), so identical inputs always keep the same tokens."""
    n = len(scores)
    per_frame = 0
    if frame_floor > 0 and tokens_per_frame:
        if n % tokens_per_frame:
            raise ValueError(f"{n} visual tokens are not whole frames of {tokens_per_frame}")
        per_frame = min(tokens_per_frame, int(frame_floor * n_keep / (n // tokens_per_frame)))
    taken = torch.zeros(n, dtype=torch.bool, device=scores.device)
    if per_frame:
        by_frame = torch.sort(scores.view(-1, tokens_per_frame), dim=1, descending=True, stable=True).indices
        starts = torch.arange(0, n, tokens_per_frame, device=scores.device)[:, None]
        taken[(by_frame[:, :per_frame] + starts).flatten()] = True
    order = torch.sort(scores, descending=True, stable=True).indices
    rest = order[~taken[order]][: n_keep - int(taken.sum())]
    taken[rest] = True
    return taken.nonzero().squeeze(-1)
