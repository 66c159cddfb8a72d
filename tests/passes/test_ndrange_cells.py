"""`bz.ndrange` cells of 2 to 4 axes as one injective index: generated pairs of loops over one
ndrange, the second reading the cell the first wrote (fused) or a neighbouring, permuted or
partial cell (kept apart). Fused and unfused runs must leave the same arrays either way."""

from __future__ import annotations

import itertools
import linecache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze.passes import fuse_tasks as ft

_counter = itertools.count()
NAMES = "ijkm"


def _load(source: str):
    filename = f"<braze-ndrange-cells {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def _program(rank: int, begins: list[int], read: list[str]) -> str:
    names = ", ".join(NAMES[:rank])
    extents = ", ".join(f"({b}, a.shape[{axis}])" if b else f"a.shape[{axis}]" for axis, b in enumerate(begins))
    cell = ", ".join(NAMES[:rank])
    weights = " + ".join(f"{name} * {10.0 ** axis}" for axis, name in enumerate(NAMES[:rank]))
    return (f"def program(a: bz.Array[bz.float32, {rank}], b: bz.Array[bz.float32, {rank}]):\n"
            f"    for {names} in bz.ndrange({extents}):\n"
            f"        a[{cell}] = a[{cell}] * 2.0 + {weights}\n"
            f"    for {names} in bz.ndrange({extents}):\n"
            f"        b[{cell}] = a[{', '.join(read)}] + 1.0\n")


@st.composite
def programs(draw):
    rank = draw(st.integers(2, 4))
    begins = draw(st.lists(st.integers(0, 1), min_size=rank, max_size=rank))
    read = list(NAMES[:rank])
    variant = draw(st.sampled_from(["same cell", "shifted", "swapped", "axis dropped"]))
    axis = draw(st.integers(0, rank - 1))
    if variant == "shifted":  # the neighbour at the range's start: in bounds, another thread's cell
        read[axis] = f"{read[axis]} - 1" if begins[axis] else f"{read[axis]} * 0"
    elif variant == "swapped":  # two axes exchanged where their extents are equal
        read[0], read[1] = read[1], read[0]
    elif variant == "axis dropped":
        read[axis] = "0" if not begins[axis] else "1"
    return rank, begins, read, variant


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_ndrange_cells_fuse_exactly_when_the_second_loop_reads_its_own_cell(program):
    rank, begins, read, variant = program
    fn = _load(_program(rank, begins, read))
    shape = (3, 3, 2, 4)[:rank]
    results = []
    for kernel in (bz.kernel(fn), bz.kernel(fuse_tasks=False)(fn)):
        a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        b = np.full(shape, np.nan, np.float32)
        kernel(a, b)
        results.append((a, b, kernel))
    (a, b, fused), (a0, b0, _) = results
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    (decision,) = fused.decisions()
    assert decision.fused == (variant == "same cell"), (variant, read, decision)
    if variant == "same cell":
        assert decision.reason == ft.FUSED_RAW


NX, NY, NZ = 3, 4, 5  # constant extents: their products fold into one constant divisor


@bz.kernel
def constant_cells(a: bz.Array[bz.float32, 3], b: bz.Array[bz.float32, 3]):
    for i, j, k in bz.ndrange(NX, NY, NZ):
        a[i, j, k] = a[i, j, k] * 2.0 + k
    for i, j, k in bz.ndrange(NX, NY, NZ):
        b[i, j, k] = a[i, j, k] + 1.0


@bz.kernel
def constant_neighbours(a: bz.Array[bz.float32, 3], b: bz.Array[bz.float32, 3]):
    for i, j, k in bz.ndrange(NX, NY, NZ):
        a[i, j, k] = a[i, j, k] * 2.0 + k
    for i, j, k in bz.ndrange(NX, NY, NZ):
        b[i, j, k] = a[i, j, NZ - 1 - k] + 1.0


def test_a_cell_of_constant_extents_is_one_index_too():
    """An ndrange of constant extents (a Warp launch over a fixed 3-d grid) splits its index as `t // 20`,
    `t // 5 % 4` and `t % 5`: 20 is 5 * 4, so the cell is injective and a loop reading its own cell fuses;
    one reading a neighbour's does not."""
    for kernel, fused in ((constant_cells, True), (constant_neighbours, False)):
        a = np.arange(NX * NY * NZ, dtype=np.float32).reshape(NX, NY, NZ)
        b = np.zeros_like(a)
        kernel(a, b)
        a0, b0 = np.arange(a.size, dtype=np.float32).reshape(a.shape), np.zeros_like(a)
        bz.kernel(fuse_tasks=False)(kernel.fn)(a0, b0)
        np.testing.assert_array_equal(a, a0)
        np.testing.assert_array_equal(b, b0)
        assert [d.fused for d in kernel.decisions()] == [fused]
