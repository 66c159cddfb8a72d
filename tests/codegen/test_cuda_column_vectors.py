"""Column reductions whose threads own 16 bytes of neighbouring columns (braze/codegen/cuda_column_vectors.py),
no GPU needed: the generated CUDA run on the CPU (tests/cuda_on_cpu.py: g++, a thread per CUDA thread,
misaligned vector loads fail) against float64 NumPy, over column counts the width divides or not, views
off a 16-byte boundary, every float dtype, nests of rows, splits across blocks and empty extents; the
launches planned for them; and the suite's column sums at their model shapes. NVRTC compiles the path
for every float dtype in tests/codegen/test_cuda_reductions.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, planned_launches, run_on_cpu

import braze as bz
from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import Prepared

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

NUMPY = {bz.float32: np.float32, bz.bfloat16: ml_dtypes.bfloat16, bz.float16: np.float16, bz.float64: np.float64}
TOLERANCE = {bz.float64: 1e-10, bz.float32: 2e-5, bz.float16: 4e-3, bz.bfloat16: 3e-2}
WIDTH = {bz.float32: 4, bz.float64: 4, bz.float16: 8, bz.bfloat16: 8}


def column_ops(f: bz.Fusion, dtype) -> None:
    """A column sum, mean and max and a variance of one input: one column task of several accumulators."""
    x = f.define_tensor([-1, -1], dtype=dtype)
    for out in (bz.ops.sum(x, axes=[0]), bz.ops.mean(x, axes=[0]), bz.ops.max(x, axes=[0]), bz.ops.var(x, axes=[0])):
        f.add_output(out)


def reference(x: np.ndarray) -> list[np.ndarray]:
    wide = x.astype(np.float64)
    return [wide.sum(0), wide.mean(0), wide.max(0), wide.var(0)]


def fusion(build, dtype) -> bz.Fusion:
    with bz.Fusion(name=f"colvec_{dtype.name}") as f:
        build(f, dtype)
    return f


def view(shape: tuple[int, int], dtype, offset: int = 0, stride: int | None = None, seed: int = 0) -> np.ndarray:
    """A [rows, columns] view whose first element is `offset` elements past a 64-byte boundary, its rows
    `stride` elements apart (by default its columns)."""
    rows, columns = shape
    stride = columns if stride is None else stride
    itemsize = np.dtype(NUMPY[dtype]).itemsize
    memory = np.empty((offset + rows * stride) * itemsize + 64, np.uint8)
    start = -memory.ctypes.data % 64
    flat = memory[start:start + (offset + rows * stride) * itemsize].view(NUMPY[dtype])
    x = flat[offset:].reshape(rows, stride)[:, :columns]
    x[...] = np.random.default_rng(seed).standard_normal(shape)
    return x


def column_sum(f: bz.Fusion, dtype) -> None:
    f.add_output(bz.ops.sum(f.define_tensor([-1, -1], dtype=dtype), axes=[0]))


def run(x: np.ndarray, dtype, build=column_ops, **gpu) -> tuple[list[np.ndarray], list[tuple]]:
    gpu = {"sm_count": 8, **gpu}
    got, launches = run_on_cpu(fusion(build, dtype), [x], **gpu)
    tol = TOLERANCE[dtype]
    wanted = reference(x) if build is column_ops else [x.astype(np.float64).sum(0)]
    for n, (g, w) in enumerate(zip(got, wanted, strict=True)):
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), w, rtol=tol, atol=tol * 8,
                                   err_msg=f"output {n} of {x.shape} {dtype}")
    return got, launches


def strip_vectors(launch: tuple) -> int:
    """The columns (or vectors of columns) a block of a columns launch owns: its `lanes`."""
    return launch[4][0]


@pytest.mark.parametrize("dtype", list(NUMPY))
def test_each_dtype_takes_vectors_of_16_bytes_where_the_width_divides_the_columns(dtype):
    width = WIDTH[dtype]
    (launch,) = run(view((37, 3 * width), dtype), dtype)[1]
    # Three vectors of columns: a strip of four threads a row group (not of 32 columns).
    assert launch[1] == "columns" and strip_vectors(launch) == 4


@pytest.mark.parametrize("columns", [3, 6, 42])
def test_columns_the_width_does_not_divide_take_one_column_a_thread(columns):
    (launch,) = run(view((29, columns), bz.float32), bz.float32)[1]
    assert strip_vectors(launch) == min(32, 1 << (columns - 1).bit_length())


@pytest.mark.parametrize("offset, stride", [(1, None), (2, 40), (0, 42)])
def test_misaligned_views_keep_the_threads_columns_and_give_the_same_bits(offset, stride):
    # A view off the boundary (a slice from column 1), or rows of a wider array: the path loads its
    # columns an element at a time in the same order, so the sums are those of the aligned array.
    misaligned = view((45, 40), bz.float32, offset, stride, seed=3)
    got, launches = run(misaligned, bz.float32)
    aligned, _ = run(view((45, 40), bz.float32, seed=3), bz.float32)
    assert strip_vectors(launches[0]) == 16
    for g, a in zip(got, aligned, strict=True):
        assert g.tobytes() == a.tobytes()


def test_a_slice_from_column_one_of_an_odd_width_array():
    wide = view((31, 41), bz.float32, seed=5)
    run(wide[:, 1:], bz.float32)


@pytest.mark.parametrize("shape", [(0, 8), (1, 4), (1, 8), (4, 0), (600, 128)])
def test_empty_single_and_split_extents(shape):
    _, launches = run(view(shape, bz.float32), bz.float32, column_sum, sm_count=4)
    if shape[1] == 0:
        assert not launches
    elif shape[0] == 600:  # 32 vectors: one strip, its rows split across blocks
        (launch,) = launches
        assert strip_vectors(launch) == 32 and launch[4][1] > 1 and launch[2] == launch[4][1]


def test_splits_meet_in_the_same_order_whatever_the_columns_alignment():
    x = view((700, 128), bz.float64, 0, seed=9)
    shifted = view((700, 128), bz.float64, 1, seed=9)
    (got, launches), (again, _) = run(x, bz.float64, sm_count=6), run(shifted, bz.float64, sm_count=6)
    assert launches[0][4][1] > 1
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, again, strict=True))


def test_the_knob_keeps_one_column_a_thread():
    x = view((37, 40), bz.float32)
    with config.scope(disable="column_vectors"):
        (launch,) = run(x, bz.float32)[1]
        text = engine.cuda_source(fusion(column_ops, bz.float32), [x]).body
    assert strip_vectors(launch) == 32 and "float4" not in text
    assert "float4" in engine.cuda_source(fusion(column_ops, bz.float32), [x]).body


def test_a_norms_weight_gradient_reads_its_rows_statistics_an_element_at_a_time():
    # layer_norm backward's dweight and dbias: dy and x along the columns as vectors, mean and rstd of
    # the row once a row.
    def build(f, dtype):
        dy, x = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        mean, rstd = f.define_tensor([-1, 1]), f.define_tensor([-1, 1])
        f.add_output(bz.ops.sum(dy * ((x - mean) * rstd), axes=[0]))
        f.add_output(bz.ops.sum(dy, axes=[0]))

    rng = np.random.default_rng(1)
    dy, x = view((300, 16), bz.float32, seed=1), view((300, 16), bz.float32, seed=2)
    mean, rstd = rng.standard_normal((300, 1)).astype(np.float32), rng.random((300, 1)).astype(np.float32)
    f = fusion(build, bz.float32)
    assert engine.cuda_source(f, [dy, x, mean, rstd]).body.count("*reinterpret_cast<const float4*>") == 2
    (dweight, dbias), _ = run_on_cpu(f, [dy, x, mean, rstd], sm_count=4)
    wide = [a.astype(np.float64) for a in (dy, x, mean, rstd)]
    np.testing.assert_allclose(dweight, (wide[0] * (wide[1] - wide[2]) * wide[3]).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dbias, wide[0].sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch, tokens", [(136, 34), (181, 36), (160, 32)])
def test_a_nest_of_rows_whose_levels_step_off_the_boundary(batch, tokens):
    # [batch, tokens, channels] summed over batch and tokens, its rows `tokens` elements apart and its
    # batches `batch` apart: the kernel tests a step of each level, and loads elements where one is off.
    with bz.Fusion(name="colvec_nest") as f:
        f.add_output(bz.ops.sum(f.define_tensor([-1, -1, -1]), axes=(0, 1)))
    memory = view((1, 3 * batch), bz.float32, seed=4)[0]
    x = np.lib.stride_tricks.as_strided(memory, (3, 4, 32), (4 * batch, 4 * tokens, 4))
    (got,), _ = run_on_cpu(f, [x], sm_count=4)
    np.testing.assert_allclose(got, x.astype(np.float64).sum((0, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["column_sum", "param_grads"])
def test_the_suites_column_reductions_take_vectors_at_their_model_shapes(name):
    case = next(c for c in CASES if c.name == name)
    p = Prepared(case, "quick")
    shape = case.shape("models")
    arrays = [np.zeros(shape, np.float32) for _ in p.inputs]
    (launch,) = planned_launches(p.fusion, arrays, sm_count=132, resident=8)
    # 768 channels: 192 vectors, six strips of 32, the rows split across blocks.
    lanes, splits, *_ = launch.scalars
    assert launch.task.schedule.kind == "columns" and launch.task.column_width == 4
    assert lanes == 32 and launch.grid == 6 * splits and splits > 1
    body = engine.cuda_source(p.fusion, [a[:2] for a in arrays]).body
    # One float4 load a row a thread; the four columns' sums meet over the row groups in one tree.
    assert "*reinterpret_cast<const float4*>" in body and "BzEach4<BzReduceAdd>" in body


@pytest.mark.parametrize("first", [0, 1])
def test_a_column_task_of_two_loops_takes_both_as_vectors(first):
    # logsumexp over axis 0 unpadded: the maximum, then the sum of exponentials shifted by it (a value
    # between the loops, one copy a column), not split across blocks.
    with config.scope(disable="logsumexp_pad"), bz.Fusion(name="colvec_lse") as f:
        f.add_output(bz.ops.logsumexp(f.define_tensor([-1, -1]), axes=[0]))
    x = view((300, 41), bz.float32, seed=6)[:, first:first + 40]
    with config.scope(disable="logsumexp_pad"):
        assert engine.cuda_source(f, [x]).body.count("*reinterpret_cast<const float4*>") == 2
        (got,), (launch,) = run_on_cpu(f, [x], sm_count=4)
    wide = x.astype(np.float64)
    top = wide.max(0)
    assert strip_vectors(launch) == 8
    np.testing.assert_allclose(got, top + np.log(np.exp(wide - top).sum(0)), rtol=1e-5, atol=1e-5)
