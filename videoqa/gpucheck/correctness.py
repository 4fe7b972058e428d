"""Correctness on the device: videoqa.llm against transformers' own forward, an fp32 reference and itself.

Tolerances come from the run itself: `noise` = max |HF bf16 logits - HF fp32 logits| at the last prompt
position is what bf16 costs transformers' own forward on this prompt. A bug (a wrong mask, a position off by
one, a dropped token) moves logits by O(1), orders of magnitude more; kernel and batching differences stay
within a small multiple of `noise`. ABS_FLOOR covers an fp32 target, where noise is ~0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import llm
from ..pruning import keep_count
from ..pruning.methods.fastv.algorithm import FastVPlan
from .models import OTHER_QUESTION, QUESTION, Target, prompt_batch
from .report import FAIL, PASS, SKIP, Check, verdict

ABS_FLOOR = 1e-4
AGREEMENT = 0.99  # share of FastV's kept tokens that must match the fp32 reference
K, R = 2, 0.5


@dataclass
class Reference:
    """An fp32 copy of the language model (decoder + head): the reference every bf16 result is held to."""

    lm: llm.LanguageModel
    noise: float = 0.0  # max |HF bf16 - HF fp32| on the 8-frame prompt (set by prefill_matches_hf)

    @classmethod
    def of(cls, qa) -> Reference:
        lm = copy.deepcopy(llm.adapt(qa.model))  # one copy: the parts keep sharing modules (tied weights too)
        lm.decoder.float()
        lm.lm_head.float()
        return cls(lm)

    def tol(self, factor: float) -> float:
        return max(factor * self.noise, ABS_FLOOR)


@torch.inference_mode()
def hf_logits(lm: llm.LanguageModel, batch) -> Tensor:
    """transformers' own forward of the decoder over the collated prompt: last-position logits [B, V] (fp32)."""
    dtype = next(lm.decoder.parameters()).dtype
    out = lm.decoder(inputs_embeds=batch.embeds.to(dtype), attention_mask=batch.attention_mask,
                     position_ids=batch.position_ids, use_cache=False)
    return lm.lm_head(out.last_hidden_state[:, -1]).float()


def _prefill(qa, batch, plan=None) -> llm.PrefillResult:
    return llm.prefill(qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan, batch.position_ids)


def prefill_matches_hf(qa, ref: Reference) -> Check:
    """Unpruned prefill vs transformers' forward, both in the target dtype; sets ref.noise."""
    batch, _ = prompt_batch(qa, 8)
    ours = _prefill(qa, batch).logits
    hf = hf_logits(llm.adapt(qa.model), batch)
    fp32 = hf_logits(ref.lm, batch)
    ref.noise = float((hf - fp32).abs().max())
    diff = float((ours - hf).abs().max())
    ok = diff <= ref.tol(0.5)
    return Check("prefill == HF forward (unpruned, 8 frames)", verdict(ok),
                 "max|ours - HF| <= max(0.5 * max|HF - HF fp32|, 1e-4)",
                 {"max_abs_diff": diff, "bf16_noise": ref.noise, "ours_vs_fp32": float((ours - fp32).abs().max()),
                  "tokens": batch.embeds.shape[1], "logits_compared": ours.numel(),
                  "top1_equal": bool((ours.argmax(-1) == hf.argmax(-1)).all())})


@torch.inference_mode()
def reference_kept(lm: llm.LanguageModel, batch, k: int, r: float) -> Tensor:
    """FastV's kept set computed independently: layers < k-1 by transformers' layers, then layer k-1's attention
    weights from transformers' eager attention (the full n x n matrix), last row, mean over heads, top-k.
    One unpadded sample."""
    dtype = next(lm.decoder.parameters()).dtype
    h = batch.embeds[:1].to(dtype)
    pos = batch.position_ids[:1]
    pos_emb = lm.rotary_emb(h, position_ids=pos)
    n = h.shape[1]
    causal = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=h.device).triu(1)[None, None]
    for i in range(k - 1):
        out = lm.layers[i](h, attention_mask=causal, position_embeddings=pos_emb)
        h = out[0] if isinstance(out, tuple) else out
    layer = lm.layers[k - 1]
    with lm.using_kernel("eager"):  # this call only: the one kernel that returns the weights
        _, weights = layer.self_attn(hidden_states=layer.input_layernorm(h), position_embeddings=pos_emb,
                                     attention_mask=causal)
    vis = batch.visual_mask[0].nonzero().squeeze(-1)
    scores = weights[0, :, -1].float().mean(0)[vis]
    return torch.topk(scores, keep_count(len(vis), r)).indices.sort().values


