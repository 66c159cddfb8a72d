"""A scan's rows on a GPU (codegen/cuda_scan.py): a tile of the row at a time over its lanes, by
shuffles up to a warp and through shared memory for a block a row. Run on the CPU
(tests/cuda_on_cpu.py: g++, a thread per CUDA thread) against NumPy in float64, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import engine

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

SCANS = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
         "cummin": np.minimum.accumulate}


def scan_fusion(op: str, axis: int, ndim: int, dtype=bz.float32) -> bz.Fusion:
    with bz.Fusion(name=op) as f:
        x = f.define_tensor([-1] * ndim, dtype=dtype)
        f.add_output(getattr(bz.ops, op)(x * 2 if op != "cumprod" else x, axis))
    return f


def wanted(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    return SCANS[op]((x.astype(np.float64) * (2 if op != "cumprod" else 1)), axis=axis)


# Row lengths for every kind of lanes: fewer than a warp (lanes 1-32), several warp tiles, a block a
# row (1024 and past: lanes_for gives the whole block), and a last tile the lanes do not fill.
CASES = [(op, shape) for op in SCANS for shape in [(5, 7), (4, 100), (2, 1031)]] + \
    [("cumsum", (3, 1)), ("cumsum", (1, 2600)), ("cummax", (6, 0)), ("cumsum", (6, 0))]


@pytest.mark.parametrize("op, shape", CASES)
def test_rows_scan_over_their_lanes(op, shape):
    rng = np.random.default_rng(sum(shape))
    x = (rng.uniform(0.9, 1.1, shape) if op == "cumprod" else rng.standard_normal(shape)).astype(np.float32)
    with bz.config.scope(enable={"poison_outputs"}):  # an element no lane stores shows as NaN
        (actual,), launches = run_on_cpu(scan_fusion(op, 1, 2), [x], sm_count=2)
    np.testing.assert_allclose(actual, wanted(op, x, 1), rtol=2e-5, atol=2e-4)
    lanes = [arguments[0] for _, _, _, _, arguments in launches]
    assert all(n > 1 for n in lanes) if shape[1] > 1 else True  # a row's lanes, not one thread a row


def test_a_scan_over_the_first_axis_and_integers():
    x = np.random.default_rng(3).integers(-50, 50, (70, 9)).astype(np.int32)
    with bz.config.scope(enable={"poison_outputs"}):
        (actual,), _ = run_on_cpu(scan_fusion("cumsum", 0, 2, bz.int32), [x], sm_count=2)
    np.testing.assert_array_equal(actual, np.cumsum(x.astype(np.int64) * 2, axis=0))


def test_the_scan_loop_is_written_over_the_lanes_and_can_be_turned_off():
    x = np.ones((4, 64), np.float32)
    assert "bz_lane_scan(" in engine.cuda_source(scan_fusion("cumsum", 1, 2), [x])
    with bz.config.scope(disable={"lane_scans"}):
        assert "bz_lane_scan(" not in engine.cuda_source(scan_fusion("cumsum", 1, 2), [x])


@pytest.mark.parametrize("prefetch", [True, False])
def test_tiles_load_ahead_of_the_scan_or_after_it(prefetch):
    """The next tile's loads are issued before this tile's scan (`scan_prefetch`); both ways give
    NumPy's sums over rows of several tiles, the last one part full."""
    x = np.random.default_rng(5).standard_normal((3, 2900)).astype(np.float32)
    with bz.config.scope(enable={"poison_outputs"}, disable=set() if prefetch else {"scan_prefetch"}):
        assert ("bz_next[" in engine.cuda_source(scan_fusion("cumsum", 1, 2), [x])) == prefetch
        (actual,), _ = run_on_cpu(scan_fusion("cumsum", 1, 2), [x], sm_count=2)
    np.testing.assert_allclose(actual, wanted("cumsum", x, 1), rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("vectors", [True, False])
@pytest.mark.parametrize("offset", [0, 1])
def test_runs_load_as_vectors_where_the_row_is_aligned(vectors, offset):
    """A lane's run of eight float32 is two 16-byte loads and two 16-byte stores where it lies inside
    the row and aligned (`scan_vectors`); rows one element off (every run misaligned: the inputs here,
    the outputs' rows after the first) and the last part-full run take the elements one at a time.
    Both agree with NumPy."""
    x = np.random.default_rng(6).standard_normal((3, 2901 + offset)).astype(np.float32)[:, offset:]
    with bz.config.scope(enable={"poison_outputs"}, disable=set() if vectors else {"scan_vectors"}):
        source = engine.cuda_source(scan_fusion("cumsum", 1, 2), [x])
        assert ("bz_vector1" in source and "float4{bz_out[4]" in source) == vectors
        (actual,), _ = run_on_cpu(scan_fusion("cumsum", 1, 2), [x], sm_count=2)
    np.testing.assert_allclose(actual, wanted("cumsum", x, 1), rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("op, block", [("cumsum", 128), ("cummax", 256)])
def test_rows_of_more_lanes_than_a_warp_and_fewer_than_the_block(op, block):
    """Long rows whose tiles leave lanes idle take fewer lanes than the block (cuda_launch.balanced_lanes):
    two or four rows a block, each over its own warps, whose totals its scan alone combines."""
    x = np.random.default_rng(7).standard_normal((5, 4100)).astype(np.float32)
    with bz.config.scope(enable={"poison_outputs"}):
        (actual,), launches = run_on_cpu(scan_fusion(op, 1, 2), [x], sm_count=2, block_size=block)
    np.testing.assert_allclose(actual, wanted(op, x, 1), rtol=2e-5, atol=2e-4)
    (lanes, *_), = [arguments for *_, arguments in launches]
    assert 32 < lanes < block
