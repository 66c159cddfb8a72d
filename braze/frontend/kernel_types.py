"""Typing of the kernel language: how operators, casts and assignments become typed Kernel IR.

A value in a kernel is either a Python object known at compile time (a literal, a global, a
closure value) or a Kernel IR expression. Operators follow the op table and braze's promotion
rules: Python literals are weak (they never widen a typed operand), half types compute in
float32 and round once to the result, as in fusions. Errors raise `_TypeProblem`; the AST
frontend adds the file, line and source.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.frontend.kernel_scope import ArrayHandle, LocalArray, ShapeHandle, TableRow, VectorValue
from braze.kir import nodes as k
from braze.lower.values import cast
from braze.ops.elementwise import BINARY, TERNARY, UNARY, compute_type

PYTHON_SCALARS = (bool, int, float)
_KIND_NAMES = {"b": "bool", "i": "integer", "f": "floating"}
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}

# What atomic updates take on every backend.
ATOMIC_DTYPES = ("int32", "int64", "uint32", "uint64", "float32", "float64")
ATOMIC_AUGMENTED = ("add", "sub")  # augmented assignments with an atomic form (`+=`, `-=`)


class TypeProblem(Exception):
    """A type error in a kernel expression (the frontend turns it into a KernelTypeError)."""


def is_value(v: object) -> bool:
    return isinstance(v, (k.Expr, *PYTHON_SCALARS))


# Entries of constant tuples chosen at run time (`W[q]`, W a tuple of Python floats): expressions, but
# as weak as the literals they choose among.
_WEAK_EXPRESSIONS: weakref.WeakSet = weakref.WeakSet()
_PYTHON_ZERO = {"b": False, "i": 0, "f": 0.0}
# The types Python computes its literals in: between weak expressions alone, arithmetic stays as exact.
_PYTHON_PRECISION = {"b": dt.bool_, "i": dt.int64, "f": dt.float64}
# Ops where Python takes bools as the ints 0 and 1 (`(x > 0) - (x < 0)` is -1, 0 or 1; NumPy's bool add
# would be a logical or; `math.floor(x > 0)` and `round(x > 0)` are 0 or 1): their bool operands compute
# as Python ints.
_BOOLS_AS_INTS = frozenset({"add", "sub", "mul", "floordiv", "remainder", "pow", "neg", "abs", "floor", "ceil",
                            "trunc", "round"})


def weak(expr: k.Expr) -> k.Expr:
    """Marks `expr`, an expression of Python literals, as weak as a literal of its kind: it takes the
    type of the typed operand it meets (a float32 one rounds it to float32), as `0.5` would."""
    _WEAK_EXPRESSIONS.add(expr)
    return expr


def type_of(v: k.Expr | bool | int | float) -> tuple[DType, int]:
    """(dtype, weakness): typed expressions are strong (0), Python literals weak (2)."""
    if isinstance(v, k.Expr):
        if v in _WEAK_EXPRESSIONS:
            return dt.python_scalar_dtype(_PYTHON_ZERO[v.dtype.category]), 2
        return v.dtype, 0
    if isinstance(v, VectorValue) and v.type.dtype.is_bool:
        raise TypeProblem(f"expected a scalar, got a {v.type_name} value: vectors compare component by component; "
                          "combine the components with .all() or .any(), as in (a < b).all()")
    if isinstance(v, VectorValue):
        raise TypeProblem(f"expected a scalar, got a {v.type_name} value; take a component (v.x, v[0]) or "
                          "a scalar function of it (bz.length(v), bz.dot(v, w))")
    if isinstance(v, TableRow):
        raise TypeProblem(f"expected a number, got a row of a constant table of shape {np.shape(v.table)} indexed "
                          f"by {len(v.keys)} index(es); index the rest too (t[q][0] or t[q, 0])")
    if not isinstance(v, PYTHON_SCALARS):  # a compile-time value that is no number: a tuple, an array
        raise TypeProblem(f"expected a number, got a constant {type(v).__name__}")
    return dt.python_scalar_dtype(v), 2


def literal(value: bool | int | float, dtype: DType) -> k.Expr:
    """A Python literal as a constant of `dtype`, rounded as a cast would round it."""
    exact = k.Const(value, dt.as_dtype(type(value)))
    if dtype.name == "bfloat16":
        return cast(k.Const(float(value), dt.float32), dtype)
    return cast(exact, dtype)


def as_expr(v: k.Expr | bool | int | float, dtype: DType | None = None) -> k.Expr:
    """`v` as an expression (of `dtype` when given: literals round to it, expressions are cast)."""
    if isinstance(v, k.Expr):
        return v if dtype is None else cast(v, dtype)
    return literal(v, dtype or type_of(v)[0])


def _check_kinds(op: str, dtype: DType, kinds: str) -> None:
    if dtype.category not in kinds:
        expected = " or ".join(_KIND_NAMES[c] for c in kinds)
        raise TypeProblem(f"{op}: expected {expected} operands, got {dtype.name}")


def _check_promoted_kind(op: str, promoted: DType, kinds: str, operands: list[DType]) -> None:
    """Each operand is of a kind `op` takes, but they may promote to one it does not: uint64 and int64
    to float64, as in NumPy (`x >> k` of a uint64 x and a loop index k)."""
    if promoted.category in kinds or not all(t.category in kinds for t in operands):
        _check_kinds(op, promoted, kinds)
        return
    expected = " or ".join(_KIND_NAMES[c] for c in kinds)
    wide = max(operands, key=lambda t: t.itemsize)
    raise TypeProblem(f"{op}: expected {expected} operands, and {' and '.join(t.name for t in operands)} promote to "
                      f"{promoted.name} (as in NumPy); convert one first, e.g. bz.{wide.name}(...)")


def _check_literal_fits(op: str, value: object, dtype: DType) -> None:
    """A Python int must fit the integer type it meets (`h * 0x1_0000_0000` with a uint32 h is an
    error, as in NumPy 2; mask first, `h & 0xFFFFFFFF`, or convert, `bz.uint64(h)`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not dtype.is_integer:
        return
    lo, hi = dt.int_bounds(dtype)
    if not lo <= value <= hi:
        raise TypeProblem(f"{op}: the Python int {value} is out of range for {dtype.name} [{lo}, {hi}]; "
                          f"convert the other operand to a wider type first, e.g. bz.int64(...)")


def _apply(op: str, table: dict, operands: list, make: Callable[[list[k.Expr], DType], k.Expr]) -> k.Expr:
    kinds, result_rule, _ = table[op]
    first_value = 1 if op == "where" else 0
    values = operands[first_value:]
    bools_as_ints = op in _BOOLS_AS_INTS
    for v in values:
        if isinstance(v, k.Expr):
            _check_kinds(op, v.dtype, (kinds + "b") if bools_as_ints else kinds)
    types = [type_of(v) for v in values]
    promoted = dt.result_type(*types)
    literals_only = all(w == 2 for _, w in types)  # weak expressions and literals: as Python computes them
    if literals_only:
        promoted = _PYTHON_PRECISION[promoted.category]
    elif _ints_meet_a_float(types, promoted):
        promoted = _PYTHON_PRECISION["f"]
    if bools_as_ints and promoted.is_bool:
        promoted = _PYTHON_PRECISION["i"]
    _check_promoted_kind(op, promoted, kinds, [t for t, _ in types])
    for v in values:
        _check_literal_fits(op, v, promoted)
    result = result_rule(promoted)
    if literals_only or result.is_floating and not promoted.is_floating:
        # math of literals alone is Python's, in float64: math.sqrt(2) or the log of a base; and an
        # integer's float result too, as Python's and NumPy's (math.sqrt(i), i / 3)
        result = _PYTHON_PRECISION[result.category]
    compute = compute_type(promoted, result)
    conditions = [as_expr(c, dt.bool_) for c in operands[:first_value]]
    # Literals round to the promoted type first (float16 x + 0.1 adds float16(0.1)), then compute.
    converted = [cast(as_expr(v, promoted), compute) for v in values]
    node = cast(make(conditions + converted, dt.bool_ if result.is_bool else compute), result)
    return weak(node) if literals_only else node


def _ints_meet_a_float(types: list[tuple[DType, int]], promoted: DType) -> bool:
    """Whether typed integers (or bools) meet a Python float literal only: `i * 0.5`, `(i + 0.5) * h`
    with a loop index i. Python and NumPy compute them in float64 (a fusion's tensors take torch's
    float32 there: dtypes.result_type); a typed float operand keeps its own type (`x[i] * 0.5` of a
    float32 x stays float32)."""
    return promoted.is_floating and not any(t.is_floating for t, weakness in types if weakness != 2)


_PYTHON_BINARY: dict[str, Callable] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "remainder": operator.mod, "pow": operator.pow,
    "left_shift": operator.lshift, "right_shift": operator.rshift, "bitwise_and": operator.and_,
    "bitwise_or": operator.or_, "bitwise_xor": operator.xor, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "maximum": max, "minimum": min,
}
_PYTHON_UNARY: dict[str, Callable] = {"neg": operator.neg, "bitwise_not": operator.invert,
                                      "logical_not": operator.not_, "abs": abs}


