"""An elementwise fusion per dtype and rank whose task moves vectors (braze/codegen/cuda_rows.py,
write_thread_vectors), and its float64 reference: shared by the CPU-run and GPU tests."""

from __future__ import annotations

import numpy as np

import braze as bz


def elementwise(dtype: bz.DType, rank: int = 1) -> bz.Fusion:
    """Two outputs over three inputs of `rank` axes and a broadcast scalar (bool: logical ops, no
    scalar). Of rank 2 and more, with every array laid out row-major, the task is one flat range
    (braze/schedule/rows.py, flat_pointwise)."""
    with bz.Fusion(name=f"thread_vectors_{dtype.name}_{rank}d") as f:
        x, y, z = (f.define_tensor([-1] * rank, dtype=dtype) for _ in range(3))
        if dtype is bz.bool_:
            outs = [bz.ops.logical_or(bz.ops.logical_and(x, y), z), bz.ops.logical_xor(x, z)]
        else:
            s = f.define_scalar(dtype=dtype)
            outs = [x * y + z * s, bz.ops.maximum(x - y, z)]
        for out in outs:
            f.add_output(out)
    return f


def reference(dtype: bz.DType, x, y, z, s=None) -> list[np.ndarray]:
    """The outputs of `elementwise(dtype)` in float64 (bool: bool) from host arrays."""
    if dtype is bz.bool_:
        return [(x & y) | z, x ^ z]
    x, y, z = (np.asarray(a, np.float64) for a in (x, y, z))
    return [x * y + z * s, np.maximum(x - y, z)]
