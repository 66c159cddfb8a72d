"""CPU tiles for pointwise tasks that read a tensor transposed (braze/lower/tiles.py): the schedule
they take, and generated permutes of 2-D to 4-D tensors, alone or beside tensors read in order, with
extents around a tile's edges (0, 1, a tile less one, a tile, a tile and one), against NumPy bit for
bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import schedule
from braze.schedule.loops import TILE

EXTENTS = (0, 1, 2, TILE - 1, TILE, TILE + 1, 2 * TILE + 3)


def _transposed_add() -> bz.Fusion:
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
        f.add_output(x + y.T)
    return f


def test_a_transposed_read_takes_tiles_on_the_cpu_only():
    f = _transposed_add()
    plan = schedule.plan(f, set(), cpu=True)
    assert [h.scheduler for h in plan.heuristics] == ["transpose"]
    assert plan.loops[0].text() == f"[merge(tiles(i0, {TILE}), tiles(i1, {TILE})){{blockIdx.x}}, tile(i0, {TILE}), " \
                                   f"tile(i1, {TILE}){{vectorize}}]"
    assert [h.scheduler for h in schedule.plan(f, set(), gpu=True).heuristics] == ["pointwise"]


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
