"""Pruning before the LLM on today's families: the encoded clip as the methods see it, and a prompt with only the
kept visual tokens, under either positions rule.

The methods choose among the frame tokens (LLaVA-OneVision's newline after the frames, a summary token, is always
kept, as a frame's [CLS] is by VisPruner). For Qwen-VL a "frame" of the layout is a temporal patch: two source
frames share its merged 2×2-patch tokens.

Positions of the kept tokens:
- ORIGINAL: every kept token keeps the position it had in the unpruned prompt (1-D: its index; M-RoPE: its
  (t, h, w) triple), so the positions have gaps (FastVID's official rule; FastV's inside the LLM).
- RENUMBERED: 1-D positions are 0..n-1 again. M-RoPE ids are recomputed as get_rope_index would for the pruned
  prompt (what vLLM's EVS does): a visual token's ids come from its (t, h, w) cell of the grid, and the text after a
  video continues from the video's start plus the grid's extent (transformers 5.24: max(h, w) / merge), neither of
  which depends on how many tokens are kept, so every kept token keeps its original ids under this rule as well.
  The position after the prompt is one past the largest kept id, as the model's rope_deltas give it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..pruning.base import VisualLayout
from ..pruning.method import EncodedVideo, Positions, Selection
from .prepared import Prepared


def layout_of(p: Prepared) -> VisualLayout:
    """The methods' layout: frames (Qwen: temporal patches) of rows x cols tokens, no [CLS]."""
    rows, cols = p.layout.grid
    return VisualLayout(n_frames=p.layout.groups, grid=rows, has_cls=False, cols=cols,
                        frames_per_token=p.layout.frames_per_group)


def encoded(p: Prepared, saliency: Tensor) -> EncodedVideo:
    """The clip as the before-LLM methods see it: frame tokens [F, T, d] (summary tokens left out) and the
    saliency [F, T] that stands in for [CLS] attention in towers without one."""
    layout = layout_of(p)
    frame_tokens = p.features[: layout.n_tokens].reshape(layout.n_frames, layout.tokens_per_frame, -1)
    # The LLM-space features serve as the tower features too: a merged (Qwen) or pooled (OneVision) token has
    # no single tower token behind it.
    return EncodedVideo(frame_tokens, frame_tokens, saliency.reshape(layout.n_frames, -1), layout)


def apply_selection(p: Prepared, sel: Selection, rule: Positions) -> Prepared:
    """`p` with only the selected visual tokens (their, possibly merged, features), positions by `rule`."""
    if sel.kept is None:
        return p
    n_frame_tokens = p.layout.n_tokens - p.layout.summary
    kept = list(sel.kept) + list(range(n_frame_tokens, p.layout.n_tokens))  # summary tokens stay
    vis = p.visual_mask.nonzero().squeeze(-1)
    keep = ~p.visual_mask
    keep[vis[torch.as_tensor(kept, dtype=torch.long)]] = True
    features = torch.cat([sel.visual.to(p.features), p.features[n_frame_tokens:]])
    if rule is Positions.RENUMBERED and p.positions.shape[0] == 1:
        positions = torch.arange(int(keep.sum()))[None]
    else:  # original ids; for M-RoPE also the renumbered ones (see the module's docstring)
        positions = p.positions[:, keep]
    additions = [a[torch.as_tensor(kept, dtype=torch.long)] for a in p.layer_additions]
    return Prepared(ids=p.ids[keep], features=features, positions=positions, layout=p.layout,
                    video_token_id=p.video_token_id, layer_additions=additions)


def mean_attention_received(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """Saliency where a tower has no [CLS]: the attention each token receives, mean over heads and queries
    (VisPruner's and FastVID's fallback). q, k [G, H, T, hd] -> [G, T] (float32)."""
    weights = ((q.float() @ k.float().transpose(-1, -2)) * scale).softmax(-1)
    return weights.mean(dim=(1, 2))
