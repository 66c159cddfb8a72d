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
            assert (g.shape, g.dtype) == (want.shape, want.dtype)
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    assert _traces(jitted) == 1


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
    (lambda x: np.einsum("ij->k", x), "np.einsum: 'ij->k': output letter 'k'"),
    (lambda x: np.einsum("ijk->", x), r"np.einsum: 'ijk->': term 'ijk' names 3 axes of T0 \('x'\), which has 2"),
], ids=["matmul_operator", "dot", "matmul", "ndarray_matmul", "multi_dot", "sort", "percentile", "median", "unique",
        "bincount", "einsum_output", "einsum_rank"])
def test_what_braze_has_no_op_for_says_what_to_write(fn, says: str) -> None:
    with pytest.raises(bz.UnsupportedError, match=says):
        bz.jit(fn)(X)