def _agreement(a: Tensor, b: Tensor) -> float:
    return len(set(a.tolist()) & set(b.tolist())) / max(1, len(b))


def fastv_kept_vs_fp32(qa, ref: Reference, frames: int) -> Check:
    batch, _ = prompt_batch(qa, frames)
    ours = _prefill(qa, batch, FastVPlan(K, R)).kept[0]
    ref_kept = reference_kept(ref.lm, batch, K, R)
    same_dtype = reference_kept(llm.adapt(qa.model), batch, K, R)
    agree = _agreement(ours, ref_kept)
    n_vis = int(batch.visual_mask[0].sum())
    return Check(f"FastV kept set vs fp32 eager reference ({frames} frames)", verdict(agree >= AGREEMENT),
                 f"share of kept tokens also kept by the fp32 reference >= {AGREEMENT}",
                 {"agreement": agree, "kept": len(ours), "visual": n_vis, "expected_kept": keep_count(n_vis, R),
                  "ref_dtype_eager_vs_fp32": _agreement(same_dtype, ref_kept),
                  "ours_vs_ref_dtype_eager": _agreement(ours, same_dtype)},
                 note="ref_dtype_eager_vs_fp32: transformers' eager attention in the target dtype against fp32, "
                      "the agreement the dtype itself allows")


@torch.inference_mode()
def masked_logits(qa, batch, kept: Tensor, k: int, extra: Tensor | None = None) -> Tensor:
    """FastV by masking instead of slicing: the whole sequence through every layer, pruned visual tokens hidden
    as keys in layers >= k. No cache, no gather: independent of videoqa.llm. `extra` [1, t, d]: tokens appended
    after the prompt (decoding). Returns the last position's logits [1, V]."""
    lm = llm.adapt(qa.model)
    h = batch.embeds[:1] if extra is None else torch.cat([batch.embeds[:1], extra], 1)
    n = h.shape[1]
    vis = torch.zeros(n, dtype=torch.bool, device=h.device)
    vis[: batch.visual_mask.shape[1]] = batch.visual_mask[0]
    dropped = vis.clone()
    dropped[vis.nonzero().squeeze(-1)[kept]] = False
    pos = torch.arange(n, device=h.device)[None]
    pos_emb = lm.rotary_emb(h, position_ids=pos)
    causal = torch.ones(n, n, dtype=torch.bool, device=h.device).tril()
    pruned = (causal & ~dropped[None]) | torch.eye(n, dtype=torch.bool, device=h.device)
    masks = [torch.zeros(n, n, dtype=h.dtype, device=h.device).masked_fill(~m, torch.finfo(h.dtype).min)[None, None]
             for m in (causal, pruned)]
    for i, layer in enumerate(lm.layers):
        out = layer(h, attention_mask=masks[int(i >= k)], position_embeddings=pos_emb)
        h = out[0] if isinstance(out, tuple) else out
    return lm.logits(h)


def fastv_matches_masked_reference(qa, ref: Reference, steps: int = 3) -> Check:
    """FastV prefill and decoded logits (sliced sequence, pruned cache) vs the masked full-sequence run."""
    batch, _ = prompt_batch(qa, 8)
    state = _prefill(qa, batch, FastVPlan(K, R))
    kept = state.kept[0]
    lm = llm.adapt(qa.model)
    worst = float((state.logits - masked_logits(qa, batch, kept, K)).abs().max())
    logits, extra = state.logits, []
    with torch.inference_mode():
        for _ in range(steps):
            new = lm.embed_tokens(logits.argmax(-1)[:, None])
            extra.append(new)
            logits = llm.decode_one_token(lm, state, new)
            masked = masked_logits(qa, batch, kept, K, torch.cat(extra, 1))
            worst = max(worst, float((logits - masked).abs().max()))
    ok = worst <= ref.tol(2.0)
    return Check("FastV prefill + decode == masked full-sequence reference", verdict(ok),
                 "max|ours - masked| <= max(2 * bf16 noise, 1e-4) over the prefill and each decoded token",
                 {"max_abs_diff": worst, "tolerance": ref.tol(2.0), "decode_steps": steps, "kept": len(kept)})


