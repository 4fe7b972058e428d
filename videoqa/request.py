"""A question made ready for the LLM (`Request`) and a batch of them (`Collated`): the tokenised prompt, the
visual features it carries, and the RoPE positions the LLM gives them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import InputError
from .pruning import EncodedVideo, PruneConfig, Selection
from .pruning.planner import Plan
from .video import Clip


@dataclass
class Request:
    """One question: its clip and encoding, the plan (frames, R, the adaptive decision), what was chosen before
    the LLM, and the prompt ids with the video slot expanded to the visual tokens it carries."""

    question: str
    clip: Clip
    enc: EncodedVideo
    encode_cached: bool
    ids: Tensor  # [n] prompt ids with the (kept) video tokens expanded
    cfg: PruneConfig
    plan: Plan
    selection: Selection  # kept is None: every token (FastV, if any, decides later)
    max_new: int  # the asked cap, or less where the context ends first
    context_capped: bool
    t_start: float
    t_sample: float
    t_encode: float
    history_dropped: int = 0  # oldest conversation turns left out so the planned frames fit the context
    t_select: float = 0.0
    frames_key: str = ""  # content hash of the decoded frames (vision.frames_hash): the encoding's cache key
    history_turns: int = 0  # earlier conversation turns in the prompt (a chat's follow-up)

    @property
    def r(self) -> float:
        return self.plan.r

    @property
    def kept(self) -> list[int] | None:
        return self.selection.kept

    @property
    def visual(self) -> Tensor:
        return self.selection.visual


@dataclass(frozen=True)
class Collated:
    """Prompts as one left-padded batch: what the LLM's prefill takes."""

    embeds: Tensor  # [B, n, d] token embeddings with the visual features in the video-token slots
    attention_mask: Tensor  # [B, n] 1 = real token, 0 = padding
    visual_mask: Tensor  # [B, n] True = visual token
    position_ids: Tensor  # [B, n] RoPE positions, or [3, B, n] M-RoPE ones (a family's `positions`)
    ids: Tensor  # [B, n] the prompt ids (padding: 0), for a family whose positions depend on them


def embed(model, ids: Tensor, visual: Tensor, visual_token_id: int) -> tuple[Tensor, Tensor]:
    """Token embeddings with the visual features scattered into the visual-token slots."""
    vis_mask = ids == visual_token_id
    if int(vis_mask.sum()) != len(visual):
        raise InputError(f"the prompt has {int(vis_mask.sum())} video-token slots for {len(visual)} visual "
                         f"features; they must be equal")
    embeds = model.get_input_embeddings()(ids)
    embeds[vis_mask] = visual.to(embeds.dtype)
    return embeds, vis_mask


def positions(req: Request, vis_mask: Tensor) -> Tensor:
    """RoPE positions of a prompt: contiguous, or, for tokens kept before the LLM with original positions
    (`keep_positions`; fastvid's default), the positions they would have had in the unpruned prompt."""
    n = len(req.ids)
    device = vis_mask.device
    pos = torch.arange(n, device=device)
    if req.kept is None or not req.cfg.original_positions or not bool(vis_mask.any()):
        return pos
    start = int(vis_mask.nonzero()[0])
    kept = torch.as_tensor(req.kept, device=device)
    pos[vis_mask] = start + kept
    after = torch.arange(n, device=device) > int(vis_mask.nonzero()[-1])
    pos[after] += req.enc.layout.n_tokens - len(kept)
    return pos


def collate(model, requests: list[Request], device: torch.device, dtype: torch.dtype, visual_token_id: int
            ) -> Collated:
    """One left-padded batch: every prompt ends at the last position, so each sample's next token is there."""
    b, n = len(requests), max(len(req.ids) for req in requests)
    width = model.get_input_embeddings().embedding_dim
    batch = Collated(
        embeds=torch.zeros(b, n, width, dtype=dtype, device=device),
        attention_mask=torch.zeros(b, n, dtype=torch.long, device=device),
        visual_mask=torch.zeros(b, n, dtype=torch.bool, device=device),
        position_ids=torch.zeros(b, n, dtype=torch.long, device=device),
        ids=torch.zeros(b, n, dtype=torch.long, device=device),
    )
    for i, req in enumerate(requests):
        e, v = embed(model, req.ids[None], req.visual, visual_token_id)
        start = n - len(req.ids)
        batch.embeds[i, start:], batch.visual_mask[i, start:] = e[0], v[0]
        batch.attention_mask[i, start:] = 1
        batch.ids[i, start:] = req.ids
        batch.position_ids[i, start:] = positions(req, v[0])
    return batch
