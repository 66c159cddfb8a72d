"""NumPy functions that are short compositions of braze's ops, with NumPy's argument names, defaults and
NumPy 2's result dtypes: the NaN-ignoring reductions (`np.nanmean`, ...), `np.average`, `np.cov`,
`np.corrcoef`, `np.ptp`, `np.gradient`, `np.trapezoid`, `np.outer`, `np.inner`, `np.isclose`,
`np.count_nonzero`, `np.cross`, the choices `np.select`, `np.piecewise` and `np.isin`, and the ufuncs
`np.fmax`, `np.fmin`, `np.heaviside`, `np.logaddexp2`, `np.signbit` with the function `np.sinc`.
braze/ops/numpy_api.py dispatches NumPy's calls to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.errors import UnsupportedError
from braze.ir.scalar import concrete_value
from braze.ir.tensor import TensorView
from braze.ops import activations, creation, views
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.elementwise import cast, elementwise, numpy_arrays_of_numbers


def _e(op: str, *operands: object) -> TensorView:
    return elementwise(op, *operands)


def _floating(x: TensorView) -> TensorView:
    """x in a floating dtype as NumPy computes a mean: integers and bools in float64."""
    return x if x.dtype.is_floating else cast(x, dt.float64)


def _along(x: TensorView, axis: int, start: int | None, stop: int | None) -> TensorView:
    return x[(slice(None),) * (axis % x.ndim) + (slice(start, stop),)]


# --- ufuncs -------------------------------------------------------------------------------------------
def _nan_at(x: object) -> object:
    """Where x is NaN: a tensor of it, or one bool for a number."""
    return _e("isnan", x) if isinstance(x, TensorView) else bool(np.isnan(x))


def _fmax_or_fmin(extreme: str) -> Callable[[object, object], TensorView]:
    def numpy_ufunc(x1, x2):
        """The extreme of the two, where a NaN gives the other operand (NaN only where both are)."""
        chosen = _e(extreme, x1, x2)
        if not isinstance(chosen, TensorView) or not chosen.dtype.is_floating:
            return chosen
        return _e("where", _nan_at(x2), x1, _e("where", _nan_at(x1), x2, chosen))

    return numpy_ufunc


def _heaviside(x1, x2):
    """0 below zero, 1 above, x2 at zero; NaN gives NaN; in the float NumPy's ufunc gives (float16 stays
    float16, integers become floats)."""
    (x1, x2), result = activations.operands_in_compute_type("np.heaviside", (x1, x2), floating=True)
    above = _e("where", _e("gt", x1, 0), 1, _e("where", _e("lt", x1, 0), 0, x2))
    return cast(_e("where", _e("isnan", x1), x1, above), result)


def _logaddexp2(x1, x2):
    """log2(2**x1 + 2**x2), from the larger as np.logaddexp, so that it cannot overflow."""
    (a, b), result = activations.operands_in_compute_type("logaddexp2", (x1, x2), floating=True)
    larger = _e("maximum", a, b)
    gap = _e("neg", _e("abs", _e("sub", a, b)))
    general = _e("add", larger, _e("mul", _e("log1p", _e("exp2", gap)), 1 / math.log(2.0)))
    return cast(_e("where", _e("eq", a, b), _e("add", larger, 1.0), general), result)


def _signbit(x):
    """Whether the sign bit is set: -0.0 and -NaN too, as copysign reads it."""
    if not x.dtype.is_floating:
        return _e("lt", x, 0)
    return _e("lt", _e("copysign", 1.0, x), 0)


UFUNCS: dict[str, Callable[..., TensorView]] = {
    "fmax": _fmax_or_fmin("maximum"), "fmin": _fmax_or_fmin("minimum"), "heaviside": _heaviside,
    "logaddexp2": _logaddexp2, "signbit": _signbit,
}


# --- NaN-ignoring reductions --------------------------------------------------------------------------
def _no_out(name: str, out: object, where: object = True) -> None:
    if out is not None:
        raise UnsupportedError(f"np.{name}: out=: a fusion's values are not buffers; use the result")
    if where is not True:
        raise UnsupportedError(f"np.{name}: where=: braze reduces every element; mask them first with np.where")


def _nan_reduction(name: str, reduce: Callable[..., TensorView], identity: float,
                   all_nan_is_nan: bool) -> Callable[..., TensorView]:
    def numpy_nan_reduction(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        _no_out(name, out)
        if initial is not None or where is not True:
            raise UnsupportedError(f"np.{name}: initial= and where=: braze reduces every element; choose them "
                                   "first with np.where(mask, x, identity)")
        x = a if dtype is None else cast(a, dtype)
        if not x.dtype.is_floating:  # no NaNs to skip
            return reduce(x, axis, bool(keepdims))
        nan = _e("isnan", x)
        result = reduce(_e("where", nan, identity, x), axis, bool(keepdims))
        if all_nan_is_nan:  # NumPy's max of nothing but NaNs is NaN (with a warning)
            result = _e("where", red.all(nan, axis, bool(keepdims)), math.nan, result)
        return cast(result, x.dtype)

    return numpy_nan_reduction


def _count_and_sum(x: TensorView, axis, keepdims: bool) -> tuple[TensorView, TensorView, TensorView]:
    """The values with NaNs zeroed, how many are not NaN and their sum, each over `axis`."""
    present = _e("logical_not", _e("isnan", x))
    zeroed = _e("where", present, x, 0.0)
    count = cast(red.sum(present, axis, keepdims), x.dtype)
    return zeroed, count, red.sum(zeroed, axis, keepdims)


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    _no_out("nanmean", out, where)
    x = _floating(a if dtype is None else cast(a, dtype))
    _, count, total = _count_and_sum(x, axis, bool(keepdims))
    return _e("truediv", total, count)


def _nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
            correction=None):
    _no_out("nanvar", out, where)
    if mean is not None:
        raise UnsupportedError("np.nanvar: mean=: braze computes the mean itself")
    ddof = ddof if correction is None else correction
    x = _floating(a if dtype is None else cast(a, dtype))
    zeroed, count, total = _count_and_sum(x, axis, True)
    present = _e("logical_not", _e("isnan", x))
    deviation = _e("where", present, _e("sub", zeroed, _e("truediv", total, count)), 0.0)
    squares = red.sum(_e("mul", deviation, deviation), axis, True)
    freedom = _e("sub", count, ddof)  # NumPy's variance with no degrees of freedom left is NaN
    variance = _e("where", _e("le", freedom, 0), math.nan, _e("truediv", squares, freedom))
    return variance if keepdims else views.squeeze(variance, _axes(axis, x.ndim))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))


def _nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **k):
    return _e("sqrt", _nanvar(a, axis, dtype, out, ddof, keepdims, **k))


NAN_REDUCTIONS: dict[Callable, Callable[..., TensorView]] = {
    np.nansum: _nan_reduction("nansum", red.sum, 0.0, False),
    np.nanprod: _nan_reduction("nanprod", red.prod, 1.0, False),
    np.nanmax: _nan_reduction("nanmax", red.max, -math.inf, True),
    np.nanmin: _nan_reduction("nanmin", red.min, math.inf, True),
    np.nanmean: _nanmean, np.nanvar: _nanvar, np.nanstd: _nanstd,
}


# --- statistics ---------------------------------------------------------------------------------------
def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """The weighted mean; 1-D weights lie along `axis`, as NumPy's."""
    if weights is None:
        average, total = red.mean(_floating(a), axis, bool(keepdims)), None
    else:
        if weights.ndim != a.ndim:
            if weights.ndim != 1 or not isinstance(axis, int):
                raise UnsupportedError(f"np.average: weights of rank {weights.ndim} for a of rank {a.ndim}: "
                                       "expected a's shape, or a 1-D weights with an int axis")
            weights = views.reshape(weights, [-1 if i == axis % a.ndim else 1 for i in range(a.ndim)])
        total = red.sum(weights, axis, bool(keepdims))  # broadcasts against the weighted sum
        average = _e("truediv", red.sum(_e("mul", _floating(a), weights), axis, bool(keepdims)), total)
    if not returned:
        return average
    total = red.sum(creation.ones_like(a, average.dtype), axis, bool(keepdims)) if total is None else total
    return average, _e("add", creation.zeros_like(average), total)  # the weights' sum in the average's shape


