"""Kernel-IR expression helpers of the lowering: casts and index arithmetic that fold constants.

Shared by the fusion lowering (`values`, `reductions`, `strips`) and the loop-kernel frontend.
"""

from __future__ import annotations

from collections.abc import Callable
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


def decompose(em: ValueEmitter, flat: k.Var, axes: list[int], extents: list[k.Expr], idx: list,
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
