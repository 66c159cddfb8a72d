"""Which integer values of a task are never negative: what lets the CUDA code generator divide index
arithmetic as unsigned values (codegen/cuda_rules.py, `index_division`) instead of with Python's
floor semantics, whose sign fix-ups cost several times the division.

Non-negative are: constants >= 0, array extents, the scalar parameters a kernel reads extents from
(`Kernel.extents`), the task's index and loop indices whose range starts at a non-negative bound
and counts up, and the sums, products, quotients, remainders, minima and maxima of such, their
widening casts, and `(x + c) - d` for constants c >= d (a ceiling division's numerator).

A local is non-negative when every value it is given (its `Let` and any `Assign`) is: found as the
greatest fixed point, so a counter `n = n + 1` from 0 counts too (by induction over the assignments
as they run, each one's value is non-negative).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from braze.kir import nodes as k

_CLOSED = ("add", "mul", "floordiv", "remainder", "maximum", "minimum")
_INDEX_TYPES = ("int32", "int64")


@dataclass
class IndexSigns:
    """The non-negative locals of one task, and the test for expressions over them."""

    extents: frozenset[str]  # scalar parameters carrying array extents
    locals: frozenset[k.Var]
    _known: dict[k.Expr, bool] = field(default_factory=dict, repr=False)

    def nonnegative(self, e: k.Expr) -> bool:
        """Whether `e` is an integer that is never negative (False where that is not proven)."""
        found = self._known.get(e)
        if found is None:
            found = self._known[e] = _nonnegative(e, self.extents, self.locals, self.nonnegative)
        return found


def _nonnegative(e: k.Expr, extents: frozenset[str], locals_: frozenset[k.Var], recurse) -> bool:
    if not e.dtype.is_integer or e.dtype.is_bool:
        return False
    if isinstance(e, k.Const):
        return e.value >= 0
    if isinstance(e, k.ArrayExtent):
        return True
    if isinstance(e, k.ScalarRef):
        return e.param.name in extents
    if isinstance(e, k.Var):
        return e in locals_
    if isinstance(e, k.Binary) and e.op in _CLOSED:
        return recurse(e.a) and recurse(e.b)
    if isinstance(e, k.Binary) and e.op == "sub":  # a ceiling division's `x + c - 1`, with c >= 1
        return _less_a_constant(e, recurse)
    if isinstance(e, k.Cast):  # a widening cast keeps the value
        if e.x.dtype.is_unsigned:  # any unsigned value fits a wider signed type: uint32 -> int32 may not
            return e.x.dtype.itemsize < e.dtype.itemsize
        return e.x.dtype.is_integer and e.x.dtype.itemsize <= e.dtype.itemsize and recurse(e.x)
    return False


def _less_a_constant(e: k.Binary, recurse) -> bool:
    """Whether `e` is `(x + c) - d` with x non-negative and constants c >= d >= 0."""
    if not (isinstance(e.b, k.Const) and isinstance(e.a, k.Binary) and e.a.op == "add" and e.b.value >= 0):
        return False
    for constant, other in ((e.a.a, e.a.b), (e.a.b, e.a.a)):
        if isinstance(constant, k.Const) and constant.value >= e.b.value and recurse(other):
            return True
    return False


def _definitions(task: k.Task) -> dict[k.Var, list[k.Expr | None]]:
    """Every value each local of the task is given (None: one that no expression describes; a loop
    index, its first value: it counts up from there)."""
    values: dict[k.Var, list[k.Expr | None]] = {}
    if task.kind == "range_for" and task.var is not None:
        values.setdefault(task.var, []).append(task.begin)

    def visit(stmts: tuple[k.Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, (k.Let, k.Assign)):
                values.setdefault(s.var, []).append(s.value)
            elif isinstance(s, k.For):
                values.setdefault(s.var, []).append(s.begin if s.step > 0 else None)
            elif isinstance(s, k.AtomicRMW) and s.result is not None:
                values.setdefault(s.result, []).append(None)
            elif isinstance(s, k.Alloc):
                values.setdefault(s.var, []).append(None)
            for name in ("body", "then", "orelse"):
                visit(getattr(s, name, ()))

    visit(task.body)
    return values


def index_signs(kernel: k.Kernel, task: k.Task) -> IndexSigns:
    """The non-negative locals of `task` (a task of `kernel`) and the test over its expressions."""
    values = _definitions(task)
    extents = frozenset(kernel.extents)
    candidates = {v for v, given in values.items() if v.dtype.name in _INDEX_TYPES and None not in given}
    while True:  # drop a local one of whose values is not proven non-negative, until none is
        signs = IndexSigns(extents, frozenset(candidates))
        dropped = {v for v in candidates if not all(signs.nonnegative(e) for e in values[v])}
        if not dropped:
            return signs
        candidates -= dropped
