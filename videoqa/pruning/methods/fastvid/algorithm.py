"""FastVID for video (arXiv 2503.11187; official code LunarShen/FastVID), pruning before the LLM.

1. Dynamic temporal segmentation: consecutive frames whose global features stop being similar start a new
   segment. Cuts are the `min_segments - 1` least similar transitions plus every transition whose cosine
   similarity is below `tau`, so a clip has at least `min_segments` segments (every frame its own segment
   when it has no more frames than that) and every real scene change is a cut.
2. Per segment the budget is split into salient tokens (share 1 - d: the patches the frame's [CLS] attends
   to most, spread evenly over the segment's frames) and context tokens (share d), chosen by density-peak
   clustering in "anchor" frames: the segment's last frame and every `anchor_stride`-th frame before it.
   Density-peak score of a patch = its density (exp of minus the mean squared distance to its k nearest
   patches, itself included, distances divided by sqrt(dim)) times its distance to the nearest denser patch.
3. Density token merging: every patch of the segment that is not salient joins the anchor's context token
   it is most cosine-similar to — the context tokens included, each joining itself — and a context token
   that absorbed n other tokens becomes w * itself + (1 - w) * mean(itself and the absorbed), w =
   max(1 / (n + 2), beta): at beta = 0.6 the absorbed weigh 0.4 * n / (n + 1) together. This is the merge of
   the official code for LLaVA-OneVision and LLaVA-Video (its Qwen2.5-VL variant leaves the anchor out of
   the mean). With several anchors in a segment a dropped patch is absorbed once per anchor, and an anchor's
   context token may absorb another anchor's (kept) context token, as the official code does. Salient
   tokens stay as they are. The official code keeps every kept token's original position (gaps in the
   positions).

Our layout and the official models differ; the adaptations, each the smallest that works:
- Video-LLaVA keeps a CLS token per frame. Here it is the frame's global feature for segmentation (the
  official models use the vision tower's pooled output), it is kept whenever its frame has a budget and
  counts against that budget (as our VisPruner does), and it is never merged or absorbed.
- Budgets are exact: `keep` is split over frames as for VisPruner (keep // F each, the rest spread over the
  clip), a segment's patch budget is the sum over its frames minus their CLS tokens. When every frame gets
  the same budget this is the official per-frame retention times the segment length. Its salient/context
  split is the official Qwen2.5-VL variant's (int(d * segment budget) context tokens, remainders spread
  evenly); the LLaVA-OneVision/LLaVA-Video variant takes int(d * per-frame retention) per frame and floors
  each anchor's share. The two agree on single-frame segments, which is every segment at 8 frames.
- Where an anchor frame has fewer free patches than its context count (only at mild pruning, which the
  official code never runs and where it fails), the excess becomes salient tokens of the segment's frames
  with room, first frame first.
- Without attention, patches are ranked by their dot product with the frame's mean patch feature: the
  projection-free stand-in for the mean-query attention the official code uses for towers without a CLS.
- The official code breaks density ties with 1e-6 of random noise; here equal densities resolve by
  position (the earlier patch counts as denser), and every ranking is a stable sort, so the result is
  deterministic. Fewer than k candidates use all of them as neighbours.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from ...base import VisualLayout
from ...shared import density_peaks, frame_budgets


@dataclass(frozen=True)
class FastVIDParams:
    """The official defaults (its evaluation scripts for LLaVA-OneVision and LLaVA-Video)."""

    min_segments: int = 8  # c: cut at the c-1 least similar transitions
    tau: float = 0.9  # cut wherever consecutive frames' cosine similarity is below this
    context_share: float = 0.4  # d: share of a segment's budget chosen by density (the rest by attention)
    anchor_stride: int = 4  # p: every p-th frame, counted back from the segment's last, is an anchor
    beta: float = 0.6  # lower bound of a context token's own weight when it absorbs others
    density_k: int = 4  # neighbours (itself included) in the density estimate


@dataclass(frozen=True)
class FastVIDSelection:
    """What FastVID kept: sorted visual-span indices, the features the LLM sees for them, what each absorbed."""

    kept: list[int]
    merged: Tensor  # [len(kept), d]: a context token's merged feature, else the token's own feature
    absorbed: list[list[int]]  # per kept token, the visual-span indices merged into it (sorted)
    details: dict = field(default_factory=dict)


def frame_similarities(frame_features: Tensor) -> Tensor:
    """Cosine similarity of each frame's global feature with the next frame's: [F, D] -> [F-1]."""
    g = torch.nn.functional.normalize(frame_features.float(), dim=-1)
    return (g[:-1] * g[1:]).sum(dim=-1)


def segment_sizes(similarities: Tensor, min_segments: int, tau: float) -> list[int]:
    """Frames per segment: cut after transition i when it is among the min_segments-1 least similar or
    below tau. Equal similarities resolve by position (the earlier transition is cut first)."""
    n_frames = similarities.numel() + 1
    n_forced = max(0, min(min_segments - 1, n_frames - 1))
    forced = torch.sort(similarities, stable=True).indices[:n_forced].tolist()
    below = torch.nonzero(similarities < tau).flatten().tolist()
    cuts = sorted(set(forced) | set(below))
    bounds = [-1, *cuts, n_frames - 1]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _even_split(total: int, parts: int) -> list[int]:
    """`total` over `parts`, the remainder one each to the first parts."""
    base, rem = divmod(total, parts)
    return [base + (i < rem) for i in range(parts)]


def segment_counts(budget: int, n_frames: int, n_patches: int, context_share: float,
                   anchor_stride: int) -> tuple[list[int], list[int]]:
    """Salient and context patches per frame of one segment, for a segment patch budget."""
    n_context = int(budget * context_share)
    salient = _even_split(budget - n_context, n_frames)
    per_anchor = _even_split(n_context, -(-n_frames // anchor_stride))
    forward = [per_anchor[i // anchor_stride] if i % anchor_stride == 0 else 0 for i in range(n_frames)]
    context = forward[::-1]  # anchors counted from the segment's last frame
    excess = 0
    for i in range(n_frames):
        room = n_patches - salient[i]
        excess += max(0, context[i] - room)
        context[i] = min(context[i], room)
    for i in range(n_frames):
        extra = min(excess, n_patches - salient[i] - context[i])
        salient[i] += extra
        excess -= extra
    return salient, context


def merge_into(flat: Tensor, normed: Tensor, targets: Tensor, members: Tensor,
               beta: float) -> tuple[Tensor, list[list[int]]]:
    """Each member joins its most cosine-similar target (the first on ties); a target becomes
    w * itself + (1 - w) * mean(its members), w = max(1 / (members + 1), beta).

    As in the official code for LLaVA-OneVision/LLaVA-Video, `members` include the targets themselves: a target
    joins itself, so it is in its own mean and n absorbed tokens weigh (1 - w) * n / (n + 1) together. Returns
    the targets' merged features [n_targets, d] and, per target, the other members it absorbed.
    """
    if members.numel() == 0:
        return flat[targets], [[] for _ in range(targets.numel())]
    choice = (normed[members] @ normed[targets].T).argmax(dim=1)
    counts = torch.bincount(choice, minlength=targets.numel()).to(flat.dtype)[:, None]
    sums = torch.zeros(targets.numel(), flat.shape[1], dtype=flat.dtype, device=flat.device)
    sums.index_add_(0, choice, flat[members])
    own = (1.0 / (counts + 1.0)).clamp(min=beta)
    merged = own * flat[targets] + (1.0 - own) * sums / counts.clamp(min=1.0)
    groups = [[] for _ in range(targets.numel())]
    target_ids = targets.tolist()
    for i, j in zip(members.tolist(), choice.tolist(), strict=True):  # one transfer, not one per target
        if i != target_ids[j]:
            groups[j].append(i)
    return merged, groups


def _segment(flat: Tensor, normed: Tensor, scores: Tensor, frames: range, budget: int, layout: VisualLayout,
             params: FastVIDParams) -> dict:
    """Salient and context tokens of one segment and the context tokens' merged features."""
    t, first = layout.tokens_per_frame, int(layout.has_cls)
    n_patches = t - first
    salient_n, context_n = segment_counts(budget, len(frames), n_patches, params.context_share,
                                          params.anchor_stride)
    patches = [torch.arange(n_patches, device=flat.device) + f * t + first for f in frames]
    salient, contexts = [], []
    for f, idx, n_sal, n_ctx in zip(frames, patches, salient_n, context_n, strict=True):
        order = torch.sort(scores[f], descending=True, stable=True).indices  # ties: the earlier patch
        salient.append(idx[order[:n_sal]])
        if n_ctx > 0:
            rest = idx[order[n_sal:].sort().values]
            contexts.append(rest[density_peaks(flat[rest], n_ctx, params.density_k)])
    all_salient = torch.cat(salient)
    in_segment = torch.cat(patches)
    merged, absorbed = [], {}
    members = in_segment[~torch.isin(in_segment, all_salient)]  # each anchor's own context tokens included
    for ctx in contexts:
        rows, groups = merge_into(flat, normed, ctx, members, params.beta)
        merged.append(rows)
        absorbed.update(zip(ctx.tolist(), groups, strict=True))
    return {
        "salient": all_salient.tolist(),
        "context": torch.cat(contexts).tolist() if contexts else [],
        "anchors": [f for f, n in zip(frames, context_n, strict=True) if n > 0],
        "merged": merged,  # rows in "context" order
        "absorbed": absorbed,
    }


