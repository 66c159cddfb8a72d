"""Tasks of one index a thread that move vectors (braze/codegen/cuda_rows.py, write_thread_vectors):
which tasks take the path, the CUDA text of the suite's Adam update and relu(x*y+z) at the suite's
GPU shapes, NVRTC compiling it for every dtype with a vector type and for generated 1-D elementwise
programs, the launches the runtime plans (vectors a thread, not elements), and the kernels run on
the CPU (tests/cuda_on_cpu.py: g++, a thread per CUDA thread) over lengths around the vector width,
aligned and one element off, with outputs poisoned first, against float64 NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, planned_launches, run_on_cpu
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thread_vector_fusions import elementwise, reference

import braze as bz
from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.codegen import cuda
from braze.compile import nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
needs_gxx = pytest.mark.skipif(not available(), reason="needs g++")

NUMPY = {bz.float32: np.float32, bz.float64: np.float64, bz.bfloat16: ml_dtypes.bfloat16, bz.int32: np.int32,
         bz.bool_: np.bool_}
LENGTHS = [0, 1, 3, 4, 5, 1023]


def inputs(dtype: bz.DType, n: int, offset: int = 0, seed: int = 0) -> list:
    """Three arrays of length `n`, each starting `offset` elements into its buffer, and the scalar."""
    rng = np.random.default_rng(seed)

    def array():
        if dtype is bz.bool_:
            full = rng.random(n + offset) > 0.5
        elif dtype is bz.int32:
            full = rng.integers(-1000, 1000, n + offset).astype(np.int32)
        else:
            full = rng.standard_normal(n + offset).astype(NUMPY[dtype])
        return full[offset:]
    arrays = [array() for _ in range(3)]
    return arrays if dtype is bz.bool_ else arrays + [3 if dtype is bz.int32 else 0.75]


# --- which tasks take the path -----------------------------------------------------------------
def suite_source(name: str) -> cuda.CudaSource:
    """The case's CUDA for its GPU shape (arrays allocated, never touched)."""
    case = next(c for c in CASES if c.name == name)
    arrays = [np.empty(case.shape("gpu"), np.float32) for _ in range(4 if name == "adam" else 3)]
    scalars = [1e-3, 0.5, 0.5] if name == "adam" else []
    return engine.cuda_source(build_fusion(case, case.shape("gpu")), arrays + scalars)


@pytest.mark.parametrize("name, loads, stores", [("adam", 4, 3), ("relu_fma", 3, 1)])
def test_the_suites_flat_updates_move_a_float4_per_array(name, loads, stores):
    src = suite_source(name)
    body = src.body
    assert src.thread_vector_widths == (4,)
    assert body.count("= *reinterpret_cast<const float4*>(") == loads
    assert body.count("*reinterpret_cast<float4*>(") == stores
    # every array it moves is tested for alignment once, and the rest go one index a thread
    assert body.count("& 15) == 0)") == loads + stores
    assert "bz_vectors = bz_aligned ? (task_end - task_begin) / 4 : 0;" in body
    assert "bz_row < task_end - bz_rest;" in body


@needs_nvrtc
def test_the_suites_flat_updates_compile_with_nvrtc():
    for name in ("adam", "relu_fma"):
        assert nvrtc.compile_ptx(suite_source(name).text, name, "sm_90")


def test_written_arrays_are_restrict_in_fusions():
    src = engine.cuda_source(elementwise(bz.float32), inputs(bz.float32, 8))
    assert "float* __restrict__ const T" in src.body and "float* const" not in src.body


@pytest.mark.parametrize("dtype, width", [(bz.float32, 4), (bz.float64, 4), (bz.int32, 4), (bz.bfloat16, 8),
                                          (bz.bool_, 8)])
def test_every_dtype_with_a_vector_type_takes_the_path(dtype, width):
    src = engine.cuda_source(elementwise(dtype), inputs(dtype, 8))
    assert src.thread_vector_widths == (width,)
    assert f"(task_end - task_begin) / {width} : 0;" in src.body


def keeps_one_index_a_thread(build, *arrays) -> bool:
    with bz.Fusion() as f:
        for out in build(f):
            f.add_output(out)
    src = engine.cuda_source(f, list(arrays))
    return src.thread_vector_widths == (1,) and "bz_vectors" not in src.body


def test_random_numbers_keep_one_index_a_thread():
    def dropout(f):
        x = f.define_tensor([-1])
        return [bz.ops.where(bz.ops.rand(x.shape, seed=3) >= 0.1, x, 0.0)]
    assert keeps_one_index_a_thread(dropout, np.ones(8, np.float32))