_RUN_TIME = (k.Expr, VectorValue, TableRow)  # what Python's operators cannot fold at compile time


def binary(op: str, a, b):
    """`a <op> b`: folded when both are Python values, else typed Kernel IR."""
    if not isinstance(a, _RUN_TIME) and not isinstance(b, _RUN_TIME) and op in _PYTHON_BINARY:
        try:
            return _PYTHON_BINARY[op](a, b)
        except (ArithmeticError, TypeError) as error:
            raise TypeProblem(f"{op} of constants {a!r} and {b!r}: {error}") from None
    if op == "pow" and _negative_int_literal(b) and isinstance(a, k.Expr) and not a.dtype.is_floating:
        b = float(b)  # as in Python (and `bz.Fusion`'s `x ** -1`), n ** -1 is a float, not an integer power of 0
    if op in _SHIFTS and _typed_integer(a) and _typed_integer(b) and a.dtype != b.dtype:
        # A shift keeps its left operand's type, as in C, Warp and Taichi: `h >> k` of a uint64 hash by
        # an int32 index is uint64 (NumPy's promotion of the pair, float64, has no shift).
        b = as_expr(b, a.dtype)
    return _apply(op, BINARY, [a, b], lambda x, dtype: k.Binary(op, x[0], x[1], dtype))


