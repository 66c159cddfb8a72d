"""Timing shared by the benchmarks: medians after a warm-up, on the host and on a GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeats: int = 9) -> float:
    """The median of `repeats` timed calls of `fn`, in milliseconds, after one warm-up call."""
    fn()  # warm-up: tracing, compilation, caches
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def device_ms(fn: Callable[[], object], repeats: int = 30) -> float:
    """Median time of `fn` in ms, by CUDA events on torch's current stream, after warm-up. The GPU
    is kept busy (a short sleep kernel) while the host enqueues the start event, the call and the
    end event: on an idle GPU the start event fires at once and the window counts the call's host
    time too, which for a 50 us kernel was a quarter of what was measured, for every library."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU cycles: longer than any call's host time
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6


def copy_ceiling_gbps(nbytes: int) -> float:
    """A device-to-device copy of `nbytes`: bytes read plus written over its device time."""
    import torch

    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    return gbps(2 * nbytes, device_ms(lambda: dst.copy_(src)))
