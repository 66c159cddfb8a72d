"""NumPy's diagonal functions as compositions of braze's ops: `np.diagonal` (also `x.diagonal()`),
`np.trace` (also `x.trace()`) and `np.diag`. A fusion has no strided gather, so each row's element of a
diagonal is chosen by a mask of column - row == offset and summed, and the rows that have none are cut
off. braze/ops/numpy_api.py dispatches NumPy's calls to them, braze/ops/methods.py the methods.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.errors import FusionDefinitionError
from braze.ir.fusion import defining
from braze.ir.scalar import Scalar, smax, smin
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops import views
from braze.ops.creation import arange
from braze.ops.elementwise import cast, elementwise


def _offset_arg(op: str, offset: object) -> int:
    if not isinstance(offset, (int, np.integer)) or isinstance(offset, (bool, np.bool_)):
        raise FusionDefinitionError(f"{op}: offset: expected an int, got {type(offset).__name__} {offset!r}")
    return int(offset)


def _on_diagonal(x: TensorView, rows: int | Scalar, cols: int | Scalar, offset: int) -> TensorView:
    """A (rows, cols) bool matrix, True where column - row == offset."""
    with defining(x.fusion):
        row, col = arange(rows), arange(cols)
    return elementwise("eq", elementwise("sub", views.unsqueeze(col, 0), views.unsqueeze(row, 1)), offset)


def _zero(dtype: dt.DType) -> bool | int:
    return False if dtype == dt.bool_ else 0


def diagonal(a: TensorView, offset: int = 0, axis1: int = 0, axis2: int = 1) -> TensorView:
    """np.diagonal: the elements a[i, i + offset] of axes `axis1` and `axis2`, as the last axis of the result
    (the other axes first, in their order), of a's dtype."""
    x = vc.tensor_arg("np.diagonal", a)
    offset = _offset_arg("np.diagonal", offset)
    if x.ndim < 2:
        raise FusionDefinitionError(f"np.diagonal: expected a tensor of rank >= 2, got {x.describe()} of rank {x.ndim}")
    first = normalize_axis(axis1, x.ndim, "np.diagonal axis1")
    second = normalize_axis(axis2, x.ndim, "np.diagonal axis2")
    if first == second:
        raise FusionDefinitionError(f"np.diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    x = views.permute(x, [d for d in range(x.ndim) if d not in (first, second)] + [first, second])
    n, m = x.shape[-2], x.shape[-1]
    chosen = elementwise("where", _on_diagonal(x, n, m, offset), x, _zero(x.dtype))
    picked = cast(red.sum(chosen, -1, False), x.dtype)  # one element a row: exact in a's dtype
    start = max(0, -offset)
    length = smax(0, smin(n - start, m - max(0, offset)))
    return vc._along(picked, picked.ndim - 1, start, start + length)


def trace(a: TensorView, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: object = None,
          out: object = None) -> TensorView:
    """np.trace: the sum of the diagonal, in the dtype NumPy's sum gives (int64 for smaller integers)."""
    if out is not None:
        raise FusionDefinitionError("np.trace: out=: a fusion's values are not buffers; use the result")
    d = diagonal(a, offset, axis1, axis2)
    return red.sum(d if dtype is None else cast(d, dtype), -1, False)


def diag(v: TensorView, k: int = 0) -> TensorView:
    """np.diag: of a vector, the square matrix with it on diagonal k and zeros elsewhere; of a matrix, its
    diagonal k."""
    x = vc.tensor_arg("np.diag", v)
    k = _offset_arg("np.diag", k)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise FusionDefinitionError(f"np.diag: expected a 1-D or 2-D tensor, got {x.describe()} of rank {x.ndim}")
    padded = views.pad(x, [(0, abs(k))], _zero(x.dtype))  # row i holds v[i] (k >= 0), column j holds v[j] (k < 0)
    size = padded.shape[0]
    values = views.unsqueeze(padded, 1 if k >= 0 else 0)
    return cast(elementwise("where", _on_diagonal(x, size, size, k), values, _zero(x.dtype)), x.dtype)


MATRICES: dict[Callable, Callable[..., TensorView]] = {np.diagonal: diagonal, np.trace: trace, np.diag: diag}
