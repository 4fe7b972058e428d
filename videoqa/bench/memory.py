"""Peak memory of one prefill per pruning method, each measured in a fresh process.

A process's memory high-water mark is set once and never goes down, so every method gets a process of
its own (multiprocessing's "spawn" start method: a clean interpreter, not a fork of this one). On CUDA
the allocator's peak is read; on CPU the resident set is sampled while the prefill runs, because building
the model already set the process's high-water mark.
"""

from __future__ import annotations

import multiprocessing

from .. import engine
from ..measure import PeakMemory
from ..pruning import keep_count
from ..pruning.fastv import FastVPlan
from .llm import TOKENS_PER_FRAME, Setup, build_lm, make_prompt


def measure_peaks(setup: Setup, methods: list[tuple[str, float]], k: int) -> dict[str, float]:
    """Method -> peak MB of one prefill above the weights and inputs, one fresh process per method."""
    ctx = multiprocessing.get_context("spawn")
    peaks = {}
    for method, r in methods:
        with ctx.Pool(1) as pool:
            peaks[method] = pool.apply(peak_memory_mb, (setup, method, r, k))
    return peaks


def peak_memory_mb(setup: Setup, method: str, r: float, k: int) -> float:
    """Run in a fresh process: peak memory (MB) of one prefill above the weights and inputs."""
    model = build_lm(setup)
    n_vis = setup.frames * TOKENS_PER_FRAME
    if method == "fastv":
        inputs, plan = make_prompt(model, setup.frames), FastVPlan(k=k, r=r)
    else:
        n_keep = None if method == "none" else keep_count(n_vis, r)
        inputs, plan = make_prompt(model, setup.frames, n_keep=n_keep), None

    memory = PeakMemory(setup.device).start()
    engine.prefill(model, *inputs, plan)
    peak, _kind = memory.stop()
    return (peak - memory.base) / 2**20