def _centred_rows(name: str, m, y, rowvar: bool, dtype) -> tuple[TensorView, bool]:
    """The variables as rows, less their means (NumPy's float64 unless `dtype`), and whether m was a
    single 1-D variable (whose covariance NumPy gives as a 0-d array)."""
    single = m.ndim == 1 and y is None
    rows = []
    for v in (m, y):
        if v is None:
            continue
        if v.ndim > 2:
            raise UnsupportedError(f"np.{name}: an array of rank {v.ndim}: expected rank 1 or 2")
        v = views.reshape(v, [1, -1]) if v.ndim == 1 else (v if rowvar else views.permute(v, (1, 0)))
        rows.append(cast(v, dt.float64 if dtype is None else dtype))  # NumPy: result_type(m, float64)
    x = views.cat(rows, 0) if len(rows) > 1 else rows[0]
    return _e("sub", x, red.mean(x, 1, True)), single


def _products(centred: TensorView) -> TensorView:
    """Every pair of rows' sum of products, by broadcasting (rows, 1, n) against (1, rows, n)."""
    return red.sum(_e("mul", views.unsqueeze(centred, 1), views.unsqueeze(centred, 0)), 2, False)


def _cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    if fweights is not None or aweights is not None:
        raise UnsupportedError("np.cov: fweights= and aweights=: braze's np.cov weighs observations equally")
    centred, single = _centred_rows("cov", m, y, rowvar, dtype)
    ddof = (0 if bias else 1) if ddof is None else ddof
    covariance = _e("truediv", _products(centred), _e("sub", centred.shape[1], ddof))
    return views.reshape(covariance, []) if single else views.squeeze(covariance)


