"""Augmented assignment in a parallel loop: to an element other threads may update too, it is atomic
(as in Taichi and Warp), so no update is lost; to the thread's own element it stays a plain update."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_cuda_on_cpu import run_on_cpu

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


@settings(max_examples=examples(25), deadline=None)
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


def test_the_threads_own_element_is_atomic_where_a_neighbour_updates_it_atomically():
    # Thread i's `force[i] += s` and thread i - 1's `force[i] -= s` each reach one element per thread, but
    # the two meet: as plain read-modify-writes one of them is lost (a spring chain on a GPU drifted).
    @bz.kernel
    def springs(x: bz.Array[bz.float64, 1], force: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0] - 1):
            stretch = x[i + 1] - x[i]
            force[i] += stretch
            force[i + 1] -= stretch

    @bz.kernel
    def vector_springs(x: bz.Array[bz.vec2, 1], force: bz.Array[bz.vec2, 1]):
        for i in range(x.shape[0] - 1):
            stretch = x[i + 1] - x[i]
            force[i] += stretch
            force[i + 1] -= stretch

    x = np.random.default_rng(2).standard_normal(1001)
    force = np.zeros_like(x)
    springs(x, force)
    want = np.zeros_like(x)
    want[:-1] += np.diff(x)
    want[1:] -= np.diff(x)
    np.testing.assert_allclose(force, want, rtol=1e-12, atol=1e-12)
    assert "force[i] = " not in springs.kernel_ir() and springs.kernel_ir().count("atomic_") == 2
    x2 = np.random.default_rng(3).standard_normal((50, 2)).astype(np.float32)
    force2 = np.zeros_like(x2)
    vector_springs(x2, force2)
    assert "atomic" in vector_springs.kernel_ir() and "force_x[i] = " not in vector_springs.kernel_ir()


@bz.func
def add_at(counts: bz.Array[bz.int64, 1], j: int, amount: int):
    counts[j] += amount


@bz.func
def pull_next(force: bz.Array[bz.float64, 1], i: int, stretch: float):
    force[i + 1] -= stretch


def test_updates_in_a_helper_the_loop_calls_are_atomic_where_threads_share_the_element():
    # A @bz.func's body runs on the loop's threads: a histogram through a helper, and a spring chain
    # updating force[i] in the loop and force[i + 1] in the helper, were plain read-modify-writes.
    @bz.kernel
    def histogram_through_helper(ids: bz.Array[bz.int32, 1], counts: bz.Array[bz.int64, 1]):
        for i in range(ids.shape[0]):
            add_at(counts, ids[i], 1)

    @bz.kernel
    def springs_through_helper(x: bz.Array[bz.float64, 1], force: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0] - 1):
            stretch = x[i + 1] - x[i]
            force[i] += stretch
            pull_next(force, i, stretch)

    ids = np.random.default_rng(4).integers(0, 5, 300).astype(np.int32)
    counts = np.zeros(5, np.int64)
    histogram_through_helper(ids, counts)
    np.testing.assert_array_equal(counts, np.bincount(ids, minlength=5))
    assert "atomic_add(counts[" in histogram_through_helper.kernel_ir()
    x = np.random.default_rng(5).standard_normal(9)
    springs_through_helper(x, np.zeros_like(x))
    assert springs_through_helper.kernel_ir().count("atomic_") == 2


@bz.func
def scale_at(values: bz.Array[bz.float64, 1], j: int, factor: float):
    values[j] *= factor


def test_a_helper_updating_the_threads_own_element_makes_a_plain_update():
    # The helper's j is the loop's i (or n - 1 - i), as if the update were written in the loop: `*=` there
    # was refused as having no atomic form, and `+=` was an atomic.
    @bz.kernel
    def scale_and_count(values: bz.Array[bz.float64, 1], counts: bz.Array[bz.int64, 1]):
        for i in range(values.shape[0]):
            scale_at(values, values.shape[0] - 1 - i, 2.0)
            add_at(counts, i, 3)

    values, counts = np.arange(5.0), np.ones(5, np.int64)
    scale_and_count(values, counts)
    np.testing.assert_array_equal(values, np.arange(5.0) * 2)
    np.testing.assert_array_equal(counts, np.full(5, 4))
    assert "atomic" not in scale_and_count.kernel_ir()


def test_a_local_set_once_to_the_index_names_the_threads_own_element():
    # `r = n - 1 - i` set once: `values[r] *= 2` is `values[n - 1 - i] *= 2` (it was refused as having no
    # atomic form); `c` is set twice, so `counts[c] += 1` stays atomic.
    @bz.kernel
    def mirrored(values: bz.Array[bz.float64, 1], counts: bz.Array[bz.int64, 1]):
        for i in range(values.shape[0]):
            r = values.shape[0] - 1 - i
            values[r] *= 2.0
            c = i
            c = c // 2
            counts[c] += 1

    values, counts = np.arange(6.0), np.zeros(6, np.int64)
    mirrored(values, counts)
    np.testing.assert_array_equal(values, np.arange(6.0) * 2)
    np.testing.assert_array_equal(counts, [2, 2, 2, 0, 0, 0])
    assert "atomic_add(counts[" in mirrored.kernel_ir() and "atomic" not in mirrored.kernel_ir().replace(
        "atomic_add(counts[", "")


def test_updates_are_atomic_where_the_calls_arrays_share_memory():
    # a[i, 1] of a sliding window is a[i + 1, 0], and a[i] and b[i + 1] of one array passed twice are one
    # element: each thread's own by its indices, two plain read-modify-writes of it on a GPU.
    from numpy.lib.stride_tricks import sliding_window_view

    @bz.kernel
    def bump_pairs(a: bz.Array[bz.float64, 2]):
        for i in range(a.shape[0]):
            a[i, 0] += 1.0
            a[i, 1] += 1.0

    @bz.kernel
    def bump_and_scale(a: bz.Array[bz.float64, 1], b: bz.Array[bz.float64, 1]):
        for i in range(a.shape[0]):
            a[i] *= 2.0  # no atomic form: the thread's own element, unless b is a
            b[i] += 1.0
            a[i] += 1.0

    @bz.kernel
    def bump_two(a: bz.Array[bz.float64, 1], b: bz.Array[bz.float64, 1]):
        for i in range(a.shape[0] - 1):
            a[i] += 1.0
            b[i + 1] += 1.0

    buffer = np.zeros(6)
    bump_pairs(sliding_window_view(buffer, 2, writeable=True))
    np.testing.assert_array_equal(buffer, [1, 2, 2, 2, 2, 1])
    assert "atomic_add(a[i, 0]" in bump_pairs.kernel_ir() and "atomic_add(a[i, 1]" in bump_pairs.kernel_ir()
    x = np.zeros(5)
    bump_two(x, x)
    np.testing.assert_array_equal(x, [1, 2, 2, 2, 1])
    assert bump_two.kernel_ir().count("atomic_add") == 2
    bump_two(np.zeros(5), np.zeros(5))  # apart: each thread's own elements
    assert "atomic" not in bump_two.kernel_ir()
    bump_and_scale(x, np.zeros(5))
    with pytest.raises(bz.KernelSyntaxError, match=r"not provably this thread's own \(the call's arrays share memory"):
        bump_and_scale(x, x)


def test_updates_of_the_threads_own_row_at_several_places_stay_plain():
    @bz.kernel
    def damp(v: bz.Array[bz.float32, 2]):
        for i in range(v.shape[0]):
            v[i, 1] -= 1.0
            v[i, 0] += 2.0
            for d in range(2):
                v[i, d] *= 0.5

    v = np.ones((7, 2), np.float32)
    damp(v)
    np.testing.assert_array_equal(v, np.tile(np.float32([1.5, 0.0]), (7, 1)))
    assert "atomic" not in damp.kernel_ir()


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

    refused = "expected an array of int32, int64, uint32, uint64, float32, float64, got int8"
    with pytest.raises(bz.KernelTypeError, match=refused):
        small_total(np.ones(4, np.int8), np.zeros(1, np.int8))


def test_an_update_in_a_serial_task_stays_plain():
    @bz.kernel
    def running_product(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        for j in bz.serial(range(x.shape[0])):  # a serial task: one thread
            out[0] *= x[j]

    out = np.ones(1, np.float32)
    running_product(np.full(3, 2.0, np.float32), out)
    assert out[0] == 8.0
    assert "atomic" not in running_product.kernel_ir()


# --- updates privatized per CPU thread: the same totals whatever the target's layout ----------------
@pytest.mark.parametrize("layout", ["dense", "every other", "reversed", "too large for a copy", "2-d"])
def test_shared_updates_land_whatever_the_targets_layout(layout):
    rng = np.random.default_rng(7)
    bins = 5000 if layout == "too large for a copy" else 37
    ids = rng.integers(0, bins, 1 << 20).astype(np.int32)
    backing = np.zeros(2 * bins, np.int64)
    counts = {"dense": backing[:bins], "every other": backing[::2], "reversed": backing[:bins][::-1],
              "too large for a copy": backing[:bins], "2-d": backing[:bins]}[layout]
    if layout == "2-d":
        @bz.kernel
        def histogram_2d(ids: bz.Array[bz.int32, 1], counts: bz.Array[bz.int64, 2]):
            for i in range(ids.shape[0]):
                counts[ids[i] % 2, ids[i] // 2] += 1

        grid = np.zeros((2, (bins + 1) // 2), np.int64)
        histogram_2d(ids, grid)
        np.testing.assert_array_equal(grid.T.reshape(-1)[:bins], np.bincount(ids, minlength=bins))
        return
    histogram(ids, counts)
    np.testing.assert_array_equal(counts, np.bincount(ids, minlength=bins))
    if layout == "every other":
        assert not backing[1::2].any()  # the elements between were not touched


def test_a_float_sum_privatized_per_thread_stays_accurate():
    @bz.kernel
    def energy(v: bz.Array[bz.float64, 1], e: bz.Array[bz.float64, 1]):
        for i in range(v.shape[0]):
            e[0] += 0.5 * v[i] * v[i]
            e[1] -= v[i]

    v = np.random.default_rng(2).standard_normal(1 << 21)
    e = np.array([1.0, 2.0])
    energy(v, e)
    np.testing.assert_allclose(e, [1.0 + 0.5 * (v * v).sum(), 2.0 - v.sum()], rtol=1e-9)


def test_an_atomic_call_whose_old_value_goes_unread_is_privatized_like_an_update():
    @bz.kernel
    def energy_calls(v: bz.Array[bz.float64, 1], e: bz.Array[bz.float64, 1], old: bz.Array[bz.float64, 1]):
        for i in range(v.shape[0]):
            bz.atomic_add(e[0], 0.5 * v[i] * v[i])  # a statement: no old value
            bz.atomic_sub(e[1], v[i])
        for i in range(old.shape[0]):
            old[i] = bz.atomic_add(e[2], 1.0)  # the old value is read: a true atomic

    v = np.random.default_rng(3).standard_normal(1 << 21)
    e, old = np.array([1.0, 2.0, 0.0]), np.zeros(64)
    energy_calls(v, e, old)
    np.testing.assert_allclose(e, [1.0 + 0.5 * (v * v).sum(), 2.0 - v.sum(), 64.0], rtol=1e-9)
    assert sorted(old.tolist()) == list(range(64))
    ir = energy_calls.kernel_ir()
    assert "e_old = atomic_add(e[2]" in ir and "    atomic_add(e[0]" in ir and "    atomic_sub(e[1]" in ir


def test_a_target_the_task_also_reads_stays_atomic():
    @bz.kernel
    def read_and_add(x: bz.Array[bz.int64, 1], acc: bz.Array[bz.int64, 1], seen: bz.Array[bz.int64, 1]):
        for i in range(x.shape[0]):
            acc[0] += x[i]
            seen[i] = acc[1]  # acc is read too: no private copy could show the value

    x = np.ones(1 << 20, np.int64)
    acc, seen = np.zeros(2, np.int64), np.zeros(1 << 20, np.int64)
    read_and_add(x, acc, seen)
    assert acc[0] == x.size and not seen.any()


@bz.kernel
def warp_spelled_atomics(x: bz.Array[bz.vec3, 1], ids: bz.Array[bz.int32, 1], grid: bz.Array[bz.float32, 2],
                         top: bz.Array[bz.int32, 1], olds: bz.Array[bz.int32, 1]):
    for t in range(ids.shape[0]):
        bz.atomic_sub(x, ids[t], bz.vec3(1.0, 2.0, 3.0))  # Warp's wp.atomic_sub(f, i, fs)
        bz.atomic_add(grid, ids[t], t % 2, 0.5)
        olds[t] = bz.atomic_add(top, 0, 1)


def test_warp_spelled_atomics_name_the_array_its_indices_and_the_value_apart():
    """`bz.atomic_add(a, i, j, v)`, as Warp spells `bz.atomic_add(a[i, j], v)`, with the old value returned."""
    ids = np.array([2, 0, 2, 1, 2], np.int32)
    x, grid = np.zeros((3, 3), np.float32), np.zeros((3, 2), np.float32)
    top, olds = np.zeros(1, np.int32), np.full(5, -1, np.int32)
    warp_spelled_atomics(x, ids, grid, top, olds)
    want_x, want_grid = np.zeros((3, 3)), np.zeros((3, 2))
    np.subtract.at(want_x, ids, [1.0, 2.0, 3.0])
    np.add.at(want_grid, (ids, np.arange(5) % 2), 0.5)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(grid, want_grid)
    assert top[0] == 5 and sorted(olds) == [0, 1, 2, 3, 4]  # each thread saw the count before its own


def test_warp_spelled_atomics_check_their_indices_and_target():
    def too_few(x: bz.Array[bz.float32, 2]):
        for i in range(x.shape[0]):
            bz.atomic_add(x, i, 1.0)

    def scalar_target(x: bz.Array[bz.float32, 1], s: bz.float32):
        for i in range(x.shape[0]):
            bz.atomic_add(s, i, 1.0)

    with pytest.raises(bz.KernelTypeError, match="'x' has 2 dimension"):
        bz.kernel(too_few)(np.zeros((2, 2), np.float32))
    with pytest.raises(bz.KernelSyntaxError, match=r"or \(array, index, \.\.\., value\).*got \(s, i, 1.0\)"):
        bz.kernel(scalar_target)(np.zeros(2, np.float32), 1.0)


@bz.kernel
def extremes(x: bz.Array[bz.float32, 1], lo: bz.Array[bz.float32, 1], hi: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        bz.atomic_min(lo[i % 2], x[i])
        bz.atomic_max(hi[i % 2], x[i])


@pytest.mark.parametrize("backend", ["llvm", "cuda_on_cpu"])
def test_a_float_atomic_minimum_or_maximum_takes_the_number_over_nan(backend):
    # As np.fmin and np.fmax (and CUDA's fminf): a NaN in the array or in the value loses to a number.
    x = np.array([np.nan, 2.0, -1.0, np.nan, 3.0, np.nan], np.float32)
    lo, hi = np.array([np.nan, 5.0], np.float32), np.array([np.nan, -5.0], np.float32)
    if backend == "llvm":
        extremes(x, lo, hi)
    elif not available():
        pytest.skip("needs g++")
    else:
        run_on_cpu(extremes, x, lo, hi)
    np.testing.assert_array_equal(lo, [-1.0, 2.0])
    np.testing.assert_array_equal(hi, [3.0, 2.0])
