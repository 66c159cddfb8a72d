"""Allocation shape and stride inference: the named layouts, and Hypothesis against NumPy.

The oracle builds the allocation by brute force: it replays the transforms on NumPy index grids
(split: `i // f, i % f`; merge: `outer * inner_extent + inner`), numbers every element of the
padded allocation by its offset, and reads off the offset of each logical element. Inference is
right when the strided view it describes, taken over that allocation, gives the same offsets;
the native (JIT) and the Python shape functions must both compute it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import braze as bz
from braze.host.shapes import Layout, PythonShapeFunction, ShapeProgram, infer_layout, same_product
from braze.ir import Merge, Split, TensorView
from braze.ir.scalar import symbol
from braze.native.host_jit import NativeShapeFunction


def _tensor(shape, dtype=bz.float32) -> TensorView:
    f = bz.Fusion()
    return f.define_tensor(shape, dtype)


def _evaluate(layout: Layout, bindings: dict[str, int]) -> tuple[list[int], list[int], int]:
    values = [v.evaluate(bindings) for v in (*layout.sizes, *layout.strides, layout.numel)]
    rank = len(layout.sizes)
    return values[:rank], values[rank:2 * rank], values[-1]


# --- the layouts that must work ---------------------------------------------------------------------------
def test_channels_last() -> None:
    t = _tensor((-1, -1, -1, -1))
    t.set_stride_order((3, 0, 2, 1))  # NCHW viewed over NHWC memory
    sizes, strides, numel = _evaluate(infer_layout(t), {"T0_s0": 2, "T0_s1": 3, "T0_s2": 4, "T0_s3": 5})
    assert (sizes, strides, numel) == ([2, 3, 4, 5], [60, 1, 15, 3], 120)
    assert strides == [s // 4 for s in np.empty((2, 4, 5, 3), np.float32).transpose(0, 3, 1, 2).strides]


def test_split_of_a_non_divisible_extent_pads_the_allocation() -> None:
    t = _tensor((-1, -1))
    t.split(1, 4)
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["T0_s0", "ceildiv(T0_s1, 4)", "4"]
    assert _evaluate(layout, {"T0_s0": 3, "T0_s1": 10}) == ([3, 10], [12, 1], 36)


def test_merge_then_split() -> None:
    t = _tensor((-1, -1))
    t.merge(0).split(0, 8)
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["ceildiv(T0_s0 * T0_s1, 8)", "8"]
    assert _evaluate(layout, {"T0_s0": 3, "T0_s1": 5}) == ([3, 5], [5, 1], 16)


def test_merge_then_reorder_makes_the_first_logical_dimension_fastest() -> None:
    t = _tensor((-1, -1, -1))
    t.merge(0).reorder({0: 1})  # [C, A*B]
    t.set_allocation_domain(t.loop)
    assert _evaluate(infer_layout(t), {"T0_s0": 2, "T0_s1": 3, "T0_s2": 4}) == ([2, 3, 4], [3, 1, 6], 24)


def test_broadcast_dimensions_take_no_memory_and_the_stride_of_their_place() -> None:
    """As torch and NumPy lay out a size-1 dimension: [3, 1, 5] is (5, 5, 1), not (5, 0, 1), which
    torch would take for another layout (Dynamo's guards compare strides)."""
    t = _tensor((-1, 1, -1))
    t.split(0, 2)  # a split next to a broadcast keeps working
    t.set_allocation_domain(t.loop)
    assert _evaluate(infer_layout(t), {"T0_s0": 3, "T0_s2": 5}) == ([3, 1, 5], [5, 5, 1], 20)


def test_reduction_dimensions_are_not_allocated() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1))
        s = bz.ops.sum(x, axes=[1])
    assert any(d.is_reduction for d in s.logical)
    assert _evaluate(infer_layout(s), {"T0_s0": 2, "T0_s1": 3, "T0_s2": 4}) == ([2, 4], [4, 1], 8)


def test_a_split_that_takes_a_merge_apart_is_a_transpose() -> None:
    t = _tensor((-1, 5))
    t.merge(0).split(0, 5).reorder({0: 1})  # [5, N]: the merge undone, then transposed
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["5", "T0_s0"]  # no ceildiv: nothing is padded
    assert _evaluate(layout, {"T0_s0": 3}) == ([3, 5], [1, 3], 15)