def _corrcoef(x, y=None, rowvar=True, *, dtype=None, **ignored):
    centred, single = _centred_rows("corrcoef", x, y, rowvar, dtype)
    products = _products(centred)
    spread = _e("sqrt", red.sum(_e("mul", centred, centred), 1, False))
    correlation = _e("truediv", products, _e("mul", views.unsqueeze(spread, 1), views.unsqueeze(spread, 0)))
    correlation = _e("maximum", _e("minimum", correlation, 1.0), -1.0)  # as NumPy clips rounding's excess
    return views.reshape(correlation, []) if single else views.squeeze(correlation)


def _ptp(a, axis=None, out=None, keepdims=False):
    _no_out("ptp", out)
    return _e("sub", red.max(a, axis, bool(keepdims)), red.min(a, axis, bool(keepdims)))


def _count_nonzero(a, axis=None, *, keepdims=False):
    return red.sum(_e("ne", a, 0), axis, bool(keepdims))


def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """NumPy's: |a - b| <= atol + rtol * |b| where b is finite, or a == b (equal infinities); either may be a
    number (np.isclose(x, 0) took abs of the number as an op, and failed)."""
    a, b = (v if isinstance(v, TensorView) else creation.full([], v, _number_dtype(other))
            for v, other in ((a, b), (b, a)))
    near = _e("logical_and", _e("le", _e("abs", _e("sub", a, b)), _e("add", atol, _e("mul", rtol, _e("abs", b)))),
              _e("isfinite", b))
    close = _e("logical_or", near, _e("eq", a, b))
    return _e("logical_or", close, _e("logical_and", _e("isnan", a), _e("isnan", b))) if equal_nan else close


def _number_dtype(other: object) -> dt.DType:
    """The dtype a number compared with `other` takes: other's, where floating; else float64."""
    return other.dtype if isinstance(other, TensorView) and other.dtype.is_floating else dt.float64


STATISTICS: dict[Callable, Callable[..., TensorView]] = {
    np.average: _average, np.cov: _cov, np.corrcoef: _corrcoef, np.ptp: _ptp, np.count_nonzero: _count_nonzero,
    np.isclose: _isclose,
}


