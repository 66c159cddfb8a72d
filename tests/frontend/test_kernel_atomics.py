"""Augmented assignment in a parallel loop: to an element other threads may update too, it is atomic
(as in Taichi and Warp), so no update is lost; to the thread's own element it stays a plain update."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


@bz.kernel
def total(x: bz.Array[bz.float32, 1], tot: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        tot[0] += x[i]


@bz.kernel
def histogram(ids: bz.Array[bz.int32, 1], counts: bz.Array[bz.int64, 1]):
    for i in range(ids.shape[0]):
        counts[ids[i]] += 1


@bz.kernel
def pair_sums(x: bz.Array[bz.float64, 1], sums: bz.Array[bz.float64, 1]):
    for i in range(x.shape[0]):
        sums[i // 2] -= x[i]  # two threads share each element


@bz.kernel
def grid_own_and_shared(a: bz.Array[bz.float32, 2], rows: bz.Array[bz.float32, 1]):
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        a[i, j] += 1.0  # (i, j) is this thread's alone
        rows[i] += a[i, j]  # every j of row i updates rows[i]


def test_a_sum_into_one_element_loses_no_update():
    x = np.ones(1 << 22, np.float32)  # large enough to run on every worker thread
    tot = np.zeros(1, np.float32)
    total(x, tot)
    assert tot[0] == x.size
    assert "atomic_add(tot[0]" in total.kernel_ir()


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 200_000), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_a_histogram_matches_bincount(n, bins, seed):
    ids = np.random.default_rng(seed).integers(0, bins, n).astype(np.int32)
    counts = np.zeros(bins, np.int64)
    histogram(ids, counts)
    np.testing.assert_array_equal(counts, np.bincount(ids, minlength=bins))


def test_shared_halves_subtract_atomically():
    x = np.random.default_rng(1).standard_normal(2_000_001)
    sums = np.zeros(1_000_001)
    pair_sums(x, sums)
    want = -np.add.reduceat(x, np.arange(0, x.size, 2))
    np.testing.assert_allclose(sums, want, rtol=1e-12, atol=1e-12)
    assert "atomic_sub" in pair_sums.kernel_ir()


def test_an_ndrange_cell_owns_its_element_and_shares_its_row():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = np.zeros(3, np.float32)
    grid_own_and_shared(a, rows)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    np.testing.assert_array_equal(rows, a.sum(1))
    ir = grid_own_and_shared.kernel_ir()
    assert "atomic_add(rows[" in ir and "atomic_add(a[" not in ir


def test_the_threads_own_element_is_a_plain_update():
    @bz.kernel
    def bump(a: bz.Array[bz.float32, 2]):
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                a[i, j] *= 2.0

    a = np.ones((5, 3), np.float32)
    bump(a)
    np.testing.assert_array_equal(a, 2.0)
    assert "atomic" not in bump.kernel_ir()


def test_an_update_with_no_atomic_form_on_a_shared_element_is_refused():
    @bz.kernel
    def product(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            out[0] *= x[i]

    with pytest.raises(bz.KernelSyntaxError, match=r"'out\[...\]' \*= in a parallel loop.*serial loop"):
        product(np.ones(4, np.float32), np.ones(1, np.float32))


def test_an_atomic_update_of_a_dtype_without_atomics_is_refused():
    @bz.kernel
    def small_total(x: bz.Array[bz.int8, 1], out: bz.Array[bz.int8, 1]):
        for i in range(x.shape[0]):
            out[0] += x[i]

    with pytest.raises(bz.KernelTypeError, match="expected an array of int32, int64, float32, float64, got int8"):
        small_total(np.ones(4, np.int8), np.zeros(1, np.int8))


def test_an_update_in_a_serial_task_stays_plain():
    @bz.kernel
    def running_product(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        if x.shape[0] > 0:  # a loop under a top-level `if`: a serial task, one thread
            for j in range(x.shape[0]):
                out[0] *= x[j]

    out = np.ones(1, np.float32)
    running_product(np.full(3, 2.0, np.float32), out)
    assert out[0] == 8.0
    assert "atomic" not in running_product.kernel_ir()
