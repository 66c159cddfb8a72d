"""The inner-outer schedule on the GPU (braze/codegen/cuda_inner_outer.py): layer_norm and rms_norm
backward (dx per row; dweight, dbias per column) in float32 and bfloat16, torch CUDA tensors in,
outputs poisoned before the kernels write them, results against a float64 NumPy reference; dweight
bit-identical from run to run; rows that start off 16-byte boundaries, strided and transposed
inputs; partial results in shared memory and in the workspace; no rows, no columns; shapes that
grow the workspace; the launches it plans.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from inner_outer_fusions import FUSIONS, fusion

import braze as bz
from braze import config
from braze.codegen import cuda_inner_outer
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

NORMS = ["layer_norm_backward", "rms_norm_backward"]
DTYPES = {bz.float32: "float32", bz.bfloat16: "bfloat16"}
# One element; rows not a multiple of 4; a long row in registers; the suite's shape; rows read
# one element a lane; many short rows a block; columns too many for shared memory (layer_norm's two
# accumulators at 20000, both at 70001: their partial results live in the workspace); fewer rows
# than blocks, rows longer than registers hold; columns no vector divides (the fold one a thread).
SHAPES = [(1, 1), (3, 5), (7, 4096), (8192, 4096), (1000, 1000), (64, 33), (33, 20000), (3, 70001), (3, 5000),
          (1000, 769)]
# The schedule's features (BRAZE_DISABLE), each of which changes its code or its launches.
FEATURES = cuda_inner_outer.FEATURES


def to_gpu(arrays: list[np.ndarray], dtype: bz.DType) -> list:
    """dy, x and the weight in `dtype`, the saved statistics in float32, on the GPU, laid out
    row-major (also when empty: NumPy gives an empty array zero strides)."""
    dtypes = [getattr(torch, DTYPES[dtype])] * 3 + [torch.float32] * 2
    return [torch.empty(a.shape, dtype=d, device="cuda").copy_(torch.from_numpy(a)) for a, d in zip(arrays, dtypes)]


def run(name: str, tensors: list, dtype: bz.DType) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        outs = fusion(FUSIONS[name][0], dtype).execute(tensors)
    torch.cuda.synchronize()
    assert all(o.dtype == getattr(torch, DTYPES[dtype]) for o in outs)
    return [o.double().cpu().numpy() for o in outs]


def expected(name: str, tensors: list) -> list[np.ndarray]:
    """The reference on the values the kernel reads (bfloat16 inputs rounded as given)."""
    return FUSIONS[name][2](*[t.double().cpu().numpy() for t in tensors])


def assert_close(actual: list, wanted: list, dtype: bz.DType) -> None:
    tolerance = {bz.float32: 1e-4, bz.bfloat16: 2e-2}[dtype]
    for a, e in zip(actual, wanted):
        assert a.shape == e.shape
        scale = max(np.abs(e).max(initial=0.0), 1.0)
        np.testing.assert_allclose(a, e, rtol=tolerance, atol=tolerance * scale)


def inputs(name: str, shape: tuple[int, int], seed: int = 0) -> list[np.ndarray]:
    return FUSIONS[name][1](np.random.default_rng(seed), *shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", NORMS)
def test_norm_backward(name, shape, dtype):
    tensors = to_gpu(inputs(name, shape), dtype)
    assert_close(run(name, tensors, dtype), expected(name, tensors), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 5), (2048, 4096), (333, 1000), (21, 33)], ids=str)
@pytest.mark.parametrize("name", ["layer_norm_backward_3d", "rms_norm_backward_4d"])
def test_norm_backward_over_batch_and_tokens(name, shape, dtype):
    """[3, tokens, hidden] and [2, 3, tokens, hidden]: the weight gradients sum over every axis
    but the last, the column task over two and three loops."""
    tensors = to_gpu(inputs(name, shape), dtype)
    assert_close(run(name, tensors, dtype), expected(name, tensors), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("name", NORMS)
def test_no_rows_give_zero_gradients_and_no_columns_give_empty_ones(name, shape, dtype):
    tensors = to_gpu(inputs(name, shape), dtype)
    outs = run(name, tensors, dtype)
    assert outs[0].shape == shape and all(o.shape == (shape[1],) for o in outs[1:])
    assert all((o == 0).all() for o in outs[1:])  # sums over no rows


@pytest.mark.parametrize("shape", [(8192, 4096), (1000, 1000), (64, 33), (3, 70001)], ids=str)
@pytest.mark.parametrize("name", NORMS)
def test_weight_gradients_are_bit_identical_from_run_to_run(name, shape):
    tensors = to_gpu(inputs(name, shape), bz.float32)
    f = fusion(FUSIONS[name][0], bz.float32)
    first = [o.clone() for o in f.execute(tensors)[1:]]
    for _ in range(3):
        again = f.execute(tensors)[1:]
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cols", [33, 64, 4096])
@pytest.mark.parametrize("name", NORMS)
def test_strided_and_misaligned_rows(name, cols, dtype):
    """dy and x side by side in rows 2 (mod 4) elements longer than a multiple of 4: even rows start
    on a 16-byte (8 for bfloat16) boundary and take the 16-byte path, odd rows do not; then x
    alone starting one element in, so no row does."""
    rows = 37
    tensors = to_gpu(inputs(name, (rows, cols), seed=1), dtype)
    start = -(-(cols + 1) // 4) * 4
    width = start + cols + (2 - (start + cols) % 4) % 4
    wide = torch.zeros((rows, width), dtype=tensors[0].dtype, device="cuda")
    wide[:, :cols], wide[:, start: start + cols] = tensors[0], tensors[1]
    strided = [wide[:, :cols], wide[:, start: start + cols], *tensors[2:]]
    assert_close(run(name, strided, dtype), expected(name, strided), dtype)
    shifted = torch.zeros((rows, cols + 1), dtype=tensors[1].dtype, device="cuda")
    shifted[:, 1:] = tensors[1]
    misaligned = [tensors[0], shifted[:, 1:], *tensors[2:]]
    assert_close(run(name, misaligned, dtype), expected(name, misaligned), dtype)


@pytest.mark.parametrize("name", NORMS)
def test_a_transposed_input(name):
    """dy stored column-major: the column sums walk it along its unit stride instead."""
    tensors = to_gpu(inputs(name, (300, 96), seed=2), bz.float32)
    tensors[0] = tensors[0].t().contiguous().t()
    assert_close(run(name, tensors, bz.float32), expected(name, tensors), bz.float32)


@pytest.mark.parametrize("name", NORMS)
def test_shapes_that_grow_the_workspace_and_back(name):
    """One runtime serves every shape of the signature: a larger one needs more partial results
    (a larger workspace); the smaller shape's cached call keeps its own."""
    f = fusion(FUSIONS[name][0], bz.float32)
    for shape in [(64, 33), (8192, 4096), (64, 33), (33, 20000), (1000, 1000)]:
        tensors = to_gpu(inputs(name, shape), bz.float32)
        with config.scope(enable="poison_outputs"):
            outs = [o.double().cpu().numpy() for o in f.execute(tensors)]
        assert_close(outs, expected(name, tensors), bz.float32)