def test_a_merge_that_restores_a_split_keeps_the_transpose_and_its_padding() -> None:
    t = _tensor((-1, 5))
    # [N*5] split by 2 and merged back (padded to even), then split by 5 and transposed: [5, outer]
    t.merge(0).split(0, 2).merge(0).split(0, 5).reorder({0: 1})
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["5", "ceildiv(ceildiv(T0_s0 * 5, 2) * 2, 5)"]
    assert _evaluate(layout, {"T0_s0": 2}) == ([2, 5], [1, 2], 10)
    assert _evaluate(layout, {"T0_s0": 3}) == ([3, 5], [1, 4], 20)  # 15 rounded up to 16, then 4 rows of 5


def test_a_split_of_a_multiple_of_its_factor_is_not_padded() -> None:
    t = _tensor((2, 3, -1))
    t.merge(0).split(0, 2).merge(1).split(1, 2)  # [2, 3, N] -> [3, 2, N] -> [3, 2 * N] -> [3, N, 2]
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["3", "T0_s2", "2"]
    assert _evaluate(layout, {"T0_s2": 4}) == ([2, 3, 4], [12, 4, 1], 24)


def test_a_split_by_the_innermost_merged_extents_takes_them_apart() -> None:
    t = _tensor((-1, 2, 3))
    t.merge(1).merge(0).split(0, 3).reorder({0: 1})  # [N * 6] split by the 3 of [N, 2 * 3]: [3, N * 2]
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    assert [str(s) for s in layout.allocation_sizes] == ["3", "T0_s0 * 2"]
    assert _evaluate(layout, {"T0_s0": 4}) == ([4, 2, 3], [2, 1, 8], 24)


def test_a_blocked_layout_is_no_strided_view() -> None:
    t = _tensor((-1, -1))
    t.split(1, 4).reorder({1: 0})  # [ceildiv(C, 4), N, 4]: NCHWc-style blocking
    t.set_allocation_domain(t.loop)
    with pytest.raises(bz.UnsupportedError, match=r"allocation domain of T0 .*the split of T0_s1 by 4 is no strided "
                                                  r"view"):
        infer_layout(t)


def test_same_product_ignores_order() -> None:
    a, b = symbol("a"), symbol("b")
    assert same_product(a * b * 4, (b * 2) * (a * 2))
    assert not same_product(a * b, a * a)


# --- Hypothesis: inference against brute force --------------------------------------------------------------
@st.composite
def allocation_layouts(draw) -> tuple[TensorView, dict[str, int]]:
    """A tensor with random symbolic, static and broadcast extents and a random split/merge/reorder layout."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.sampled_from([-1, -1, 0, 1, 2, 3, 5]), min_size=rank, max_size=rank))
    t = _tensor(tuple(shape))
    bindings = {d.extent.name: draw(st.integers(0, 7)) for d in t.logical if d.extent.is_symbol}
    for _ in range(draw(st.integers(0, 4))):
        if len(t.loop) > 1 and draw(st.booleans()):
            t.merge(draw(st.integers(0, len(t.loop) - 2)))
        else:
            t.split(draw(st.integers(0, len(t.loop) - 1)), draw(st.integers(1, 5)))
    if draw(st.booleans()):
        permutation = draw(st.permutations(range(len(t.loop))))
        t.reorder(dict(enumerate(permutation)))
    t.set_allocation_domain(t.loop)
    return t, bindings


def brute_force_offsets(t: TensorView, bindings: dict[str, int]) -> tuple[np.ndarray, list[int]]:
    """The offset in the padded allocation of every logical element, and the allocation's sizes."""
    index, extent = _replay(t, bindings)
    sizes = [extent[id(d)] for d in t.allocation]
    numbered = np.arange(math.prod(sizes), dtype=np.int64).reshape(sizes)  # each element holds its offset
    return numbered[tuple(index[id(d)] for d in t.allocation)], sizes


