"""Scientific NumPy code under `@bz.jit`, a second set: integers made floats as NumPy makes them (a count
divided by a total, np.sqrt of pixels, a mean of labels), Black-Scholes prices with erf, polynomials by
np.polyval, short filters and tables written as lists, diagonals and traces, pairwise differences by
`np.subtract.outer`, and results the trace knows as numbers or arrays. Each program is traced once and gives
NumPy's float64 values, shapes and dtypes at two sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import braze as bz
from braze.ops.elementwise import erf


def _traces(jitted: bz.JitFunction) -> int:
    return sum(len(traces) for traces in jitted.fusions.values())


def _rows(n: int, columns: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(n + seed).standard_normal((n, columns))


def _same(got: object, want: object, rtol: float = 1e-12) -> None:
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


# --- integers made floats ---------------------------------------------------------------------------------
FLOAT_OF_INTEGERS = {
    "true_divide": lambda k: (k / 3, k / k.sum(), 1 / (k + 1), np.true_divide(k, 2)),
    "float_ufuncs": lambda k: (np.sqrt(k), np.exp(k), np.log1p(k), np.sin(k), np.arctan2(k, 2)),
    "compositions": lambda k: (np.hypot(k, k), np.cbrt(k), np.degrees(k), np.logaddexp(k, k), np.arcsinh(k),
                               np.hypot(k, 2.5), np.heaviside(k - 3, 0.5), np.heaviside(k, k), np.rint(k)),
    "python_floats": lambda k: (k * 0.5, k + 1.5, np.power(k, 0.5), k // 2.0, np.where(k > 2, k, 0.5)),
    "moments": lambda k: (k.mean(), np.mean(k, axis=0), np.var(k), k.std(axis=1, ddof=1), (k > 2).mean()),
}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("name", FLOAT_OF_INTEGERS)
def test_integers_become_the_floats_numpy_makes_of_them(name: str, dtype) -> None:
    """They were all float32 (torch's default): `counts / total` of int64 lost every digit past the 7th.
    NumPy's true division and Python floats give float64, its float ufuncs the smallest float that holds the
    integers (float16 for 8 bits, float32 for 16), its mean and var float64 whatever the width."""
    fn = FLOAT_OF_INTEGERS[name]
    k = (np.arange(12) % 7 + 1).astype(dtype).reshape(3, 4)
    _same(bz.jit(fn)(k), fn(k), rtol=1e-3 if dtype in (np.int8, np.uint8) else 1e-6)


def test_python_floats_chosen_by_a_mask_are_float64() -> None:
    """np.where(c, 0.1, 0.3) was float32, so 0.1 was rounded to 7 digits before it met float64 values."""
    fn = lambda x: (np.where(x > 0, 0.1, 0.3), x * np.where(x > 0, 0.1, 0.3), np.select([x > 0], [0.1], 0.3))  # noqa: E731
    x = np.linspace(-1, 1, 5).astype(np.float32)
    _same(bz.jit(fn)(x), fn(x))


def test_heaviside_of_float16_stays_float16() -> None:
    x = np.array([-1.0, 0.0, 2.0], np.float16)
    _same(bz.jit(lambda x: np.heaviside(x, 0.5))(x), np.heaviside(x, 0.5))


def test_counts_divided_by_a_total_keep_float64_digits() -> None:
    counts = np.array([123456789, 1, 987654321], np.int64)
    np.testing.assert_array_equal(bz.jit(lambda c: c / c.sum())(counts), counts / counts.sum())


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint8])
def test_an_integer_array_beside_a_float_one_promotes_as_numpy_s(dtype) -> None:
    """float32 positions times int64 counts were float32 (JAX's promotion); NumPy's is float64 (float32 for
    16-bit integers and below), in ops and in compositions."""
    fn = lambda x, k: (x * k, x / k, np.where(k > 2, x, k), np.maximum(x, k), np.hypot(x, k), np.arctan2(k, x))  # noqa: E731
    x, k = np.linspace(0.5, 3.0, 6, dtype=np.float32), np.arange(1, 7).astype(dtype)
    _same(bz.jit(fn)(x, k), fn(x, k), rtol=1e-6)


def test_a_trace_of_torch_tensors_keeps_torch_s_float32() -> None:
    k = torch.arange(6)
    got = bz.jit(lambda k: (k / 2, k * 0.5, k.float().mean()))(k)
    assert [g.dtype for g in got] == [torch.float32] * 3


def test_histogram_equalization_of_uint8_pixels() -> None:
    def equalize(img):
        cdf = (img.reshape(-1)[:, None] <= np.arange(256)[None, :]).sum(0)
        lowest = np.min(np.where(cdf > 0, cdf, img.size))
        return np.round((cdf - lowest) / (img.size - lowest) * 255).astype(np.uint8)[img]

    jitted = bz.jit(lambda img: np.round((lambda cdf, low: (cdf - low) / (img.size - low) * 255)(
        (img.reshape(-1)[:, None] <= np.arange(256)[None, :]).sum(0),
        np.min(np.where((img.reshape(-1)[:, None] <= np.arange(256)[None, :]).sum(0) > 0,
                        (img.reshape(-1)[:, None] <= np.arange(256)[None, :]).sum(0), img.size)))))
    for n in (5, 9):
        img = np.random.default_rng(n).integers(40, 200, (n, 7)).astype(np.uint8)
        table = jitted(img)
        assert table.dtype == np.float64
        np.testing.assert_array_equal(table.astype(np.uint8)[img], equalize(img))


# --- programs ---------------------------------------------------------------------------------------------
def _black_scholes(erf_of):
    def prices(spot, strike, years, rate, sigma):
        d1 = (np.log(spot / strike) + (rate + 0.5 * sigma**2) * years) / (sigma * np.sqrt(years))
        d2 = d1 - sigma * np.sqrt(years)
        cnd = lambda d: 0.5 * (1 + erf_of(d / math.sqrt(2.0)))  # noqa: E731
        discount = strike * np.exp(-rate * years)
        return spot * cnd(d1) - discount * cnd(d2), discount * cnd(-d2) - spot * cnd(-d1)

    return prices


def _market(n: int) -> tuple:
    rng = np.random.default_rng(n)
    return rng.uniform(50, 150, n), rng.uniform(50, 150, n), rng.uniform(0.1, 2, n), 0.05, 0.3


# name: (the function braze traces, NumPy's (None: the same), arguments for a size n)
PROGRAMS = {
    "black_scholes": (_black_scholes(bz.ops.erf), _black_scholes(erf), _market),
    # np.polyval was refused ("braze has no op for it")
    "polynomials": (lambda x, c: (np.polyval([1.0, -2.0, 0.5, 3.0], x), np.polyval(c, x), np.polyval((2, 1), x)),
                    None, lambda n: (np.linspace(-2, 2, n), np.array([0.5, -1.0, 2.0]))),
    # a kernel or a table given as a list: "np.convolve: v: expected a 1-D array, got list"
    "listed_filters": (lambda x: (np.convolve(x, [1, -1], "valid"), np.convolve(x, [0.25, 0.5, 0.25], "same"),
                                  np.correlate(x, (1.0, 2.0)), np.interp(x, [-1.0, 0.0, 1.0], [0.0, 1.0, 4.0]),
                                  np.searchsorted([-0.5, 0.5], x)),
                       None, lambda n: (_rows(n)[:, 0],)),
    # np.diagonal, np.trace and np.diag were refused
    "diagonals": (lambda a, b, v: (np.diagonal(a), np.diagonal(a, 1), np.diagonal(a, -2), np.trace(a), np.diag(a, -1),
                                   np.diag(v), np.diag(v, 2), np.diag(v, -1), b.diagonal(0, 1, 2), b.trace(axis1=0,
                                   axis2=2), np.trace(b.astype(np.int32)), np.diagonal(a.T, 5)),
                  None, lambda n: (_rows(n, 4), np.arange(2 * n * 3).reshape(2, n, 3), np.arange(n) - 2)),
    # ufunc.outer was refused ("np.subtract.outer: braze has no op for it")
    "pairwise_outer": (lambda x, y: (np.subtract.outer(x[:, 0], y[:, 0]), np.add.outer(x[:, 1], y[0]),
                                     np.hypot(np.subtract.outer(x[:, 0], x[:, 0]), np.subtract.outer(x[:, 1], x[:, 1])),
                                     np.maximum.outer(x[0], y[1]), np.less.outer(x[:, 0], y[:, 0])),
                       None, lambda n: (_rows(n), _rows(n, seed=1))),
    # two integer arrays were refused ("indices 0 and 1 are both arrays")
    "advanced_indexing": (lambda logits, y, a, r, c: (
        -np.mean((logits - np.log(np.exp(logits).sum(1, keepdims=True)))[np.arange(len(y)), y]),
        logits[y[:, None] % 2, y[None, :]], a[:, r, c], a[r % 2, :, c], a[..., r[:2], -1 - c[:2]], a[r % 2, r, c]),
        None, lambda n: (_rows(n, 5), np.arange(n) % 5, np.arange(2 * 3 * n).reshape(2, 3, n),
                         np.array([0, 2, 1]), np.array([n - 1, 0, -2]))),
    # np.broadcast_arrays and np.fix were refused
    "broadcasts_and_fix": (lambda x, y: (*np.broadcast_arrays(x[:, :1], y[:1], 2.0), np.fix(x * 3)),
                           None, lambda n: (_rows(n), _rows(n, seed=2))),
# a join's dtype= was dropped
    "joins_with_dtype": (lambda x: (np.concatenate([x, x], dtype=np.float32), np.stack([x, x], 1, dtype=np.float32),
                                    np.hstack([x, x], dtype=np.float32), np.vstack((x, x), dtype=np.float32)),
                         None, lambda n: (_rows(n),)),
        # results known to the trace were refused ("expected a TensorView ..., got Scalar")
    "known_results": (lambda x: {"n": x.shape[0], "dx": 1.0 / x.shape[0], "grid": np.linspace(0, 1, 5, endpoint=False),
                                 "mean": x.mean(), "three": 3, "flag": True},
                      None, lambda n: (_rows(n),)),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_traces_once_and_gives_numpys_results(name: str) -> None:
    fn, reference, make = PROGRAMS[name]
    jitted = bz.jit(fn)
    for n in (5, 8):
        args = make(n)
        got, want = jitted(*args), (reference or fn)(*args)
        if isinstance(want, dict):
            assert got.keys() == want.keys()
            got, want = tuple(got.values()), tuple(np.asarray(v) for v in want.values())
        _same(got, want)
    assert _traces(jitted) == (2 if name == "advanced_indexing" else 1)  # np.arange(len(y)): one per size


def test_torch_tensors_made_in_a_trace_index_it() -> None:
    logp, labels = torch.arange(20.0).reshape(4, 5), torch.tensor([1, 4, 0, 2])
    fn = lambda logp, labels: (logp[torch.arange(4), labels], logp[torch.tensor([3, 1])])  # noqa: E731
    for got, want in zip(bz.jit(fn)(logp, labels), fn(logp, labels), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def _columns_written_into_a_new_array(x):
    out = np.zeros_like(x, shape=(x.shape[0], 3))
    out[:, 0] = x[:, 0] ** 2
    out[:, 1] = np.sin(x[:, 1])
    out[:, 2] += 1
    out[out > 0.5] = 0.5
    return out, np.ones_like(x, shape=(2,), dtype=np.int32), np.empty_like(x, shape=x.shape[0]) * 0


def test_a_new_array_of_another_shape_made_like_a_traced_one() -> None:
    """np.zeros_like(x, shape=...) gave x's shape (shape= was ignored)."""
    jitted = bz.jit(_columns_written_into_a_new_array)
    for n in (4, 6):
        x = _rows(n)
        _same(jitted(x), _columns_written_into_a_new_array(x))
    assert _traces(jitted) == 1


def test_writing_a_traced_tensor_into_a_numpy_array_says_what_to_write() -> None:
    def step(x):
        out = np.zeros((x.shape[0], 3))
        out[:, 0] = x[:, 0]
        return out

    with pytest.raises(bz.TracerBoolConversionError, match=r"np.asarray\(T\d+\): .*out = np.zeros_like\(x, "
                                                          r"shape=\(n, 3\)\), or join the pieces with np.stack"):
        bz.jit(step)(np.ones((3, 2)))


def test_a_known_array_result_is_fresh_at_each_call() -> None:
    grid = bz.jit(lambda x: (np.linspace(0, 1, 3), x + 1))
    first, _ = grid(np.zeros(2))
    first[0] = 99.0
    np.testing.assert_array_equal(grid(np.zeros(2))[0], [0.0, 0.5, 1.0])


def test_diagonals_of_torch_tensors() -> None:
    t = torch.arange(12.0).reshape(3, 4)
    fn = lambda t: (t.diagonal(), t.diagonal(1, dim1=1, dim2=0), torch.diagonal(t, -1), torch.trace(t[:, :3]),  # noqa: E731
                    torch.diag(t[0]), t[0].diag(1))
    for got, want in zip(bz.jit(fn)(t), fn(t), strict=True):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_polynomial_of_traced_coefficients_needs_their_count() -> None:
    with pytest.raises(bz.UnsupportedError, match=r"np.polyval: p: expected 1 to 64 coefficients in a 1-D array"):
        bz.jit(lambda c, x: np.polyval(c, x))(np.ones((2, 2)), np.ones(3))