def test_strided_and_int64_arrays_keep_one_index_a_thread():
    strided = np.ones(16, np.float32)[::2]
    assert keeps_one_index_a_thread(lambda f: [f.define_tensor([-1]) * 2.0], strided)
    assert keeps_one_index_a_thread(lambda f: [f.define_tensor([-1], dtype=bz.int64) + 1], np.ones(8, np.int64))


def test_the_launch_counts_vectors():
    """1023 float32 are 256 vectors: one block of 256 threads (not four); 2**22 vectors of 4 are
    one a thread over 2**14 blocks, as many as the same elements one a thread four times over."""
    (small,) = planned_launches(elementwise(bz.float32), inputs(bz.float32, 1023), sm_count=132)
    assert small.grid == 1
    big = [np.empty(1 << 24, np.float32) for _ in range(3)] + [0.5]  # allocated, never touched
    (large,) = planned_launches(elementwise(bz.float32), big, sm_count=132)
    assert large.grid == (1 << 22) // 256
    big_bf16 = [np.empty(1 << 24, ml_dtypes.bfloat16) for _ in range(3)] + [0.5]  # allocated, never touched
    (bf16,) = planned_launches(elementwise(bz.bfloat16), big_bf16, sm_count=132)
    assert bf16.grid == (1 << 21) // 256  # vectors of 8: one a thread too


# --- the kernels run on the CPU ----------------------------------------------------------------
def check_on_cpu(dtype: bz.DType, n: int, offset: int) -> None:
    arrays = inputs(dtype, n, offset, seed=n)
    if n:  # the vector path where every array starts on 16 bytes; the one-index loop alone one element in
        assert all((a.ctypes.data % 16 == 0) != bool(offset) for a in arrays[:3])
    with config.scope(enable="poison_outputs"):
        outputs, _ = run_on_cpu(elementwise(dtype), arrays, sm_count=2, resident=1)
    tolerance = 1e-2 if dtype is bz.bfloat16 else 1e-6
    for actual, expected in zip(outputs, reference(dtype, *arrays)):
        assert actual.shape == (n,)
        if dtype is bz.bool_ or dtype is bz.int32:
            np.testing.assert_array_equal(actual, expected)
        else:
            scale = max(np.abs(expected).max(initial=0.0), 1.0)  # as the suite checks (braze/cli/bench/check.py)
            np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=tolerance, atol=tolerance * scale)


@needs_gxx
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16, bz.float64, bz.int32, bz.bool_], ids=str)
def test_vectors_and_the_rest_on_the_cpu(dtype, n):
    check_on_cpu(dtype, n, 0)


@needs_gxx
@pytest.mark.parametrize("n", [5, 1023])
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16, bz.float64, bz.int32, bz.bool_], ids=str)
def test_misaligned_arrays_take_one_index_a_thread_on_the_cpu(dtype, n):
    check_on_cpu(dtype, n, 1)


@needs_gxx
def test_the_adam_update_on_the_cpu():
    case = next(c for c in CASES if c.name == "adam")
    for offset in (0, 1):
        arrays = case.inputs(np.random.default_rng(offset), (1030 + offset,), np.float32)
        arrays[:4] = [a[offset:] for a in arrays[:4]]
        with config.scope(enable="poison_outputs"):
            outputs, launches = run_on_cpu(build_fusion(case, (1030,)), arrays, sm_count=2, resident=1)
        expected = case.math(np, *[np.asarray(a, np.float64) if isinstance(a, np.ndarray) else a for a in arrays])
        for actual, wanted in zip(outputs, expected):
            np.testing.assert_allclose(np.asarray(actual, np.float64), wanted, rtol=1e-5, atol=1e-6)
        assert [grid for _, _, grid, _, _ in launches] == [2]  # 258 vectors (or 1030 indices a grid of them)


# --- generated programs ------------------------------------------------------------------------
_UNARY = [bz.ops.abs, bz.ops.exp, bz.ops.tanh, bz.ops.relu, lambda e: e * e, lambda e: -e]
_BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, bz.ops.maximum,
           lambda a, b: bz.ops.where(a > b, a, b * 0.5)]


