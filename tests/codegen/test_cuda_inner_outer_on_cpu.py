"""The inner-outer schedule's CUDA run on the CPU (tests/cuda_on_cpu.py: g++, a thread per CUDA
thread), launched as the CUDA executor plans it for a small fake GPU: the row groups' partial
results in shared memory or the workspace, rows of one block on different paths, no rows, and the
same bits from run to run; against float64 NumPy."""

from __future__ import annotations

from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from inner_outer_fusions import FUSIONS, fusion
from numpy.lib.stride_tricks import as_strided

import braze as bz
from braze.codegen import cuda_launch

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def check(name, arrays, dtype=bz.float32, rtol=1e-5, **launch):
    build, _, reference = FUSIONS[name]
    outputs, launches = run_on_cpu(fusion(build, dtype), arrays, **launch)
    expected = reference(*[np.asarray(a, np.float64) for a in arrays])
    for actual, wanted in zip(outputs, expected):
        scale = max(np.abs(wanted).max(initial=0.0), 1.0)
        np.testing.assert_allclose(np.asarray(actual, np.float64), wanted, rtol=rtol, atol=rtol * scale)
    return outputs, launches


def kinds(launches):
    return [launch[1] for launch in launches]


@pytest.mark.parametrize("name", ["layer_norm_backward", "rms_norm_backward"])
def test_short_rows_sixteen_lanes_a_row(name):
    arrays = FUSIONS[name][1](np.random.default_rng(0), 64, 33)
    _, launches = check(name, arrays)
    (rows, _, grid, shared, (lanes, cached, _, in_memory)), fold = launches
    assert kinds(launches) == ["inner_outer", "column_fold"] and (lanes, cached, in_memory) == (16, 33, 0)
    assert fold[4][1] == grid  # the fold reads one row of partial results a block


def test_rows_over_batch_and_tokens():
    arrays = FUSIONS["layer_norm_backward_3d"][1](np.random.default_rng(6), 20, 64)
    _, launches = check("layer_norm_backward_3d", arrays)
    assert kinds(launches) == ["inner_outer", "column_fold"]


def test_bfloat16_rows_in_shared_memory():
    arrays = FUSIONS["rms_norm_backward"][1](np.random.default_rng(1), 9, 1024, ml_dtypes.bfloat16)
    check("rms_norm_backward", arrays, bz.bfloat16, rtol=2e-2)


def test_rows_of_one_block_alternate_between_paths():
    """dy and x side by side in rows 2 (mod 4) floats longer than a multiple of 4: even rows take
    the 16-byte path in registers, odd ones one element a lane; three blocks of a row each, so each
    block's rows alternate (a lane adds to other columns from one row to the next)."""
    rows, cols = 9, 1024
    arrays = FUSIONS["layer_norm_backward"][1](np.random.default_rng(2), rows, cols)
    wide = np.zeros((rows, 2 * cols + 6), np.float32)
    wide[:, :cols], wide[:, cols + 4: 2 * cols + 4] = arrays[0], arrays[1]
    _, launches = check("layer_norm_backward", [wide[:, :cols], wide[:, cols + 4: 2 * cols + 4], *arrays[2:]],
                        sm_count=3, resident=1)
    assert launches[0][2] == 3


def test_partial_results_in_the_workspace_when_shared_memory_is_short():
    arrays = FUSIONS["layer_norm_backward"][1](np.random.default_rng(3), 7, 600)
    with mock.patch.object(cuda_launch, "ROW_CACHE_BYTES", 1024):
        _, launches = check("layer_norm_backward", arrays)
    (_, _, grid, shared, (lanes, cached, _, in_memory)), fold = launches
    assert (in_memory, shared, cached) == (1, 0, 0) and fold[4][1] == grid  # one block, one row group each


def test_no_rows_leave_the_fold_to_store_zeros():
    arrays = FUSIONS["layer_norm_backward"][1](np.random.default_rng(4), 1, 8)
    shapes = [(0, 8), (0, 8), (8,), (0, 1), (0, 1)]
    empty = [as_strided(a, shape=shape, strides=a.strides) for a, shape in zip(arrays, shapes)]
    outputs, launches = check("layer_norm_backward", empty)
    assert kinds(launches) == ["column_fold"] and (outputs[1] == 0).all() and (outputs[2] == 0).all()


def test_the_same_bits_from_run_to_run():
    arrays = FUSIONS["layer_norm_backward"][1](np.random.default_rng(5), 16, 300)
    first, _ = check("layer_norm_backward", arrays, block_size=128)
    again, _ = check("layer_norm_backward", arrays, block_size=128)
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(first, again))


# --- the schedule's launches at odd shapes: each path of the rows and of the fold ----------------------
@pytest.mark.parametrize("name", ["layer_norm_backward", "rms_norm_backward"])
def test_fewer_rows_than_blocks_and_a_vector_fold(name):
    """3 rows of 5000: one row a block, the other blocks add nothing; 5000 columns fold four a thread."""
    arrays = FUSIONS[name][1](np.random.default_rng(7), 3, 5000)
    _, ((_, _, grid, _, (lanes, _, _, in_memory)), fold) = check(name, arrays)
    assert (grid, lanes, in_memory) == (3, 256, 0) and fold[4][1] == 3 and fold[4][3] == 4


def test_columns_no_vector_divides_fold_one_a_thread():
    arrays = FUSIONS["rms_norm_backward"][1](np.random.default_rng(8), 10, 769)
    _, (_, fold) = check("rms_norm_backward", arrays)
    assert fold[4][3] == 1


def test_bfloat16_rows_of_4096_in_registers_two_vectors_a_thread():
    arrays = FUSIONS["rms_norm_backward"][1](np.random.default_rng(9), 5, 4096, ml_dtypes.bfloat16)
    _, ((_, _, _, shared, (lanes, cached, _, _)), fold) = check("rms_norm_backward", arrays, bz.bfloat16, rtol=2e-2)
    assert (lanes, cached, shared) == (256, 0, 4096 * 4) and fold[4][3] == 4


def test_partial_results_in_the_workspace_fold_four_columns_a_thread():
    """72 columns of partial results are more than 256 bytes of shared memory: each block's row of
    them in the workspace (the rows' copy that reads them there), folded as vectors of four."""
    arrays = FUSIONS["rms_norm_backward"][1](np.random.default_rng(10), 70, 72)
    with mock.patch.object(cuda_launch, "ROW_CACHE_BYTES", 256):
        _, ((_, _, grid, _, (lanes, _, _, in_memory)), fold) = check("rms_norm_backward", arrays)
    assert in_memory == 1 and lanes == 256 and fold[4][1] == grid and fold[4][3] == 4