def _check(features: Tensor, keep: int, layout: VisualLayout, attention: Tensor | None,
           frame_features: Tensor | None, params: FastVIDParams) -> None:
    shape = (layout.n_frames, layout.tokens_per_frame)
    if features.dim() != 3 or tuple(features.shape[:2]) != shape:
        raise ValueError(f"features {tuple(features.shape)} do not match the layout "
                         f"({shape[0]} frames x {shape[1]} tokens x dim)")
    if attention is not None and tuple(attention.shape) != shape:
        raise ValueError(f"attention {tuple(attention.shape)} does not match the layout {shape}")
    if frame_features is not None and (frame_features.dim() != 2 or frame_features.shape[0] != shape[0]):
        raise ValueError(f"frame_features {tuple(frame_features.shape)} must be [{shape[0]}, dim]")
    if not 0 <= keep <= layout.n_tokens:
        raise ValueError(f"keep must be in [0, {layout.n_tokens}], got {keep}")
    if not 0.0 <= params.context_share <= 1.0 or not 0.0 <= params.beta <= 1.0:
        raise ValueError(f"context_share and beta must be in [0, 1], got {params.context_share}, {params.beta}")
    if params.anchor_stride < 1 or params.density_k < 1 or params.min_segments < 1:
        raise ValueError("anchor_stride, density_k and min_segments must be >= 1")


