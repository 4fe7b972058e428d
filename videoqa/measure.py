"""Honest timings and peak memory of one call, on CUDA and on CPU.

CUDA kernels run asynchronously: a wall-clock reading right after launching work measures the launch, and
the rest of the work is billed to whatever is timed next. `device_clock` synchronises the device before
every reading. CUDA's allocator keeps a resettable peak; a CPU process only has a lifetime high-water mark
(which would report the biggest call ever for every later one), so on CPU the resident set is sampled in a
thread while the call runs.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable

import torch

Clock = Callable[[], float]


def device_clock(device: torch.device, sync: Callable[[], None] | None = None) -> Clock:
    """Seconds (perf_counter) read after `sync()`; by default CUDA devices synchronise, others read directly."""
    if sync is None and device.type == "cuda":
        def sync() -> None:
            torch.cuda.synchronize(device)
    if sync is None:
        return time.perf_counter

    def now() -> float:
        sync()
        return time.perf_counter()

    return now


def rss_bytes() -> int:
    """The process's resident set now (Linux /proc; elsewhere its high-water mark, the best there is)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss * (1 if os.uname().sysname == "Darwin" else 1024)


class RssSampler:
    """The largest resident set seen between start() and stop(), sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.001, read: Callable[[], int] = rss_bytes):
        self.interval, self.read = interval, read
        self.base = self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RssSampler:
        self.base = self.peak = self.read()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.read())

    def stop(self) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.read())
        return self.peak


class PeakMemory:
    """Peak memory of one call: `start()` before it, `stop()` after; returns (bytes, kind).

    kind "cuda-max-allocated": the CUDA allocator's peak since start (weights included);
    "cpu-rss-sampled": the largest resident set sampled during the call (the whole process).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._sampler = None if device.type == "cuda" else RssSampler()

    def start(self) -> PeakMemory:
        if self._sampler is None:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._sampler.start()
        return self

    def stop(self) -> tuple[int, str]:
        if self._sampler is None:
            return torch.cuda.max_memory_allocated(self.device), "cuda-max-allocated"
        return self._sampler.stop(), "cpu-rss-sampled"