@pytest.mark.parametrize("name", FUSIONS)
def test_other_fusions_of_rows_and_columns(name):
    build, make, reference = FUSIONS[name]
    for shape in [(3, 5), (64, 33), (1000, 1000), (9, 20000)]:
        arrays = make(np.random.default_rng(3), *shape)
        tensors = [torch.from_numpy(a).cuda() for a in arrays]
        with config.scope(enable="poison_outputs"):
            outs = [o.double().cpu().numpy() for o in fusion(build).execute(tensors)]
        assert_close(outs, reference(*[a.astype(np.float64) for a in arrays]), bz.float32)


def test_the_suite_shape_launches_the_rows_then_the_fold(capsys):
    """layer_norm backward [8192, 4096] float32: the row task over as many blocks an SM as fit (at
    most 4), each block's rows in registers and its partial results in shared memory, then the fold
    of those blocks' rows, four columns a thread."""
    tensors = to_gpu(inputs("layer_norm_backward", (8192, 4096)), bz.float32)
    f = fusion(FUSIONS["layer_norm_backward"][0], bz.float32)
    with config.scope(dump="launch_params"):
        f.execute(tensors)
    # (then the prepared call, made from the first call, plans the same two launches again)
    launches = [line for line in capsys.readouterr().err.splitlines() if " range=[" in line][:2]
    assert [line.split()[1] for line in launches] == ["inner_outer", "column_fold"]
    fields = [dict(re.findall(r"(\w+)=(\d+)", line)) for line in launches]
    sms = cuda_driver.device(0).sm_count
    assert 2 * sms <= int(fields[0]["grid"]) <= 4 * sms and fields[0]["lanes"] == "256"
    assert int(fields[0]["shared"]) == 4096 * 4 * 2  # dweight's and dbias's partial results
    assert fields[1]["lanes"] == "4" and fields[1]["cached_row"] == fields[0]["grid"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8192, 4096), (3, 5000), (1000, 769), (33, 20000)], ids=str)
@pytest.mark.parametrize("name", NORMS)
def test_each_feature_of_the_schedule_turned_off(name, shape, dtype):
    """The same results with each of the schedule's features off (old and new code side by side),
    and dweight bit-identical from run to run with all of them on."""
    tensors = to_gpu(inputs(name, shape, seed=5), dtype)
    wanted = expected(name, tensors)
    for feature in FEATURES:
        with config.scope(disable=feature):
            assert_close(run(name, tensors, dtype), wanted, dtype)
    first, again = run(name, tensors, dtype), run(name, tensors, dtype)
    assert_close(first, wanted, dtype)
    assert all(np.array_equal(a, b) for a, b in zip(first[1:], again[1:]))
