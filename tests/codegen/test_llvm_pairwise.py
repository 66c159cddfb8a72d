"""Which float32 accumulations the LLVM code generator sums in blocks (braze/codegen/llvm_pairwise.py):
only those whose value is needed after their loops alone, so blocking cannot change what any other
statement sees."""

from __future__ import annotations

from braze import dtypes as dt
from braze.codegen.llvm_pairwise import BLOCK, STRIDED_BLOCK, block_size, blocked_sums
from braze.kir import nodes as k

X = k.ArrayParam("x", dt.float32, 1, (1,))
Y = k.ArrayParam("y", dt.float32, 1, (1,))
M = k.ArrayParam("m", dt.float32, 2, (None, 1))
INDEX = k.Var("i", dt.int64)


def _task(acc: k.Var, loop_body: tuple[k.Stmt, ...], after: tuple[k.Stmt, ...] = ()) -> tuple[k.Task, k.For]:
    loop = k.For(INDEX, k.Const(0, dt.int64), k.ArrayExtent(X, 0), loop_body)
    body = (k.Let(acc, k.Const(0.0, acc.dtype)), loop, *after, k.Store(Y, (k.Const(0, dt.int64),), acc))
    return k.Task("t", "serial", body), loop


def _update(acc: k.Var, value: k.Expr) -> k.Assign:
    return k.Assign(acc, k.Binary("reduce_add", acc, value, acc.dtype))


def test_a_float32_sum_is_blocked():
    acc = k.Var("acc", dt.float32)
    task, loop = _task(acc, (_update(acc, k.Load(X, (INDEX,))),))
    assert blocked_sums(task) == {id(loop): (acc,)}


def test_a_sum_whose_loop_also_reads_it_is_not_blocked():
    acc = k.Var("acc", dt.float32)
    task, _ = _task(acc, (_update(acc, k.Load(X, (INDEX,))), k.Store(Y, (INDEX,), acc)))
    assert blocked_sums(task) == {}


def test_a_sum_also_assigned_otherwise_is_not_blocked():
    acc = k.Var("acc", dt.float32)
    task, _ = _task(acc, (_update(acc, k.Load(X, (INDEX,))),),
                    (k.Assign(acc, k.Binary("mul", acc, k.Const(2.0, dt.float32), dt.float32)),))
    assert blocked_sums(task) == {}


def test_float64_sums_and_other_folds_are_not_blocked():
    wide = k.Var("wide", dt.float64)
    task, _ = _task(wide, (_update(wide, k.Cast(k.Load(X, (INDEX,)), dt.float64)),))
    assert blocked_sums(task) == {}
    top = k.Var("top", dt.float32)
    task, _ = _task(top, (k.Assign(top, k.Binary("reduce_maximum", top, k.Load(X, (INDEX,)), dt.float32)),))
    assert blocked_sums(task) == {}


def test_strided_loops_sum_smaller_blocks():
    acc = k.Var("acc", dt.float32)
    zero, end = k.Const(0, dt.int64), k.ArrayExtent(X, 0)
    contiguous = k.For(INDEX, zero, end, (_update(acc, k.Load(M, (zero, INDEX))),))
    down_a_column = k.For(INDEX, zero, end, (_update(acc, k.Load(M, (INDEX, zero))),))
    assert (block_size(contiguous), block_size(down_a_column)) == (BLOCK, STRIDED_BLOCK)
