"""A fusion of 12 segments shared by the CPU and GPU tests: pointwise work ending in a full
reduction that the next segment reads, eleven times, then a last pointwise segment."""

from __future__ import annotations

import numpy as np

import braze as bz


def alternating(reductions: int = 11) -> bz.Fusion:
    with bz.Fusion(name="alternating") as f:
        t = f.define_tensor([-1, -1])
        for i in range(reductions):
            t = bz.ops.relu(t * 1.01 + 0.01 * i)
            t = t - bz.ops.sum(t, axes=[0, 1]) * 1e-3
        f.add_output(t * 1.0)
    return f


def reference(x: np.ndarray, reductions: int = 11) -> np.ndarray:
    t = x.astype(np.float64)
    for i in range(reductions):
        t = np.maximum(t * 1.01 + 0.01 * i, 0)
        t = t - t.sum() * 1e-3
    return t
