"""Loops over `range(v.shape[0])` and `range(x.shape[0])` share launch bounds when the two extents are
equal at the call, so they may fuse; a call where they differ is another signature, kept apart."""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


@bz.kernel
def step(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], dt: bz.float32):
    for i in range(v.shape[0]):
        v[i] -= 9.81 * dt
    for i in range(x.shape[0]):
        x[i] += v[i] * dt


@bz.kernel
def shift_rows(a: bz.Array[bz.float32, 2], b: bz.Array[bz.float32, 2]):
    for i in range(a.shape[0]):
        a[i, 0] += 1.0
    for i in range(b.shape[1]):  # another array, another axis
        b[0, i] += a[i, 0]


def run_in_python(x, v, dt):
    v -= np.float32(9.81) * np.float32(dt)
    x += v * np.float32(dt)


def test_equal_extents_of_different_arrays_fuse():
    x, v = np.ones(100, np.float32), np.zeros(100, np.float32)
    want_x, want_v = x.copy(), v.copy()
    step(x, v, 0.01)
    run_in_python(want_x, want_v, 0.01)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(v, want_v)
    assert [d.fused for d in step.decisions()] == [True]


@settings(max_examples=examples(20), deadline=None)
@given(st.integers(0, 6), st.integers(0, 6))
def test_another_axis_of_another_array_fuses_only_when_equal(rows, cols):
    a = np.arange(max(rows, 1) * 2, dtype=np.float32).reshape(-1, 2)[:rows]
    b = np.zeros((1, cols), np.float32)
    if rows < cols:  # the second loop would read past a's rows
        return
    want_a, want_b = a.copy(), b.copy()
    want_a[:, 0] += 1
    want_b[0, :cols] += want_a[:cols, 0]
    shift_rows(a, b)
    np.testing.assert_array_equal(a, want_a)
    np.testing.assert_array_equal(b, want_b)
    assert [d.fused for d in shift_rows.decisions()] == [rows == cols]


@bz.kernel
def reverse_then_scale(a: bz.Array[bz.float64, 1], b: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1],
                       c: bz.Array[bz.float64, 1]):
    n = a.shape[0]
    for i in range(n - 1, -1, -1):  # a loop written backwards: the same n iterations as range(n)
        out[i] = a[n - 1 - i]
    for j in range(n):
        b[j] = b[j] * 2.0
    for m in range(n + 1, 0, -1):  # n + 1 iterations, as range(n + 1): bounds of its own
        c[m - 1] = 2.0 * m


@pytest.mark.parametrize("n", [0, 1, 7])
def test_a_loop_over_a_reversed_range_has_the_bounds_of_the_forward_one(n):
    """range(n - 1, -1, -1) runs n iterations, as range(n) does: the two loops merge into one launch.
    The loop over range(n + 1, 0, -1) runs n + 1 iterations and stays apart."""
    a, b = np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64) + 1.0
    out, c = np.full(n, np.nan), np.full(n + 1, np.nan)
    reverse_then_scale(a, b, out, c)
    np.testing.assert_array_equal(out, a[::-1])
    np.testing.assert_array_equal(b, (np.arange(n) + 1.0) * 2.0)
    np.testing.assert_array_equal(c, 2.0 * np.arange(1, n + 2))
    assert [d.fused for d in reverse_then_scale.decisions()] == [True, False]


@bz.kernel
def double_then_offset(p: bz.Array[bz.float64, 2], q: bz.Array[bz.float64, 2], r: bz.Array[bz.float64, 2]):
    for i, j in bz.ndrange(p.shape[0], p.shape[1]):
        q[i, j] = p[i, j] * 2.0
    for i, j in bz.ndrange(q.shape[0], q.shape[1]):  # q's coordinates: split by q's extents, equal to p's
        r[i, j] = q[i, j] + p[(i + 1) % p.shape[0], j]


@pytest.mark.parametrize("q_shape", [(3, 5), (4, 5)])
def test_ndrange_cells_over_equal_extents_of_different_arrays_are_the_same_cell(q_shape):
    """Thread (i, j) of both loops is the same cell when q's extents equal p's, so the loops merge; with
    other extents the bounds differ and they stay apart."""
    p = np.arange(15, dtype=np.float64).reshape(3, 5)
    q, r = np.full(q_shape, np.nan), np.full(q_shape, np.nan)
    double_then_offset(p, q, r)
    rows = min(q_shape[0], 3)
    np.testing.assert_array_equal(q[:3], 2 * p[:q_shape[0]])
    np.testing.assert_array_equal(r[:rows], 2 * p[:rows] + np.roll(p, -1, 0)[:rows])
    assert [d.fused for d in double_then_offset.decisions()] == [q_shape == p.shape]
