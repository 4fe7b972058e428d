"""Attention masks in the form each kernel takes. Causality is by sequence (or cache slot) order, never by RoPE
position: after FastV's slicing, positions have gaps.

FlashAttention-2 takes the 2-D key padding mask [B, kv]; SDPA and eager an additive [B, 1, q, kv] mask.
"""

from __future__ import annotations

import torch
from torch import Tensor


def additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """[B, q, kv] booleans (True: the query may see the key) as an additive mask [B, 1, q, kv]."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def layer_mask(kernel: str, key_mask: Tensor, q_len: int, dtype: torch.dtype) -> Tensor | None:
    """The mask a layer needs for `q_len` new queries (the last q_len keys) against keys whose validity is
    `key_mask` [B, kv]: prefill, and decoding on the prefill's growing cache.

    None where the kernel's own path is exact and fastest: one query with nothing padded sees every key in every
    kernel; SDPA's is_causal (top-left aligned) is exact when queries and keys are the same tokens;
    FlashAttention-2's causal flag is bottom-right aligned, so exact for any q_len. Eager attention applies no
    causality of its own, so it always gets the mask for q_len > 1.
    """
    kv_len = key_mask.shape[1]
    if bool(key_mask.all()):
        if q_len == 1 or kernel == "flash_attention_2" or (kernel == "sdpa" and q_len == kv_len):
            return None
    elif kernel == "flash_attention_2":
        return key_mask.long()
    q_idx = torch.arange(kv_len - q_len, kv_len, device=key_mask.device)
    k_idx = torch.arange(kv_len, device=key_mask.device)
    allowed = (k_idx[None, :] <= q_idx[:, None])[None] & key_mask[:, None, :]
    # A padded query would see no key at all (NaN rows in SDPA); let every query see itself.
    allowed |= k_idx[None, None, :] == q_idx[None, :, None]
    return additive(allowed, dtype)


def slot_mask(kernel: str, valid: Tensor, start: Tensor, slot: Tensor, dtype: torch.dtype) -> Tensor:
    """The mask of one new query on a preallocated cache: real prompt slots (`valid` [B, length]) and the decoded
    slots from `start` up to and including `slot` ([1] tensors: no Python branching on data, so a compiled step
    serves every step)."""
    idx = torch.arange(valid.shape[1], device=valid.device)
    allowed = valid | ((idx >= start) & (idx <= slot))[None, :]
    if kernel == "flash_attention_2":
        return allowed.long()
    return additive(allowed[:, None, :], dtype)
