"""The timing harness: honest timings and peak memory of one call, on CUDA and on CPU, and a call with a timeout.

CUDA kernels run asynchronously: a wall-clock reading right after launching work measures the launch, and
the rest of the work is billed to whatever is timed next. `device_clock` synchronises the device before
every reading. CUDA's allocator keeps a resettable peak; a CPU process only has a lifetime high-water mark
(which would report the biggest call ever for every later one), so on CPU the resident set is sampled in a
thread while the call runs.

`device_clock` is the one clock; `Timer` times a block through it, `best_of` repeats a call and keeps the
fastest, `PeakMemory` measures a call's peak, `call_with_timeout` abandons a call that hangs.
"""

from __future__ import annotations

import _thread
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # torch is imported where it is used: video decoding needs the timeout, not torch
    import torch

Clock = Callable[[], float]
T = TypeVar("T")


def device_clock(device: torch.device, sync: Callable[[], None] | None = None) -> Clock:
    """Seconds (perf_counter) read after `sync()`; by default CUDA devices synchronise, others read directly."""
    if sync is None and device.type == "cuda":
        import torch

        def sync() -> None:
            torch.cuda.synchronize(device)
    if sync is None:
        return time.perf_counter

    def now() -> float:
        sync()
        return time.perf_counter()

    return now


class Timer:
    """Seconds of a `with` block, read through `clock` (pass a `device_clock`: on CUDA it synchronises, so the
    block's queued kernels are billed to it and not to whatever is timed next)."""

    def __init__(self, clock: Clock = time.perf_counter):
        self.clock = clock
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self._t0 = self.clock()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = self.clock() - self._t0


def best_of(repeats: int, fn: Callable[[], T], clock: Clock = time.perf_counter) -> tuple[float, T]:
    """(seconds of the fastest of `repeats` calls of `fn`, what that call returned). The minimum, because on
    a shared machine noise only ever adds time."""
    best, value = float("inf"), None
    for _ in range(max(repeats, 1)):
        with Timer(clock) as t:
            out = fn()
        if t.seconds < best:
            best, value = t.seconds, out
    return best, value


def call_with_timeout(fn: Callable[[], T], timeout_s: float | None, name: str = "call-with-timeout") -> T:
    """`fn()`, run in a daemon thread; after `timeout_s` seconds raise TimeoutError (no timeout: call directly).

    A hung native call (a decoder stuck on a corrupt file) cannot be killed from Python: the thread is
    abandoned, not joined, and being a daemon it does not block interpreter exit. An exception `fn` raises is
    re-raised in the caller's thread."""
    if not timeout_s:
        return fn()
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"gave up after {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def rss_bytes() -> int:
    """The process's resident set now (Linux /proc; elsewhere its high-water mark, the best there is)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss * (1 if os.uname().sysname == "Darwin" else 1024)


class RssSampler:
    """The largest resident set seen between start() and stop(), sampled every `interval` seconds.

    The sampling thread is started without waiting for it to run and stopped without joining it: threading.Thread's
    start() and join() each wait for the thread to be scheduled, which on a loaded CPU cost milliseconds a call (a
    prefix-cached question is about ten). Each start() gets its own stop event and running maximum, so a thread still
    finishing its last reading never writes into a later call's."""

    def __init__(self, interval: float = 0.001, read: Callable[[], int] = rss_bytes):
        self.interval, self.read = interval, read
        self.base = self.peak = 0
        self._run: _SamplerRun | None = None

    def start(self) -> RssSampler:
        self.base = self.peak = self.read()
        self._run = _SamplerRun(threading.Event(), [self.base])
        _thread.start_new_thread(self._sample, (self._run,))
        return self

    def _sample(self, run: _SamplerRun) -> None:
        while not run.stop.wait(self.interval):
            run.peak[0] = max(run.peak[0], self.read())

    def stop(self) -> int:
        if self._run is not None:
            self._run.stop.set()
            self.peak = self._run.peak[0]
        self.peak = max(self.peak, self.read())
        return self.peak


@dataclass(frozen=True)
class _SamplerRun:
    stop: threading.Event
    peak: list[int]  # one item: the largest reading so far, written by the sampling thread


class PeakMemory:
    """Peak memory of one call: `start()` before it, `stop()` after; returns (bytes, kind).

    kind "cuda-max-allocated": the CUDA allocator's peak since start (weights included);
    "cpu-rss-sampled": the largest resident set sampled during the call (the whole process).
    `base` is the same reading at start, so `peak - base` is what the call added.
    """

    def __init__(self, device: torch.device | str):
        import torch

        self.device = torch.device(device)
        self._sampler = None if self.device.type == "cuda" else RssSampler()
        self.base = 0

    def start(self) -> PeakMemory:
        import torch

        if self._sampler is None:
            self.base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._sampler.start()
            self.base = self._sampler.base
        return self

    def stop(self) -> tuple[int, str]:
        import torch

        if self._sampler is None:
            return torch.cuda.max_memory_allocated(self.device), "cuda-max-allocated"
        return self._sampler.stop(), "cpu-rss-sampled"


def free_memory_bytes(device: str | torch.device) -> int:
    """Memory a new allocation can use now: CUDA free memory from the driver plus what PyTorch's caching
    allocator holds unused; CPU: MemAvailable (Linux), else available physical pages."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
