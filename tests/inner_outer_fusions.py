"""Fusions whose rows and columns reduce one [rows, columns] space (the inner-outer schedule of
braze/codegen/cuda_inner_outer.py), their inputs and float64 NumPy references: layer_norm and
rms_norm backward as the benchmark suite writes them (from the statistics the forward saved, any
float dtype computed in float32), and other folds than sums. Shared by the CPU, NVRTC and GPU tests."""

from __future__ import annotations

import numpy as np

import braze as bz

ops = bz.ops
EPS = 1e-5


def layer_norm_backward(f, dtype=bz.float32):
    """From the statistics the forward saved (mean and rstd per row), as the suite writes it."""
    dy, x = f.define_tensor([-1, -1], dtype=dtype), f.define_tensor([-1, -1], dtype=dtype)
    w = f.define_tensor([-1], dtype=dtype)
    mean, rstd = f.define_tensor([-1, 1]), f.define_tensor([-1, 1])
    dy, x, w = (ops.cast(t, bz.float32) for t in (dy, x, w))
    xhat = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - ops.mean(g, axes=[-1], keepdim=True) - xhat * ops.mean(g * xhat, axes=[-1], keepdim=True))
    return [ops.cast(t, dtype) for t in (dx, ops.sum(dy * xhat, axes=[0]), ops.sum(dy, axes=[0]))]


def layer_norm_backward_reference(dy, x, w, mean, rstd):
    xhat = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return [dx, (dy * xhat).sum(0), dy.sum(0)]


def rms_norm_backward(f, dtype=bz.float32):
    dy, x = f.define_tensor([-1, -1], dtype=dtype), f.define_tensor([-1, -1], dtype=dtype)
    w, rstd = f.define_tensor([-1], dtype=dtype), f.define_tensor([-1, 1])
    dy, x, w = (ops.cast(t, bz.float32) for t in (dy, x, w))
    xhat = x * rstd
    g = dy * w
    dx = rstd * (g - xhat * ops.mean(g * xhat, axes=[-1], keepdim=True))
    return [ops.cast(dx, dtype), ops.cast(ops.sum(dy * xhat, axes=[0]), dtype)]


def rms_norm_backward_reference(dy, x, w, rstd):
    xhat = x * rstd
    g = dy * w
    return [rstd * (g - xhat * (g * xhat).mean(-1, keepdims=True)), (dy * xhat).sum(0)]


def layer_norm_backward_3d(f, dtype=bz.float32):
    """Over [batch, tokens, hidden], dweight and dbias summed over batch and tokens (as PyTorch's
    decomposition writes them): the column task walks two loops over the rows."""
    dy, x = f.define_tensor([-1, -1, -1], dtype=dtype), f.define_tensor([-1, -1, -1], dtype=dtype)
    w = f.define_tensor([-1], dtype=dtype)
    mean, rstd = f.define_tensor([-1, -1, 1]), f.define_tensor([-1, -1, 1])
    dy, x, w = (ops.cast(t, bz.float32) for t in (dy, x, w))
    xhat = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - ops.mean(g, axes=[-1], keepdim=True) - xhat * ops.mean(g * xhat, axes=[-1], keepdim=True))
    return [ops.cast(t, dtype) for t in (dx, ops.sum(dy * xhat, axes=[0, 1]), ops.sum(dy, axes=[0, 1]))]


def layer_norm_backward_3d_reference(dy, x, w, mean, rstd):
    dx, dw, db = layer_norm_backward_reference(dy, x, w, mean, rstd)
    return [dx, dw.sum(0), db.sum(0)]


def rms_norm_backward_4d(f, dtype=bz.float32):
    """Over [2, 3, tokens, hidden]: three loops over the rows."""
    dy, x = f.define_tensor([-1] * 4, dtype=dtype), f.define_tensor([-1] * 4, dtype=dtype)
    w, rstd = f.define_tensor([-1], dtype=dtype), f.define_tensor([-1, -1, -1, 1])
    dy, x, w = (ops.cast(t, bz.float32) for t in (dy, x, w))
    xhat = x * rstd
    g = dy * w
    dx = rstd * (g - xhat * ops.mean(g * xhat, axes=[-1], keepdim=True))
    return [ops.cast(dx, dtype), ops.cast(ops.sum(dy * xhat, axes=[0, 1, 2]), dtype)]