_SHIFTS = frozenset({"left_shift", "right_shift"})


def _typed_integer(v) -> bool:
    return isinstance(v, k.Expr) and v.dtype.is_integer


def _negative_int_literal(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v < 0


def unary(op: str, x, attrs: tuple = ()):
    if not isinstance(x, _RUN_TIME) and op in _PYTHON_UNARY:
        return _PYTHON_UNARY[op](x)
    return _apply(op, UNARY, [x], lambda v, dtype: k.Unary(op, v[0], dtype, attrs))


def ternary(op: str, a, b, c):
    return _apply(op, TERNARY, [a, b, c], lambda v, dtype: k.Ternary(op, v[0], v[1], v[2], dtype))


def convert(x, dtype: DType):
    """`bz.float32(x)`, `int(x)`: an explicit conversion (floats to integers truncate)."""
    return as_expr(x, dtype)


def truth(x) -> k.Expr | bool:
    """A condition as a bool (nonzero is true, NaN too)."""
    if isinstance(x, (VectorValue, TableRow)):
        type_of(x)  # a TypeProblem: a vector is no condition
    if isinstance(x, (ArrayHandle, LocalArray, ShapeHandle)):
        raise TypeProblem("expected a number as a condition, got an array; compare an element (a[i] > 0) or "
                          "an extent (a.shape[0] > 0)")
    return bool(x) if not isinstance(x, k.Expr) else cast(x, dt.bool_)


def assignable(value, target: DType, what: str, local: str | None = None) -> k.Expr:
    """`value` converted for storing into `target`: within a kind or up a kind (bool < int < float).

    Going down a kind (a float into an integer) loses the value silently in C; here it is a type
    mismatch, to be spelled out with a conversion such as `bz.int32(x)`. For a `local` whose first
    value was an integer (`s = 0`, then `s += x[i]`), the message says to start it as a float.
    """
    source = type_of(value)[0]
    if _KIND_RANK[source.kind] > _KIND_RANK[target.kind]:
        start = (f"; or, to keep floats in it, start it as a float ({local} = 0.0, not {local} = 0)"
                 if local is not None and source.is_floating and target.is_integer else "")
        raise TypeProblem(f"type mismatch: {what} is {target.name}, the value is {source.name}; "
                          f"convert it explicitly, e.g. bz.{target.name}(...){start}")
    return as_expr(value, target)


def index(x, what: str) -> k.Expr:
    """An array index as int64."""
    dtype = type_of(x)[0]
    if not dtype.is_integer:
        raise TypeProblem(f"{what}: expected an integer index, got {dtype.name}")
    return as_expr(x, dt.int64)


def common_type(a, b) -> DType:
    """The type of `a if c else b`."""
    return dt.result_type(type_of(a), type_of(b))


def table_entry(values, indices: list[k.Expr], typed: bool) -> k.Expr:
    """The entry of the constant array `values` at run-time `indices` (negative ones count from the end):
    a chain of selects over its flattened entries, the last entry where no other matches. `typed`: the
    entries have the array's dtype; otherwise they are Python literals, and the entry is weak."""
    kind = {"b": "b", "f": "f"}.get(values.dtype.kind, "i")  # unsigned Python ints are ints too
    dtype = dt.from_numpy(values.dtype) if typed else _PYTHON_PRECISION[kind]
    flat: k.Expr | int = 0
    for i, extent in zip(indices, values.shape):
        wrapped = ternary("where", binary("lt", i, 0), binary("add", i, extent), i)
        flat = binary("add", binary("mul", flat, extent), wrapped)
    entries = [literal(v.item(), dtype) for v in values.reshape(-1)]
    entry = entries[-1]
    for position in reversed(range(len(entries) - 1)):
        entry = k.Ternary("where", as_expr(binary("eq", flat, position)), entries[position], entry, dtype)
    return entry if typed else weak(entry)