def _replay(t: TensorView, bindings: dict[str, int]) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Every dimension's index for each logical element, and its (padded) extent."""
    logical = t.visible
    extent = {id(d): 1 if d.is_broadcast else d.extent.evaluate(bindings) for d in logical}
    grids = np.indices([extent[id(d)] for d in logical], dtype=np.int64)
    index = {id(d): grids[axis] for axis, d in enumerate(logical)}
    for transform in t.transforms:  # replayed forward, in the order they were applied
        if isinstance(transform, Split):
            f, i = transform.factor.value, index[id(transform.inp)]
            broadcast = transform.inp.is_broadcast
            index[id(transform.outer)], index[id(transform.inner)] = i // f, i % f
            extent[id(transform.outer)] = 1 if broadcast else -(-extent[id(transform.inp)] // f)
            extent[id(transform.inner)] = 1 if broadcast else f
        elif isinstance(transform, Merge):
            inner = extent[id(transform.inner)]
            index[id(transform.out)] = index[id(transform.outer)] * inner + index[id(transform.inner)]
            extent[id(transform.out)] = extent[id(transform.outer)] * inner
    return index, extent


def _is_strided(offsets: np.ndarray) -> bool:
    """Whether some strides give these offsets (checked against the first step along each axis)."""
    if offsets.size == 0:
        return True
    strides = [int(np.take(offsets, 1, axis).flat[0] - offsets.flat[0]) if n > 1 else 0
               for axis, n in enumerate(offsets.shape)]
    expected = sum(g * s for g, s in zip(np.indices(offsets.shape), strides)) + offsets.flat[0]
    return bool((offsets == expected).all())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(allocation_layouts())
def test_inference_matches_brute_force(case) -> None:
    t, bindings = case
    offsets, allocation_sizes = brute_force_offsets(t, bindings)
    try:
        layout = infer_layout(t)
    except bz.UnsupportedError:
        event("rejected: no strided view")
        # Rejecting is conservative; a layout that is strided for every extent must not be rejected.
        # Symbolic extents can make a layout strided by coincidence (a merge of [2, n] split by 2 is
        # a transpose when n is 2), so other values of the symbols are tried too, some past the
        # products of the split factors ([2, n] with n split by 4, merged under the 2 and split by 2,
        # is strided while ceildiv(n, 4) <= 2, up to n = 8).
        others = [{name: value for name in bindings} for value in (3, 5, 7, 13, 31)]
        assert any(not _is_strided(brute_force_offsets(t, b)[0]) for b in [bindings, *others]) \
            or _degenerate(t, bindings)
        return
    event("accepted")
    program = ShapeProgram.of("hypothesis", layout.values)
    extents = [bindings[name] for name in program.symbols]
    native = NativeShapeFunction(program)(extents)
    python = PythonShapeFunction(program)(extents)
    assert native == python == program.evaluate(extents)
    numel, rank = python[0], len(layout.sizes)
    sizes, strides = python[1:1 + rank], python[1 + rank:]
    assert numel == math.prod(allocation_sizes)  # the padded allocation, no more, no less
    assert [s.evaluate(bindings) for s in layout.allocation_sizes] == allocation_sizes
    assert sizes == list(offsets.shape)
    storage = np.arange(max(numel, 1), dtype=np.int64)
    view = np.lib.stride_tricks.as_strided(storage, sizes, [s * storage.itemsize for s in strides])
    np.testing.assert_array_equal(view, offsets)


def _degenerate(t: TensorView, bindings: dict[str, int]) -> bool:
    """Whether these extents hide a non-strided layout: an empty tensor or a split with a part of extent 1."""
    if any(d.extent.evaluate(bindings) in (0, 1) for d in t.logical):
        return True
    splits = [x for x in t.transforms if isinstance(x, Split)]
    # A split whose input indices all fall in its first outer step: padding upstream (a split then
    # merge rounds 5 up to 6) can leave a split of extent 6 by 5 that only ever sees indices 0-4.
    index, _ = _replay(t, bindings)
    return any(x.factor.value == 1 or x.inp.extent.evaluate(bindings) <= x.factor.value
               or index[id(x.inp)].size == 0 or int(index[id(x.inp)].max()) < x.factor.value for x in splits)