@st.composite
def pointwise(draw, leaves, depth: int = 3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    if draw(st.booleans()):
        return draw(st.sampled_from(_UNARY))(draw(pointwise(leaves, depth - 1)))
    return draw(st.sampled_from(_BINARY))(draw(pointwise(leaves, depth - 1)), draw(pointwise(leaves, depth - 1)))


@needs_nvrtc
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_elementwise_programs_take_the_path_and_compile_with_nvrtc(data):
    """Random pointwise programs over dense arrays of 1 to 3 axes move vectors one index a thread."""
    dtype = data.draw(st.sampled_from([bz.float32, bz.bfloat16, bz.float64]))
    count = data.draw(st.integers(1, 4))
    rank = data.draw(st.integers(1, 3))  # of 2 and 3 axes, dense: one flat range (flat_pointwise)
    with bz.Fusion(name=f"thread_vectors_generated_{data.draw(st.integers(0, 10**9))}") as f:
        tensors = [f.define_tensor([-1] * rank, dtype=dtype) for _ in range(count)]
        leaves = tensors + [f.define_scalar(dtype=bz.float32)]
        for _ in range(data.draw(st.integers(1, 3))):
            f.add_output(data.draw(pointwise(leaves)) + tensors[0])
    arrays = [np.ones((4,) * (rank - 1) + (64,), NUMPY[dtype]) for _ in range(count)] + [0.5]
    src = engine.cuda_source(f, arrays)
    assert all(width in (4, 8) for width in src.thread_vector_widths) and "lanes32" not in src.body
    assert nvrtc.compile_ptx(src.text, "generated", "sm_90")


# --- flat tasks: arrays of several axes laid out row-major (schedule/rows.py, flat_pointwise) -------
def nd_inputs(dtype: bz.DType, shape: tuple[int, ...], layout: str = "dense", seed: int = 0) -> list:
    """Three arrays of `shape`: dense, one starting an element into its buffer ("offset"), the last
    one a transposed view ("transposed") or every row padded ("padded"): never all dense then."""
    arrays = [a.reshape(shape) for a in inputs(dtype, int(np.prod(shape)), seed=seed)[:3]]
    scalar = inputs(dtype, 1)[3:]
    if layout == "offset":
        arrays = [np.concatenate([a.ravel()[:1], a.ravel()])[1:].reshape(shape) for a in arrays]
    elif layout == "transposed":
        arrays[2] = np.ascontiguousarray(arrays[2].swapaxes(0, 1)).swapaxes(0, 1)
    elif layout == "padded":
        arrays[2] = np.concatenate([arrays[2], arrays[2][..., :3]], axis=-1)[..., :shape[-1]]
    return arrays + scalar


@pytest.mark.parametrize("dtype, width", [(bz.float32, 4), (bz.bfloat16, 8)])
def test_a_dense_fusion_of_several_axes_is_one_flat_range(dtype, width):
    src = engine.cuda_source(elementwise(dtype, 3), nd_inputs(dtype, (4, 6, 8)))
    assert src.thread_vector_widths == (width,)
    assert "bz_fast_floordiv" not in src.body and "bz_fast_remainder" not in src.body and "lanes32" not in src.body
    with config.scope(disable="flat_pointwise"):  # rows of the innermost axis, as before
        assert "lanes32" in engine.cuda_source(elementwise(dtype, 3), nd_inputs(dtype, (4, 6, 8))).body


@pytest.mark.parametrize("layout", ["transposed", "padded"])
def test_arrays_not_laid_out_row_major_keep_rows(layout):
    src = engine.cuda_source(elementwise(bz.float32, 2), nd_inputs(bz.float32, (6, 8), layout))
    assert "task_end = bz_mul(" not in src.body or "lanes32" in src.body or "tile" in src.body


def test_a_task_beside_a_row_task_keeps_rows_to_be_folded():
    """h = x + r is written and normalized: its rows fold into the norm's row task, so it is not flat."""
    with bz.Fusion() as f:
        x, r = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        h = x + r
        f.add_output(bz.ops.softmax(h, -1))
        f.add_output(h)
    src = engine.cuda_source(f, [np.ones((4, 64), np.float32)] * 2)
    assert "// fusion: 1 task(s)" in src.text and "task_end = bz_mul(" not in src.body


@needs_gxx
@pytest.mark.parametrize("shape", [(3, 5), (0, 4), (4, 0), (2, 3, 4, 5), (1, 1, 7), (3, 1029)])
@pytest.mark.parametrize("layout", ["dense", "offset", "transposed", "padded"])
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=str)
def test_flat_tasks_and_rows_on_the_cpu(dtype, layout, shape):
    if layout == "transposed" and len(shape) < 2:
        pytest.skip("no axes to swap")
    arrays = nd_inputs(dtype, shape, layout, seed=sum(shape))
    with config.scope(enable="poison_outputs"):
        outputs, _ = run_on_cpu(elementwise(dtype, len(shape)), arrays, sm_count=2, resident=1)
    tolerance = 1e-2 if dtype is bz.bfloat16 else 1e-6
    for actual, expected in zip(outputs, reference(dtype, *arrays)):
        assert actual.shape == shape
        scale = max(np.abs(expected).max(initial=0.0), 1.0)
        np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=tolerance, atol=tolerance * scale)
