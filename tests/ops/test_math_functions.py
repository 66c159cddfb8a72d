"""The compositions of braze/ops/math_functions.py (`bz.ops.asin`, `acos`, `atan`, `sinh`, `cosh`,
`asinh`, `acosh`, `atanh`, `log10`, `cbrt`, `hypot`, `degrees`, `radians`, `lgamma`, `erfinv`) against
NumPy (Python's math for lgamma, a bisection on erf for erfinv) in float64, on half,
single and double floats and on integers (computed in float32), over each function's domain with its
edges (|x| near 1, arguments near each zero, large arguments whose square overflows float32) and the
special values; and the same functions as NumPy ufuncs under `@bz.jit` and as `math.*` in loop kernels
(one table of formulas serves both frontends)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from oracle import FLOAT_DTYPES, assert_matches, define, execute, rng_for

import braze as bz
from braze.ops.math_compositions import REFERENCES

MATH_FUNCTIONS_COVERED = frozenset(REFERENCES)
K = 4  # a composition of a few correctly rounded steps, rounded once at the end

# name: (lowest, highest, edges): samples drawn in [lowest, highest], the edges always among them.
DOMAINS = {
    "asin": (-1, 1, [-1.0, 1.0, 0.0, -0.0, 0.999, -0.999, 1e-6]),
    "acos": (-1, 1, [-1.0, 1.0, 0.0, 0.999, -0.999, 1e-6]),
    "atan": (-50, 50, [0.0, -0.0, 1e-6, 1e6, -1e30, np.inf, -np.inf]),
    # exp(|x|) overflows before sinh and cosh do: past 88.7 in float32 (sinh(89.3) = 3e38), 709.8 in float64
    "sinh": (-8, 8, [0.0, -0.0, 1e-6, -1e-4, 80.0, -80.0, np.inf, -np.inf, 89.3, -88.8, 710.0]),
    "cosh": (-8, 8, [0.0, 1e-6, 80.0, -80.0, np.inf, -89.3, 88.8, -710.0]),
    "asinh": (-100, 100, [0.0, -0.0, 1e-6, -1e-3, 1e8, 2e8, -3e20, 1e30, np.inf, -np.inf]),
    "acosh": (1, 100, [1.0, 1.0001, 1e8, 2e8, 3e20, np.inf, -2.0, -1e4, -np.inf]),
    "atanh": (-1, 1, [-1.0, 1.0, 0.0, -0.0, 1e-6, 0.999, -0.999]),
    "log10": (0, 1000, [0.0, 1.0, 10.0, 1e-6, 1e30, np.inf]),
    "cbrt": (-1000, 1000, [0.0, -0.0, 27.0, -8.0, 1e-30, 1e30, -3e38, 1e-40, 1e300, np.inf, -np.inf]),
    "degrees": (-10, 10, [0.0, math.pi, -1e30]),
    "radians": (-720, 720, [0.0, 180.0, -1e30]),
}
SHAPES = [(1,), (11,), (3, 7), (0, 4)]


def _id(value: object) -> str:
    return value.name if isinstance(value, bz.DType) else str(value)


def _sample(name: str, dtype: bz.DType, shape: tuple[int, ...]) -> np.ndarray:
    lowest, highest, edges = DOMAINS[name]
    rng = rng_for("math", name, dtype.name, shape)
    if dtype.kind == "i":
        x = rng.integers(math.ceil(lowest), math.floor(highest) + 1, shape)
        return np.clip(x, -8, 8).astype(dtype.numpy) if name in ("sinh", "cosh") else x.astype(dtype.numpy)
    x = rng.uniform(lowest, highest, shape)
    usable = [e for e in edges if np.isinf(e) or abs(e) <= float(ml_dtypes.finfo(dtype.numpy).max)]
    x.flat[: min(x.size, len(usable))] = usable[: x.size]
    return x.astype(dtype.numpy)


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return REFERENCES[name](x.astype(np.float64))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", (*FLOAT_DTYPES, bz.int32), ids=_id)
@pytest.mark.parametrize("name", DOMAINS)
def test_each_function_matches_float64_numpy(name: str, dtype: bz.DType, shape: tuple) -> None:
    x = _sample(name, dtype, shape)
    (got,) = execute(lambda f: getattr(bz.ops, name)(define(f, x)), [x])
    result = dtype if dtype.kind == "f" else bz.float32
    expected = _reference(name, x)
    if dtype != bz.float64:  # what float64 gives, rounded as the result is
        with np.errstate(over="ignore"):  # cosh(80) is inf in float16, cosh(710) in float32, as braze gives
            expected = expected.astype(result.numpy).astype(np.float64)
    assert_matches(got, expected, result, k=K, what=f"{name}({dtype.name})")


# lgamma: away from the poles, where float32's argument itself is off by half an ulp of a slope of 1/|x - n|;
# the poles and +-inf are +inf. erfinv: over (-1, 1), its tails too, with +-1 giving +-inf and NaN past them.
SPECIAL = {
    "lgamma": (np.concatenate([np.linspace(-4.45, -0.05, 45), np.linspace(0.05, 30.0, 300), [0.5, 1.0, 2.0, 3.0,
                                                                                              1e-6, 170.5]]),
               [0.0, -1.0, -3.0, np.inf, -np.inf]),
    "erfinv": (np.concatenate([np.linspace(-0.999, 0.999, 301), [0.0, -0.0, 1e-10, 0.5, -0.9999, 1 - 2**-20]]),
               [1.0, -1.0, 1.5, -2.0]),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
@pytest.mark.parametrize("name", SPECIAL)
def test_lgamma_and_erfinv_match_float64(name: str, dtype: bz.DType) -> None:
    finite, edges = SPECIAL[name]
    x = np.concatenate([finite, edges]).astype(dtype.numpy)
    x = x[np.isfinite(x.astype(np.float64)) | np.isin(x.astype(np.float64), edges)]
    (got,) = execute(lambda f: getattr(bz.ops, name)(define(f, x)), [x])
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        pole = (x64 <= 0) & (np.floor(x64) == x64) if name == "lgamma" else np.zeros(x.shape, bool)
        want = np.where(pole, np.inf, _reference(name, np.where(pole, 2.0, x64)))  # math.lgamma raises there
    got64 = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(got64), np.isnan(want), err_msg=name)
    np.testing.assert_array_equal(got64[np.isinf(want)], want[np.isinf(want)], err_msg=name)
    close = np.isfinite(want)
    rtol, atol = {bz.float64: (1e-10, 1e-12), bz.float32: (3e-6, 1e-5)}.get(dtype, (1e-2, 1e-2))
    # float32's lgamma near a pole: the argument's own rounding, times the slope there
    atol = atol * np.where(name == "lgamma", 1 + 1 / np.maximum(np.abs(x64 - np.round(x64)), 1e-3) * 1e-2, 1.0)
    ratio = np.abs(got64[close] - want[close]) / (atol[close] + rtol * np.abs(want[close]))
    assert np.all(ratio <= 1), f"{name}({dtype.name}): {ratio.max():.2f} times the tolerance"


def test_lgamma_and_erfinv_in_jit_and_kernels() -> None:
    torch = pytest.importorskip("torch")
    x = torch.linspace(0.1, 6.0, 40, dtype=torch.float64)
    y = torch.linspace(-0.99, 0.99, 40, dtype=torch.float64)
    lg, ei = bz.jit(lambda a, b: (torch.lgamma(a), torch.special.erfinv(b) + b.erfinv()))(x, y)
    torch.testing.assert_close(lg, torch.lgamma(x), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ei, 2 * torch.erfinv(y), rtol=1e-10, atol=1e-12)

    @bz.kernel
    def loop(a: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
        for i in range(a.shape[0]):
            out[i] = math.lgamma(a[i])

    out = np.zeros(40)
    loop(x.numpy(), out)
    np.testing.assert_allclose(out, torch.lgamma(x).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_hypot_of_tensors_and_numbers(dtype: bz.DType) -> None:
    rng = rng_for("hypot", dtype.name)
    x, y = (rng.uniform(-100, 100, (4, 6)).astype(dtype.numpy) for _ in range(2))
    both, number, numbers_only = execute(lambda f: [bz.ops.hypot(a := define(f, x), define(f, y)),
                                                    bz.ops.hypot(a, 3.0), bz.ops.hypot(2.0, a)], [x, y])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    for got, want, what in ((both, np.hypot(x64, y64), "hypot(x, y)"), (number, np.hypot(x64, 3.0), "hypot(x, 3)"),
                            (numbers_only, np.hypot(2.0, x64), "hypot(2, x)")):
        assert_matches(got, want.astype(dtype.numpy).astype(np.float64), dtype, k=K, what=what)


@pytest.mark.parametrize("dtype", (bz.float32, bz.float64), ids=_id)
def test_hypot_neither_overflows_nor_underflows_on_the_way(dtype: bz.DType) -> None:
    big, tiny = (1e30, 1e-30) if dtype == bz.float32 else (1e300, 1e-300)  # their squares are out of range
    x = np.array([3 * big, big, 3 * tiny, 0.0, -0.0, np.inf, np.nan, np.inf, -np.inf, 5.0], dtype.numpy)
    y = np.array([4 * big, -big, 4 * tiny, 0.0, 0.0, np.nan, np.inf, np.inf, 2.0, -12.0], dtype.numpy)
    (got,) = execute(lambda f: bz.ops.hypot(define(f, x), define(f, y)), [x, y])
    assert_matches(got, np.hypot(x.astype(np.float64), y.astype(np.float64)), dtype, k=K, what="hypot")


def test_nan_gives_nan() -> None:
    x = np.array([np.nan, 0.5], np.float32)
    outs = execute(lambda f: [getattr(bz.ops, name)(t) for t in [define(f, x)] for name in DOMAINS], [x])
    for name, got in zip(DOMAINS, outs, strict=True):
        assert np.isnan(got[0]), name


def test_numpy_ufuncs_and_loop_kernels_use_the_same_formulas() -> None:
    x = np.linspace(-0.9, 0.9, 11).astype(np.float32)
    traced = bz.jit(lambda a: (np.arcsin(a), np.arccosh(a * a + 1), np.arctanh(a), np.sinh(a)))(x)

    @bz.kernel
    def loop(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 2]):
        for i in range(a.shape[0]):
            out[i, 0] = math.asin(a[i])
            out[i, 1] = math.acosh(a[i] * a[i] + 1)
            out[i, 2] = math.atanh(a[i])
            out[i, 3] = math.sinh(a[i])

    out = np.zeros((11, 4), np.float32)
    loop(x, out)
    for column, got in enumerate(traced):
        np.testing.assert_array_equal(out[:, column], got)
