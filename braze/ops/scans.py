"""Cumulative ops (scans) along one axis: `cumsum`, `cumprod`, `cummax`, `cummin`, `logcumsumexp`.

Element i of a scan along `axis` combines the input's elements 0..i of that axis. The output has the
input's shape. Result dtypes follow the reductions of the same name (reductions.py): sums and
products of integers and bools are int64, of unsigned integers uint64 (NumPy's accumulation types on
its default platform), floats
keep their dtype and half types accumulate in float32; running maxima and minima keep the dtype and
propagate NaN, as NumPy's `np.maximum.accumulate` and torch's `cummax` do.

A scan is lowered as a task of its own that walks each row of its axis (braze/lower/scans.py; on a
GPU a tile of the row at a time over its lanes, braze/codegen/cuda_scan.py); its producers are
computed inside that walk, its consumers read it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops.elementwise import SAME, cast, not_a_tensor
from braze.ops.reductions import _SUM_TYPE, _as_asked, cast_first, keyword_aliases
from braze.ops.table import OpDef, RefContext, apply, register, reject_kinds

# name: (result rule, accumulation of NumPy arrays along an axis)
SCANS: dict[str, tuple[Callable[[DType], DType], Callable]] = {
    "cumsum": (_SUM_TYPE, np.cumsum),
    "cumprod": (_SUM_TYPE, np.cumprod),
    "cummax": (SAME, np.maximum.accumulate),
    "cummin": (SAME, np.minimum.accumulate),
    "logcumsumexp": (SAME, np.logaddexp.accumulate),
}
_FLOATS_ONLY = frozenset({"logcumsumexp"})  # torch has no logcumsumexp of integers


def scan_accumulator(result: DType) -> DType:
    """The type a scan's running value is kept in: the result's compute type (float32 for half
    types; int64 and uint64 sums and products are their result type already)."""
    return dt.compute_dtype(result)


def _scan_entry(name: str, result: Callable[[DType], DType], accumulate: Callable) -> OpDef:
    def shape_rule(inputs: Sequence[TensorView], attrs: dict):
        return [d.clone() for d in inputs[0].visible]

    def dtype_rule(inputs: Sequence[TensorView], attrs: dict) -> DType:
        reject_kinds(name, inputs[0], "f" if name in _FLOATS_ONLY else "bif")
        return result(inputs[0].dtype)

    def reference(ctx: RefContext, args: Sequence[np.ndarray], out: TensorView, attrs: dict) -> np.ndarray:
        x = np.asarray(args[0])
        accumulator = scan_accumulator(out.dtype)
        with np.errstate(all="ignore"):  # overflow to inf and NaN are values here, not warnings
            scanned = accumulate(x.astype(accumulator.numpy), axis=attrs["axis"])
        return np.asarray(scanned).astype(out.dtype.numpy, copy=False)

    return OpDef(name, "scan", shape_rule, dtype_rule, reference)


for _name, _row in SCANS.items():
    register(_scan_entry(_name, *_row))


def scan(op: str, x: TensorView, axis: int) -> TensorView:
    """`op` (cumsum, cumprod, cummax, cummin) of x along `axis` (negative counts from the end)."""
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    if x.ndim == 0:  # torch scans a 0-d tensor along dim 0 or -1 as one element: itself
        normalize_axis(axis, 1, f"{op} axis")
        reject_kinds(op, x, "f" if op in _FLOATS_ONLY else "bif")
        return cast(x, SCANS[op][0](x.dtype))
    return apply(op, [x], axis=normalize_axis(axis, x.ndim, f"{op} axis"))


_AXIS_ALIASES = keyword_aliases(axis=("dim",))


@_AXIS_ALIASES
def cumsum(x: TensorView, axis: int, *, dtype: object = None) -> TensorView:
    """Running sum along `axis`; integers and bools accumulate in int64 (unsigned ones in uint64), half
    types in float32.
    `dtype=` casts x to it first, as torch's does."""
    return _as_asked(scan("cumsum", cast_first(x, dtype, "cumsum"), axis), dtype)


@_AXIS_ALIASES
def cumprod(x: TensorView, axis: int, *, dtype: object = None) -> TensorView:
    """Running product along `axis`; integers and bools accumulate in int64, half types in float32.
    `dtype=` as for `cumsum`."""
    return _as_asked(scan("cumprod", cast_first(x, dtype, "cumprod"), axis), dtype)


@_AXIS_ALIASES
def cummax(x: TensorView, axis: int) -> TensorView:
    """Running maximum along `axis` (the values only; NaN propagates)."""
    return scan("cummax", x, axis)


@_AXIS_ALIASES
def cummin(x: TensorView, axis: int) -> TensorView:
    """Running minimum along `axis` (the values only; NaN propagates)."""
    return scan("cummin", x, axis)


@_AXIS_ALIASES
def logcumsumexp(x: TensorView, axis: int) -> TensorView:
    """Running log(sum(exp(x))) along `axis`, torch's `logcumsumexp`: each step adds the next element
    from the larger of the two, so it neither overflows nor loses a prefix far below the rest to
    underflow; -inf elements add nothing. Floats only; half types accumulate in float32."""
    return scan("logcumsumexp", x, axis)
