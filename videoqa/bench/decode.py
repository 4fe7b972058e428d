"""Decode time per token: the eager loop (the prefill's cache) vs the static-cache step, plain and `torch.compile`d.

Each mode decodes from its own prefill of the same prompt (FastV or not), after a few warm-up steps (which, for
the compiled step, include the compilation and, on CUDA, the graph capture: reported separately). Timings are
synchronised on CUDA.
"""

from __future__ import annotations

import torch

from .. import llm
from ..measure import Clock, Timer, device_clock
from ..pruning.method import Acts
from .lm import TOKENS_PER_FRAME, bench_config, build_lm, make_prompt
from .setup import Setup

WARMUP = 3


@torch.inference_mode()
def time_mode(model, state: llm.PrefillResult, mode: str, n_tokens: int,
              decoder: llm.DecodeLoop | None = None, clock: Clock | None = None) -> tuple[float, float]:
    """(seconds per token over `n_tokens` steps, seconds of the warm-up steps) for one decode mode, read
    through `clock` (default: the device's synced clock)."""
    device = state.logits.device
    clock = clock or device_clock(device)
    tokens = state.logits.argmax(-1)
    if mode == "eager":
        lm = llm.adapt(model)
        embeds = lm.embed_tokens(tokens[:, None])

        def run_step(_i: int) -> None:
            llm.decode_one_token(lm, state, embeds)
    else:
        n_layers = len(state.cache.layers)
        cache = llm.StaticKVCache.from_prefill(state, n_layers, WARMUP + n_tokens)
        step = torch.zeros(1, dtype=torch.long, device=device)

        def run_step(_i: int) -> None:
            decoder.step(cache, tokens, step)
            step.add_(1)
    with Timer(clock) as warm:
        for i in range(WARMUP):
            run_step(i)
    with Timer(clock) as timed:
        for i in range(n_tokens):
            run_step(i)
    return timed.seconds / n_tokens, warm.seconds


def decode_rows(setup: Setup, plans: list[tuple[str, float]], n_tokens: int, compile: bool, k: int = 2,
                repeats: int = 2, model=None, inputs=None, decoders: dict | None = None) -> list[dict]:
    """ms/token of each decode mode (best of `repeats`, modes interleaved), for each (method, R) in `plans`
    (a registered method acting inside the LLM, e.g. "fastv", at layer `k`, or "none"). The warm-up column is
    the first run's (the compilation, for the compiled step).

    By default a random-weight decoder of `setup`'s preset and its synthetic prompt; `model` and `inputs`
    (embeds, attention mask, visual mask) replace them, `decoders` reuses Decoders (and their compiled
    graphs) across calls."""
    model = model if model is not None else build_lm(setup)
    modes = ["eager", "static"] + (["compiled"] if compile else [])
    if decoders is None:
        decoders = {}
    decoders.setdefault("static", llm.DecodeLoop(model, "static"))
    if compile:
        decoders.setdefault("compiled", llm.DecodeLoop(model, "compiled"))
    inputs = inputs if inputs is not None else make_prompt(model, setup.frames)
    rows = []
    for method, r in plans:
        cfg = bench_config(method, r, k)
        spec = cfg.method_spec
        # the method's own ranking plan when it prunes inside the LLM; r for each prompt of the batch
        plan = spec.plan(cfg.options, [r] * len(inputs[0]), TOKENS_PER_FRAME) if spec.acts is Acts.IN_LLM else None
        row = dict(frames=setup.frames, method=method, k=k if plan else None, r=r if plan else 0.0)
        for _ in range(repeats):
            for mode in modes:
                state = llm.prefill(model, *inputs, plan)
                row["cache_tokens"] = _cache_tokens(state)
                per_token, warm = time_mode(model, state, mode, n_tokens, decoders.get(mode))
                row[f"{mode}_ms"] = min(row.get(f"{mode}_ms", float("inf")), 1000 * per_token)
                row.setdefault(f"{mode}_warmup_s", warm)
        rows.append(row)
    return rows


def _cache_tokens(state: llm.PrefillResult) -> str:
    lengths = [layer.keys.shape[2] for layer in state.cache.layers]
    first, last = lengths[0], lengths[-1]
    return str(first) if first == last else f"{first} / {last}"


def format_decode_table(rows: list[dict]) -> str:
    compiled = "compiled_ms" in rows[0]
    head = ("| frames | method | K | R | KV tokens (layers < K / >= K) | eager ms/token | static ms/token "
            "| static/eager |")
    if compiled:
        head += " compiled ms/token | compiled/eager | compile + capture s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = (f"| {r['frames']} | {r['method']} | {'-' if r['k'] is None else r['k']} | {r['r']:.2f} "
                f"| {r['cache_tokens']} | {r['eager_ms']:.2f} | {r['static_ms']:.2f} "
                f"| {r['static_ms'] / r['eager_ms']:.2f} |")
        if compiled:
            line += (f" {r['compiled_ms']:.2f} | {r['compiled_ms'] / r['eager_ms']:.2f} "
                     f"| {r['compiled_warmup_s']:.1f} |")
        lines.append(line)
    return "\n".join(lines)


def run_decode(setup: Setup, n_tokens: int, compile: bool, k: int = 2, repeats: int = 2) -> str:
    """The decode table for none and FastV R=0.5 at `setup.frames` frames."""
    rows = decode_rows(setup, [("none", 0.0), ("fastv", 0.5)], n_tokens, compile, k, repeats)
    n_vis = setup.frames * TOKENS_PER_FRAME
    return (f"Decode, preset {setup.preset} ({setup.dtype}, {setup.device}, {setup.attn}), {setup.frames} frames "
            f"({n_vis} visual tokens), {n_tokens} tokens after {WARMUP} warm-up steps, best of {repeats}:\n"
            f"{format_decode_table(rows)}")
