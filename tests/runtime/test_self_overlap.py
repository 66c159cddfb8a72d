"""An argument whose strides let two index tuples reach one address is shared between threads:
`overlaps_itself` against a brute-force walk of every index, and task fusion kept apart on such
an argument."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided, sliding_window_view

import braze as bz
from braze.runtime.arrays import OverlapCheck, overlaps_itself


def reaches_one_address_twice(shape, strides) -> bool:
    addresses = [sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, shape))]
    return len(set(addresses)) < len(addresses)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-12, 12)), min_size=0, max_size=3),
       st.sampled_from([1, 2, 4, 8]))
def test_every_layout_reaching_an_element_twice_is_flagged(dims, itemsize):
    shape = tuple(n for n, _ in dims)
    strides = tuple(s * itemsize for _, s in dims)
    # Whole elements only (as braze requires): an address collision is a shared element. Interleaved
    # layouts (strides 3 and 2 over extents 2 and 3) may be flagged without colliding: that only
    # keeps two tasks apart.
    if reaches_one_address_twice(shape, strides):
        assert overlaps_itself(shape, strides, itemsize)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_views_made_by_slicing_and_transposing_are_not_flagged(shape, data):
    view = np.zeros(shape, np.float32)
    for axis in range(view.ndim):
        step = data.draw(st.sampled_from([1, 2, -1, -3]))
        view = np.moveaxis(np.moveaxis(view, axis, 0)[::step], 0, axis)
    view = view.transpose(data.draw(st.permutations(range(view.ndim))))
    assert not overlaps_itself(view.shape, view.strides, view.itemsize)


@bz.kernel
def double_then_shift(w: bz.Array[bz.float32, 2], n: bz.int32):
    for t in range(n):
        w[t, 0] = w[t, 0] * 2.0 + 1.0
    for t in range(n):
        w[t, 1] = w[t, 1] + 10.0  # w[t, 1] is w[t + 1, 0]: another thread's element of the first loop


def run_in_python(w, n):
    for t in range(n):
        w[t, 0] = w[t, 0] * 2.0 + 1.0
    for t in range(n):
        w[t, 1] = w[t, 1] + 10.0


def test_a_sliding_window_view_is_not_fused_as_if_its_rows_were_distinct():
    buf = np.arange(9, dtype=np.float32)
    want = buf.copy()
    run_in_python(sliding_window_view(want, 2, writeable=True), 8)
    double_then_shift(sliding_window_view(buf, 2, writeable=True), 8)
    np.testing.assert_array_equal(buf, want)
    assert not any(d.fused for d in double_then_shift.decisions())


def test_distinct_rows_still_fuse():
    rows = np.arange(18, dtype=np.float32).reshape(9, 2)
    want = rows.copy()
    run_in_python(want, 9)
    double_then_shift(rows, 9)
    np.testing.assert_array_equal(rows, want)
    assert all(d.fused for d in double_then_shift.decisions())


def test_a_read_only_broadcast_stays_fusable():
    row = as_strided(np.arange(2, dtype=np.float32), (5, 2), (0, 4), writeable=False)
    assert overlaps_itself(row.shape, row.strides, row.itemsize) and not row.flags.writeable

    @bz.kernel
    def copy_twice(src: bz.Array[bz.float32, 2], dst: bz.Array[bz.float32, 2]):
        for t in range(src.shape[0]):
            dst[t, 0] = src[t, 0]
        for t in range(src.shape[0]):
            dst[t, 1] = src[t, 1]

    dst = np.zeros((5, 2), np.float32)
    copy_twice(row, dst)
    np.testing.assert_array_equal(dst, row)
    assert all(d.fused for d in copy_twice.decisions())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.lists(st.tuples(st.integers(0, 4), st.integers(-6, 6)),
                                                         min_size=1, max_size=2), st.integers(1, 3))
def test_two_views_sharing_an_element_are_flagged(start_a, start_b, dims, step):
    """The one overlap check of loop-kernel calls (CPU and GPU alike): two views of one buffer that
    share an element are always flagged; disjoint contiguous slices never are."""
    base = np.zeros(400, np.float32)
    shape = tuple(n for n, _ in dims)
    strides = tuple(s * base.itemsize for _, s in dims)
    a = as_strided(base[40 + start_a:], shape, strides)
    b = base[start_b: start_b + 10 * step: step]
    pointers = [v.__array_interface__["data"][0] for v in (a, b)]
    if np.shares_memory(a, b):
        assert OverlapCheck((a, b))(pointers)
    c, d = base[:start_a], base[start_a: start_a + start_b]
    assert not OverlapCheck((c, d))([x.__array_interface__["data"][0] for x in (c, d)])
