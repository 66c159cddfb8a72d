"""Timing shared by the benchmark scripts: medians after a warm-up."""

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
