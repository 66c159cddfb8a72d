"""Dynamo's symbolic sizes as braze extents.

A region's tensor inputs carry their sizes as `torch.SymInt`s (a sympy expression over the shape
environment's symbols) or plain ints. Each symbol that is a whole input dimension becomes that
dimension's braze extent; every other size of the region (a view's target shape, a slice bound, a
created tensor's shape) is then the same expression over those extents, so a new batch size or
sequence length runs the kernels already compiled.

A size braze's extents cannot compute (`TruncToInt(1.5*ToFloat(s0))`, the output size of an
interpolation by a float scale) is an atom of its own, like a symbol: a carrier (carriers.py) brings
it into the region as one of its tensor's dimensions, computed by PyTorch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import sympy
import torch
from torch.utils._sympy import functions as symfn

from braze.errors import UnsupportedError
from braze.ir.scalar import Scalar, ceildiv, smax, smin

Extent = int | Scalar


def _fold(op: Callable[[Extent, Extent], Extent]) -> Callable[[list[Extent]], Extent]:
    def fold(args: list[Extent]) -> Extent:
        result = args[0]
        for a in args[1:]:
            result = op(result, a)
        return result

    return fold


# sympy head -> how its (already translated) arguments combine. torch's FloorDiv and its Python-style
# Mod are Python's // and %, which braze's Scalar ops are too.
_COMBINE: dict[type, Callable[[list[Extent]], Extent]] = {
    sympy.Add: _fold(operator.add),
    sympy.Mul: _fold(operator.mul),
    symfn.FloorDiv: lambda a: a[0] // a[1],
    symfn.PythonMod: lambda a: a[0] % a[1],
    symfn.Mod: lambda a: a[0] % a[1],
    symfn.CeilDiv: lambda a: ceildiv(a[0], a[1]),
    symfn.Max: _fold(smax),
    symfn.Min: _fold(smin),
    sympy.Max: _fold(smax),
    sympy.Min: _fold(smin),
}


def size_expr(size: object) -> sympy.Expr | int:
    """A size as an int, or the sympy expression of a symbolic one (after the shape environment's
    replacements, so two names for one size agree)."""
    if isinstance(size, sympy.Expr):
        return int(size) if size.is_Integer else size
    if isinstance(size, torch.SymInt):
        node = size.node
        expr = node.shape_env.replace(node.expr) if node.shape_env is not None else node.expr
        return int(expr) if expr.is_Integer else expr
    return int(size)


def sign_range(number: torch.SymInt) -> tuple[bool, bool]:
    """(never negative, always negative): what the shape environment's guards say of a symbolic int's
    sign (Dynamo guards it where torch branches on it: a slice bound counts from the end when negative)."""
    node = number.node
    ranges = node.shape_env.bound_sympy(node.expr)
    return bool(ranges.lower >= 0), bool(ranges.upper < 0)


def size_atoms(expr: sympy.Expr | int) -> set[sympy.Expr]:
    """What a region must be given to compute the size `expr`: its symbols, and each largest part of it
    that braze's extents cannot compute (that part whole, not its symbols)."""
    if isinstance(expr, int) or expr.is_Integer:
        return set()
    if isinstance(expr, sympy.Symbol):
        return {expr}
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 0:
        return size_atoms(expr.base)
    if type(expr) in _COMBINE:
        return set().union(*(size_atoms(a) for a in expr.args))
    return {expr}


def is_atom(expr: sympy.Expr | int) -> bool:
    """Whether a size is one atom (`size_atoms`): a symbol, or a size braze's extents cannot compute."""
    return not isinstance(expr, int) and size_atoms(expr) == {expr}


class ExtentMap:
    """Size atoms (`size_atoms`: symbols of the shape environment, sizes braze cannot compute) -> the
    braze extents of a region's input dimensions."""

    def __init__(self) -> None:
        self.symbols: dict[sympy.Expr, Scalar] = {}

    def learn(self, shape: Sequence[object], extents: Sequence[Scalar]) -> None:
        """Records each dimension of an input whose size is one atom, or one atom negated (the carrier
        of a number that is always negative: carriers.py)."""
        for size, extent in zip(shape, extents):
            expr = size_expr(size)
            if is_atom(expr):
                self.symbols.setdefault(expr, extent)
            elif is_atom(-expr):
                self.symbols.setdefault(-expr, -extent)

    def extent(self, size: object) -> Extent:
        """A size (int, SymInt, or a sympy expression) as an int or a braze extent."""
        expr = size if isinstance(size, sympy.Expr) else size_expr(size)
        return expr if isinstance(expr, int) else self._translate(expr)

    def shape(self, sizes: Sequence[object]) -> list[Extent]:
        return [self.extent(s) for s in sizes]

    def _translate(self, expr: sympy.Expr) -> Extent:
        if expr.is_Integer:
            return int(expr)
        if expr in self.symbols:
            return self.symbols[expr]
        if isinstance(expr, sympy.Symbol):
            raise UnsupportedError(f"size {expr} is not a dimension of any tensor the region reads")
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 0:
            base = self._translate(expr.base)
            return _fold(operator.mul)([base] * int(expr.exp)) if int(expr.exp) else 1
        combine = _COMBINE.get(type(expr))
        if combine is None:
            raise UnsupportedError(f"size {expr}: braze extents have no {type(expr).__name__}, and no tensor "
                                   "the region reads has this size as a dimension")
        return combine([self._translate(a) for a in expr.args])
