"""The `llm` and `frames` suites: LLM prefill and decode with and without pruning, on a random-weight decoder.

- llm: prefill time and peak memory of every registered method; the measured time ratio next to the
  theoretical FLOPs ratio (an in-LLM method's from the token counts it left at each layer where it acted); the
  share of prefill spent ranking; decode time per token on the pruned vs full cache; cache bytes.
- frames: prefill time for 8/12/15 frames with no pruning, fixed R=0.5 and adaptive R.

All ratios come from one run, interleaved; these machines are noisy, so compare rows, not runs.
Presets: `mid` (d=1024, 8 layers, fp32: runs on a laptop CPU) and `7b` (Video-LLaVA-7B's language
model shapes, random weights; use on a GPU with --dtype bfloat16).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import llm
from ..measure import Clock, Timer, best_of, device_clock
from ..pruning import REGISTRY, Acts, PruneConfig, keep_count
from ..pruning.flops import estimate_flops, staged_flops
from .lm import TEXT_AFTER, TEXT_BEFORE, TOKENS_PER_FRAME, bench_config, build_lm, dims_of, llm_inputs, random_encoding
from .setup import Setup


def time_prefill(model, inputs, plan, clock: Clock, repeats: int) -> tuple[float, float, object]:
    """Best-of-`repeats` prefill seconds, that run's ranking seconds, and its state. Both times are read
    through `clock` (a `device_clock`: on CUDA, a ranking timed without a sync measures only the launch)."""
    best, state = best_of(repeats, lambda: llm.prefill(model, *inputs, plan, clock=clock), clock)
    return best, state.t_rank, state


def time_decode(model, state, n_tokens: int, clock: Clock) -> float:
    """Seconds per decoded token on `state`'s cache (greedy, fixed token count)."""
    lm = llm.adapt(model)
    token = lm.embed_tokens(torch.zeros(1, 1, dtype=torch.long, device=state.logits.device))
    with Timer(clock) as t:
        for _ in range(n_tokens):
            llm.decode_one_token(lm, state, token)
    return t.seconds / n_tokens


def method_rows(setup: Setup, methods: list[tuple[str, float | str]], repeats: int, decode_tokens: int,
                k: int = 2, clock: Clock | None = None) -> list[dict]:
    """Time every (method, R) on one model in one process, interleaved so machine noise hits all alike.
    Every time is read through `clock` (default: the device's synced clock)."""
    from ..measure import free_memory_bytes
    from ..pruning.adaptive import decide
    from ..pruning.budget import only_kept_count

    clock = clock or device_clock(torch.device(setup.device))
    model = build_lm(setup)
    dtype = getattr(torch, setup.dtype)
    dims = dims_of(model, dtype)
    n_vis = setup.frames * TOKENS_PER_FRAME
    n_text = TEXT_BEFORE + TEXT_AFTER
    rows = []
    for method, r in methods:
        cfg = bench_config(method, r, k)
        decision = None
        if cfg.adaptive:
            decision = decide(None, dims, n_text, free_memory_bytes(setup.device), k=cfg.layer or 0,
                              frames=setup.frames, renumbered=only_kept_count(cfg))
            r = decision.r
        r = float(r) if cfg.method_spec.uses_r else 0.0
        inputs, plan, kept = llm_inputs(model, setup.frames, cfg, r)
        t_select = _selection_seconds(cfg, setup.frames, keep_count(n_vis, r), dims.hidden, setup.device, clock)
        llm.prefill(model, *inputs, plan)  # warm-up
        t, t_rank, state = time_prefill(model, inputs, plan, clock, repeats)
        t_dec = time_decode(model, state, decode_tokens, clock)
        k, flops = cfg.layer, estimate_flops(dims, n_text, n_vis, kept, cfg.layer)
        if state.stages:  # an in-LLM method: the counts it left at each layer where it acted (after a selection's)
            before = [(0, kept)] if cfg.method_spec.acts is Acts.BEFORE_LLM else []
            k, kept = state.boundaries[0], len(state.kept[0])
            flops = staged_flops(dims, n_text, n_vis, before + [(layer, counts[0]) for layer, counts in state.stages])
        rows.append(dict(frames=setup.frames, method=method, k=k, r=round(r, 3), kept=kept,
                         auto=decision is not None, prefill_s=t + t_select, rank_s=t_rank + t_select,
                         decode_ms=1000 * t_dec, cache_mb=llm.cache_bytes(state.cache) / 2**20,
                         flops_ratio=flops.ratio))
    base = next((row["prefill_s"] for row in rows if row["method"] == "none"), None)
    for row in rows:
        row["time_ratio"] = row["prefill_s"] / base if base else float("nan")
    return rows


