"""Random row fusions through their generated CUDA run on the CPU (tests/cuda_on_cpu.py: g++, a thread
per CUDA thread; it fails any misaligned vector access), against float64 NumPy within the dtype's
tolerance: the row loops' vector paths (braze/codegen/cuda_peel.py: a head of single elements, the
vectors, a tail) over odd widths (1..80, and rows of 1000..1100), 1..9 rows, every float dtype, inputs
that are views starting 0..7 elements off a 16-byte boundary or rows of a wider array, on a random
small fake GPU (SMs, resident blocks, block size) whose row caches hold every row, some or none, so
block rows, warp rows and rows read twice from memory all run. Ops whose loops vectorize: softmax,
log_softmax, layer_norm and rms_norm (with and without their weight and bias), a row sum and max,
x * y + z of rows whose misalignments disagree, a residual add under a norm (two outputs), and a
cross-entropy (max, sum of exp, the target's logit), per row or its mean. A few examples a run (BRAZE_FUZZ_SCALE,
tests/fuzz_scale.py, draws more): the harness builds each program with g++."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import braze as bz
from braze.codegen import cuda_launch

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

NUMPY = {bz.float32: np.float32, bz.bfloat16: ml_dtypes.bfloat16, bz.float16: np.float16, bz.float64: np.float64}
# A few roundings of the dtype: of the inputs' sums in float32 (the compute type of 2-byte floats) and of
# the output.
TOLERANCE = {bz.float64: 1e-10, bz.float32: 2e-5, bz.float16: 4e-3, bz.bfloat16: 3e-2}
EPS = 1e-5


def log_softmax64(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def layer_norm64(x: np.ndarray, w=1.0, b=0.0) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt(x.var(-1, keepdims=True) + EPS) * w + b


def rms_norm64(x: np.ndarray, w=1.0) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


@dataclass(frozen=True)
class RowOp:
    """A row fusion: its inputs ("row": rows x width, "vec": width, "target": a class per row), its
    outputs of the inputs' TensorViews, and their float64 reference of the inputs (as float64, each
    output rounded to its dtype where braze stores an intermediate one)."""
    inputs: tuple[str, ...]
    build: Callable
    reference: Callable
    relative: bool = False  # compared by relative error alone (softmax's small values)


def _residual(norm: Callable, norm64: Callable, affine: int) -> RowOp:
    """h = x + r under a norm: [norm(h), h]; the reference's h rounded to the dtype, as braze stores it."""
    def reference(x, r, *wb, dtype):
        h = (x + r).astype(NUMPY[dtype]).astype(np.float64)
        return [norm64(h, *wb), h]
    return RowOp(("row", "row") + ("vec",) * affine, lambda x, r, *wb: [norm(x + r, *wb), x + r], reference)


def _cross_entropy64(x, t, dtype):
    return [-np.take_along_axis(log_softmax64(x), t[:, None], -1)[:, 0]]


OPS = {
    "softmax": RowOp(("row",), lambda x: [bz.ops.softmax(x, -1)],
                     lambda x, dtype: [np.exp(log_softmax64(x))], relative=True),
    "log_softmax": RowOp(("row",), lambda x: [bz.ops.log_softmax(x, -1)], lambda x, dtype: [log_softmax64(x)]),
    "layer_norm": RowOp(("row",), lambda x: [bz.ops.layer_norm(x, eps=EPS)], lambda x, dtype: [layer_norm64(x)]),
    "layer_norm_affine": RowOp(("row", "vec", "vec"), lambda x, w, b: [bz.ops.layer_norm(x, w, b, eps=EPS)],
                               lambda x, w, b, dtype: [layer_norm64(x, w, b)]),
    "rms_norm": RowOp(("row",), lambda x: [bz.ops.rms_norm(x, eps=EPS)], lambda x, dtype: [rms_norm64(x)]),
    "rms_norm_weight": RowOp(("row", "vec"), lambda x, w: [bz.ops.rms_norm(x, w, eps=EPS)],
                             lambda x, w, dtype: [rms_norm64(x, w)]),
    "row_sum": RowOp(("row",), lambda x: [bz.ops.sum(x, axes=-1)], lambda x, dtype: [x.sum(-1)]),
    "row_max": RowOp(("row",), lambda x: [bz.ops.max(x, axes=-1)], lambda x, dtype: [x.max(-1)]),
    "fma": RowOp(("row", "row", "row"), lambda x, y, z: [x * y + z],
                 lambda x, y, z, dtype: [(x * y).astype(NUMPY[dtype]).astype(np.float64) + z]),
    "residual_layer_norm": _residual(lambda h, w, b: bz.ops.layer_norm(h, w, b, eps=EPS), layer_norm64, 2),
    "residual_rms_norm": _residual(lambda h: bz.ops.rms_norm(h, eps=EPS), rms_norm64, 0),
    "cross_entropy": RowOp(("row", "target"), lambda x, t: [bz.ops.cross_entropy(x, t, reduction="none")],
                           _cross_entropy64),
    # A language model's loss: its rows meet across blocks ("grid_rows").
    "cross_entropy_mean": RowOp(("row", "target"), lambda x, t: [bz.ops.cross_entropy(x, t)],
                                lambda x, t, dtype: [_cross_entropy64(x, t, dtype)[0].mean()]),
}