def batch_matches_single(qa, ref: Reference, steps: int = 3) -> Check:
    """A left-padded batch of two (different question lengths), FastV: each sample as when run alone.

    Decoding is teacher-forced (both runs are fed the single run's greedy tokens), so a near-tie in a random
    model's logits cannot make the comparison diverge."""
    batch, _ = prompt_batch(qa, 8, (QUESTION, OTHER_QUESTION))
    plan = FastVPlan(K, R)
    both = _prefill(qa, batch, plan)
    lm = llm.adapt(qa.model)
    worst, agree, padded = 0.0, 1.0, []
    singles = []
    for i, question in enumerate((QUESTION, OTHER_QUESTION)):
        alone, _ = prompt_batch(qa, 8, (question,))
        padded.append(int((batch.attention_mask[i] == 0).sum()))
        single = _prefill(qa, alone, plan)
        singles.append(single)
        agree = min(agree, _agreement(both.kept[i], single.kept[0]))
        worst = max(worst, float((both.logits[i] - single.logits[0]).abs().max()))
    with torch.inference_mode():
        for _ in range(steps):
            tokens = torch.stack([s.logits[0].argmax() for s in singles])
            out_b = llm.decode_one_token(lm, both, lm.embed_tokens(tokens[:, None]))
            for i, s in enumerate(singles):
                out_s = llm.decode_one_token(lm, s, lm.embed_tokens(tokens[i, None, None]))
                worst = max(worst, float((out_b[i] - out_s[0]).abs().max()))
    ok = worst <= ref.tol(2.0) and agree >= AGREEMENT
    return Check("left-padded batch of 2 == each alone (FastV)", verdict(ok),
                 f"max|batch - single| <= max(2 * bf16 noise, 1e-4) (prefill + {steps} decode steps); "
                 f"kept-set agreement >= {AGREEMENT}",
                 {"max_abs_diff": worst, "tolerance": ref.tol(2.0), "kept_agreement": agree,
                  "padding": padded, "decode_steps": steps})


def kernels(qa, ref: Reference, target: Target) -> list[Check]:
    """Each installed attention kernel: unpruned logits vs fp32 and FastV's kept set vs the fp32 reference."""
    import importlib.util

    batch, _ = prompt_batch(qa, 8)
    fp32 = hf_logits(ref.lm, batch)
    ref_kept = reference_kept(ref.lm, batch, K, R)
    checks = []
    for kernel in target.kernels:
        name = f"kernel {kernel}: unpruned logits vs fp32, FastV kept set"
        if kernel == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
            checks.append(Check(name, SKIP, "-", note="flash-attn is not installed"))
            continue
        try:
            qa.model.set_attn_implementation({"text_config": kernel})
            err = float((_prefill(qa, batch).logits - fp32).abs().max())
            agree = _agreement(_prefill(qa, batch, FastVPlan(K, R)).kept[0], ref_kept)
        except Exception as e:  # noqa: BLE001 - one kernel failing must not hide the others
            checks.append(Check(name, FAIL, "runs", note=f"{type(e).__name__}: {e}"))
            continue
        finally:
            qa.model.set_attn_implementation({"text_config": "sdpa"})
        ok = err <= ref.tol(2.0) and agree >= AGREEMENT
        checks.append(Check(name, PASS if ok else FAIL,
                            f"max|kernel - fp32| <= max(2 * bf16 noise, 1e-4); kept agreement >= {AGREEMENT}",
                            {"max_abs_diff_vs_fp32": err, "tolerance": ref.tol(2.0), "kept_agreement": agree}))
    return checks
