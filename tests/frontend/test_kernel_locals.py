"""A loop-kernel local first set from a Python literal (`acc = 0.0`) takes the widest dtype of its
kind stored into it, met in an operation or stored from it: float64 data accumulates in float64, and
`w = 0.1` times a float64 is 0.1 times it, not the literal's float32 rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest

import braze as bz


@bz.kernel
def total(x: bz.Array, out: bz.Array):
    for _ in range(1):
        acc = 0.0
        for i in range(x.shape[0]):
            acc += x[i]
        out[0] = acc


@bz.kernel
def row_sums(x: bz.Array, out: bz.Array):
    for i in range(x.shape[0]):
        acc = 0.0
        n = 0
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                acc = acc + x[i, j]
                n += 1
        out[i] = acc / max(n, 1)


@pytest.mark.parametrize("dtype, local", [(np.float64, "float64"), (np.float32, "float32"), (np.float16, "float32")])
def test_a_literal_local_accumulates_in_the_widest_float_stored_into_it(dtype, local: str) -> None:
    x = np.random.default_rng(0).uniform(0, 0.25, 200_001).astype(dtype)
    out = np.zeros(1, dtype)
    total(x, out)
    assert f"acc: {local} = 0.0:{local}" in total.kernel_ir()
    want = math.fsum(x.astype(np.float64))
    if dtype == np.float64:  # float32 accumulation of 2e5 values is off by ~1e-5 relative
        assert abs(out[0] - want) <= 1e-9 * want
    else:
        np.testing.assert_allclose(out[0], want, rtol=2e-3)  # the sum rounded to the array's dtype


def test_a_local_widened_in_a_branch_is_declared_wide_from_its_first_assignment() -> None:
    x = np.random.default_rng(1).normal(size=(5, 3001)) * 1e3 + 1e-7
    out = np.zeros(5)
    row_sums(x, out)
    assert "acc: float64 = 0.0:float64" in row_sums.kernel_ir()
    positive = np.where(x > 0, x, 0.0)
    want = positive.sum(axis=1) / np.maximum((x > 0).sum(axis=1), 1)
    np.testing.assert_allclose(out, want, rtol=1e-12)


@bz.kernel
def literal_locals_meet_wider_values(x: bz.Array, flags: bz.Array[bz.bool, 1], out: bz.Array):
    for i in range(x.shape[0]):
        w = 0.1
        out[i, 0] = w * x[i]  # an operand of a wider type
        third = 1.0 / 3.0
        out[i, 1] = third  # stored into a wider array
        out[i, 2] = math.atan2(w, x[i])  # an argument beside a wider one
        out[i, 3] = w if flags[i] else x[i]
        step = 0.0
        step += 0.1
        out[i, 4] = step < x[i]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_literal_local_is_the_literal_where_it_meets_a_wider_type(dtype) -> None:
    x, flags = np.array([1.0, 0.1], dtype), np.array([True, False])
    out = np.zeros((2, 5), dtype)
    literal_locals_meet_wider_values(x, flags, out)
    w = dtype(0.1)  # a float32 kernel keeps its float32 literals: no float64 math in it
    want = [[w * v, dtype(1.0) / dtype(3.0), math.atan2(w, v), w if f else v, dtype(0.1) < v]
            for v, f in zip(x.tolist(), flags.tolist())]
    np.testing.assert_allclose(out, np.array(want, dtype), rtol=1e-15 if dtype == np.float64 else 1e-6)
    assert ("float64" in literal_locals_meet_wider_values.kernel_ir()) == (dtype == np.float64)


@bz.kernel
def computed_from_literal_locals(x: bz.Array, out: bz.Array):
    for i in range(x.shape[0]):
        w = 0.5
        out[i, 0] = w / 3  # stored from an expression of it
        v = 0.1
        out[i, 1] = (v + 0.2) * x[i]  # an expression of it meets a wider operand
        u = 2.0
        out[i, 2] = math.sqrt(u + 1.0)
        total = 0.0
        third = 1.0 / 3.0
        total = third  # a literal local assigned into one that widens
        out[i, 3] = total


def test_an_expression_of_a_literal_local_is_computed_at_the_wider_type_it_meets() -> None:
    x = np.array([1.0, 3.0])
    out = np.zeros((2, 4))
    computed_from_literal_locals(x, out)
    want = [[0.5 / 3, (0.1 + 0.2) * v, math.sqrt(3.0), 1.0 / 3.0] for v in x.tolist()]
    np.testing.assert_array_equal(out, np.array(want))
