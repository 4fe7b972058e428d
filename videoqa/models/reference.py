"""An independent reference for pruning inside the LLM: transformers' own forward of a family's model (its
embeddings, positions and deepstack) with dropped tokens masked out as keys from layer K on: FastV's
attention-mask form, with no cache and no slicing. The tests and the accelerator check compare our prefill to it."""

from __future__ import annotations

import torch
from torch import Tensor, nn


@torch.inference_mode()
def forward_with_dropped_keys(model: nn.Module, inputs, k: int, dropped: Tensor) -> Tensor:
    """Last-position logits [V] (float) of `model(**inputs)` where layers >= k may not attend to the `dropped`
    sequence positions ([n] bool) of its single prompt. Hooks are per instance and removed before returning."""
    n = inputs["input_ids"].shape[1]
    layers = model.model.language_model.layers
    dtype, device = next(model.parameters()).dtype, dropped.device
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=device)
    pruned = (causal & ~dropped[None, :]) | eye  # a dropped row still sees itself (its output is never read)

    def additive(allowed: Tensor) -> Tensor:
        return torch.zeros(n, n, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]

    masks = (additive(causal), additive(pruned))

    def hook(i: int):
        def swap(module, args, kwargs):
            kwargs["attention_mask"] = masks[int(i >= k)]
            return args, kwargs
        return swap

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        return model(**inputs, use_cache=False, logits_to_keep=1).logits[0, -1].float()
    finally:
        for h in handles:
            h.remove()
