"""The adaptive policy's memory model against what one answer really allocates.

Predicted: `pruning.memory.memory_need` (KV cache + prefill activations) for the prompt's exact token counts.
Measured: the peak bytes allocated above the weights and inputs while the prompt is prefilled and `new_tokens`
tokens are decoded — `torch.cuda.max_memory_allocated` on CUDA; on CPU the same quantity is counted by
following every tensor storage the run creates and frees (`LiveBytes`), since a CPU process has no allocator
peak to read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .. import llm
from ..measure import free_memory_bytes
from ..pruning import ModelDims, keep_count
from ..pruning.adaptive import AdaptivePolicy, decide
from ..pruning.memory import memory_need
from ..pruning.methods.fastv.algorithm import FastVPlan
from .models import prompt_batch
from .report import FAIL, Check, verdict

TOLERANCE = 0.15  # |measured - predicted| / measured


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensor storages created inside the block that are still alive, and their peak.

    Storages created before the block (weights, inputs) are not counted; views share their base's storage."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and not t.is_meta:
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.now += storage.nbytes()
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self._freed, key)
        return out


def peak_bytes(fn: Callable[[], object], device: torch.device) -> tuple[int, object]:
    """(peak bytes allocated by `fn` above what was allocated before it, fn's result)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base, result
    with LiveBytes() as live:
        result = fn()
    return live.peak, result


def memory_check(qa, frames: int, method: str, new_tokens: int, gated: bool) -> Check:
    """One prompt of `frames` frames, unpruned or FastV with the adaptive R: predicted vs measured bytes."""
    policy = AdaptivePolicy()
    batch, _ = prompt_batch(qa, frames)
    n = batch.embeds.shape[1]
    n_vis = int(batch.visual_mask[0].sum())
    n_text = n - n_vis
    dims: ModelDims = qa.dims
    if method == "none":
        plan, k, kept, r = None, dims.n_layers, n_vis, 0.0
    else:
        decision = decide(None, dims, n_text, free_memory_bytes(qa.device), k=2, frames=frames, policy=policy)
        plan, k, kept, r = FastVPlan(2, decision.r), 2, keep_count(n_vis, decision.r), decision.r
    predicted = memory_need(dims, n_text, n_vis, kept, k, new_tokens)
    lm = llm.adapt(qa.model)
    token = lm.embed_tokens(torch.zeros(1, 1, dtype=torch.long, device=qa.device))

    @torch.inference_mode()
    def answer():
        state = llm.prefill(lm, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)
        for _ in range(new_tokens):
            llm.decode_one_token(lm, state, token)
        return llm.cache_bytes(state.cache)

    measured, kv = peak_bytes(answer, qa.device)
    error = (predicted["need_bytes"] - measured) / measured
    figures = {"predicted_MiB": predicted["need_bytes"] / 2**20, "measured_MiB": measured / 2**20,
               "error": error, "kv_predicted_MiB": predicted["kv_bytes"] / 2**20, "kv_measured_MiB": kv / 2**20,
               "activation_predicted_MiB": predicted["activation_bytes"] / 2**20, "tokens": n, "kept": kept,
               "r": round(r, 3), "new_tokens": new_tokens, "peak_phase": predicted.get("peak_phase", "")}
    label = "none" if method == "none" else f"FastV auto (R={r:.2f})"
    status = verdict(abs(error) <= TOLERANCE, gated) if kv == predicted["kv_bytes"] else FAIL
    return Check(f"memory model: {frames} frames, {label}", status,
                 f"KV bytes exact; |predicted - measured| / measured <= {TOLERANCE} (peak of KV + activations, "
                 f"prefill and {new_tokens} decoded tokens)", figures,
                 note="" if gated else "tiny shapes: fixed overheads dominate, the 15% criterion is not applied")


def memory_checks(qa, frames: tuple[int, ...], new_tokens: int, gated: bool) -> list[Check]:
    return [memory_check(qa, f, m, new_tokens, gated) for f in frames for m in ("none", "fastv")]
