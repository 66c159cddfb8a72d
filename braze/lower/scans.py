"""The task writing a scan (braze/ops/scans.py): one task index per row of the scanned axis (every
other axis merged into the task's range), each walking its row serially with the running value in
a local variable and storing it at every element.

The scan's input is computed inside that walk (its pointwise producers fuse into the scan's task);
its consumers read the scan back from memory in later tasks of the same kernel (ValueEmitter asks
for the cut). On a GPU the row's lanes take the walk a tile at a time (braze/codegen/cuda_scan.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from braze import dtypes as dt
from braze.dtypes import DType
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower.exprs import cast, decompose, index_op
from braze.lower.reductions import _extreme
from braze.ops.scans import scan_accumulator
from braze.ops.table import lookup

if TYPE_CHECKING:
    from braze.lower.values import ValueEmitter


def _combine(op: str, acc: DType) -> str:
    """The Kernel IR binary that folds one element into a running value of type `acc`. Not the
    `reduce_*` ops: those may be reassociated, and a scan stores every partial result in order."""
    if acc.is_bool:
        return {"cummax": "logical_or", "cummin": "logical_and"}[op]
    return {"cumsum": "add", "cumprod": "mul", "cummax": "maximum", "cummin": "minimum"}[op]


def _fold(op: str, acc: k.Expr, element: k.Expr, acc_dtype: DType) -> k.Expr:
    """The running value with one more element folded in."""
    if op == "logcumsumexp":
        return _log_add_exp(acc, element, acc_dtype)
    return k.Binary(_combine(op, acc_dtype), acc, element, acc_dtype)


def _log_add_exp(a: k.Expr, b: k.Expr, dtype: DType) -> k.Expr:
    """log(exp(a) + exp(b)) from the larger of the two, so that it neither overflows nor loses a small
    running value to underflow; equal values (the same infinity too) give a + log 2, not NaN. It is
    no single binary op, so on a GPU a thread walks each row (braze/codegen/cuda_scan.py spreads only
    the binary combines over a row's lanes)."""
    larger = k.Binary("maximum", a, b, dtype)
    gap = k.Unary("neg", k.Unary("abs", k.Binary("sub", a, b, dtype), dtype), dtype)
    general = k.Binary("add", larger, k.Unary("log1p", k.Unary("exp", gap, dtype), dtype), dtype)
    same = k.Binary("add", larger, k.Const(math.log(2.0), dtype), dtype)
    return k.Ternary("where", k.Binary("eq", a, b, dt.bool_), same, general, dtype)


def _initial(op: str, acc: DType) -> k.Const:
    """The identity of the combine: the first element combined with it is that element."""
    if op == "logcumsumexp":
        return k.Const(float("-inf"), acc)
    if op == "cumsum":
        return k.Const(0, acc)
    if op == "cumprod":
        return k.Const(1, acc)
    return _extreme(acc, largest=op == "cummin")


def is_scan(tv: TensorView) -> bool:
    """Whether `tv` is computed by a scan."""
    return tv.definition is not None and lookup(tv.definition.op).category == "scan"


def scan_task(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, name: str) -> k.Task:
    """The task writing scan `tv`: task index p over the product of the other axes' extents, decomposed
    into their indices, then `for j in [0, n)`: acc = combine(acc, x[..., j, ...]); out[..., j, ...] = acc."""
    expr = tv.definition
    x, axis, op = expr.inputs[0], expr.attrs["axis"], expr.op
    scopes, extents = em.scopes, em.shape(tv)
    acc_dtype = scan_accumulator(tv.dtype)
    others = [a for a in range(tv.ndim) if a != axis]
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    idx: list[k.Expr | None] = [None] * tv.ndim
    decompose(em, task_var, others, extents, idx, task_scope.iteration, [not d.is_broadcast for d in tv.visible])
    acc = scopes.fresh("acc", acc_dtype)
    scopes.emit(k.Let(acc, _initial(op, acc_dtype)))
    j = scopes.fresh("j", em.index)
    scopes.push("element", {j}).iteration.add(j)
    idx[axis] = j
    element = cast(em.value(x, tuple(idx)), acc_dtype)
    scopes.emit(k.Assign(acc, _fold(op, acc, element, acc_dtype)))
    scopes.emit(k.Store(param, tuple(idx), cast(acc, tv.dtype)))
    scopes.emit(k.For(j, em.zero, extents[axis], tuple(scopes.pop().stmts)))
    end = em.one
    for a in others:
        end = index_op("mul", end, extents[a])
    return k.Task(name, "range_for", tuple(scopes.pop().stmts), task_var, em.zero, end)