@torch.no_grad()
def select_fastvid(features: Tensor, keep: int, layout: VisualLayout, attention: Tensor | None = None,
                   frame_features: Tensor | None = None, params: FastVIDParams = FastVIDParams()) -> FastVIDSelection:
    """Choose `keep` visual tokens with FastVID and merge the dropped ones into the kept context tokens.

    features [F, T, d]: the tokens as the LLM will see them (density and merging work on these; the official
    code uses the projected embeddings); attention [F, T]: [CLS]->token attention (the CLS column is
    ignored); frame_features [F, D]: the frames' global features for segmentation (default: each frame's CLS
    token in `features`, or its mean patch feature when the layout has no CLS).
    """
    _check(features, keep, layout, attention, frame_features, params)
    f, t, first = layout.n_frames, layout.tokens_per_frame, int(layout.has_cls)
    flat = features.reshape(f * t, -1).float()
    normed = torch.nn.functional.normalize(flat, dim=-1)
    patches = features[:, first:].float()
    if frame_features is None:
        frame_features = features[:, 0] if layout.has_cls else patches.mean(dim=1)
    if attention is not None:
        scores = attention[:, first:].float()
    else:
        scores = (patches * patches.mean(dim=1, keepdim=True)).sum(dim=-1)
    similarities = frame_similarities(frame_features)
    sizes = segment_sizes(similarities, params.min_segments, params.tau)
    budgets = frame_budgets(keep, f)
    has_cls = [layout.has_cls and b > 0 for b in budgets]
    cls = [i * t for i in range(f) if has_cls[i]]

    salient, context, anchors, seg_budgets, merged, absorbed = [], [], [], [], [], {}
    start = 0
    for size in sizes:
        frames = range(start, start + size)
        budget = sum(budgets[i] - has_cls[i] for i in frames)
        seg = _segment(flat, normed, scores, frames, budget, layout, params)
        salient += seg["salient"]
        context += seg["context"]
        anchors += seg["anchors"]
        merged += seg["merged"]
        absorbed.update(seg["absorbed"])
        seg_budgets.append(budget + sum(has_cls[i] for i in frames))
        start += size

    kept = sorted(cls + salient + context)
    out = flat[torch.as_tensor(kept, dtype=torch.long, device=flat.device)]
    if context:  # context tokens carry their merged features
        where = {i: n for n, i in enumerate(kept)}
        out[torch.as_tensor([where[i] for i in context], device=flat.device)] = torch.cat(merged)
    details = {
        "segments": sizes,
        "similarities": [round(s, 4) for s in similarities.tolist()],
        "segment_budgets": seg_budgets,
        "frame_budgets": budgets,
        "cls": cls,
        "salient": sorted(salient),
        "context": sorted(context),
        "anchors": anchors,
        "params": asdict(params),
    }
    return FastVIDSelection(kept, out.to(features.dtype), [sorted(absorbed.get(i, [])) for i in kept], details)
