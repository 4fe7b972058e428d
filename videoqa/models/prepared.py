"""A prompt of today's families made ready for our LLM loops, and the loops run on a batch of them.

Every family's processor expands the video placeholder and its vision tower encodes the frames; what the LLM
then needs is the same for all of them: the ids, the visual features in the video slots, the RoPE positions
(1-D, or M-RoPE's 3-D ids from the model's own get_rope_index) and, for Qwen3-VL, the deepstack features added
after the first layers. `collate` left-pads a batch of such prompts and `generate` runs our prefill (with a method's
in-LLM plan, if any: pruning/hook.py) and greedy decode on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..llm import decode_n_tokens, prefill
from ..llm.prefill import PrefillResult
from ..pruning.hook import LLMPlan


@dataclass
class VideoLayout:
    """Where a prompt's visual tokens come from: `groups` time steps (frames, or Qwen's pairs of frames) of
    `grid` = (rows, cols) tokens each, plus `summary` tokens after them (LLaVA-OneVision's newline)."""

    frames: int
    groups: int
    grid: tuple[int, int]
    frames_per_group: int = 1
    summary: int = 0

    @property
    def tokens_per_group(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def n_tokens(self) -> int:
        return self.groups * self.tokens_per_group + self.summary


@dataclass
class Prepared:
    """One prompt: ids [n] with the video slots expanded, the visual features [n_vis, d] that fill them, the
    positions [P, n] (P = 1, or 3 for M-RoPE), per-layer additions [n_vis, d] (deepstack), the layout."""

    ids: Tensor
    features: Tensor
    positions: Tensor
    layout: VideoLayout
    video_token_id: int
    layer_additions: list[Tensor] = field(default_factory=list)
    saliency: Tensor | None = None  # [n_vis - summary] attention each frame token receives in the tower

    @property
    def visual_mask(self) -> Tensor:
        return self.ids == self.video_token_id


@dataclass
class Batch:
    embeds: Tensor  # [B, n, d]
    attention_mask: Tensor  # [B, n]
    visual_mask: Tensor  # [B, n]
    position_ids: Tensor  # [B, n], or [3, B, n] for M-RoPE
    layer_additions: list[Tensor]  # each [B, n, d]


def collate(model: nn.Module, prompts: list[Prepared]) -> Batch:
    """Left-pad prompts into one batch (pads: masked, position 0, no additions)."""
    emb = model.get_input_embeddings()
    b, n = len(prompts), max(len(p.ids) for p in prompts)
    dtype, device = emb.weight.dtype, emb.weight.device
    axes = prompts[0].positions.shape[0]
    embeds = torch.zeros(b, n, emb.embedding_dim, dtype=dtype, device=device)
    attention = torch.zeros(b, n, dtype=torch.long, device=device)
    visual = torch.zeros(b, n, dtype=torch.bool, device=device)
    positions = torch.zeros(axes, b, n, dtype=torch.long, device=device)
    n_add = len(prompts[0].layer_additions)
    additions = [torch.zeros_like(embeds) for _ in range(n_add)]
    for i, p in enumerate(prompts):
        start, ids = n - len(p.ids), p.ids.to(device)
        vis = p.visual_mask.to(device)
        row = emb(ids)
        row[vis] = p.features.to(device, dtype)
        embeds[i, start:], attention[i, start:], visual[i, start:] = row, 1, vis
        positions[:, i, start:] = p.positions.to(device)
        for a, extra in zip(additions, p.layer_additions, strict=True):
            a[i, start:][vis] = extra.to(device, dtype)
    return Batch(embeds, attention, visual, positions if axes == 3 else positions[0], additions)


def generate(model: nn.Module, prompts: list[Prepared], max_new_tokens: int = 16,
             plan: LLMPlan | None = None) -> tuple[list[list[int]], PrefillResult]:
    """Greedy answers (token ids, EOS included when reached) of a batch, pruned inside the LLM by `plan` if given
    (the plan is told the tokens per time step of the first prompt's layout)."""
    batch = collate(model, prompts)
    state = prefill(model, batch.embeds, batch.attention_mask, batch.visual_mask, plan=plan,
                    position_ids=batch.position_ids, layer_additions=batch.layer_additions,
                    tokens_per_frame=prompts[0].layout.tokens_per_group)
    logits = state.logits.clone()
    steps = list(decode_n_tokens(model, state, max_new_tokens, model.generation_config.eos_token_id))
    state.logits = logits
    tokens = torch.stack(steps, 1).tolist() if steps else [[] for _ in prompts]
    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or [])
    return [_until_eos(t, eos) for t in tokens], state


def _until_eos(tokens: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens
