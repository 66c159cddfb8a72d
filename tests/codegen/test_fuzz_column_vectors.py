"""Random column fusions through their generated CUDA run on the CPU (tests/cuda_on_cpu.py: g++, a thread
per CUDA thread; it fails any misaligned vector access), against float64 NumPy within the dtype's
tolerance: column tasks whose threads own a vector of neighbouring columns
(braze/codegen/cuda_column_vectors.py) or one column, over 1..70 columns, 0..40 or 100..600 rows, every
float dtype, inputs that are views starting 0..7 elements off a 16-byte boundary or rows of a wider
array, on a random small fake GPU whose splits of the rows across blocks vary. Ops: a column sum, mean,
max, variance with its mean, a sum of products of two inputs whose misalignments disagree, a norm's
weight gradient (per-row statistics read beside the columns), and a sum over the two outer axes of a
3-D input. A few examples a run (BRAZE_FUZZ_SCALE, tests/fuzz_scale.py, draws more)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


NUMPY = {bz.float32: np.float32, bz.bfloat16: ml_dtypes.bfloat16, bz.float16: np.float16, bz.float64: np.float64}
# A few roundings of the dtype: of the inputs' sums in float32 (the compute type of 2-byte floats) and of
# the output.
TOLERANCE = {bz.float64: 1e-10, bz.float32: 2e-5, bz.float16: 4e-3, bz.bfloat16: 3e-2}


@st.composite
def layouts(draw, columns: int) -> tuple[int, int]:
    """(elements before the view's first, its row stride): contiguous rows `offset` elements off a 64-byte
    boundary, or rows of a wider array."""
    offset = draw(st.integers(0, 7))
    return offset, columns if draw(st.booleans()) else columns + draw(st.integers(1, 9))


def view(rng, rows: int, columns: int, layout: tuple[int, int], dtype) -> np.ndarray:
    offset, stride = layout
    itemsize = np.dtype(NUMPY[dtype]).itemsize
    memory = np.empty((offset + rows * stride) * itemsize + 64, np.uint8)
    start = -memory.ctypes.data % 64
    flat = memory[start:start + (offset + rows * stride) * itemsize].view(NUMPY[dtype])
    x = flat[offset:].reshape(rows, stride)[:, :columns]
    x[...] = rng.standard_normal((rows, columns))
    return x


@dataclass(frozen=True)
class ColumnOp:
    """A column fusion: its inputs ("grid": rows x columns, "stat": rows x 1, "cube": 3 x rows x columns),
    its outputs of the inputs' TensorViews, their float64 reference, and whether it needs a row."""
    inputs: tuple[str, ...]
    build: Callable
    reference: Callable
    needs_rows: bool = False  # a max, a mean or a variance of no rows has no value to compare


OPS = {
    "sum": ColumnOp(("grid",), lambda x: [bz.ops.sum(x, axes=[0])], lambda x: [x.sum(0)]),
    "mean_max": ColumnOp(("grid",), lambda x: [bz.ops.mean(x, axes=[0]), bz.ops.max(x, axes=[0])],
                         lambda x: [x.mean(0), x.max(0)], needs_rows=True),
    "var_mean": ColumnOp(("grid",), lambda x: [bz.ops.var(x, axes=[0]), bz.ops.mean(x, axes=[0])],
                         lambda x: [x.var(0), x.mean(0)], needs_rows=True),
    "dot": ColumnOp(("grid", "grid"), lambda x, y: [bz.ops.sum(x * y, axes=[0])], lambda x, y: [(x * y).sum(0)]),
    "weight_grad": ColumnOp(("grid", "grid", "stat"),
                            lambda dy, x, m: [bz.ops.sum(dy * (x - m), axes=[0]), bz.ops.sum(dy, axes=[0])],
                            lambda dy, x, m: [(dy * (x - m)).sum(0), dy.sum(0)]),
    "outer_two": ColumnOp(("cube",), lambda x: [bz.ops.sum(x, axes=(0, 1))], lambda x: [x.sum((0, 1))]),
}


def fusion(op: ColumnOp, dtype) -> bz.Fusion:
    shapes = {"grid": (-1, -1), "stat": (-1, 1), "cube": (-1, -1, -1)}
    with bz.Fusion(name="column_fuzz") as f:
        for out in op.build(*(f.define_tensor(shape=shapes[kind], dtype=dtype) for kind in op.inputs)):
            f.add_output(out)
    return f


@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_column_fusions_over_misaligned_columns_on_a_fake_gpu(data):
    name = data.draw(st.sampled_from(sorted(OPS)), label="op")
    op, dtype = OPS[name], data.draw(st.sampled_from(list(NUMPY)), label="dtype")
    # Up to 40 rows, or enough that a strip of many columns splits them across blocks.
    rows = data.draw(st.one_of(st.integers(1 if op.needs_rows else 0, 40), st.integers(100, 600)), label="rows")
    columns = data.draw(st.integers(1, 70), label="columns")
    gpu = {"sm_count": data.draw(st.integers(1, 8)), "resident": data.draw(st.integers(1, 4)),
           "block_size": data.draw(st.sampled_from([128, 256, 512]))}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays, drawn = [], []
    for kind in op.inputs:
        shape = {"grid": (rows, columns), "stat": (rows, 1), "cube": (3 * rows, columns)}[kind]
        drawn.append(data.draw(layouts(shape[1]), label=f"{kind} layout"))
        array = view(rng, *shape, drawn[-1], dtype)
        arrays.append(array.reshape(3, rows, columns) if kind == "cube" else array)  # a view: rows split
    got, launches = run_on_cpu(fusion(op, dtype), arrays, **gpu)
    for launch in launches:
        event(f"{launch[1]}, {launch[4][0]} columns or vectors a strip, split {launch[4][1] > 1}")
    tol = TOLERANCE[dtype]
    wanted = op.reference(*(a.astype(np.float64) for a in arrays))
    context = f"{name} {dtype} {rows}x{columns}, layouts {drawn} on {gpu}"
    for n, (g, w) in enumerate(zip(got, wanted, strict=True)):
        scale = max(1.0, float(np.abs(w).max(initial=0.0)), rows ** 0.5)
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), w, rtol=tol * 4, atol=tol * scale,
                                   err_msg=f"output {n} of {context}")
