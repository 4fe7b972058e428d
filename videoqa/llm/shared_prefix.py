"""One clip's questions on its one cached prefix, as one sequence: `[prefix | question 1 | question 2 | ...]`, and
while decoding each step's new tokens (one per question) after them. A mask by owner lets every token see the
prefix and the earlier tokens of its own question only, so each answer is what its own prompt alone would give.

The batch layout (`prefix_cache.prefill_after_prefixes`, `[pad, prefix, pad, question]` per row) copies the prefix
into every question's row of the batch's keys and values, and each question's attention reads its own copy: for
Video-LLaVA's 2,000-token prefix and a clip's 20 questions, twenty copies of the clip's whole cache. Here the prefix
is held and read once. Taken for a batch whose samples all start from the same prefix, with no plan inside the LLM,
no earlier turns to keep, eager decoding and a kernel that takes an arbitrary mask (SDPA, eager)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .adapter import LanguageModel
from .decode import GrowingCache
from .masks import additive
from .prefill import PrefillResult, next_positions, visual_offsets
from .prefix_cache import prefix_slots

MASK_KERNELS = ("sdpa", "eager")  # FlashAttention-2 takes a key padding mask only, not one by owner


@dataclass
class SharedLayout:
    """Who owns each cached token: -1 the prefix (seen by every question), b question b's (its prompt's own tokens,
    then its answer's)."""

    owner: Tensor  # [n] int

    def allowed(self, first: int) -> Tensor:
        """[1, q, n] booleans for the queries at token indices [first, n): the prefix, and their own question's
        tokens up to themselves."""
        n = self.owner.shape[0]
        k_idx = torch.arange(n, device=self.owner.device)
        q_idx = k_idx[first:]
        mine = (self.owner[None, :] == self.owner[first:, None]) & (k_idx[None, :] <= q_idx[:, None])
        return (mine | (self.owner[None, :] == -1))[None]

    def step(self, lm: LanguageModel, state: PrefillResult, tokens: Tensor) -> Tensor:
        """Feed each question's next token ([B]) as B new tokens of the one sequence; returns logits [B, V]."""
        b = tokens.shape[0]
        first = self.owner.shape[0]
        self.owner = torch.cat([self.owner, torch.arange(b, device=self.owner.device)])
        h = lm.embed_tokens(tokens[None, :])  # [1, B, d]
        mask = additive(self.allowed(first), h.dtype)
        pos_emb = lm.rotary_emb(h, position_ids=state.next_position[None, :])
        for i in range(lm.n_layers):
            h = lm.run_layer(i, h, mask, pos_emb, state.cache)
        state.next_position = state.next_position + 1
        state.steps += 1
        return lm.logits(h.transpose(0, 1))  # each question's token as the last of its own row


def can_share(lm: LanguageModel, prefixes: list, plan, room: int, follow_ups: bool) -> bool:
    """Whether a batch can run on one shared prefix (see the module's docstring)."""
    return (len(prefixes) > 1 and all(p is prefixes[0] for p in prefixes) and plan is None and room > 0
            and not follow_ups and lm.kernel in MASK_KERNELS)


@torch.inference_mode()
def prefill_shared(lm: LanguageModel, prefix, inputs_embeds: Tensor, attention_mask: Tensor, visual_mask: Tensor,
                   position_ids: Tensor, room: int, layer_additions: list[Tensor] | None = None) -> PrefillResult:
    """The prefill of a left-padded batch whose samples' first `prefix.length` real tokens are all `prefix` (every
    layer): only each question's own tokens are computed, in one sequence after the prefix. `room`: decoding steps
    per question the cache's buffers get room for. Returns what `llm.prefill` returns; its cache is a batch-1
    `GrowingCache` that `SharedLayout.step` (the result's `shared`) decodes on."""
    b = inputs_embeds.shape[0]
    real = attention_mask.bool()
    own = real & ~prefix_slots(real, [prefix.length] * b)  # each sample's tokens after the prefix
    lengths = own.sum(-1)
    h = inputs_embeds[own][None]  # [1, S, d]: question 0's tokens, then question 1's, ...
    pos = position_ids[..., own][..., None, :]  # [1, S] (M-RoPE: [3, 1, S]), as the model gave them
    n_prefix, n_own = prefix.length, h.shape[1]
    owner = torch.cat([torch.full((n_prefix,), -1, device=real.device),
                       torch.repeat_interleave(torch.arange(b, device=real.device), lengths)])
    layout = SharedLayout(owner)
    # The prefix copied once into buffers with room for every question's tokens and answer (it stays in the cache).
    cache = GrowingCache.copied(prefix.keys, prefix.values, n_own + b * room)
    mask = additive(layout.allowed(n_prefix), h.dtype)
    pos_emb = lm.rotary_emb(h, position_ids=pos)
    additions = [add[own][None] for add in layer_additions or []]
    for i in range(lm.n_layers):
        h = lm.run_layer(i, h, mask, pos_emb, cache)
        if i < len(additions):
            h = h + additions[i].to(h.dtype)
    last = torch.cumsum(lengths, 0) - 1
    logits = lm.logits(h[0, last][:, None])
    return PrefillResult(logits=logits, cache=cache, masks=[real], boundaries=(),
                         next_position=next_positions(position_ids), visual_offsets=visual_offsets(visual_mask),
                         shared=layout)
