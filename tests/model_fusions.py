"""Fusions written from real models, with several reductions each (row statistics, a softmax of
the normalized rows, column sums for the weight gradients), and their float64 NumPy references.
Shared by the CPU, NVRTC and GPU tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import braze as bz

ops = bz.ops


def residual_norm_softmax(f: bz.Fusion, dtype: bz.DType = bz.float32) -> list[bz.TensorView]:
    """h = x + residual; y = layer_norm(h) * w + b; softmax(y) over rows and the column sum of y."""
    x, residual = f.define_tensor([-1, -1], dtype=dtype), f.define_tensor([-1, -1], dtype=dtype)
    w, b = f.define_tensor([-1], dtype=dtype), f.define_tensor([-1], dtype=dtype)
    y = ops.layer_norm(x + residual, w, b)
    return [ops.softmax(y, -1), ops.sum(y, axes=[0])]


def layer_norm_backward(f: bz.Fusion, dtype: bz.DType = bz.float32) -> list[bz.TensorView]:
    """dx, dweight, dbias of layer_norm(x) * w from primitives, as an autograd graph spells them."""
    x, g = f.define_tensor([-1, -1], dtype=dtype), f.define_tensor([-1, -1], dtype=dtype)
    w = f.define_tensor([-1], dtype=dtype)
    centered = x - ops.mean(x, axes=[-1], keepdim=True)
    rstd = ops.rsqrt(ops.mean(centered * centered, axes=[-1], keepdim=True) + 1e-5)
    xhat = centered * rstd
    gw = g * w
    dx = rstd * (gw - ops.mean(gw, axes=[-1], keepdim=True) - xhat * ops.mean(gw * xhat, axes=[-1], keepdim=True))
    return [dx, ops.sum(g * xhat, axes=[0]), ops.sum(g, axes=[0])]


def rms_norm_backward(f: bz.Fusion, dtype: bz.DType = bz.float32) -> list[bz.TensorView]:
    """dx and dweight of rms_norm(x) * w from primitives."""
    x, g = f.define_tensor([-1, -1], dtype=dtype), f.define_tensor([-1, -1], dtype=dtype)
    w = f.define_tensor([-1], dtype=dtype)
    rstd = ops.rsqrt(ops.mean(x * x, axes=[-1], keepdim=True) + 1e-6)
    xhat = x * rstd
    gw = g * w
    dx = rstd * (gw - xhat * ops.mean(gw * xhat, axes=[-1], keepdim=True))
    return [dx, ops.sum(g * xhat, axes=[0])]


def _residual_norm_softmax_reference(x, residual, w, b):
    h = x + residual
    y = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * w + b
    e = np.exp(y - y.max(-1, keepdims=True))
    return [e / e.sum(-1, keepdims=True), y.sum(0)]


def _layer_norm_backward_reference(x, g, w):
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    xhat = (x - x.mean(-1, keepdims=True)) * rstd
    gw = g * w
    dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    return [dx, (g * xhat).sum(0), g.sum(0)]


def _rms_norm_backward_reference(x, g, w):
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    xhat = x * rstd
    gw = g * w
    return [rstd * (gw - xhat * (gw * xhat).mean(-1, keepdims=True)), (g * xhat).sum(0)]


def adam_update(f: bz.Fusion, dtype: bz.DType = bz.float32) -> list[bz.TensorView]:
    """One Adam step over [rows, cols] parameters: new m, new v, then new p reading both (three
    outputs of one shape, each from inputs of their own, a task each until they are merged)."""
    p, g, m, v = (f.define_tensor([-1, -1], dtype=dtype) for _ in range(4))
    m2 = m * 0.9 + g * 0.1
    v2 = ops.abs(v) * 0.999 + g * g * 0.001  # the inputs are standard normal: v made non-negative
    return [m2, v2, p - 0.01 * (m2 / 0.19) / (ops.sqrt(v2 / 0.002) + 1e-8)]


def var_and_mean(f: bz.Fusion, dtype: bz.DType = bz.float32) -> list[bz.TensorView]:
    """var and mean of each row, and the column sum of x: two row tasks over the same rows."""
    x = f.define_tensor([-1, -1], dtype=dtype)
    return [ops.var(x, axes=[-1]), ops.mean(x, axes=[-1]), ops.sum(x, axes=[0])]


def _adam_reference(p, g, m, v):
    m2 = m * 0.9 + g * 0.1
    v2 = np.abs(v) * 0.999 + g * g * 0.001
    return [m2, v2, p - 0.01 * (m2 / 0.19) / (np.sqrt(v2 / 0.002) + 1e-8)]


def _var_and_mean_reference(x):
    return [x.var(-1), x.mean(-1), x.sum(0)]


# name -> (builder, how many (rows, cols) inputs, then how many (cols,) inputs, float64 reference)
MODEL_FUSIONS: dict[str, tuple[Callable, int, int, Callable]] = {
    "residual_norm_softmax": (residual_norm_softmax, 2, 2, _residual_norm_softmax_reference),
    "layer_norm_backward": (layer_norm_backward, 2, 1, _layer_norm_backward_reference),
    "rms_norm_backward": (rms_norm_backward, 2, 1, _rms_norm_backward_reference),
    "adam_update": (adam_update, 4, 0, _adam_reference),
    "var_and_mean": (var_and_mean, 1, 0, _var_and_mean_reference),
}


def build(name: str, dtype: bz.DType = bz.float32) -> bz.Fusion:
    """The named fusion, its outputs added."""
    with bz.Fusion(name=name) as f:
        for out in MODEL_FUSIONS[name][0](f, dtype):
            f.add_output(out)
    return f


def inputs(name: str, rows: int, cols: int, seed: int = 0) -> list[np.ndarray]:
    """float32 inputs of the named fusion: `rows` x `cols` matrices, then `cols` vectors."""
    _, matrices, vectors, _ = MODEL_FUSIONS[name]
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(matrices)]
            + [rng.standard_normal(cols).astype(np.float32) for _ in range(vectors)])


def reference(name: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The named fusion's outputs in float64."""
    return MODEL_FUSIONS[name][3](*[np.asarray(a, dtype=np.float64) for a in arrays])


def assert_close(actual: list, expected: list[np.ndarray]) -> None:
    """float32 results within a few ulps of the float64 reference, scaled by the column sums' size."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        got = np.asarray(got, dtype=np.float64)
        assert got.shape == want.shape
        scale = np.abs(want).max(initial=1.0)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5 * scale)