def aligned(count: int, dtype) -> np.ndarray:
    """`count` elements of `dtype` starting on a 64-byte boundary, whatever NumPy's allocator gives."""
    itemsize = np.dtype(dtype).itemsize
    memory = np.empty(count * itemsize + 64, np.uint8)
    start = -memory.ctypes.data % 64
    return memory[start:start + count * itemsize].view(dtype)


@st.composite
def layouts(draw, rows: int, width: int) -> tuple[int, int]:
    """(elements before the view's first, its row stride): contiguous rows `offset` elements off the
    boundary, or rows of a wider array."""
    offset = draw(st.integers(0, 7))
    stride = width if draw(st.booleans()) else width + draw(st.integers(1, 9))
    return offset, stride


def view(rng, rows: int, width: int, layout: tuple[int, int], dtype) -> np.ndarray:
    offset, stride = layout
    memory = aligned(offset + rows * stride, NUMPY[dtype])
    x = memory[offset:].reshape(rows, stride)[:, :width]
    x[...] = rng.standard_normal((rows, width))
    return x


def fusion(op: RowOp, dtype) -> bz.Fusion:
    shapes = {"row": (-1, -1), "vec": (-1,), "target": (-1,)}
    with bz.Fusion(name="peel_fuzz") as f:
        tvs = [f.define_tensor(shape=shapes[kind], dtype=bz.int64 if kind == "target" else dtype)
               for kind in op.inputs]
        for out in op.build(*tvs):
            f.add_output(out)
    return f


def check(name: str, got: list[np.ndarray], wanted: list[np.ndarray], dtype, context: str) -> None:
    tol = TOLERANCE[dtype]
    for n, (g, w) in enumerate(zip(got, wanted, strict=True)):
        g = np.asarray(g).astype(np.float64)
        # Relative errors alone, but for a subnormal's rounding (softmax's small values in float16).
        atol = float(ml_dtypes.finfo(NUMPY[dtype]).smallest_subnormal) if OPS[name].relative \
            else tol * max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=atol, err_msg=f"output {n} of {context}")


@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_row_fusions_over_misaligned_rows_on_a_fake_gpu(data):
    name = data.draw(st.sampled_from(sorted(OPS)), label="op")
    op, dtype = OPS[name], data.draw(st.sampled_from(list(NUMPY)), label="dtype")
    rows = data.draw(st.integers(1, 9), label="rows")
    width = data.draw(st.one_of(st.integers(1, 80), st.integers(1000, 1100)), label="width")
    gpu = {"sm_count": data.draw(st.integers(1, 4)), "resident": data.draw(st.integers(1, 4)),
           "block_size": data.draw(st.sampled_from([128, 256, 512]))}
    # Row caches that hold every row, only short ones, or none (the loops then read memory again).
    cache_bytes = data.draw(st.sampled_from([cuda_launch.ROW_CACHE_BYTES, 2048, 0]), label="row cache bytes")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays, layouts_drawn = [], []
    for kind in op.inputs:
        if kind == "target":
            arrays.append(rng.integers(0, width, rows))
            continue
        shape = (rows, width) if kind == "row" else (1, width)
        layout = data.draw(layouts(*shape), label=f"{kind} layout")
        layouts_drawn.append(layout)
        array = view(rng, *shape, layout, dtype)
        arrays.append(array if kind == "row" else array[0])
    context = f"{name} {dtype} {rows}x{width}, layouts {layouts_drawn} on {gpu}, row caches of {cache_bytes} bytes"
    with mock.patch.object(cuda_launch, "ROW_CACHE_BYTES", cache_bytes):
        got, launches = run_on_cpu(fusion(op, dtype), arrays, **gpu)
    for launch in launches:
        event(f"{launch[1]} {'warp' if launch[0].endswith('_warp') else 'block'} rows, cached {bool(launch[3])}")
    as64 = [a if a.dtype == np.int64 else a.astype(np.float64) for a in arrays]
    check(name, got, op.reference(*as64, dtype=dtype), dtype, context)
