"""Speed on the device: prefill time vs FLOPs, ranking share, decode per token, and one answer's stages.

Every timing synchronises the device before and after (`measure.Timer` over `measure.device_clock`).
Figures are the median of `target.repeats` runs after one warm-up run.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .. import llm
from ..bench.decode import decode_rows, format_decode_table
from ..bench.setup import Setup
from ..measure import Timer, device_clock, free_memory_bytes
from ..pruning import PruneConfig, keep_count
from ..pruning.adaptive import decide
from ..pruning.flops import estimate_flops
from ..pruning.methods.fastv.algorithm import FastVPlan
from .models import QUESTION, Target, prompt_batch, synthetic_frames
from .report import INFO, Check, verdict

TIME_OVER_FLOPS = 1.10  # goal: FastV's prefill time ratio at most 10% above its FLOPs ratio
FASTV_A40_7B = (0.344, 0.230)  # FastV paper, Table 4: LLaVA-1.5-7B latency (s) without / with FastV, A40


def _prefill(qa, batch, plan):
    return llm.prefill(qa.model, batch.embeds, batch.attention_mask, batch.visual_mask, plan,
                       batch.position_ids, clock=device_clock(qa.device))  # ranking timed with the device synced


def _time_prefill(qa, batch, plan, repeats: int) -> tuple[float, float]:
    """(median prefill seconds, median ranking seconds)."""
    _prefill(qa, batch, plan)  # warm-up
    times, ranks = [], []
    for _ in range(repeats):
        with Timer(device_clock(qa.device)) as t:
            state = _prefill(qa, batch, plan)
        times.append(t.seconds)
        ranks.append(state.t_rank)
    return statistics.median(times), statistics.median(ranks)


def prefill_speed(qa, target: Target, report) -> list[Check]:
    """Prefill time ratio vs FLOPs ratio, FastV R=0.5 and adaptive R, per frame count; a table in the report."""
    gated = qa.device.type == "cuda"
    rows, checks = [], []
    for frames in target.frames:
        batch, _ = prompt_batch(qa, frames)
        n = batch.embeds.shape[1]
        n_vis = int(batch.visual_mask[0].sum())
        n_text = n - n_vis
        auto = decide(None, qa.dims, n_text, free_memory_bytes(qa.device), k=2, frames=frames).r
        base = None
        for label, r in (("none", None), ("fastv R=0.50", 0.5), (f"fastv auto R={auto:.2f}", auto)):
            plan = None if r is None else FastVPlan(2, r)
            t, t_rank = _time_prefill(qa, batch, plan, target.repeats)
            kept = n_vis if r is None else keep_count(n_vis, r)
            flops = estimate_flops(qa.dims, n_text, n_vis, kept, None if r is None else 2).ratio
            base = base or t
            rows.append(dict(frames=frames, method=label, kept=kept, ms=1000 * t, time_ratio=t / base,
                             flops_ratio=flops, rank_pct=100 * t_rank / t))
            if r is not None:
                over = (t / base) / flops
                checks.append(Check(f"prefill time/FLOPs, {frames} frames, {label}",
                                    verdict(over <= TIME_OVER_FLOPS, gated),
                                    f"(time ratio) / (FLOPs ratio) <= {TIME_OVER_FLOPS}",
                                    {"time_over_flops": over, "time_ratio": t / base, "flops_ratio": flops,
                                     "ranking_pct": 100 * t_rank / t, "prefill_ms": 1000 * t,
                                     "ranking_timer": "synchronised"},
                                    note="" if gated else "CPU at tiny shapes: overheads dominate; not applied"))
    head = "| frames | method | kept visual | prefill ms | time ratio | FLOPs ratio | time/FLOPs | ranking % |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['frames']} | {r['method']} | {r['kept']} | {r['ms']:.1f} | {r['time_ratio']:.3f} "
              f"| {r['flops_ratio']:.3f} | {r['time_ratio'] / r['flops_ratio']:.2f} | {r['rank_pct']:.2f} |"
              for r in rows]
    report.tables["Prefill: time vs FLOPs (K=2)"] = "\n".join(lines)
    return checks


def decode_speed(qa, target: Target, report) -> list[Check]:
    """ms/token: eager loop vs static cache vs compiled step, full vs FastV cache, per frame count."""
    setup = Setup(preset=target.name, device=str(qa.device), dtype=str(qa.dtype).removeprefix("torch."))
    decoders: dict = {}
    rows = []
    for frames in target.frames:
        batch, _ = prompt_batch(qa, frames)
        inputs = (batch.embeds, batch.attention_mask, batch.visual_mask)
        rows += decode_rows(replace(setup, frames=frames), [("none", 0.0), ("fastv", 0.5)], target.decode_tokens,
                            target.compile, 2, max(1, target.repeats // 2), model=qa.model, inputs=inputs,
                            decoders=decoders)
    weights = sum(p.numel() * p.element_size() for p in llm.adapt(qa.model).decoder.parameters())
    report.tables["Decode ms/token (K=2)"] = (
        format_decode_table(rows) + f"\n\nLanguage-model weights: {weights / 2**30:.2f} GiB read per token "
        f"(at ~4.3 TB/s, an H200's measured copy bandwidth: {1000 * weights / 4.3e12:.2f} ms/token)")
    best = {m: min(r[f"{m}_ms"] for r in rows) for m in ("eager", "static", "compiled") if f"{m}_ms" in rows[0]}
    return [Check("decode: static / compiled vs eager", INFO, "faster than eager decides the default",
                  {f"{m}_ms_best": v for m, v in best.items()} | {"rows": len(rows)},
                  note="" if target.compile else "compiled step not timed on this target")]


def _clip_file(folder: Path, seconds: float, fps: int, height: int) -> Path | None:
    """An h264 mp4 (16:9) written with PyAV (None without PyAV): what `sample` decodes in a real answer."""
    try:
        import av
    except ImportError:
        return None
    path = folder / "clip.mp4"
    width = height * 16 // 9 // 2 * 2
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for img in synthetic_frames(int(seconds * fps), size=height):
            img = np.concatenate([img, img[:, : width - height]], 1)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")))
        out.mux(stream.encode())
    return path


def answer_stages(qa, target: Target, report, max_new: int = 16) -> list[Check]:
    """One `ask`, stage by stage (sampling, vision tower, prefill, decode), unpruned vs FastV K=2 R=0.5."""
    from ..model import LoadedModel
    from ..pipeline import VideoQA
    from ..video import sample_frames
    from .models import clip_of

    loaded = LoadedModel(qa.model, qa.processor, qa.device, qa.dtype, qa.name)
    with tempfile.TemporaryDirectory() as tmp:
        path = _clip_file(Path(tmp), *target.clip)
        rows = {}
        for method in ("warm-up", "none", "fastv"):
            fresh = VideoQA(loaded, max_new_tokens=max_new)  # empty caches: the vision tower runs again
            cfg = PruneConfig(method="none" if method != "fastv" else "fastv", k=2, r=0.5).validate()
            with Timer(device_clock(qa.device)) as t_sample:
                clip = sample_frames(path, 8) if path else clip_of(synthetic_frames(8))
            with Timer(device_clock(qa.device)) as t_encode:
                fresh.encode(clip.frames)
            with Timer(device_clock(qa.device)) as t_prompt:
                reqs = [fresh.prepare(clip, QUESTION, None, cfg, 8, max_new)]
            with Timer(device_clock(qa.device)) as t_prefill, torch.inference_mode():
                state = fresh.prefill(reqs, fresh.collate(reqs))
            with Timer(device_clock(qa.device)) as t_decode, torch.inference_mode():
                tokens = sum(1 for _ in fresh.decode(reqs, state))
            rows[method] = dict(sample=t_sample.seconds, encode=t_encode.seconds, prompt=t_prompt.seconds,
                                prefill=t_prefill.seconds, decode=t_decode.seconds, deltas=tokens)
    for row in rows.values():
        row["total"] = sum(row[s] for s in ("sample", "encode", "prompt", "prefill", "decode"))
    none, fastv = rows["none"], rows["fastv"]
    lines = ["| method | sampling s | vision tower s | prompt s | prefill s | decode s | total s |",
             "|---|---|---|---|---|---|---|"]
    for name in ("none", "fastv"):
        r = rows[name]
        lines.append(f"| {name} | {r['sample']:.3f} | {r['encode']:.3f} | {r['prompt']:.3f} | {r['prefill']:.3f} "
                     f"| {r['decode']:.3f} | {r['total']:.3f} |")
    published = FASTV_A40_7B[1] / FASTV_A40_7B[0]
    lines.append(f"\nFastV / unpruned: total {fastv['total'] / none['total']:.3f}, prefill "
                 f"{fastv['prefill'] / none['prefill']:.3f}, LLM (prefill + {max_new} tokens) "
                 f"{(fastv['prefill'] + fastv['decode']) / (none['prefill'] + none['decode']):.3f}; FastV paper "
                 f"(LLaVA-1.5-7B, A40): {FASTV_A40_7B[0]} -> {FASTV_A40_7B[1]} s = {published:.3f}. "
                 f"Sampling: " + (f"PyAV, {target.clip[0]:g} s {target.clip[1]} fps h264 clip, {target.clip[2]}p"
                                  if path else "not measured (no PyAV)") + ".")
    report.tables[f"One answer by stage (8 frames, {max_new} new tokens)"] = "\n".join(lines)
    return [Check("end-to-end ask: FastV / unpruned", INFO, f"compared with FastV's published {published:.3f}",
                  {"total_ratio": fastv["total"] / none["total"], "prefill_ratio": fastv["prefill"] / none["prefill"],
                   "total_s_none": none["total"], "total_s_fastv": fastv["total"],
                   "sampling_measured": path is not None},
                  note="" if path else "PyAV missing: frames made in memory, sampling time not measured")]


def tower_speed(qa, target: Target, report) -> list[Check]:
    """The video tower with and without temporal attention at the model's tower shapes, 8 frames (`videoqa bench
    tower`'s row): a separate random tower on the same device and dtype."""
    from ..bench.tower import format_tower_table, tower_rows

    rows = tower_rows(target.device, target.dtype, 8, target.repeats, config=qa.model.config.vision_config)
    report.tables["Video tower: temporal attention's cost (8 frames)"] = format_tower_table(
        rows, f"{target.name} tower shapes, {str(target.dtype).removeprefix('torch.')}, median of {target.repeats}")
    hf, published = rows
    return [Check("video tower: temporal attention / -hf", INFO, "time ratio next to the FLOPs ratio",
                  {"seconds_hf": hf.seconds, "seconds_temporal": published.seconds,
                   "time_ratio": published.seconds / hf.seconds, "flops_ratio": published.gflops / hf.gflops})]