def rms_norm_backward_4d_reference(dy, x, w, rstd):
    dx, dw = rms_norm_backward_reference(dy, x, w, rstd)
    return [dx, dw.sum((0, 1))]


def batched(make, batch: tuple[int, ...]):
    """Inputs of `make` with every [rows, ...] array given `batch` dimensions in front."""
    def inputs(rng, rows, cols, *args):
        arrays = make(rng, int(np.prod(batch)) * rows, cols, *args)
        return [a.reshape(*batch, rows, *a.shape[1:]) if a.ndim == 2 else a for a in arrays]
    return inputs


def norm_inputs(rng, rows, cols, dtype=np.float32, with_mean=True):
    dy, x = rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))
    w = rng.standard_normal(cols)
    mean = x.mean(-1, keepdims=True) if cols else np.zeros((rows, 1))
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS) if cols else np.ones((rows, 1))
    arrays = [dy.astype(dtype), x.astype(dtype), w.astype(dtype)]
    return arrays + ([mean.astype(np.float32)] if with_mean else []) + [rstd.astype(np.float32)]


def softmax_and_column_max(f):
    """A softmax over rows and the column maximum and mean of the same input: other folds than sums."""
    x = f.define_tensor([-1, -1])
    return [ops.softmax(x, -1), ops.max(x, axes=[0]), ops.mean(x * 2.0, axes=[0])]


def softmax_and_column_max_reference(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return [e / e.sum(-1, keepdims=True), x.max(0), (x * 2).mean(0)]


def row_sum_and_weighted_columns(f):
    """An inner reduction and a column sum reading a weight per column (hoisted out of the column
    loop, so inlined into the row task's loop) and an integer input."""
    x, w = f.define_tensor([-1, -1]), f.define_tensor([-1])
    n = f.define_tensor([-1, -1], dtype=bz.int32)
    return [ops.sum(x * x, axes=[1]), ops.sum(x * ops.exp(w) + ops.cast(n, bz.float32), axes=[0]),
            ops.sum(n, axes=[0])]


def row_sum_and_weighted_columns_reference(x, w, n):
    return [(x * x).sum(1), (x * np.exp(w) + n).sum(0), n.sum(0)]


def _row_sum_inputs(rng, rows, cols):
    return [rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32),
            rng.integers(-9, 9, (rows, cols)).astype(np.int32)]


def column_sums_first(f):
    """The column sum is the first output: its task comes before the row task's."""
    dy, x = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
    return [ops.sum(dy * x, axes=[0]), ops.softmax(dy + x, -1)]


def column_sums_first_reference(dy, x):
    e = np.exp(dy + x - (dy + x).max(-1, keepdims=True))
    return [(dy * x).sum(0), e / e.sum(-1, keepdims=True)]


# name -> (builder, inputs(rng, rows, cols), float64 reference)
FUSIONS = {
    "layer_norm_backward": (layer_norm_backward, norm_inputs, layer_norm_backward_reference),
    "rms_norm_backward": (rms_norm_backward,
                          lambda rng, r, c, dtype=np.float32: norm_inputs(rng, r, c, dtype, with_mean=False),
                          rms_norm_backward_reference),
    "softmax_and_column_max": (softmax_and_column_max,
                               lambda rng, r, c: [rng.standard_normal((r, c)).astype(np.float32)],
                               softmax_and_column_max_reference),
    "row_sum_and_weighted_columns": (row_sum_and_weighted_columns, _row_sum_inputs,
                                     row_sum_and_weighted_columns_reference),
    "layer_norm_backward_3d": (layer_norm_backward_3d, batched(norm_inputs, (3,)), layer_norm_backward_3d_reference),
    "rms_norm_backward_4d": (rms_norm_backward_4d,
                             batched(lambda rng, r, c, dtype=np.float32: norm_inputs(rng, r, c, dtype, with_mean=False),
                                     (2, 3)),
                             rms_norm_backward_4d_reference),
    "column_sums_first": (column_sums_first,
                          lambda rng, r, c: [rng.standard_normal((r, c)).astype(np.float32) for _ in range(2)],
                          column_sums_first_reference),
}


def fusion(build, *args) -> bz.Fusion:
    with bz.Fusion(name="_".join(["io", build.__name__, *(str(a) for a in args)])) as f:
        for out in build(f, *args):
            f.add_output(out)
    return f
