"""FastV's ranking: the attention the text pays each visual token at layer K-1, and the top tokens to keep.

The prefill (videoqa.llm) runs the layers; between layer K-1 and layer K it calls `rank` with layer K-1's input
and the keys that layer just cached. Only the attention rows of the ranking queries are recomputed (the last
prompt token, or every text token after the visual span), so no n x n matrix is formed and every layer
keeps its fast attention kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import keep_count


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


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


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


def rank(decoder, layer_idx: int, h_in: Tensor, pos_emb, cache, key_mask: Tensor, visual_mask: Tensor,
         plan: FastVPlan) -> tuple[list[Tensor], list[Tensor]]:
    """Per sample: kept indices into its visual span, and the score of every visual token."""
    rows, rows_valid = ranking_rows(visual_mask, key_mask, plan.rank_by)
    weights = attention_rows(decoder, layer_idx, h_in, rows, pos_emb, cache, key_mask)
    return rank_visual_tokens(weights, visual_mask, plan, rows_valid)


def attention_rows(decoder, layer_idx: int, h_in: Tensor, rows: Tensor, pos_emb, cache, key_mask: Tensor) -> Tensor:
    """Attention weights of layer `layer_idx` for query positions `rows` only, mean over heads.

    `h_in` is the layer's input [B, n, d]; its keys (after RoPE) are read from the cache the layer just
    filled. Costs O(len(rows) * n * d) instead of the n x n matrix eager attention would build.
    Returns [B, len(rows), n].
    """
    layer = decoder.layers[layer_idx]
    attn = layer.self_attn
    b = h_in.shape[0]
    x = layer.input_layernorm(h_in[:, rows])
    q = attn.q_proj(x).view(b, len(rows), -1, attn.head_dim)
    if hasattr(attn, "q_norm"):  # Qwen3-style per-head query norm
        q = attn.q_norm(q)
    q = q.transpose(1, 2)  # [B, H, r, hd]
    cos, sin = (t[:, rows].unsqueeze(1) for t in pos_emb)
    q = q * cos + _rotate_half(q) * sin
    keys = cache.layers[layer_idx].keys  # [B, Hkv, n, hd]
    groups = q.shape[1] // keys.shape[1]
    q = q.view(b, keys.shape[1], groups, len(rows), -1)  # heads grouped by their kv head (GQA)
    logits = torch.einsum("bkgrd,bknd->bkgrn", q.float(), keys.float()) * attn.scaling
    n = keys.shape[2]
    causal = torch.arange(n, device=q.device)[None, :] <= rows[:, None]  # [r, n]
    allowed = causal[None, None, None] & key_mask[:, None, None, None, :]
    logits = logits.masked_fill(~allowed, float("-inf"))
    return logits.softmax(-1).mean(dim=(1, 2))  # [B, r, n]


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
