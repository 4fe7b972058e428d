"""The timing harness (videoqa.measure): a synced clock bills queued device work to the block that queued it,
best-of keeps the fastest call, peak memory is the call's own, a hung call is abandoned."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from videoqa.bench.llm import Setup, method_rows
from videoqa.errors import VideoError
from videoqa.measure import PeakMemory, Timer, best_of, call_with_timeout, device_clock


class AsyncDevice:
    """A stand-in for CUDA: launched work returns at once and is only finished by `sync()`."""

    def __init__(self):
        self.pending = 0.0
        self.syncs = 0

    def launch(self, seconds: float) -> None:
        self.pending += seconds

    def sync(self) -> None:
        self.syncs += 1
        time.sleep(self.pending)
        self.pending = 0.0


def test_device_clock_reads_after_the_device_finished():
    device = AsyncDevice()
    now = device_clock(torch.device("cuda"), sync=device.sync)
    device.launch(0.05)
    before = time.perf_counter()
    reading = now()
    assert reading - before >= 0.05  # the reading waited for the queued work
    assert device.syncs == 1
    assert device_clock(torch.device("cpu")) is time.perf_counter  # CPU: read directly


def test_timer_bills_queued_work_to_the_block_that_queued_it():
    device = AsyncDevice()
    clock = device_clock(torch.device("cuda"), sync=device.sync)
    with Timer(clock) as launched:
        device.launch(0.1)
    with Timer(clock) as after:
        pass
    assert launched.seconds >= 0.1 and after.seconds < 0.1
    with Timer(time.perf_counter) as unsynced:  # the mis-measurement the synced clock prevents
        device.launch(0.1)
    assert unsynced.seconds < 0.1
    device.sync()


def test_best_of_keeps_the_fastest_call_and_its_result():
    readings = iter([0.0, 5.0, 10.0, 12.0, 20.0, 27.0])  # calls of 5, 2 and 7 s
    calls = itertools.count(1)
    seconds, value = best_of(3, lambda: next(calls), clock=lambda: next(readings))
    assert (seconds, value) == (2.0, 2)


def test_peak_memory_is_what_the_call_added():
    memory = PeakMemory("cpu").start()
    block = np.ones(128 << 20, dtype=np.uint8)  # 128 MiB, touched
    peak, kind = memory.stop()
    del block
    assert kind == "cpu-rss-sampled"
    assert 120 << 20 <= peak - memory.base < 1 << 30


def test_peak_memory_sees_what_the_call_freed_before_it_ended():
    """The sampling thread reads the resident set while the call runs: a block freed before stop() still counts;
    and a second call's peak starts from its own base."""
    memory = PeakMemory("cpu")
    for _ in range(2):
        memory.start()
        block = np.ones(128 << 20, dtype=np.uint8)
        time.sleep(0.3)  # the main thread idle: the sampler reads
        del block
        peak, _ = memory.stop()
        assert 120 << 20 <= peak - memory.base < 1 << 30


def test_call_with_timeout_gives_up_on_a_hang():
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="gave up after 0.2s"):
        call_with_timeout(lambda: time.sleep(5), 0.2)
    assert time.perf_counter() - t0 < 2
    assert call_with_timeout(lambda: 42, 1.0) == 42
    with pytest.raises(VideoError):  # the call's own error reaches the caller
        call_with_timeout(lambda: (_ for _ in ()).throw(VideoError("x", "broken")), 1.0)


def test_bench_ranking_time_is_read_through_the_synced_clock():
    """`bench llm`'s "ranking %": FastV's ranking is timed with the bench's clock (on CUDA, a synced one), so
    with a clock that ticks once per reading both it and the prefill are whole numbers of readings."""
    ticks = itertools.count()
    rows = method_rows(Setup(preset="tiny", frames=2), [("fastv", 0.5)], repeats=1, decode_tokens=1,
                       clock=lambda: float(next(ticks)))
    fastv = rows[0]
    assert fastv["rank_s"] == int(fastv["rank_s"]) >= 1
    assert fastv["prefill_s"] == int(fastv["prefill_s"]) > fastv["rank_s"]
