"""The op table: one `OpDef` per op, holding its shape, dtype and reference rules.

Later backends add their rules (`cuda`, `llvm`) to the same entries, so adding an op is one entry
here plus its user-facing function, never edits across the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from braze.dtypes import DType
from braze.errors import FusionDefinitionError, UnsupportedError, a_or_an
from braze.ir.domain import IterDomain
from braze.ir.fusion import FusionGraph, active_fusion
from braze.ir.scalar import Scalar, concrete_value
from braze.ir.tensor import TensorView

ShapeRule = Callable[[Sequence[TensorView], dict], list[IterDomain]]
DTypeRule = Callable[[Sequence[TensorView], dict], DType]


class RefContext:
    """What a reference rule may need beyond its operands: bound extents and random state."""

    def __init__(self, bindings: dict[str, int], rng_state: Callable[[], tuple[int, int]]) -> None:
        self.bindings = bindings
        self.next_rng = rng_state  # -> (seed, offset) for an op that did not fix its own

    def extent(self, value: Scalar) -> int:
        return value.evaluate(self.bindings)

    def shape(self, domain: Sequence[IterDomain]) -> tuple[int, ...]:
        return tuple(self.extent(d.extent) for d in domain if not d.is_reduction)


ReferenceRule = Callable[[RefContext, Sequence[np.ndarray], TensorView, dict], np.ndarray]


@dataclass(frozen=True)
class OpDef:
    """One op: how its output's shape and dtype follow from the operands, and what it computes."""

    name: str
    category: str  # unary, binary, ternary, cast, reduction, view, creation
    shape: ShapeRule
    dtype: DTypeRule
    reference: ReferenceRule
    backend_rules: dict[str, Any] = field(default_factory=dict)  # "cuda", "llvm": added by backends


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is registered twice")
    OPS[op.name] = op
    return op


def lookup(name: str) -> OpDef:
    if name not in OPS:
        raise UnsupportedError(f"op {name!r} is not in the op table")
    return OPS[name]


def apply(name: str, inputs: Sequence[TensorView], fusion: FusionGraph | None = None, **attrs: Any) -> TensorView:
    """Adds `name(inputs, **attrs)` to the fusion and returns its output tensor."""
    op = lookup(name)
    if fusion is None:
        fusion = inputs[0].fusion if inputs else active_fusion(name)
    for tv in inputs:
        fusion.check_owned(tv, name)
        if tv.overwritten:
            raise UnsupportedError(f"{name}: {tv.overwritten}, which NumPy's would see through and braze's "
                                   "does not; take the view after the write, or copy it (.copy()) before")
    fusion.check_definable(name)
    dtype = op.dtype(inputs, attrs)
    out = TensorView(fusion, op.shape(inputs, attrs), dtype)
    # Arithmetic on Python numbers alone stays as weak as they are (`x * (1 - beta)` keeps x's dtype).
    # Extents count as Python ints here, as torch's sizes are: attention's `x.shape[-1] ** -0.5` is a
    # number, and a float16 `x` times it stays float16.
    out.python_scalar = op.category == "elementwise" and bool(inputs) and all(
        tv.weak == 2 or tv.scalar == "extent" for tv in inputs)
    # Arithmetic and casts on scalars alone, one of them typed, give a scalar as weak as a typed one.
    out.scalar_arithmetic = (op.category in ("elementwise", "cast") and bool(inputs) and not out.python_scalar
                             and all(tv.weak >= 1 and not tv.visible for tv in inputs))
    fusion.add_expr(name, tuple(inputs), (out,), **attrs)
    return out


def size_number(tv: TensorView) -> np.ndarray | None:
    """A scalar computed from sizes and numbers alone (`(stop - start) / step`, as `np.arange(n)` computes
    it), as a 0-d array, where its sizes are numbers: static, or in a @bz.jit trace that specializes on
    them (ir/scalar.py, `concretizing`); else None."""
    if tv.visible or tv.scalar == "input":
        return None
    if tv.scalar == "extent":
        value = concrete_value(tv.value)
        return None if value is None else np.asarray(value, tv.dtype.numpy)
    if tv.scalar is not None:  # a literal or a constant
        return np.asarray(tv.value) if tv.scalar == "literal" else np.asarray(tv.value, tv.dtype.numpy)
    expr = tv.definition
    if expr is None or lookup(expr.op).category not in ("elementwise", "cast"):
        return None
    args = [size_number(operand) for operand in expr.inputs]
    if any(a is None for a in args):
        return None
    return lookup(expr.op).reference(RefContext({}, _no_random_state), args, tv, expr.attrs)


def _no_random_state() -> tuple[int, int]:
    raise AssertionError("an elementwise op of numbers drew random numbers")


def size_value(value: object, what: str) -> object:
    """A size given as nvFuser writes them, `define_scalar(2)` (a constant), `t.size(0)` (an extent) or an
    integer scalar input (its value, a symbolic extent bound at every call), as its value: an int or a
    symbolic extent; a size computed from constants alone (`cast(2.5 * 7, Int)`), its number. Anything else
    is returned as it is, for the caller to check."""
    if not isinstance(value, TensorView) or value.visible:
        return value
    if value.scalar is None:  # computed in the fusion: a number where only constants and sizes went in
        number = size_number(value) if value.dtype.is_integer else None
        return value if number is None else int(number)
    if value.scalar in ("const", "literal", "extent") and value.dtype.is_integer:
        return value.value
    if value.scalar == "input" and value.dtype.is_integer:
        return value.fusion.value_symbol(value)
    if value.scalar == "input":
        raise FusionDefinitionError(f"{what}: expected an integer scalar, got {value.describe()} of type "
                                    f"{value.dtype.name}")
    return value


def reject_kinds(op: str, tv: TensorView, allowed: str) -> None:
    """Raises when `tv`'s dtype kind is not among `allowed` ('b', 'i', 'f'; 'i' takes unsigned integers too)."""
    if tv.dtype.category not in allowed:
        names = {"b": "bool", "i": "integer", "f": "floating"}
        expected = " or ".join(names[k] for k in allowed)
        # A mask in arithmetic (p - onehot, as torch refuses it too) is meant as 0 and 1 of the other operand
        hint = "; cast a mask to numbers first (mask.astype(x.dtype), mask.float())" if tv.dtype.is_bool else ""
        raise FusionDefinitionError(
            f"{op}: {tv.describe()}: expected {a_or_an(expected)} dtype, got {tv.dtype.name}{hint}")
