"""Task bounds computed on the host (kir/python.py) agree with the same integer arithmetic in a
kernel: floor division and remainder as in Python, and a division by zero gives 0, for fusions and
loop kernels alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import dtypes as dt
from braze.kir import nodes as k
from braze.kir.python import python_function, scalar_by_name
from braze.runtime.backends.cpu import host_function
from braze.runtime.loop_calls import bounds_function

A, B = k.ScalarParam("a", dt.int64), k.ScalarParam("b", dt.int64)


def _binary(op: str, a: k.Expr, b: k.Expr) -> k.Expr:
    return k.Binary(op, a, b, dt.int64)


def _expected(op: str, a: int, b: int) -> int:
    if op in ("floordiv", "remainder") and b == 0:
        return 0
    return {"floordiv": a // b if b else 0, "remainder": a % b if b else 0, "add": a + b, "sub": a - b,
            "mul": a * b, "minimum": min(a, b), "maximum": max(a, b)}[op]


OPS = ["add", "sub", "mul", "floordiv", "remainder", "minimum", "maximum"]


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(OPS), a=st.integers(-50, 50), b=st.integers(-7, 7), constant=st.booleans())
def test_fusion_and_loop_kernel_bounds_agree(op: str, a: int, b: int, constant: bool) -> None:
    """The fusion executor's bounds (scalars by name) and a loop kernel's (scalars by position) give
    the same value, that of the kernel's own arithmetic."""
    divisor = k.Const(b, dt.int64) if constant else k.ScalarRef(B)
    e = _binary(op, k.ScalarRef(A), divisor)
    fusion_bound = host_function([e])({"a": a, "b": b})[0]
    kernel = k.Kernel("bounds", (A, B), (k.Task("t", "range_for", (), begin=k.Const(0, dt.int64), end=e),))
    loop_bound = bounds_function(kernel, [], [A, B])((), (a, b))[0][1]
    assert fusion_bound == loop_bound == _expected(op, a, b)


def test_a_division_by_zero_in_a_bound_gives_zero_and_a_cast_truncates() -> None:
    by_zero = _binary("floordiv", k.ScalarRef(A), k.ScalarRef(B))
    rest = _binary("remainder", k.ScalarRef(A), k.ScalarRef(B))
    cast = k.Cast(k.ScalarRef(k.ScalarParam("x", dt.float64)), dt.int64)
    values = python_function([by_zero, (rest, cast)], "s", scalar_by_name)({"a": 7, "b": 0, "x": -2.7})
    assert values == (0, (0, -2))


def test_what_the_host_cannot_evaluate_is_refused() -> None:
    load = k.Load(k.ArrayParam("x", dt.int64, 1), (k.Const(0, dt.int64),))
    with pytest.raises(TypeError, match="cannot evaluate Load"):
        host_function([load])


@bz.kernel
def count_quotient(flags: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1], a: bz.int64, b: bz.int64):
    for i in range(a // b):  # the bound: computed on the host
        flags[i] = 1
    for _ in range(1):  # the same arithmetic in the kernel
        out[0] = a // b
        out[1] = a % b


@settings(max_examples=40, deadline=None)
@given(a=st.integers(-20, 20), b=st.integers(-5, 5))
def test_a_loop_kernel_bound_agrees_with_the_kernel(a: int, b: int) -> None:
    flags, out = np.zeros(32, np.int64), np.full(2, -99, np.int64)
    count_quotient(flags, out, a, b)
    assert out.tolist() == [_expected("floordiv", a, b), _expected("remainder", a, b)]
    assert int(flags.sum()) == max(out[0], 0)
