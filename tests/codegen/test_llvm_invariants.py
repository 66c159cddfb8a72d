"""Index-invariant values of a CPU task computed once before its loop (codegen/llvm_invariants.py):
which expressions are hoisted, and that kernels with them give the reference's results, empty ranges
included."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import dtypes as dt
from braze.codegen.llvm_invariants import task_invariants
from braze.kir import nodes as k

I32, F32 = dt.int32, dt.float32
P = k.Var("p", I32)


def array(name: str) -> k.ArrayParam:
    return k.ArrayParam(name, F32, 1, (1,))


def task(*body: k.Stmt) -> k.Task:
    return k.Task("t", "range_for", body, P, k.Const(0, I32), k.Const(64, I32))


def add(a: k.Expr, b: k.Expr) -> k.Expr:
    return k.Binary("add", a, b, F32)


def test_the_largest_invariant_parts_of_the_leading_statements_are_hoisted():
    w = k.Load(array("w"), (k.Const(0, I32),))
    chain = k.Unary("exp", add(w, k.Const(1.0, F32)), F32)
    body = (k.Store(array("out"), (P,), add(k.Load(array("x"), (P,)), chain)),)
    assert task_invariants(task(*body)) == [chain]  # not its parts, not the load at p


def test_what_reads_the_index_a_local_or_a_written_array_stays_in_the_loop():
    local = k.Var("v", F32)
    written = k.Load(array("out"), (k.Const(0, I32),))  # out is stored by the task
    body = (k.Let(local, k.Unary("exp", k.Load(array("x"), (P,)), F32)),
            k.Store(array("out"), (P,), add(k.Unary("exp", local, F32), k.Unary("exp", written, F32))))
    assert task_invariants(task(*body)) == []


def test_statements_after_a_branch_are_not_searched():
    w = k.Unary("exp", k.Load(array("w"), (k.Const(0, I32),)), F32)
    branch = k.If(k.Binary("lt", P, k.Const(3, I32), dt.bool_), (k.Continue(),), ())
    body = (branch, k.Store(array("out"), (P,), w))
    assert task_invariants(task(*body)) == []


def test_a_broadcast_chain_gives_the_reference_result_and_an_empty_range_reads_nothing():
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        y = f.define_tensor((1,), dtype=bz.float32)
        f.add_output(x * bz.ops.exp(y * 0.5 + 0.25))
    y = np.array([0.3], np.float32)
    for n in (0, 1, 37):
        x = np.arange(n, dtype=np.float32)
        (got,) = f.execute([x, y], backend="llvm")
        (want,) = f.execute([x, y], backend="reference")
        np.testing.assert_allclose(got, want, rtol=1e-6)
