"""Rows divided by their maximum, with divisors whose reciprocal is not a normal float32 (subnormal,
above 2**126, 0, inf, NaN: braze/passes/hoist.py scales them), and the check of the quotients
against NumPy in float64: shared by the CPU tests (tests/codegen/test_cuda_row_values.py) and the
GPU tests (tests/cuda/test_masked_softmax_gpu.py)."""

from __future__ import annotations

import numpy as np

import braze as bz

DIVISORS = [2.5, 2.0**-127, 3.0e-42, 2.0**-149, 2.0**127, 3.0e38, 0.0, np.inf, np.nan, 2.0**-126, 2.0**126]


def divided_by_row_maximum() -> bz.Fusion:
    with bz.Fusion() as f:
        t = f.define_tensor((-1, -1), dtype=bz.float32)
        f.add_output(t / bz.ops.max(t, [1], keepdim=True))
    return f


def rows(length: int, seed: int = 0) -> np.ndarray:
    """A row per divisor, each its divisor times values in [-1, 1] and, at column 5, the divisor itself
    (the row's maximum); the first row also holds tiny values, whose quotients are subnormal."""
    rng = np.random.default_rng(seed)
    x = np.empty((len(DIVISORS), length), np.float32)
    with np.errstate(invalid="ignore"):
        for row, d in enumerate(DIVISORS):
            x[row] = np.float32(d) * rng.uniform(-1, 1, length).astype(np.float32)
            x[row, 5] = d
    x[0, :3] = [2.0**-149, 3.0e-39, 0.0]
    return x


def check_quotients(x: np.ndarray, got: np.ndarray) -> None:
    """Infinite, NaN and zero quotients exactly as NumPy's; the others within two units in the last
    place of the float32 quotient."""
    with np.errstate(all="ignore"):
        want = x.astype(np.float64) / x.max(1, keepdims=True).astype(np.float64)
        want32 = want.astype(np.float32)
    special = ~np.isfinite(want32) | (want32 == 0)
    np.testing.assert_array_equal(got[special], want32[special])
    ulps = np.abs(got[~special].astype(np.float64) - want[~special]) / np.spacing(np.abs(want32[~special]))
    assert ulps.max() <= 2
