"""Atomic updates into a small target on the CPU (a histogram, an energy sum), which braze adds into a
private copy per thread (braze/codegen/llvm_private.py), against NumPy's own way to the same result
and against the same kernel made to keep every update atomic. Prints a table and writes JSON to
benchmarks/results/cpu-atomics.json.

    .venv/bin/python benchmarks/cpu_atomics.py
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
from timing import median_ms

import braze as bz
from braze.compile.compiled_kernel import worker_count

RESULTS = Path(__file__).parent / "results"
N = 1 << 20


@bz.kernel
def histogram(ids: bz.Array[bz.int64, 1], counts: bz.Array[bz.int64, 1]):
    for i in range(ids.shape[0]):
        counts[ids[i]] += 1


@bz.kernel
def histogram_atomic(ids: bz.Array[bz.int64, 1], counts: bz.Array[bz.int64, 1], seen: bz.Array[bz.int64, 1]):
    """The same, with each old value read back: nothing can be privatized."""
    for i in range(ids.shape[0]):
        seen[i] = bz.atomic_add(counts[ids[i]], 1)


@bz.kernel
def kinetic_energy(v: bz.Array[bz.vec3, 1], m: bz.Array[bz.float32, 1], energy: bz.Array[bz.float64, 1]):
    for i in range(v.shape[0]):
        bz.atomic_add(energy[0], bz.float64(0.5 * m[i] * bz.length_sq(v[i])))


def rows() -> list[dict]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 256, N)
    counts, seen = np.zeros(256, np.int64), np.zeros(N, np.int64)
    v, m = rng.standard_normal((N, 3)).astype(np.float32), rng.uniform(1, 2, N).astype(np.float32)
    energy = np.zeros(1)
    return [
        {"case": "histogram of 1M ids into 256 bins", "braze_ms": median_ms(lambda: histogram(ids, counts)),
         "all_atomic_ms": median_ms(lambda: histogram_atomic(ids, counts, seen)),
         "numpy_ms": median_ms(lambda: np.bincount(ids, minlength=256)), "numpy": "np.bincount"},
        {"case": "kinetic energy of 1M vec3 into one float64",
         "braze_ms": median_ms(lambda: kinetic_energy(v, m, energy)), "all_atomic_ms": float("nan"),
         "numpy_ms": median_ms(lambda: 0.5 * np.dot(m.astype(np.float64), (v.astype(np.float64) ** 2).sum(axis=1))),
         "numpy": "float64 dot"},
    ]


def main() -> int:
    table = rows()
    print(f"{'case':<44} {'braze ms':>9} {'all atomic ms':>14} {'NumPy ms':>9}  NumPy as")
    for r in table:
        print(f"{r['case']:<44} {r['braze_ms']:9.3f} {r['all_atomic_ms']:14.3f} {r['numpy_ms']:9.3f}  {r['numpy']}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "python": sys.version.split()[0],
            "numpy": np.__version__, "threads": worker_count()}
    out = RESULTS / "cpu-atomics.json"
    out.write_text(json.dumps({"meta": meta, "rows": table}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
