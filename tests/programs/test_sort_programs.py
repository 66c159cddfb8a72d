"""Sorting and binning programs as Taichi or Warp users write them: a counting sort whose counts come
from atomics, whose bucket offsets come from a prefix sum in a `bz.serial` loop, and whose scatter
takes each slot with an atomic (or, stably, in a second serial loop); then a cell list built the
same way and walked. Each is checked against NumPy, on the CPU and on a GPU (the `where` fixture of
tests/programs/conftest.py); on the CPU run, the CUDA of each kernel call is also compiled with NVRTC
where it is installed (the fixture of tests/programs/test_sim_programs.py)."""

import numpy as np
import pytest
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz

RNG = np.random.default_rng(91)


@bz.kernel
def counting_sort(keys: bz.Array[bz.int32, 1], counts: bz.Array[bz.int32, 1], start: bz.Array[bz.int32, 1],
                  order: bz.Array[bz.int32, 1]):
    for b in range(counts.shape[0]):
        counts[b] = 0
    for i in range(keys.shape[0]):
        counts[keys[i]] += 1  # not this thread's own element: atomic
    total = 0
    for b in bz.serial(range(counts.shape[0])):  # bucket offsets: a prefix sum, in order on one thread
        start[b] = total
        total += counts[b]
        counts[b] = start[b]  # from here on, the next free slot of bucket b
    for i in range(keys.shape[0]):
        slot = bz.atomic_add(counts[keys[i]], 1)
        order[slot] = i


@bz.kernel
def stable_counting_sort(keys: bz.Array[bz.int32, 1], counts: bz.Array[bz.int32, 1], order: bz.Array[bz.int32, 1]):
    for b in range(counts.shape[0]):
        counts[b] = 0
    for i in range(keys.shape[0]):
        bz.atomic_add(counts[keys[i]], 1)
    total = 0
    for b in bz.serial(range(counts.shape[0])):
        n = counts[b]
        counts[b] = total
        total = total + n
    for i in bz.serial(range(keys.shape[0])):  # in order: equal keys keep their order
        order[counts[keys[i]]] = i
        counts[keys[i]] += 1


@pytest.mark.parametrize("n, buckets", [(0, 4), (1, 1), (1000, 7), (20_000, 300)])
def test_counting_sort_with_atomic_counts_a_serial_prefix_sum_and_a_scatter(where, n, buckets):
    keys = RNG.integers(0, buckets, n).astype(np.int32)
    counts, start, order = where(np.full(buckets, -1, np.int32)), where(np.full(buckets, -1, np.int32)), \
        where(np.full(n, -1, np.int32))
    counting_sort(where(keys), counts, start, order)
    histogram = np.bincount(keys, minlength=buckets)
    offsets = np.cumsum(histogram) - histogram
    np.testing.assert_array_equal(where.host(start), offsets)
    np.testing.assert_array_equal(where.host(counts), offsets + histogram)  # each cursor at its bucket's end
    order = where.host(order)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))  # a permutation
    np.testing.assert_array_equal(keys[order], np.sort(keys))
    for b in range(buckets):  # within a bucket the atomics' order is free: the same elements
        bucket = order[offsets[b]:offsets[b] + histogram[b]]
        np.testing.assert_array_equal(np.sort(bucket), np.flatnonzero(keys == b))


@pytest.mark.parametrize("n, buckets", [(0, 3), (5000, 64)])
def test_stable_counting_sort_equals_numpy_s_stable_argsort(where, n, buckets):
    keys = RNG.integers(0, buckets, n).astype(np.int32)
    counts, order = where(np.full(buckets, -1, np.int32)), where(np.full(n, -1, np.int32))
    stable_counting_sort(where(keys), counts, order)
    np.testing.assert_array_equal(where.host(order), np.argsort(keys, kind="stable"))


# --- a cell list: bin particles, sort them by cell, and count neighbours cell by cell --------------------
@bz.kernel
def bin_particles(x: bz.Array[bz.float64, 2], cell_of: bz.Array[bz.int32, 1], cell_start: bz.Array[bz.int32, 1],
                  cursor: bz.Array[bz.int32, 1], sorted_ids: bz.Array[bz.int32, 1], cells: bz.int32,
                  size: bz.float64):
    for c in range(cursor.shape[0]):
        cursor[c] = 0
    for p in range(x.shape[0]):
        cx = min(bz.int32(x[p, 0] / size * cells), cells - 1)
        cy = min(bz.int32(x[p, 1] / size * cells), cells - 1)
        cell_of[p] = cy * cells + cx
        bz.atomic_add(cursor[cell_of[p]], 1)
    running = 0
    for c in bz.serial(range(cursor.shape[0])):
        cell_start[c] = running
        running += cursor[c]
        cursor[c] = cell_start[c]
    cell_start[cursor.shape[0]] = running
    for p in range(x.shape[0]):
        sorted_ids[bz.atomic_add(cursor[cell_of[p]], 1)] = p


@bz.kernel
def count_neighbours(x: bz.Array[bz.float64, 2], cell_of: bz.Array[bz.int32, 1], cell_start: bz.Array[bz.int32, 1],
                     sorted_ids: bz.Array[bz.int32, 1], found: bz.Array[bz.int32, 1], cells: bz.int32,
                     radius: bz.float64):
    for p in range(x.shape[0]):
        cx, cy = cell_of[p] % cells, cell_of[p] // cells
        hits = 0
        for dy in range(-1, 2):
            for dx in range(-1, 2):
                nx, ny = cx + dx, cy + dy
                if 0 <= nx < cells and 0 <= ny < cells:
                    c = ny * cells + nx
                    for k in range(cell_start[c], cell_start[c + 1]):
                        q = sorted_ids[k]
                        d0, d1 = x[q, 0] - x[p, 0], x[q, 1] - x[p, 1]
                        if q != p and d0 * d0 + d1 * d1 < radius * radius:
                            hits += 1
        found[p] = hits


def test_a_cell_list_built_with_a_serial_prefix_sum_finds_every_neighbour(where):
    n, cells, size, radius = 600, 8, 1.0, 0.1
    x = RNG.random((n, 2))
    cell_of, cell_start = where(np.full(n, -1, np.int32)), where(np.full(cells * cells + 1, -1, np.int32))
    cursor, sorted_ids, found = where(np.full(cells * cells, -1, np.int32)), where(np.full(n, -1, np.int32)), \
        where(np.full(n, -1, np.int32))
    xs = where(x)
    bin_particles(xs, cell_of, cell_start, cursor, sorted_ids, cells, size)
    count_neighbours(xs, cell_of, cell_start, sorted_ids, found, cells, radius)
    cell = np.minimum((x[:, 1] * cells).astype(int), cells - 1) * cells + np.minimum((x[:, 0] * cells).astype(int),
                                                                                       cells - 1)
    np.testing.assert_array_equal(where.host(cell_of), cell)
    histogram = np.bincount(cell, minlength=cells * cells)
    np.testing.assert_array_equal(where.host(cell_start), np.concatenate([[0], np.cumsum(histogram)]))
    np.testing.assert_array_equal(cell[where.host(sorted_ids)], np.sort(cell))
    distance2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=-1)
    np.fill_diagonal(distance2, np.inf)
    np.testing.assert_array_equal(where.host(found), (distance2 < radius * radius).sum(axis=1))
