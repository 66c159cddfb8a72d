"""Full reductions over whole arrays (braze/codegen/cuda_grid.py, walk_dense), shared by
tests/codegen/test_cuda_dense_reductions.py (NVRTC, the kernels run on the CPU) and
tests/cuda/test_dense_reductions_gpu.py: each a fusion over one or two operands, its NumPy reference
in float64, and the bound its result must keep to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import braze as bz

NUMPY = {bz.float32: np.float32, bz.float64: np.float64, bz.float16: np.float16, bz.bfloat16: ml_dtypes.bfloat16,
         bz.int32: np.int32}
# The relative rounding of a result stored in each dtype, and of the float32 or float64 sums that
# accumulate it (bounds the error by that times the sum of the terms' magnitudes).
ROUNDING = {bz.float64: 2.0**-52, bz.float32: 2.0**-23, bz.float16: 2.0**-10, bz.bfloat16: 2.0**-7}
ACCUMULATION = {bz.float64: 1e-13}  # float32 and narrower accumulate in float32
FLOAT32_ACCUMULATION = 1e-6


@dataclass(frozen=True)
class Reduction:
    name: str
    operands: int
    build: Callable  # tensors -> the output
    reference: Callable  # float64 arrays -> the expected value
    terms: Callable  # float64 arrays -> the values summed (their magnitudes bound the error)
    exact: bool = False  # max and min round nothing
    empty: bool = True  # defined over no elements


REDUCTIONS = {r.name: r for r in [
    Reduction("sum", 1, bz.ops.sum, np.sum, lambda x: x),
    Reduction("mean", 1, bz.ops.mean, np.mean, lambda x: x / max(x.size, 1), empty=False),
    Reduction("max", 1, bz.ops.max, np.max, lambda x: x, exact=True, empty=False),
    Reduction("min", 1, bz.ops.min, np.min, lambda x: x, exact=True, empty=False),
    Reduction("norm", 1, lambda g: bz.ops.sqrt(bz.ops.sum(g * g)), lambda g: np.sqrt((g * g).sum()),
              lambda g: g * g),
    Reduction("dot", 2, lambda x, y: bz.ops.sum(x * y), lambda x, y: (x * y).sum(), lambda x, y: x * y),
    Reduction("sum_as_float32", 1, lambda x: bz.ops.sum(bz.ops.cast(x, bz.float32)), np.sum, lambda x: x),
]}


def fusion(reduction: Reduction, dtype: bz.DType, ndim: int) -> bz.Fusion:
    with bz.Fusion(name=f"{reduction.name}_{dtype.name}_{ndim}d") as f:
        operands = [f.define_tensor([-1] * ndim, dtype=dtype) for _ in range(reduction.operands)]
        f.add_output(reduction.build(*operands))
    return f


def operands(reduction: Reduction, dtype: bz.DType, shape: tuple[int, ...], seed: int = 0,
             buffer: tuple[int, ...] | None = None, offset: int = 0, place: Callable = lambda a: a) -> list:
    """The reduction's operands of `shape`: normals around 1 (sums far from zero) or integers; each
    the leading `shape` of a `buffer`-shaped array (a strided view), or `offset` elements into a flat
    buffer (misaligned for 16-byte loads). `place` makes the flat buffer an array of another kind
    (a GPU tensor) before the view is taken."""
    rng = np.random.default_rng(seed)
    arrays = []
    for _ in range(reduction.operands):
        size = int(np.prod(buffer or shape)) + offset
        if dtype is bz.int32:
            values = rng.integers(-1000, 1000, size)
        else:
            values = rng.standard_normal(size) + 1.0
        full = place(values.astype(NUMPY[dtype]))[offset:]
        arrays.append(full.reshape(buffer)[tuple(slice(0, n) for n in shape)] if buffer else full.reshape(shape))
    return arrays


def check(reduction: Reduction, dtype: bz.DType, actual, arrays: list[np.ndarray]) -> None:
    """`actual` (a 0-d array) against the float64 reference of `arrays`, within the rounding of the
    result's dtype and of the accumulation over the terms' magnitudes."""
    wide = [np.asarray(a, np.float64) for a in arrays]
    expected = reduction.reference(*wide)
    value = float(np.asarray(actual, np.float64))
    if reduction.exact or dtype is bz.int32:
        assert value == float(expected), (value, expected)
        return
    out = bz.float32 if reduction.name == "sum_as_float32" else dtype
    scale = float(np.abs(reduction.terms(*wide)).sum())
    bound = ROUNDING[out] * abs(expected) + ACCUMULATION.get(dtype, FLOAT32_ACCUMULATION) * scale
    if reduction.name == "norm":  # sqrt halves the relative error of the sum of squares
        bound = ROUNDING[out] * abs(expected) + ACCUMULATION.get(dtype, FLOAT32_ACCUMULATION) * np.sqrt(scale)
    assert abs(value - expected) <= bound, (value, expected, bound)
