"""Peak memory of one prefill per pruning method, each measured in a fresh process.

A process's memory high-water mark is set once and never goes down, so every method gets a process of
its own (multiprocessing's "spawn" start method: a clean interpreter, not a fork of this one). On CUDA
the allocator's peak is read; on CPU the resident set is sampled while the prefill runs, because building
the model already set the process's high-water mark.
"""

from __future__ import annotations

import multiprocessing

from .. import llm
from ..measure import PeakMemory
from ..pruning import REGISTRY, Method
from .lm import bench_config, build_lm, llm_inputs
from .setup import Setup


def measure_peaks(setup: Setup, methods: list[tuple[str, float]], k: int) -> dict[str, float]:
    """Method -> peak MB of one prefill above the weights and inputs, one fresh process per method."""
    ctx = multiprocessing.get_context("spawn")
    peaks = {}
    for method, r in methods:
        with ctx.Pool(1) as pool:  # the declaration travels along: a fresh process knows only the built-ins
            peaks[method] = pool.apply(peak_memory_mb, (setup, REGISTRY.get(method), r, k))
    return peaks


def peak_memory_mb(setup: Setup, method: Method, r: float, k: int) -> float:
    """Run in a fresh process: peak memory (MB) of one prefill above the weights and inputs."""
    if method.name not in REGISTRY:  # a method registered by a plugin or a test in the parent
        REGISTRY.register(method)
    model = build_lm(setup)
    inputs, plan, _ = llm_inputs(model, setup.frames, bench_config(method.name, r, k), r)

    memory = PeakMemory(setup.device).start()
    llm.prefill(model, *inputs, plan)
    peak, _kind = memory.stop()
    return (peak - memory.base) / 2**20
