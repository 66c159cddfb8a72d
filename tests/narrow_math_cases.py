"""Float32 results only a bfloat16 or float16 keeps, computed approximately on the GPU (cuda_rules,
"narrow"): the functions, extreme inputs, and the check against NumPy in float64 that
tests/codegen/test_cuda_narrow_math.py (the generated CUDA on the CPU) and
tests/cuda/test_narrow_math_gpu.py (on a GPU) share."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import braze as bz

NARROW_TYPES = {"bfloat16": (bz.bfloat16, ml_dtypes.bfloat16), "float16": (bz.float16, np.float16)}
FUNCTIONS = {"silu": bz.ops.silu, "sigmoid": bz.ops.sigmoid, "exp": bz.ops.exp,
             "gelu_tanh": lambda x: bz.ops.gelu(x, approximate="tanh")}


def fusion(name: str, out: str) -> bz.Fusion:
    """FUNCTIONS[name] of a float32 vector, rounded to `out`."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(bz.ops.cast(FUNCTIONS[name](x), NARROW_TYPES[out][0]))
    return f


def inputs(seed: int = 0) -> np.ndarray:
    """The extremes, then normal values over the functions' interesting range."""
    rng = np.random.default_rng(seed)
    return np.concatenate([EXTREMES, (rng.standard_normal(4000) * 6).astype(np.float32)])


EXTREMES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 5.5, -5.5, 10.0,
                     -10.0, 10.1, -10.1, 20.0, -20.0, 44.0, -44.0, 87.0, -87.0, 88.5, -88.5, 100.0, -100.0,
                     1e13, -1e13, 3e38, -3e38, np.inf, -np.inf, np.nan], np.float32)


def reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sigmoid = 1 / (1 + np.exp(-x))
        if name == "silu":
            return x * sigmoid
        if name == "sigmoid":
            return sigmoid
        if name == "exp":
            return np.exp(x)
        u = 0.7978845608028654 * (x + 0.044715 * x ** 3)
        return x / (1 + np.exp(-2 * u))  # 0.5 * x * (1 + tanh(u)), without its cancellation


def check(name: str, out: str, x: np.ndarray, got: np.ndarray) -> None:
    """`got` within one rounding step of `out` of the exact result rounded once; NaN where it is;
    the infinities exact."""
    np_type = NARROW_TYPES[out][1]
    want = reference(name, x)
    with np.errstate(over="ignore"):
        rounded = want.astype(np_type).astype(np.float64)  # the exact result, rounded once
    got = got.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(rounded))
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(rounded)], rounded[~finite & ~np.isnan(rounded)])
    step = np.spacing(np.abs(rounded[finite]).astype(np_type)).astype(np.float64)
    # Past the range: the division's 0 for divisors beyond 2^126 flushes results below about 2^-120.
    tiny = 2.0 ** -119 if out == "bfloat16" else 6e-8
    assert np.all(np.abs(got[finite] - rounded[finite]) <= np.maximum(step, tiny)), \
        x[finite][np.abs(got[finite] - rounded[finite]) > np.maximum(step, tiny)]
