"""A residual add, or dropout and a residual add, under rms_norm or layer_norm, returning h and the
norm of h (what braze/passes/fold_rows.py makes one task), and its float64 NumPy reference: shared by
the CPU tests (tests/engine/test_fold_rows_fusions.py) and the GPU tests (tests/cuda/test_fold_rows_gpu.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import braze as bz

P, SEED, EPS = 0.1, 1234, 1e-5
NUMPY = {bz.float32: np.float32, bz.bfloat16: ml_dtypes.bfloat16, bz.float16: np.float16, bz.float64: np.float64}
NORMS = [("rms_norm", False), ("layer_norm", False), ("layer_norm", True)]  # (norm, dropout)
NORM_IDS = ["residual_rms_norm", "residual_layer_norm", "dropout_residual_layer_norm"]


def build(norm: str, dtype, rank: int, dropout: bool) -> bz.Fusion:
    """x, residual, weight, bias -> [y = norm(h), h], h = (dropout(x) +) residual computed in float32."""
    with bz.Fusion() as f:
        x, r = (f.define_tensor([-1] * rank, dtype=dtype) for _ in range(2))
        w, b = (f.define_tensor([-1], dtype=dtype) for _ in range(2))
        wide = bz.ops.cast(x, bz.float32)
        if dropout:
            wide = bz.ops.where(bz.ops.rand(x.shape, seed=SEED) >= P, wide * (1 / (1 - P)), 0.0)
        h = bz.ops.cast(wide + bz.ops.cast(r, bz.float32), dtype)
        f.add_output(bz.ops.rms_norm(h, w, eps=EPS) if norm == "rms_norm" else bz.ops.layer_norm(h, w, b, eps=EPS))
        f.add_output(h)
    return f


def keep_mask(shape) -> np.ndarray:
    """rand(seed) >= p as the reference backend draws it (every backend draws the same numbers)."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.rand(f.define_tensor([-1] * len(shape)).shape, seed=SEED) >= P)
    return f.execute([np.empty(shape, np.float32)], backend="reference")[0]


def reference(norm: str, dtype, dropout: bool, x, r, w, b) -> tuple[np.ndarray, np.ndarray]:
    """[y, h] in float64 from float64 inputs, h rounded to its dtype first, as the fusion stores it."""
    h = (np.where(keep_mask(x.shape), x * np.float64(np.float32(1 / (1 - P))), 0) if dropout else x) + r
    h = h.astype(NUMPY[dtype]).astype(np.float64)
    if norm == "rms_norm":
        return h / np.sqrt((h * h).mean(-1, keepdims=True) + EPS) * w, h
    centred = h - h.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + EPS) * w + b, h
