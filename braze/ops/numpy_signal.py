"""NumPy's signal and lookup functions as compositions of braze's ops: `np.convolve` and `np.correlate`
with a short kernel (a sum of shifted slices, one per tap), `np.unwrap`, `np.searchsorted` and `np.interp`
over a short table (by comparing every value with every entry), `np.polyval` of a few coefficients (Horner's
rule, unrolled), and `np.allclose` (a 0-d bool tensor, where NumPy gives a Python bool). A kernel, table or
coefficients may be written as a list of numbers (`np.convolve(x, [1, -1])`), as NumPy takes them.
braze/ops/numpy_api.py dispatches NumPy's calls to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.errors import UnsupportedError
from braze.ir.fusion import active_fusion
from braze.ir.scalar import concrete_value, smax
from braze.ir.tensor import TensorView
from braze.ops import creation, scans, views
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.elementwise import cast, elementwise
from braze.ops.numpy_compositions import _isclose

MAX_TAPS = 64  # a kernel's taps are unrolled, one slice each


def _e(op: str, *operands: object) -> TensorView:
    return elementwise(op, *operands)


def _listed(name: str, value: object) -> object:
    """A list or tuple of numbers given for an array (`np.convolve(x, [1, -1])`, `np.interp(x, [0, 1], fp)`)
    as the array NumPy makes of it, taken into a @bz.jit trace as any array the function makes; anything
    else as it is (the caller says what it expected)."""
    numbers = (bool, int, float, np.bool_, np.integer, np.floating)
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, numbers) for v in value):
        return value
    capture = getattr(active_fusion(f"np.{name}"), "capture_array", None)
    return value if capture is None else capture(np.asarray(value))


def _taps(name: str, a: TensorView, v: TensorView) -> int:
    """The kernel's length, a number the trace specializes on (one trace per kernel length)."""
    for what, x in (("a", a), ("v", v)):
        if not isinstance(x, TensorView) or x.ndim != 1:
            got = f"{x.describe()} of rank {x.ndim}" if isinstance(x, TensorView) else type(x).__name__
            raise UnsupportedError(f"np.{name}: {what}: expected a 1-D array, got {got}")
    taps = concrete_value(v.shape[0])
    if taps is None or not 1 <= taps <= MAX_TAPS:
        raise UnsupportedError(
            f"np.{name}: v: expected a kernel of 1 to {MAX_TAPS} taps whose length is known when tracing "
            f"(a @bz.jit argument's is), got {v.describe()} of length {v.shape[0]}")
    return taps


