"""A masked-attention reference for methods that prune or merge inside the LLM: transformers' own decoder forward
over every token (no cache, no slicing). Before each layer a callback may rewrite the hidden states (merging) and
names the tokens still present; the layer's attention then hides the others as keys. Eager attention, so each
layer's weights come back for the callback of the next."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from videoqa import llm

# (layer i, its input [1, n, d], weights of the layers run so far {j: [heads, n, n]}) -> (present [n] bool, new
# input or None)
BeforeLayer = Callable[[int, Tensor, dict[int, Tensor]], tuple[Tensor, Tensor | None]]


def masked_forward(model, embeds: Tensor, before_layer: BeforeLayer) -> tuple[Tensor, dict[int, Tensor]]:
    """Last-position logits [1, V] and every layer's attention weights, batch of one, positions 0..n-1."""
    dec = model.model.language_model
    n = embeds.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool, device=embeds.device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=embeds.device)
    weights: dict[int, Tensor] = {}

    def before(i):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            present, new = before_layer(i, h, weights)
            if new is not None:
                if args:
                    args = (new, *args[1:])
                else:
                    kwargs["hidden_states"] = new
            allowed = causal & present[None, :] | eye
            kwargs["attention_mask"] = torch.zeros(n, n, dtype=embeds.dtype, device=embeds.device).masked_fill(
                ~allowed, torch.finfo(embeds.dtype).min)[None, None]
            return args, kwargs
        return hook

    def grab(i):
        def hook(module, args, output):
            weights[i] = output[1][0].float()
        return hook

    handles = [layer.register_forward_pre_hook(before(i), with_kwargs=True) for i, layer in enumerate(dec.layers)]
    handles += [layer.self_attn.register_forward_hook(grab(i)) for i, layer in enumerate(dec.layers)]
    try:
        with torch.no_grad(), llm.adapt(model).using_kernel("eager"):
            h = dec(inputs_embeds=embeds, position_ids=torch.arange(n, device=embeds.device)[None]).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()
    return model.lm_head(h)[:, -1].float(), weights


def present_before(n: int, dropped_at: dict[int, list[int]], layer: int) -> Tensor:
    """[n] booleans: the tokens layer `layer` sees, given the sequence positions dropped before each layer."""
    present = torch.ones(n, dtype=torch.bool)
    for at, gone in dropped_at.items():
        if at <= layer:
            present[gone] = False
    return present


class Recorder:
    """Wraps a plan: records, at each layer where it acts, the original visual indices it keeps."""

    def __init__(self, plan):
        self.plan, self.r, self.stages = plan, plan.r, []

    @property
    def layers(self):
        return self.plan.layers

    def layers_for(self, n_layers: int):
        return self.plan.layers_for(n_layers)

    def at_layer(self, view):
        keep = self.plan.at_layer(view)
        if keep is not None:
            self.stages.append((view.layer, view.visual_index[0][keep.kept[0]].tolist(), keep, view))
        return keep


def eager_prompt(model_dir, n: int, visual: slice, seed: int):
    """The tiny model with eager attention (its weights are the reference's) and one small random prompt:
    (model, embeds [1, n, d], visual mask [1, n] True at `visual`)."""
    from transformers import VideoLlavaForConditionalGeneration

    model = VideoLlavaForConditionalGeneration.from_pretrained(model_dir, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(1, n, model.config.text_config.hidden_size, generator=g) * 0.05
    vis = torch.zeros(1, n, dtype=torch.bool)
    vis[0, visual] = True
    return model, embeds, vis