# --- choices ----------------------------------------------------------------------------------------
def _select(condlist, choicelist, default=0):
    """np.select: the choice of the first condition that holds, else `default` (a chain of wheres)."""
    if len(condlist) != len(choicelist):
        raise UnsupportedError(f"np.select: expected as many conditions as choices, got {len(condlist)} and "
                               f"{len(choicelist)}")
    if condlist and isinstance(condlist[0], TensorView):  # numbers alone: NumPy's arrays of them (float64)
        *choicelist, default = numpy_arrays_of_numbers(condlist[0].fusion, (*choicelist, default))
    out = default
    for condition, choice in reversed(list(zip(condlist, choicelist))):
        out = _e("where", condition, choice, out)
    return out if isinstance(out, TensorView) else creation.full_like(condlist[0], out)


def _piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise: each function (or value) where its condition holds, a later condition over an
    earlier one, one more function where none does, 0 elsewhere; in x's dtype."""
    conditions = list(condlist) if not isinstance(condlist, TensorView) else \
        list(vc.unbind(condlist, 0)) if condlist.ndim > 1 else [condlist]  # NumPy reads rows as conditions
    if len(funclist) not in (len(conditions), len(conditions) + 1):
        raise UnsupportedError(f"np.piecewise: expected {len(conditions)} or {len(conditions) + 1} functions for "
                               f"{len(conditions)} conditions, got {len(funclist)}")
    value = lambda f: cast(f(x, *args, **kw), x.dtype) if callable(f) else f  # noqa: E731
    out = creation.zeros_like(x)
    if len(funclist) > len(conditions):
        none_holds = _e("logical_not", _any_of(conditions))
        out = _e("where", none_holds, value(funclist[-1]), out)
    for condition, f in zip(conditions, funclist):
        out = _e("where", condition, value(f), out)
    return cast(out, x.dtype)


def _any_of(conditions: list) -> TensorView:
    held = conditions[0]
    for condition in conditions[1:]:
        held = _e("logical_or", held, condition)
    return held


def _isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    """np.isin: whether each element equals one of `test_elements` (numbers known when traced, one
    comparison each; or an array, compared with every element of it)."""
    if isinstance(test_elements, TensorView):
        flat = views.reshape(test_elements, [-1])
        found = red.any(_e("eq", views.unsqueeze(element, -1), flat), -1)
    else:
        values = list(dict.fromkeys(np.ravel(test_elements).tolist()))
        found = _any_of([_e("eq", element, v) for v in values]) if values else \
            creation.full_like(element, False, dt.bool_)
    return _e("logical_not", found) if invert else found


CHOICES: dict[Callable, Callable[..., TensorView]] = {
    np.select: _select, np.piecewise: _piecewise, np.isin: _isin, np.copy: lambda a, order="K", subok=False: a,
}


# --- calculus and products ----------------------------------------------------------------------------
def _gradient(f, *varargs, axis=None, edge_order=1):
    """Central differences inside, one-sided ones at the two ends, with a uniform spacing per axis (one
    number, or one per axis); one array for one axis, a tuple for several, as NumPy's."""
    axes = _axes(axis, f.ndim)
    spacings = varargs if len(varargs) > 1 else varargs * len(axes) if varargs else (1.0,) * len(axes)
    if len(spacings) != len(axes) or any(isinstance(h, TensorView) or np.ndim(h) for h in spacings):
        raise UnsupportedError("np.gradient: braze takes a uniform spacing, one number or one per axis "
                               "(coordinate arrays it does not)")
    if edge_order not in (1, 2):
        raise UnsupportedError(f"np.gradient: edge_order={edge_order!r}: expected 1 or 2")
    x = _floating(f)
    slopes = tuple(_slope(x, a, float(h), edge_order) for a, h in zip(axes, spacings, strict=True))
    return slopes[0] if len(slopes) == 1 and (axis is not None or f.ndim == 1) else slopes


