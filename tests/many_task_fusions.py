"""A fusion of many independent tasks (a row sum, a column sum and a softmax of each of its
inputs, like a model's parameter gradients side by side), its inputs and its NumPy float64
reference: shared by the CPU tests of split NVRTC programs (tests/runtime/test_split_programs.py)
and their GPU test (tests/cuda/test_split_programs_gpu.py)."""

from __future__ import annotations

import numpy as np

import braze as bz


def many_tasks(count: int) -> bz.Fusion:
    """Per input n: the sum of its rows times n + 1, the sum of its columns and the softmax of its
    rows (a row task with a function for one warp a row)."""
    with bz.Fusion() as f:
        for n in range(count):
            x = f.define_tensor((-1, -1), dtype=bz.float32)
            f.add_output(bz.ops.sum(x * float(n + 1), axes=[1]))
            f.add_output(bz.ops.sum(x, axes=[0]))
            f.add_output(bz.ops.softmax(x, -1))
    return f


def inputs(count: int, seed: int = 0) -> list[np.ndarray]:
    """An input of its own shape each, positive (sums without cancellation)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 2.0, (37 + 11 * n, 300 + 7 * n)).astype(np.float32) for n in range(count)]


def reference(arrays: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for n, x in enumerate(np.asarray(a, np.float64) for a in arrays):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out += [(x * (n + 1)).sum(axis=1), x.sum(axis=0), e / e.sum(axis=1, keepdims=True)]
    return out
