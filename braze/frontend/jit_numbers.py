"""The check a `@bz.jit` call makes of its runtime Python ints.

An int argument is traced as an int64 value of the fusion, so one trace serves every value. An op that
meets it with a narrower integer tensor (`int32_array + k`) computes in the tensor's type, as NumPy 2
and torch do, and they raise for a Python int that does not fit there, where a conversion would wrap
it silently (2**40 as an int32 is 0). A literal int is checked while tracing (ops/elementwise.py); a
runtime one has its value only at the call, so the trace records where it is narrowed
(`FusionGraph.narrowed_numbers`) and each call checks the value: an int argument by a comparison, a
number computed from some (`k * 2`) by the reference rules of the ops that compute it, in int64 as
the kernel does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np

from braze import dtypes as dt
from braze.errors import InputError
from braze.ir.fusion import NarrowedNumber
from braze.ir.tensor import TensorView
from braze.ops.table import lookup

ValueOf = Callable[[Sequence[object]], object]


def number_check(fn_name: str, names: Sequence[str], narrowed: Sequence[NarrowedNumber],
                 positions: dict[int, int]) -> Callable[[Sequence[object]], None] | None:
    """A function of a call's arguments (one per parameter) that raises an InputError for a runtime
    int that does not fit where the trace narrows it; None when the trace narrows none.
    `positions` maps id() of each runtime number's input to its parameter's position."""
    checks, seen = [], set()
    for number in narrowed:
        key = (id(number.value), number.dtype)
        value_of = _value_of(number.value, positions)
        if key in seen or value_of is None:  # None: computed from an extent too, which is no argument
            continue
        seen.add(key)
        arguments = ", ".join(repr(names[p]) for p in sorted(_leaves(number.value, positions)))
        checks.append((value_of, *dt.int_bounds(number.dtype), number, arguments))
    if not checks:
        return None

    def check(args: Sequence[object]) -> None:
        for value_of, lo, hi, number, arguments in checks:
            value = value_of(args)
            if value is not None and not lo <= value <= hi:
                _raise(fn_name, number, arguments, value, lo, hi)

    return check


def _raise(fn_name: str, number: NarrowedNumber, arguments: str, value: object, lo: int, hi: int) -> None:
    direct = number.value.scalar == "input"
    what = f"argument {arguments}" if direct else f"a number computed from argument {arguments}"
    raise InputError(
        f"{fn_name}: {what}: expected {'a Python int' if direct else 'a value'} in [{lo}, {hi}] (the range of "
        f"{number.dtype.name}, which {number.op} computes in), got {int(value)}; cast the tensor to a wider "
        "dtype first, or pass the number as an array")


def _value_of(tv: TensorView, positions: dict[int, int]) -> ValueOf | None:
    """How a call's arguments give the value of the runtime number `tv`."""
    if tv.scalar == "input":
        return operator.itemgetter(positions[id(tv)]) if id(tv) in positions else None
    if tv.scalar in ("literal", "const"):
        return lambda args: tv.value
    expr = tv.definition
    if expr is None or lookup(expr.op).category != "elementwise":
        return None
    operands = [_value_of(t, positions) for t in expr.inputs]
    if any(o is None for o in operands):
        return None
    reference = lookup(expr.op).reference

    def computed(args: Sequence[object]) -> int | None:
        values = [o(args) for o in operands]
        if any(v is None for v in values):
            return None
        try:
            arrays = [np.asarray(v, t.dtype.numpy) for v, t in zip(values, expr.inputs)]
        except OverflowError:  # an argument past int64: binding it says so
            return None
        return int(reference(None, arrays, tv, expr.attrs))

    return computed


def _leaves(tv: TensorView, positions: dict[int, int]) -> set[int]:
    """The positions of the arguments the runtime number `tv` is computed from."""
    if tv.scalar == "input":
        return {positions[id(tv)]}
    expr = tv.definition
    return set().union(*(_leaves(t, positions) for t in expr.inputs)) if expr is not None else set()