def _slope(x: TensorView, axis: int, h: float, edge_order: int) -> TensorView:
    def at(index):  # one slice along axis, kept as an axis of extent 1
        return _along(x, axis, index, index + 1 or None)

    inside = _e("truediv", _e("sub", _along(x, axis, 2, None), _along(x, axis, 0, -2)), 2 * h)
    if edge_order == 1:
        first = _e("truediv", _e("sub", at(1), at(0)), h)
        last = _e("truediv", _e("sub", at(-1), at(-2)), h)
    else:  # second-order one-sided differences
        first = _e("truediv", _e("add", _e("mul", at(0), -1.5), _e("sub", _e("mul", at(1), 2.0),
                                                                          _e("mul", at(2), 0.5))), h)
        last = _e("truediv", _e("add", _e("mul", at(-1), 1.5), _e("sub", _e("mul", at(-3), 0.5),
                                                                         _e("mul", at(-2), 2.0))), h)
    return views.cat([first, inside, last], axis)


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    """The trapezoidal rule along `axis`, over a uniform spacing `dx` or the sample points `x`."""
    axis = axis % y.ndim
    if x is None:
        spacing = dx
    else:
        spacing = vc.diff(x, 1, -1 if x.ndim == 1 else axis)
        if x.ndim == 1 and y.ndim > 1:
            spacing = views.reshape(spacing, [-1 if i == axis else 1 for i in range(y.ndim)])
    heights = _e("add", _along(y, axis, 1, None), _along(y, axis, None, -1))
    return red.sum(_e("truediv", _e("mul", spacing, heights), 2.0), axis, False)


def _outer(a, b, out=None):
    _no_out("outer", out)
    return _e("mul", views.reshape(a, [-1, 1]), views.reshape(b, [1, -1]))


def _inner(a, b):
    """The sum of products over the last axes: shape a.shape[:-1] + b.shape[:-1]."""
    if not isinstance(a, TensorView) or not isinstance(b, TensorView) or a.ndim == 0 or b.ndim == 0:
        return _e("mul", a, b)
    a = views.reshape(a, list(a.shape[:-1]) + [1] * (b.ndim - 1) + [a.shape[-1]])
    return red.sum(_e("mul", a, b), -1, False)


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """3-vectors (or 2-vectors, whose cross product is a number) along the last axis; the vectors'
    length decides the result's shape, so it must be a static extent, or one a @bz.jit trace specializes
    on."""
    if axis is not None or (axisa, axisb, axisc) != (-1, -1, -1):
        raise UnsupportedError("np.cross: axisa=, axisb=, axisc= and axis=: braze takes vectors along the last axis")
    lengths = [concrete_value(v.shape[-1]) for v in (a, b)]  # under @bz.jit the trace specializes on them
    for v, length in zip((a, b), lengths):
        if length is None:
            raise UnsupportedError(
                f"np.cross: the last dimension of {v.describe()} is the symbolic extent {v.shape[-1]}: the vectors' "
                "length (2 or 3) decides the result's shape, so it must be a static extent (a Fusion's "
                "define_tensor((-1, 3)))")
    size = max(lengths)
    if size not in (2, 3):
        raise UnsupportedError(f"np.cross: vectors of length {size}: expected 2 or 3")

    def component(v, length, i):
        return v[..., i] if length == size else v[..., 0]  # a length-1 axis broadcasts

    def twist(i, j):
        (a_i, a_j), (b_i, b_j) = ([component(v, n, i), component(v, n, j)] for v, n in zip((a, b), lengths))
        return _e("sub", _e("mul", a_i, b_j), _e("mul", a_j, b_i))

    if size == 2:
        return twist(0, 1)
    return vc.stack([twist(1, 2), twist(2, 0), twist(0, 1)], -1)


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    y = _e("mul", _floating(x), math.pi)
    return _e("where", _e("eq", y, 0), 1.0, _e("truediv", _e("sin", y), _e("where", _e("eq", y, 0), 1.0, y)))


CALCULUS: dict[Callable, Callable[..., TensorView]] = {
    np.gradient: _gradient, np.trapezoid: _trapezoid, np.outer: _outer, np.inner: _inner, np.cross: _cross,
    np.sinc: _sinc, **({np.trapz: _trapezoid} if hasattr(np, "trapz") else {}),
}
