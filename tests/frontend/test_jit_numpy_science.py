"""Scientific and machine-learning NumPy code under `@bz.jit` (braze/ops/numpy_api.py and its
compositions): each program is traced once and gives NumPy's float64 values, shapes and dtypes at two
sizes; what braze has no op for (matrix products, sorting, values that size a result) says what to write
instead."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz


def _traces(jitted: bz.JitFunction) -> int:
    return sum(len(traces) for traces in jitted.fusions.values())


def _rows(n: int, columns: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(n + seed).standard_normal((n, columns))


# name: (function of NumPy arrays, arguments for a size n); traced once, then run at two sizes.
PROGRAMS = {
    "einsum_reductions": (lambda a, b: (np.einsum("ij,ij->i", a, b), np.einsum("ij->j", a), np.einsum("bi,bi->b", a, b),
                                        np.einsum("ij->ji", a), np.einsum("ij", a), np.einsum("...i,...i->...", a, b),
                                        np.einsum("ij->", a), np.einsum("i,i", a[:, 0], b[:, 0])),
                          lambda n: (_rows(n), _rows(n, seed=1))),
    "einsum_products": (lambda x, w, t: (np.einsum("bi,ij->bj", x, w), np.einsum("bi,bj->ij", x, t),
                                         np.einsum("ii", w[:, :4]), np.einsum("ii->i", w[:, :4]),
                                         np.einsum("i,j->ij", x[0], t[0]), np.einsum("bi,ij,bj->b", x, w, t)),
                        lambda n: (_rows(n), _rows(4, 6), _rows(n, 6))),
    "integer_einsum": (lambda k: np.einsum("ij,ij->j", k, k),
                       lambda n: (np.arange(3 * n, dtype=np.int32).reshape(n, 3),)),
    "log_sum_exp": (lambda x: (np.logaddexp.reduce(x, axis=1), np.logaddexp.reduce(x)), lambda n: (_rows(n) * 40,)),
    # an array made in the function joins the argument in a list (it was refused as made outside the fusion)
    "cumsum_moving_average": (lambda x: np.diff(np.concatenate([np.zeros(1), np.cumsum(x)])[::2]),
                              lambda n: (_rows(n)[:, 0],)),
    "sizes_and_scalar_dot": (lambda x: np.dot(x, 0.5) * np.size(x) + np.ndim(x) + np.size(x, 1) * np.shape(x)[0],
                             lambda n: (_rows(n),)),
    # a kernel's length is a number of the trace (its taps are unrolled); the signal's stays symbolic
    "convolutions": (lambda x, k, e: (np.convolve(x, k, mode="valid"), np.convolve(x, k, "same"), np.convolve(x, k),
                                      np.convolve(x, e, "same"), np.correlate(x, e), np.correlate(x, k, "full"),
                                      np.convolve(x, e[:1], "same")),
                     lambda n: (_rows(n)[:, 0], np.array([0.25, 0.5, 0.25]), np.array([1.0, -2.0, 0.5, 3.0]))),
    "unwrap": (lambda p, q: (np.unwrap(p), np.unwrap(q, axis=0), np.unwrap(p, period=4.0), np.unwrap(p, discont=4.0)),
               lambda n: (np.cumsum(_rows(n)[:, 0] * 2.5) % (2 * np.pi) - np.pi, np.cumsum(_rows(n) * 3, 0))),
    "lookups": (lambda x, xp, fp: (np.searchsorted(xp, x), np.searchsorted(xp, x, side="right"), np.interp(x, xp, fp),
                                   np.interp(x, xp, fp, left=-1.0, right=9.0), np.interp(x.astype(np.float32), xp, fp)),
                lambda n: (np.concatenate([np.linspace(-0.5, 4.5, n), [0.0, 1.0, 4.0, np.nan]]),
                           np.array([0.0, 1.0, 1.0, 2.5, 4.0]), np.array([1.0, 3.0, 5.0, -2.0, 0.5]))),
    # np.isclose(x, 0) took the absolute value of the number as an op, which failed
    "closeness": (lambda x: (np.allclose(x, x + 1e-9), np.allclose(x, 0), np.isclose(x, 0), np.isclose(0.0, x),
                             np.allclose(x[:, :0], 1.0)),
                  lambda n: (np.where(_rows(n) > 1, 0.0, _rows(n)),)),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_traces_once_and_gives_numpys_results(name: str) -> None:
    fn, make = PROGRAMS[name]
    jitted = bz.jit(fn)
    for n in (5, 8):
        args = make(n)
        expected = fn(*args)
        got = jitted(*args)
        for g, want in zip(*((got, expected) if isinstance(expected, tuple) else ((got,), (expected,))), strict=True):
            want = np.asarray(want)  # np.allclose's Python bool is a 0-d bool array here
            assert (g.shape, g.dtype) == (want.shape, want.dtype)
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    assert _traces(jitted) == 1


def test_a_convolution_s_signal_shorter_than_its_kernel_is_refused_at_run_time() -> None:
    """NumPy's convolve swaps a signal shorter than the kernel; braze's result would have the signal's
    length, so it says to swap them (one trace serves every signal length)."""
    smooth = bz.jit(lambda x, k: np.convolve(x, k, "same"))
    kernel = np.ones(5) / 5
    np.testing.assert_allclose(smooth(np.arange(6.0), kernel), np.convolve(np.arange(6.0), kernel, "same"))
    with pytest.raises(bz.Error, match=r"np.convolve: mode='same': the signal a .* at least as long as the kernel v"):
        smooth(np.arange(3.0), kernel)


X = _rows(5)


@pytest.mark.parametrize("fn, says", [
    (lambda x: x @ x[0], r"matmul \(@\): braze has no matrix-product op .*np.einsum\('ij,j->i', a, b\)"),
    (lambda x: np.dot(x, x.T), r"np.dot: .*np.einsum\('ij,jk->ik', a, b\)"),
    (lambda x: np.matmul(x[None], x.T), r"np.matmul: .*np.einsum\('...ij,jk->...ik', a, b\)"),
    (lambda x: np.ones((2, 5)) @ x, r"np.matmul: .*np.einsum\('ij,jk->ik', a, b\)"),
    (lambda x: np.linalg.multi_dot([x, x.T, x]), "np.linalg.multi_dot on a traced tensor: braze has no matrix-product"),
    (lambda x: np.sort(x, axis=0), "np.sort on a traced tensor: sorting and selection have no braze op"),
    (lambda x: np.percentile(x, 90), "np.percentile on a traced tensor: sorting and selection"),
    (lambda x: np.median(x, axis=0), "np.median on a traced tensor: sorting and selection"),
    (lambda x: np.unique(x), "np.unique on a traced tensor: its result's length depends on the values"),
    (lambda x: np.bincount(np.argmin(x, 1)), r"np.bincount on .*\(labels\[:, None\] == np.arange\(k\)\)"),
    (lambda x: np.histogram(x, bins=4), r"np.histogram on .*np.searchsorted\(edges, x, side='right'\) - 1"),
    (lambda x: np.einsum("ij->k", x), "np.einsum: 'ij->k': output letter 'k'"),
    (lambda x: np.einsum("ijk->", x), r"np.einsum: 'ijk->': term 'ijk' names 3 axes of T0 \('x'\), which has 2"),
    (lambda x: np.convolve(x[0], np.ones(65)), "np.convolve: v: expected a kernel of 1 to 64 taps"),
    (lambda x: np.convolve(x, x[0]), r"np.convolve: a: expected a 1-D array, got T0 \('x'\) of rank 2"),
], ids=["matmul_operator", "dot", "matmul", "ndarray_matmul", "multi_dot", "sort", "percentile", "median", "unique",
        "bincount", "histogram", "einsum_output", "einsum_rank", "long_kernel", "convolve_rank"])
def test_what_braze_has_no_op_for_says_what_to_write(fn, says: str) -> None:
    with pytest.raises(bz.UnsupportedError, match=says):
        bz.jit(fn)(X)


def test_unwrap_of_one_element_along_its_axis_broadcasts_as_numpy_s() -> None:
    """np.unwrap rebuilt an axis of one element as a slice and a join, whose size the trace no longer knew
    was 1: adding it to a longer array said the extents must match."""
    rows, phases = np.ones((3, 3)), np.array([[0.5, 4.0, -3.0]])
    unwrap_rows = bz.jit(lambda p, y: (np.unwrap(p, axis=0) * y, np.unwrap(p) + y, np.unwrap(p[0, :1]) + y[0]))
    for got, want in zip(unwrap_rows(phases, rows), (np.unwrap(phases, axis=0) * rows, np.unwrap(phases) + rows,
                                                     np.unwrap(phases[0, :1]) + rows[0]), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)
