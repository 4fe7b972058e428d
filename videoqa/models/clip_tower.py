"""The [CLS] attention of a CLIP vision encoder layer: the per-token saliency towers with a CLS token give."""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def cls_attention(vision_layer: torch.nn.Module, hidden_in: Tensor) -> Tensor:
    """[CLS]→token attention of one CLIP encoder layer, mean over heads: [F, T, D] -> [F, T] (float32).

    `vision_layer` is a transformers CLIPEncoderLayer and `hidden_in` its input (for Video-LLaVA's feature
    layer -2, the input of encoder.layers[-2] is hidden_states[-3] of a run with output_hidden_states=True).
    Only the CLS query row is computed (O(T·D) beyond the key projection), so the tower itself can run
    with SDPA/FlashAttention instead of eager attention.
    """
    mix = getattr(vision_layer, "temporal_mix", None)
    if mix is not None:  # LanguageBind's layer (models/languagebind.py): the frames meet before the spatial attention
        hidden_in = mix(hidden_in)
    attn = vision_layer.self_attn
    f, t, _ = hidden_in.shape
    h = vision_layer.layer_norm1(hidden_in)
    q = attn.q_proj(h[:, :1]).view(f, 1, -1, attn.head_dim).transpose(1, 2)  # [F, H, 1, hd]
    k = attn.k_proj(h).view(f, t, -1, attn.head_dim).transpose(1, 2)  # [F, H, T, hd]
    scores = (q.float() @ k.float().transpose(-1, -2)) * attn.scale  # [F, H, 1, T]
    # Softmax in float32 as CLIP's eager attention does; CLIP vision has no attention mask.
    return scores.softmax(dim=-1).mean(dim=1)[:, 0]


