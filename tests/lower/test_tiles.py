"""Tiles for pointwise tasks that read a tensor transposed (braze/schedule/transpose.py,
braze/lower/tiles.py): the schedule they take on the CPU and a GPU (which axis the tiles' rows follow,
the GPU's tile by element size), and on the CPU generated permutes of 2-D to 4-D tensors and inputs
passed as transposed views, alone or beside tensors read in order, with extents around a tile's
edges (0, 1, a tile less one, a tile, a tile and one), against NumPy bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine, schedule
from braze.runtime.inputs import bind_inputs
from braze.schedule import GPU_NARROW_TILE, GPU_TILE
from braze.schedule.loops import TILE

EXTENTS = (0, 1, 2, TILE - 1, TILE, TILE + 1, 2 * TILE + 3)


def _transposed_add() -> bz.Fusion:
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
        f.add_output(x + y.T)
    return f


def test_a_transposed_read_takes_tiles_on_the_cpu_and_a_gpu():
    f = _transposed_add()
    plan = schedule.plan(f, set(), cpu=True)
    assert [h.scheduler for h in plan.heuristics] == ["transpose"]
    assert plan.loops[0].text() == f"[merge(tiles(i0, {TILE}), tiles(i1, {TILE})){{blockIdx.x}}, tile(i0, {TILE}), " \
                                   f"tile(i1, {TILE}){{vectorize}}]"
    (gpu,) = schedule.plan(f, set(), gpu=True).heuristics
    assert (gpu.scheduler, gpu.tile) == ("transpose", GPU_TILE)
    assert [h.scheduler for h in schedule.plan(f, set()).heuristics] == ["pointwise"]  # neither: the reference's


def _plan(f: bz.Fusion, inputs: list, gpu: bool = False) -> schedule.Plan:
    """The plan at the signature of `inputs` (their strides say which axes are contiguous)."""
    plan, _, _ = engine.plan_kernel(f, engine.signature(f, bind_inputs(f, inputs)), views_on_host=not gpu, gpu=gpu)
    return plan


def test_the_tiles_rows_follow_the_axis_the_transposed_tensor_is_contiguous_along():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1))
        f.add_output(bz.ops.permute(x, (2, 1, 0)) + 1.0)  # x's last axis is the output's first
    for plan in (schedule.plan(f, set(), cpu=True), schedule.plan(f, set(), gpu=True)):
        (h,) = plan.heuristics
        assert (h.scheduler, h.loop_order) == ("transpose", (1, 0, 2))


@pytest.mark.parametrize("gpu", [False, True])
def test_an_input_passed_as_a_transposed_view_takes_tiles(gpu):
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
        f.add_output(x + y)
    a = np.ones((40, 30), np.float32)
    (h,) = _plan(f, [a, np.ones((30, 40), np.float32).T], gpu).heuristics
    assert (h.scheduler, h.loop_order) == ("transpose", (0, 1))
    (h,) = _plan(f, [a, a], gpu).heuristics
    assert h.scheduler == "pointwise"


def test_an_output_laid_out_across_its_inputs_takes_tiles():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1))
        out = bz.ops.exp(x)
        out.set_stride_order((2, 0, 1))  # channels last: written along axis 1, read along axis 2
        f.add_output(out)
    (h,) = schedule.plan(f, set(), gpu=True).heuristics
    assert (h.scheduler, h.loop_order) == ("transpose", (0, 2, 1))


def test_tensors_read_along_the_columns_or_broadcast_along_them_take_rows():
    with bz.Fusion() as f:
        x, b = f.define_tensor((-1, -1)), f.define_tensor((-1,))
        f.add_output(x * bz.ops.broadcast(b, [False, True]))  # b is contiguous along the rows, but the same along them
        f.add_output(bz.ops.reshape(x.T, (-1, 1)) * 2.0)  # a reshape's reads follow its flat index
        f.add_output(bz.ops.permute(bz.ops.broadcast(b, [True, False]), (1, 0)) + x)  # b along the rows, broadcast
    for plan in (schedule.plan(f, set(), cpu=True), schedule.plan(f, set(), gpu=True)):
        assert [h.scheduler for h in plan.heuristics] == ["pointwise"] * 3


@pytest.mark.parametrize("transposed, straight, tile", [
    (bz.bfloat16, bz.bfloat16, GPU_NARROW_TILE), (bz.float16, bz.float32, GPU_NARROW_TILE),
    (bz.int8, bz.int8, GPU_NARROW_TILE), (bz.float32, bz.bfloat16, GPU_TILE), (bz.float64, bz.float64, GPU_TILE)])
def test_a_gpu_takes_wider_tiles_for_narrow_transposed_elements(transposed, straight, tile):
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1, -1), dtype=straight), f.define_tensor((-1, -1), dtype=transposed)
        f.add_output(bz.ops.cast(x, bz.float32) + bz.ops.cast(y.T, bz.float32))
    (h,) = schedule.plan(f, set(), gpu=True).heuristics
    assert (h.scheduler, h.tile) == ("transpose", tile)
    (h,) = schedule.plan(f, set(), cpu=True).heuristics
    assert (h.scheduler, h.tile) == ("transpose", TILE)


def test_a_permute_that_keeps_the_innermost_axis_takes_rows():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1))
        f.add_output(bz.ops.permute(x, (1, 0, 2)) * 2.0)
    assert [h.scheduler for h in schedule.plan(f, set(), cpu=True).heuristics] == ["pointwise"]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 4).flatmap(lambda rank: st.tuples(
    st.lists(st.sampled_from(EXTENTS), min_size=rank, max_size=rank), st.permutations(range(rank)))),
    st.booleans(), st.integers(0, 2**31))
def test_generated_transposes_against_numpy(case, beside, seed):
    shape, dims = case
    if dims[-1] == len(shape) - 1:  # keep the innermost axis moving: a transposed read
        dims = dims[-1:] + dims[:-1]
    permuted = tuple(shape[d] for d in dims)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    with bz.Fusion() as f:
        tx = f.define_tensor((-1,) * len(shape))
        t = bz.ops.permute(tx, tuple(dims)) * 3.0
        if beside:  # and a tensor read in order, of the permuted shape
            t = t - f.define_tensor((-1,) * len(shape))
        f.add_output(t)
    inputs = [x] + ([rng.standard_normal(permuted).astype(np.float32)] if beside else [])
    (got,) = f.execute(inputs)
    want = np.transpose(x, dims) * np.float32(3)
    np.testing.assert_array_equal(got, want - inputs[1] if beside else want)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 3).flatmap(lambda rank: st.tuples(
    st.lists(st.sampled_from(EXTENTS), min_size=rank, max_size=rank), st.permutations(range(rank)))),
    st.integers(0, 2**31))
def test_inputs_passed_as_transposed_views_against_numpy(case, seed):
    """`x * 2 + y` where x arrives as a permuted view of a contiguous array: its strides, not the
    fusion, make the read transposed."""
    shape, dims = case
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(shape).astype(np.float32)
    x = np.transpose(base, dims)
    y = rng.standard_normal(x.shape).astype(np.float32)
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1,) * len(shape)) * 2.0 + f.define_tensor((-1,) * len(shape)))
    (got,) = f.execute([x, y])
    np.testing.assert_array_equal(got, x * np.float32(2) + y)
