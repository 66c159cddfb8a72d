"""Output rows as caches (braze/passes/output_cache.py): softmax computes each exp once, with the
same bits as before, in its output row or (a narrower output) in a local row where the row fits;
the rewrite is not made where reading back could differ."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import dtypes as dt
from braze import engine
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.output_cache import LOCAL_ROW, cache_rows_in_outputs

F32, I64 = dt.float32, dt.int64
X = k.ArrayParam("X", F32, 2, (None, 1))
N = k.ScalarRef(k.ScalarParam("n", I64))
ROW, R, J = k.Var("row_i"), k.Var("r"), k.Var("j")
TOTAL = k.Var("total", F32)


def softmax_like(out: k.ArrayParam, between: tuple[k.Stmt, ...] = ()) -> str:
    """sum of exp(X[row, r]), then out[row, j] = exp(X[row, j]) / sum, simplified to text."""
    exp = lambda v: k.Unary("exp", k.Load(X, (ROW, v)), F32)  # noqa: E731
    body = (k.Let(TOTAL, k.Const(0.0, F32)),
            k.For(R, k.Const(0, I64), N, (k.Assign(TOTAL, k.Binary("reduce_add", TOTAL, exp(R), F32)),)),
            *between,
            k.For(J, k.Const(0, I64), N, (k.Store(out, (ROW, J), k.Binary("truediv", exp(J), TOTAL, F32)),)))
    task = k.Task("t", "range_for", body, ROW, k.Const(0, I64), N)
    kernel = k.Kernel("kern", (X, out, k.ScalarParam("n", I64)), (task,))
    return "\n".join(line.strip() for line in kernel_text(cache_rows_in_outputs(kernel)).splitlines()[2:])


def test_the_sum_loop_stores_each_exp_and_the_output_loop_reads_it_back():
    assert softmax_like(k.ArrayParam("OUT", F32, 2, (None, 1))).splitlines() == [
        "total: float32 = 0.0:float32",
        "for r in range(0, n):",
        "row0: float32 = exp(X[row_i, r])",
        "OUT[row_i, r] = row0",
        "total = reduce_add(total, row0)",
        "for j in range(0, n):",
        "OUT[row_i, j] = truediv(OUT[row_i, j], total)",
    ]


def test_a_narrower_output_caches_its_row_locally_when_it_fits():
    lines = softmax_like(k.ArrayParam("OUT", dt.float16, 2, (None, 1))).splitlines()  # stored exps would round
    assert lines == [
        "total: float32 = 0.0:float32",
        f"row1 = alloc_local(float32, {LOCAL_ROW})",
        f"if le(n, {LOCAL_ROW}):",
        "for r in range(0, n):",
        "row0: float32 = exp(X[row_i, r])",
        "row1[r] = row0",
        "total = reduce_add(total, row0)",
        "for j in range(0, n):",
        "OUT[row_i, j] = truediv(row1[j], total)",
        "else:",  # a longer row computes its exps twice
        "for r in range(0, n):",
        "total = reduce_add(total, exp(X[row_i, r]))",
        "for j in range(0, n):",
        "OUT[row_i, j] = truediv(exp(X[row_i, j]), total)",
    ]


def test_no_rewrite_where_reading_back_could_differ():
    reassigned = softmax_like(k.ArrayParam("OUT", F32, 2, (None, 1)),
                              between=(k.Assign(TOTAL, k.Const(1.0, F32)),))  # not only lets in between
    assert "exp(X[row_i, j])" in reassigned


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_results_are_bit_for_bit_those_without_the_rewrite(op, monkeypatch):
    x = np.random.default_rng(5).standard_normal((7, 33)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, np.nan]
    results = []
    for rewrite in (cache_rows_in_outputs, lambda kernel: kernel):
        monkeypatch.setattr(engine, "cache_rows_in_outputs", rewrite)
        with bz.Fusion() as f:
            f.add_output(getattr(bz.ops, op)(f.define_tensor((-1, -1)), -1))
        results.append(f.execute([x], backend="llvm")[0])
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("columns", [1, 33, LOCAL_ROW, LOCAL_ROW + 1])
def test_local_rows_give_the_bits_of_no_rewrite(dtype, columns, monkeypatch):
    x = np.random.default_rng(columns).standard_normal((3, columns)).astype(np.float32)
    x[0, :1] = np.nan
    results = []
    for rewrite in (cache_rows_in_outputs, lambda kernel: kernel):
        monkeypatch.setattr(engine, "cache_rows_in_outputs", rewrite)
        with bz.Fusion() as f:
            f.add_output(bz.ops.cast(bz.ops.softmax(f.define_tensor((-1, -1)), -1), getattr(bz, dtype)))
        results.append(f.execute([x], backend="llvm")[0])
    np.testing.assert_array_equal(results[0].view(np.uint16), results[1].view(np.uint16))
