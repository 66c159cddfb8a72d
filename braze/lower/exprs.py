"""Kernel-IR expression helpers of the lowering: casts and index arithmetic that fold constants.

Shared by the fusion lowering (`values`, `reductions`, `strips`) and the loop-kernel frontend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.kir import nodes as k

if TYPE_CHECKING:
    from braze.lower.values import ValueEmitter


def cast(e: k.Expr, dtype: DType) -> k.Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, k.Const) and dtype.name != "bfloat16" and e.dtype.name != "bfloat16":
        # Fold, rounding as the cast would: 0.1 cast to float16 and back is not 0.1.
        return k.Const(dt.cast_values(const_array(e), dtype).item(), dtype)
    return k.Cast(e, dtype)


def const_array(c: k.Const) -> np.ndarray:
    """A constant's value as a 0-d array of its dtype (an integer's value taken modulo 2^n)."""
    value = dt.wrap_int(c.value, c.dtype) if c.dtype.is_integer else c.value
    return np.asarray(value, dtype=c.dtype.numpy)


def _is_const(e: k.Expr, value: int) -> bool:
    return isinstance(e, k.Const) and e.value == value


def index_op(op: str, a: k.Expr, b: k.Expr) -> k.Expr:
    """Index arithmetic in the operands' (index) type, with constant folding (extents are often static)."""
    dtype = a.dtype
    if isinstance(a, k.Const) and isinstance(b, k.Const):
        return k.Const(_FOLD[op](a.value, b.value), dtype)
    if op in ("mul", "floordiv") and _is_const(b, 1) or op in ("add", "sub") and _is_const(b, 0):
        return a
    if op == "mul" and _is_const(a, 1) or op == "add" and _is_const(a, 0):
        return b
    if op == "mul" and (_is_const(a, 0) or _is_const(b, 0)):
        return k.Const(0, dtype)
    return k.Binary(op, a, b, dtype)


_FOLD: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else 0, "remainder": lambda a, b: a % b if b else 0,
    "minimum": min, "maximum": max,
}


@dataclass(frozen=True)
class RowAxes:
    """A row over several trailing axes: their indices (outer first), each decomposed from the row
    position, that position, and their extents."""

    positions: tuple[k.Var, ...]
    position: k.Var
    extents: tuple[k.Expr, ...]

    def spans(self, idx: tuple[k.Expr, ...], extents) -> bool:
        """Whether indices `idx` over `extents` are the row's: the same indices over the same extents
        (the outermost aside: its index is in range either way), so their flat index is the position."""
        return idx == self.positions and tuple(extents[1:]) == self.extents[1:]


def trailing_run(axes: tuple[int, ...] | list[int], ndim: int) -> int:
    """How many of `axes` (ascending) are the last axes of a tensor of `ndim` axes, in order: 2 for
    batch_norm's (0, 2, 3) of [N, C, H, W]."""
    run = 0
    while run < len(axes) and axes[len(axes) - 1 - run] == ndim - 1 - run:
        run += 1
    return run


def product(extents) -> k.Expr:
    """The product of one or more index expressions, built as ReductionLoops.count builds it."""
    total: k.Expr | None = None
    for extent in extents:
        total = extent if total is None else index_op("mul", total, extent)
    return total


def without_unread(stmts: list[k.Stmt], candidates: set[k.Var]) -> tuple[k.Stmt, ...]:
    """`stmts` less the `Let`s of `candidates` that no other statement reads (a row axis's index that
    every access reads through the row position instead)."""
    read: set[k.Var] = set()
    seen: set[int] = set()

    def visit(node) -> None:  # Kernel IR is a DAG: each node once
        if isinstance(node, tuple):
            for child in node:
                visit(child)
            return
        if not isinstance(node, (k.Expr, k.Stmt)) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, k.Var):
            read.add(node)
        for field in getattr(node, "__dataclass_fields__", {}):
            visit(getattr(node, field))

    kept = [s for s in stmts if not (isinstance(s, k.Let) and s.var in candidates)]
    for stmt in kept:
        visit(stmt)
    return tuple(s for s in stmts if not (isinstance(s, k.Let) and s.var in candidates - read))


def decompose(em: ValueEmitter, flat: k.Expr, axes: list[int], extents: list[k.Expr], idx: list,
              iteration: set, iterates: list[bool]) -> None:
    """Binds the index of each of `axes` (outer first) to its digit of `flat` over their extents."""
    rest: k.Expr = flat
    for n, axis in enumerate(reversed(axes)):  # innermost first
        position = em.scopes.fresh("i", em.index)
        outermost = n == len(axes) - 1
        em.scopes.emit(k.Let(position, rest if outermost else index_op("remainder", rest, extents[axis])))
        iteration |= {position} if iterates[axis] else set()
        idx[axis] = position
        rest = index_op("floordiv", rest, extents[axis])


def decompose_row(em: ValueEmitter, position: k.Var, axes: list[int], extents: list[k.Expr], idx: list,
                  iteration: set, iterates: list[bool]) -> RowAxes:
    """Binds the indices of `axes` (ascending, outer first) of a tensor of `len(idx)` axes from
    `position`, their flat index, and gives the row a row-major tensor is read along: the axes among
    them that end the tensor's. Where those are all of `axes`, the row's position is `position`
    itself; where other axes come first (batch_norm's (n, h, w) of [N, C, H, W]), it is
    q = position % (H * W), and (n, c, h, w) reads (n, c, 0, q): one division where each axis took one."""
    run = trailing_run(axes, len(idx))
    if run < 2 or run == len(axes):
        decompose(em, position, axes, extents, idx, iteration, iterates)
        return RowAxes(tuple(idx[a] for a in axes), position, tuple(extents[a] for a in axes))
    tail, span = axes[-run:], product(extents[a] for a in axes[-run:])
    inner = em.scopes.fresh("q", em.index)
    em.scopes.emit(k.Let(inner, index_op("remainder", position, span)))
    iteration |= {inner} if any(iterates[a] for a in tail) else set()
    decompose(em, inner, tail, extents, idx, iteration, iterates)
    decompose(em, index_op("floordiv", position, span), axes[:-run], extents, idx, iteration, iterates)
    return RowAxes(tuple(idx[a] for a in tail), inner, tuple(extents[a] for a in tail))