def _convolve(a, v, mode="full"):
    """sum over k of a[n - k] * v[k]; `a` is the signal, at least as long as the kernel `v` for 'valid' and
    'same' (checked at run time), as NumPy's convolve would otherwise swap them."""
    a, v = _listed("convolve", a), _listed("convolve", v)
    taps = _taps("convolve", a, v)
    if mode not in ("full", "same", "valid"):
        raise UnsupportedError(f"np.convolve: mode={mode!r}: expected 'full', 'same' or 'valid'")
    n = a.shape[0]
    if mode != "full":
        a.fusion.require_equal(smax(n, taps), n, f"np.convolve: mode={mode!r}: the signal a (length {n}) must be at "
                                                 f"least as long as the kernel v ({taps} taps)")
    if mode == "valid":
        return _shifted_sum(a, v, taps, n - taps + 1)
    full = _shifted_sum(views.pad(a, [(taps - 1, taps - 1)], 0), v, taps, n + taps - 1)
    return full if mode == "full" else full[(taps - 1) // 2:(taps - 1) // 2 + n]


def _shifted_sum(signal: TensorView, v: TensorView, taps: int, length) -> TensorView:
    """out[i] = sum over k of signal[i + taps - 1 - k] * v[k], in the dtype NumPy's convolve gives."""
    total = None
    for k in range(taps):
        start = taps - 1 - k
        term = _e("mul", signal[start:start + length], v[k])
        total = term if total is None else _e("add", total, term)
    return cast(total, _e("mul", signal, v[0]).dtype)


def _correlate(a, v, mode="valid"):
    """NumPy's: the convolution with the kernel reversed."""
    a, v = _listed("correlate", a), _listed("correlate", v)
    _taps("correlate", a, v)
    return _convolve(a, views.flip(v, 0), mode)


def _unwrap(p, discont=None, axis=-1, *, period=2 * math.pi):
    """NumPy's: each jump larger than max(discont, period / 2) along `axis` is brought back by whole periods."""
    x = p if p.dtype.is_floating else cast(p, dt.float64)
    discont = period / 2 if discont is None else discont
    axis = axis % x.ndim
    if x.visible[axis].is_broadcast:  # one element has no jump; as a slice and a join it would lose its size 1
        return x
    jump = vc.diff(x, 1, axis)
    half = period / 2
    wrapped = _e("sub", _e("remainder", _e("add", jump, half), period), half)
    wrapped = _e("where", _e("logical_and", _e("eq", wrapped, -half), _e("gt", jump, 0)), half, wrapped)
    correction = _e("where", _e("lt", _e("abs", jump), discont), 0.0, _e("sub", wrapped, jump))
    head = x[(slice(None),) * axis + (slice(0, 1),)]
    tail = _e("add", x[(slice(None),) * axis + (slice(1, None),)], scans.cumsum(correction, axis))
    unwrapped = views.cat([cast(head, tail.dtype), tail], axis)
    # The head and tail tile p's axis: say the result has p's extent, not min(n, 1) + (n - min(n, 1)).
    unwrapped.visible[axis].extent = x.shape[axis]
    return unwrapped


def _table(name: str, table: object, what: str) -> TensorView:
    table = _listed(name, table)
    if not isinstance(table, TensorView) or table.ndim != 1:
        raise UnsupportedError(f"np.{name}: {what}: expected a 1-D traced array, got "
                               f"{table.describe() if isinstance(table, TensorView) else type(table).__name__}")
    return table


def _searchsorted(a, v, side="left", sorter=None):
    """How many entries of the sorted `a` lie before each value: below it ('left') or not above it ('right'),
    with NumPy's order, in which NaN is the largest."""
    if sorter is not None:
        raise UnsupportedError("np.searchsorted: sorter=: braze takes `a` sorted")
    if side not in ("left", "right"):
        raise UnsupportedError(f"np.searchsorted: side={side!r}: expected 'left' or 'right'")
    a = _table("searchsorted", a, "a")
    values = v if isinstance(v, TensorView) else creation.full([], v, a.dtype)
    entries = views.reshape(a, [1] * values.ndim + [-1])
    column = views.unsqueeze(values, values.ndim)
    before = _e("lt" if side == "left" else "le", entries, column)
    if entries.dtype.is_floating or column.dtype.is_floating:
        nan_value = _e("isnan", column)
        before = _e("logical_or", before, nan_value if side == "right" else
                    _e("logical_and", nan_value, _e("logical_not", _e("isnan", entries))))
    return red.sum(before, -1, False)


def _interp(x, xp, fp, left=None, right=None, period=None):
    """Linear interpolation in the table (xp, fp): each value against every segment, the one holding it
    chosen by a mask; fp[0] (or `left`) below the table, fp[-1] (or `right`) above, float64 as NumPy's."""
    if period is not None:
        raise UnsupportedError("np.interp: period=: braze interpolates in a table that does not wrap")
    xp, fp = (cast(_table("interp", t, name), dt.float64) for t, name in ((xp, "xp"), (fp, "fp")))
    x = views.unsqueeze(cast(x, dt.float64), x.ndim)
    lo_x, hi_x, lo_f, hi_f = xp[:-1], xp[1:], fp[:-1], fp[1:]
    slope = _e("truediv", _e("sub", hi_f, lo_f), _e("sub", hi_x, lo_x))
    along = _e("where", _e("eq", x, lo_x), lo_f, _e("add", _e("mul", slope, _e("sub", x, lo_x)), lo_f))
    inside = _e("logical_and", _e("le", lo_x, x), _e("lt", x, hi_x))
    value = red.sum(_e("where", inside, along, 0.0), -1, False)
    x = views.squeeze(x, [x.ndim - 1])
    first, last = xp[0], xp[-1]
    above = _e("where", _e("eq", x, last), fp[-1], fp[-1] if right is None else right)
    value = _e("where", _e("ge", x, last), above, value)
    value = _e("where", _e("lt", x, first), fp[0] if left is None else left, value)
    return _e("where", _e("isnan", x), math.nan, value)


def _polyval(p, x):
    """NumPy's: p[0] * x**(n-1) + ... + p[n-1] by Horner's rule, one step a coefficient (a number of the
    trace, as a convolution's taps are), from zeros of x's dtype as NumPy starts."""
    p = _listed("polyval", p)
    if not isinstance(p, TensorView) or p.ndim != 1 or not 1 <= (concrete_value(p.shape[0]) or 0) <= MAX_TAPS:
        got = f"{p.describe()} of shape {tuple(p.shape)}" if isinstance(p, TensorView) else type(p).__name__
        raise UnsupportedError(f"np.polyval: p: expected 1 to {MAX_TAPS} coefficients in a 1-D array whose length "
                               f"is known when tracing, got {got}")
    x = x if isinstance(x, TensorView) else creation.full([], x, p.dtype)
    y = creation.zeros_like(x)
    for k in range(concrete_value(p.shape[0])):
        y = _e("add", _e("mul", y, x), p[k])
    return y


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every pair is close, as a 0-d bool tensor (NumPy's Python bool needs the values: branch on it
    outside the jitted function, or choose with np.where)."""
    return red.all(_isclose(a, b, rtol, atol, equal_nan), None, False)


SIGNAL: dict[Callable, Callable[..., TensorView]] = {
    np.convolve: _convolve, np.correlate: _correlate, np.unwrap: _unwrap, np.searchsorted: _searchsorted,
    np.interp: _interp, np.polyval: _polyval, np.allclose: _allclose,
}