def _selection_seconds(cfg: PruneConfig, frames: int, kept: int, hidden: int = 4096, device: str = "cpu",
                       clock: Clock | None = None) -> float:
    """Cost of choosing tokens before the LLM (VisPruner's similarity passes, random's draw, FastVID's
    segmentation, density peaks and merging), on a random encoding of LLM-sized features, read through
    `clock` (default: the device's synced clock)."""
    spec = cfg.method_spec
    if spec.acts is not Acts.BEFORE_LLM:
        return 0.0
    clock = clock or device_clock(torch.device(device))
    enc = random_encoding(frames, hidden, device)
    with Timer(clock) as t:
        spec.select(enc, kept, cfg.options)
    return t.seconds


def format_llm_table(rows: list[dict], peaks: dict[str, float] | None = None) -> str:
    head = ("| frames | method | K | R | kept visual | prefill s | time ratio | FLOPs ratio | time/FLOPs "
            "| ranking % | decode ms/token | KV cache MB |" + (" peak MB |" if peaks else ""))
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        rank_pct = 100 * r["rank_s"] / r["prefill_s"] if r["prefill_s"] else 0.0
        k = "-" if r["k"] is None else r["k"]
        line = (f"| {r['frames']} | {r['method']}{' (auto)' if r['auto'] else ''} | {k} "
                f"| {r['r']:.2f} | {r['kept']} | {r['prefill_s']:.3f} | {r['time_ratio']:.3f} "
                f"| {r['flops_ratio']:.3f} | {r['time_ratio'] / r['flops_ratio']:.2f} | {rank_pct:.2f} "
                f"| {r['decode_ms']:.1f} | {r['cache_mb']:.1f} |")
        if peaks:
            line += f" {peaks.get(r['method'], float('nan')):.0f} |" if not r["auto"] else " |"
        lines.append(line)
    return "\n".join(lines)


def run_llm(setup: Setup, k: int = 2, repeats: int = 3, decode_tokens: int = 16, memory: bool = True) -> str:
    """The `llm` table (8 frames; `setup.frames` is ignored) and its FastV summary line."""
    from .memory import measure_peaks

    setup = replace(setup, frames=8)
    methods = [(m.name, 0.5 if m.uses_r else 0.0) for m in REGISTRY]  # every registered method
    rows = method_rows(setup, methods, repeats, decode_tokens, k=k)
    peaks = measure_peaks(setup, methods, k) if memory else None
    fastv = next(r for r in rows if r["method"] == "fastv")
    table = format_llm_table(rows, peaks)
    return (f"LLM prefill, preset {setup.preset} ({setup.dtype}, {setup.device}, {setup.attn}), 8 frames = "
            f"{8 * TOKENS_PER_FRAME} visual + {TEXT_BEFORE + TEXT_AFTER} text tokens, best of {repeats}:\n"
            f"{table}\n"
            f"FastV K={k} R=0.5: measured prefill ratio {fastv['time_ratio']:.3f} vs theoretical FLOPs "
            f"ratio {fastv['flops_ratio']:.3f} (x{fastv['time_ratio'] / fastv['flops_ratio']:.2f}); ranking "
            f"{100 * fastv['rank_s'] / fastv['prefill_s']:.2f}% of prefill")


def run_frames(setup: Setup, k: int = 2, repeats: int = 3) -> str:
    """The `frames` table: 8, 12 and 15 frames (`setup.frames` is ignored), fixed and adaptive R."""
    rows = []
    for frames in (8, 12, 15):
        methods = [("none", 0.0), ("fastv", 0.5), ("fastv", "auto"), ("vispruner", "auto"), ("random", "auto")]
        rows += method_rows(replace(setup, frames=frames), methods, repeats, 1, k=k)
    base8 = next(r["prefill_s"] for r in rows if r["frames"] == 8 and r["method"] == "none")
    auto15 = next(r["prefill_s"] for r in rows if r["frames"] == 15 and r["method"] == "fastv" and r["auto"])
    return (f"Prefill vs frames, preset {setup.preset} (time ratio is against the same frame count unpruned):\n"
            f"{format_llm_table(rows)}\n"
            f"15 frames with FastV auto R: {auto15:.3f} s vs unpruned 8 frames {base8:.3f} s "
            f"(ratio {auto15 / base8:.2f})")
