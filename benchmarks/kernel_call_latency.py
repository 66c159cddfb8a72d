"""Host time of a cached `@bz.kernel` call on the CPU backend (prints a table, writes JSON).

    python benchmarks/kernel_call_latency.py

Rows (nanoseconds per call: 20,000 calls after a warm-up, the median of 7 repeats):
- `axpy` on 16 float32, the same arrays at every call;
- `axpy` alternating between two pairs of arrays (a time loop swapping its buffers);
- a kernel of 6 array arguments and 3 scalars on 16 float32.
The kernels are tiny, so the time is the call's own: binding, the cache lookup, patching and launch.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import braze as bz

RESULTS = Path(__file__).parent / "results"
CALLS, REPEATS = 20_000, 7


@bz.kernel
def axpy(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1], a: bz.float32):
    for i in range(x.shape[0]):
        y[i] += a * x[i]


@bz.kernel
def six_arrays(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1], c: bz.Array[bz.float32, 1],
               d: bz.Array[bz.float32, 1], e: bz.Array[bz.float32, 1], f: bz.Array[bz.float32, 1],
               s: bz.float32, t: bz.float32, u: bz.float32):
    for i in range(a.shape[0]):
        d[i] = s * a[i] + t * b[i]
        e[i] = u * c[i]
        f[i] = a[i] + c[i]


def ns_per_call(step: Callable[[int], None]) -> float:
    """The median over REPEATS of the mean time of CALLS calls of `step(n)`, in nanoseconds."""
    for n in range(1000):
        step(n)
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        for n in range(CALLS):
            step(n)
        samples.append((time.perf_counter_ns() - start) / CALLS)
    return statistics.median(samples)


def rows() -> dict[str, float]:
    x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
    pairs = [(np.ones(16, np.float32), np.zeros(16, np.float32)) for _ in range(2)]
    six = [np.ones(16, np.float32) for _ in range(6)]
    return {
        "(a) axpy, same arrays": ns_per_call(lambda n: axpy(x, y, 0.5)),
        "(b) axpy, two pairs in turn": ns_per_call(lambda n: axpy(*pairs[n & 1], 0.5)),
        "(c) 6 arrays, 3 scalars": ns_per_call(lambda n: six_arrays(*six, 0.5, 1.5, 2.0)),
    }


def main() -> None:
    results = rows()
    for name, ns in results.items():
        print(f"{name:32s} {ns:8.0f} ns")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kernel_call_latency.json").write_text(json.dumps(
        {"machine": platform.processor() or platform.machine(), "ns_per_call": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
