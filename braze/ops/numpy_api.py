"""NumPy's ufuncs and functions on the tensors of a fusion being defined: `np.sqrt(x)`,
`np.where(x > 0, x, 0.0)`, `np.sum(x, axis=0)`, `np.maximum.reduce(x, axis=1)`, so NumPy-style code
traces under `@bz.jit` as it is written. TensorView takes NumPy's two protocols for array-like types
(`__array_ufunc__` and `__array_function__`), installed by `braze/ops/methods.py`; each ufunc and
function maps onto an op of braze.ops. What has no braze op (np.dot, np.sort, an `out=` argument, an
ndarray operand, which a fusion cannot capture) raises UnsupportedError naming it and, where there is
one, what to write instead (`_REFUSED`), never NumPy's fallback to an object array.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.fusion import active_fusion, defining_any
from braze.ir.scalar import Scalar, concrete_value
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import activations, creation, scans, views
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.broadcast import broadcast_domains, broadcast_one_element_slices, expand
from braze.ops.elementwise import BINARY, UNARY, cast, elementwise, float_of_integers, numpy_arrays_of_numbers
from braze.ops.math_compositions import NUMPY_NAMES
from braze.ops.math_functions import FUNCTIONS
from braze.ops.numpy_compositions import CALCULUS, CHOICES, NAN_REDUCTIONS, STATISTICS, UFUNCS
from braze.ops.numpy_einsum import einsum, matrix_product_error
from braze.ops.numpy_matrices import MATRICES
from braze.ops.numpy_signal import SIGNAL

# --- ufuncs -------------------------------------------------------------------------------------------
_RENAMED = {  # NumPy's ufunc name -> braze's elementwise op, where they differ
    "absolute": "abs", "fabs": "abs", "negative": "neg", "subtract": "sub", "multiply": "mul",
    "divide": "truediv", "true_divide": "truediv", "floor_divide": "floordiv", "mod": "remainder",
    "power": "pow", "arctan2": "atan2", "equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge", "invert": "bitwise_not", "bitwise_invert": "bitwise_not",
"bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
}
_COMPOSED: dict[str, Callable[..., TensorView]] = {
    "positive": lambda x: x,
    "square": lambda x: elementwise("mul", x, x),
    "fmod": activations.fmod,
    "logaddexp": activations.logaddexp,
    "rint": lambda x: elementwise("round", x if _dtype(x).is_floating else  # a float ufunc: floats of integers
                                  cast(x, float_of_integers(x.fusion, x.dtype))),
    **FUNCTIONS,  # asin, sinh, log10, hypot, ...: braze/ops/math_functions.py
    **{numpy: FUNCTIONS[name] for numpy, name in NUMPY_NAMES.items()},
    **UFUNCS,  # fmax, heaviside, logaddexp2, ...: braze/ops/numpy_compositions.py
}
_REDUCE = {"add": red.sum, "multiply": red.prod, "maximum": red.max, "minimum": red.min,
           "logical_and": red.all, "logical_or": red.any, "logaddexp": activations.logsumexp}
_ACCUMULATE = {"add": scans.cumsum, "multiply": scans.cumprod, "maximum": scans.cummax, "minimum": scans.cummin}


def _dtype(x: object) -> dt.DType:
    return x.dtype if isinstance(x, TensorView) else dt.float64


def _ufunc_op(name: str) -> Callable[..., TensorView] | None:
    if name in _COMPOSED:
        return _COMPOSED[name]
    op = _RENAMED.get(name, name)
    if op in UNARY or op in BINARY:
        return lambda *operands: elementwise(op, *operands)
    return None


def _outer_operands(a: object, b: object) -> tuple[object, object]:
    """`np.subtract.outer(a, b)`: `a` with one new axis of 1 for each of b's, so op(a, b) broadcasts to
    a.shape + b.shape."""
    if isinstance(a, TensorView) and isinstance(b, TensorView):
        a = views.reshape(a, [*a.shape, *[1] * b.ndim])
    return a, b


def array_ufunc(self: TensorView, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: object) -> TensorView:
    """NEP 13: `np.exp(x)`, `np.add(x, 1)`, `np.add.reduce(x, axis=0)`, `np.multiply.accumulate(x)`."""
    what = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    operands = [trace_operand(what, v) for v in inputs]
    if kwargs.get("out") is not None or kwargs.get("where", True) is not True:
        raise UnsupportedError(f"{what}: out= and where= arguments: a fusion's values are not buffers; "
                               "use the result (and bz.ops.where to choose per element)")
    dtype = kwargs.pop("dtype", None)
    if dtype is not None:
        operands = [cast(v, dtype) if isinstance(v, TensorView) else v for v in operands]
    if method == "__call__" and (op := _ufunc_op(ufunc.__name__)) is not None:
        return op(*operands)
    if method == "reduce" and ufunc.__name__ in _REDUCE:
        return _REDUCE[ufunc.__name__](operands[0], kwargs.get("axis", 0), bool(kwargs.get("keepdims", False)))
    if method == "outer" and (op := _ufunc_op(ufunc.__name__)) is not None and len(operands) == 2:
        return op(*_outer_operands(*operands))
    if method == "accumulate" and ufunc.__name__ in _ACCUMULATE:
        return _ACCUMULATE[ufunc.__name__](operands[0], kwargs.get("axis", 0))
    if ufunc.__name__ in _MATRIX_PRODUCTS:
        raise matrix_product_error(what, *operands[:2])
    if method == "at":
        raise UnsupportedError(f"{what}: a write at indices given by data (a scatter) has no braze op in a fusion: "
                               "write the loop as a @bz.kernel with bz.atomic_add(array, index, value), or, "
                               "with k bins, count by comparison: (np.arange(k) == idx[:, None]).sum(0)")
    raise UnsupportedError(f"{what}: braze has no op for it in a fusion")


def trace_operand(what: str, value: object) -> object:
    """A tensor or a number. A @bz.jit trace takes an array in as an input, a 0-d one too (held as any array
    is, so writes into it show in later calls); elsewhere a 0-d array becomes its NumPy scalar, which braze
    takes as it takes one written beside a tensor."""
    if isinstance(value, TensorView):
        return value
    capture = getattr(active_fusion(what), "capture_array", None) if defining_any() else None
    if isinstance(value, np.ndarray) and capture is not None:
        return capture(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    if isinstance(value, np.ndarray):
        raise UnsupportedError(
            f"{what}: an ndarray operand of shape {value.shape} inside a traced function: a fusion does not "
            "capture arrays as constants; pass it as an argument")
    return value


# --- functions ----------------------------------------------------------------------------------------
# A reduction's identity, which a `where=` mask puts where it is False, and how `initial=` joins the result.
_IDENTITY = {"sum": 0, "prod": 1, "any": False, "all": True, "mean": 0}
_WITH_INITIAL = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}


def _reduction(reduce: Callable[..., TensorView]) -> Callable[..., TensorView]:
    name = reduce.__name__

    def numpy_reduction(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        _no_out(name, out)
        x = _in_dtype(a, dtype)
        if where is not True:
            x = _masked(name, x, where, initial)
        if name == "mean" and where is not True:  # the masked sum over the count of True
            counted = elementwise("where", where, creation.ones_like(x), 0)
            result = elementwise("truediv", red.sum(x, axis, bool(keepdims)), red.sum(counted, axis, bool(keepdims)))
        elif name in ("max", "min") and initial is not None and _may_be_empty(x, axis):
            return _in_dtype(reduce(_with_initial(x, axis, initial), axis, bool(keepdims)), dtype)
        else:
            result = reduce(x, axis, bool(keepdims))
        if initial is not None:
            if name not in _WITH_INITIAL:
                raise UnsupportedError(f"np.{name}: initial= is for sum, prod, max and min")
            result = elementwise(_WITH_INITIAL[name], result, initial)
        return _in_dtype(result, dtype)

    return numpy_reduction


def _reduced_axes(x: TensorView, axis) -> set[int]:
    axes = range(x.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    return {normalize_axis(a, x.ndim, "axis") for a in axes}


def _may_be_empty(x: TensorView, axis) -> bool:
    """Whether a reduction of `x` over `axis` may reduce nothing: some reduced extent is not a known non-zero."""
    return not all(x.shape[a].is_const and x.shape[a].value > 0 for a in _reduced_axes(x, axis))


def _with_initial(x: TensorView, axis, initial: object) -> TensorView:
    """`x` with one more element, `initial`, at the end of each reduced axis: a max or min over it is
    NumPy's with `initial=`, also over an empty axis (`np.max(speeds, initial=0.0)` of no particles),
    where a max of nothing would have no value."""
    reduced = _reduced_axes(x, axis)
    return views.pad(x, [(0, 1) if a in reduced else (0, 0) for a in range(x.ndim)], initial)


def reduction(name: str) -> Callable[..., TensorView]:
    """NumPy's reduction of that name (`np.sum`'s keywords: axis, dtype, out, keepdims, initial, where)."""
    return _reduction(getattr(red, name))


def _masked(name: str, x: TensorView, where: object, initial: object) -> TensorView:
    """x with the reduction's identity (max and min: `initial`) where `where` is False, as NumPy's `where=`
    leaves those elements out."""
    fill = _IDENTITY.get(name, initial)
    if fill is None:
        raise FusionDefinitionError(f"np.{name}: where= needs initial= (a {name} of no elements has no value), "
                                    "as NumPy's")
    if name not in _IDENTITY and name not in _WITH_INITIAL:
        raise UnsupportedError(f"np.{name}: where= is for sum, prod, mean, max, min, any and all")
    return elementwise("where", where, x, fill)


def _moments(reduce: Callable[..., TensorView]) -> Callable[..., TensorView]:
    def numpy_moment(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **ignored):
        _no_out(reduce.__name__, out)
        x = a if dtype is None else cast(a, dtype)
        return reduce(x, axis, bool(keepdims), correction=ddof)

    return numpy_moment


def _scan(scan: Callable[..., TensorView]) -> Callable[..., TensorView]:
    def numpy_scan(a, axis=None, dtype=None, out=None):
        _no_out(scan.__name__, out)
        x = _in_dtype(a, dtype)
        result = scan(views.reshape(x, [-1]), 0) if axis is None else scan(x, axis)  # None: flattened, as NumPy
        return _in_dtype(result, dtype)

    return numpy_scan


def _in_dtype(x: TensorView, dtype: object) -> TensorView:
    """x in the `dtype=` a NumPy reduction or scan was given, which is its accumulator and its result's
    dtype: np.sum(x, dtype=np.int32) is int32, though braze sums integers in int64 (the same sum, wrapped
    as NumPy's)."""
    return x if dtype is None else cast(x, dtype)


def _no_out(name: str, out: object) -> None:
    if out is not None:
        raise UnsupportedError(f"np.{name}: out=: a fusion's values are not buffers; use the result")


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise UnsupportedError("np.where(condition) alone gives indices of data-dependent count: braze has no op "
                               "for it in a fusion; np.where(condition, x, y) chooses per element")
    if isinstance(condition, TensorView):
        x, y = numpy_arrays_of_numbers(condition.fusion, (x, y))  # np.where(c, 0.1, 0.3) is float64
    return elementwise("where", condition, x, y)


def round_decimals(a, decimals=0, out=None):
    """NumPy's np.round(a, decimals): half to even, at `decimals` digits after the point (before it where
    negative)."""
    _no_out("round", out)
    if not a.dtype.is_floating:  # integers keep their dtype: unchanged, or rounded to tens, hundreds, ...
        return a if decimals >= 0 else cast(round_decimals(cast(a, dt.float64), decimals), a.dtype)
    if decimals == 0:
        return elementwise("round", a)
    if decimals < 0:  # as NumPy: divides by 10**-decimals, which is exact, where 10.0**decimals is not
        scale = 10.0 ** -decimals
        return elementwise("mul", elementwise("round", elementwise("truediv", a, scale)), scale)
    scale = 10.0 ** decimals  # as NumPy rounds: scale, round half to even, scale back
    return elementwise("truediv", elementwise("round", elementwise("mul", a, scale)), scale)


def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):  # noqa: A002  (NumPy's names)
    """NumPy 2's clip: the bounds by position or as `min=`/`max=`, either left out (both: a itself)."""
    _no_out("clip", out)
    lower, upper = (a_min if min is None else min), (a_max if max is None else max)
    return a if lower is None and upper is None else a.clip(lower, upper)


def _diff(a, n=1, axis=-1, prepend=None, append=None):
    """NumPy's diff; a number to prepend or append is one slice of it along `axis`, joined as NumPy joins
    it: an array of the number (a Python float is float64), so float32 `a` with `prepend=0.5` is float64."""
    numbers = [v for v in (prepend, append) if v is not None and not isinstance(v, TensorView)]
    if numbers and isinstance(a, TensorView):
        a = cast(a, dt.as_dtype(np.result_type(a.dtype.numpy, *(np.asarray(v).dtype for v in numbers))))

    def joined(value):
        if value is None or isinstance(value, TensorView):
            return value
        shape = list(a.shape)
        shape[axis] = 1  # a slice of a's shape: made, not cut from a, which may have none along axis
        return creation.full(shape, value, a.dtype)

    return vc.diff(a, n, axis, joined(prepend), joined(append))


def _transpose(a, axes=None):
    return views.permute(a, tuple(reversed(range(a.ndim))) if axes is None else tuple(axes))


def _expand_dims(a, axis):
    """NumPy's: each of `axis` is a position in the result, which has a dimension more per axis."""
    positions = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    rank = a.ndim + len(positions)
    for position in sorted(p % rank for p in positions):
        a = views.unsqueeze(a, position)
    return a


def _norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002  (NumPy's name)
    """Vector norms over one axis (or of a vector), and the Frobenius norm; NumPy's matrix norms (an
    `ord` over two axes) have no braze op."""
    matrix = (axis is None and x.ndim >= 2) or (isinstance(axis, (tuple, list)) and len(axis) == 2)
    if matrix and ord not in (None, "fro"):
        raise UnsupportedError(f"np.linalg.norm: ord={ord!r} over two axes is a matrix norm: braze has none "
                               "(vector norms over one axis, and the Frobenius norm, it has)")
    return x.norm(2 if ord is None else ord, axis, keepdims)  # braze/ops/torch_methods.py


def _pad(array, pad_width, mode="constant", constant_values=0):
    if mode != "constant" and mode not in vc.PAD_MODES:
        raise UnsupportedError(f"np.pad: mode={mode!r}: braze pads with a constant or by mode "
                               f"{', '.join(map(repr, vc.PAD_MODES))}")
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (array.ndim, 2))
    widths = [tuple(int(w) for w in pair) for pair in widths]
    if mode != "constant":
        return vc.pad_from_slices(array, widths, mode)
    return views.pad(array, widths, constant_values)


def _broadcast_to(array, shape):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return array.expand(*shape)


def _dot(a, b, out=None):
    """np.dot of a number is a product; of arrays, a matrix product, which braze has no op for."""
    _no_out("dot", out)
    if not isinstance(a, TensorView) or not isinstance(b, TensorView) or a.ndim == 0 or b.ndim == 0:
        return elementwise("mul", a, b)
    raise matrix_product_error("np.dot", a, b)


# NumPy functions braze has no op for, and what to write instead.
_MATRIX_PRODUCTS = ("matmul", "vdot", "tensordot", "multi_dot", "kron", "matvec", "vecmat")
_SORTING = ("sorting and selection have no braze op: call it outside the jitted function, on the arrays it "
            "takes or on its result (np.median(f(x), axis=0))")
_DATA_SIZED = ("its result's length depends on the values, which a fusion's extents cannot: compute it outside "
               "the jitted function")
_REFUSED: dict[str, str] = {
    **dict.fromkeys(("sort", "argsort", "partition", "argpartition", "lexsort", "msort", "sort_complex", "median",
                     "percentile", "quantile", "nanmedian", "nanpercentile", "nanquantile"), _SORTING),
    **dict.fromkeys(("unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "nonzero",
                     "argwhere", "flatnonzero", "extract", "compress", "trim_zeros"), _DATA_SIZED),
    "bincount": ("its length depends on the largest value: with k bins known, count by comparison, "
                 "(labels[:, None] == np.arange(k)).sum(0), which braze fuses"),
    **dict.fromkeys(("histogram", "histogram2d", "histogramdd", "histogram_bin_edges", "digitize"),
                    "binning has no braze op: with the edges known, find each value's bin with "
                    "np.searchsorted(edges, x, side='right') - 1 and count by comparison with np.arange(bins), "
                    "which braze fuses"),
    **dict.fromkeys(("put", "put_along_axis", "choose"),
                    "indexing by an array (a gather or scatter) has no braze op: do it outside the jitted function "
                    "(np.where chooses between two values per element)"),
}


def _refused(name: str, func: Callable) -> UnsupportedError:
    module = getattr(func, "__module__", "") or ""
    qualified = "np.linalg." + name if module.endswith("linalg") else f"np.{name}"
    if name in _MATRIX_PRODUCTS:
        return UnsupportedError(f"{qualified} on a traced tensor: braze has no matrix-product op (it fuses the "
                                "elementwise work around one): compute it outside the jitted function and pass it "
                                "in, or write it as a broadcast and a sum with np.einsum")
    if name in _REFUSED:
        return UnsupportedError(f"{qualified} on a traced tensor: {_REFUSED[name]}")
    return UnsupportedError(f"{qualified} on a traced tensor: braze has no op for it in a fusion "
                            "(the ops braze has: braze.ops)")


def _size(a, axis=None):
    """NumPy's np.size: the element count, or one extent; a Python int where static, else symbolic."""
    return a.numel() if axis is None else a.shape[axis]


def _split(ary, indices_or_sections, axis=0) -> list[TensorView]:
    """NumPy's np.split: an int is that many equal pieces (an extent they do not divide is an error, at
    run time where it is symbolic), a list the indices where the pieces after the first start."""
    x = vc.tensor_arg("np.split", ary)
    axis = vc._axis("np.split", x, axis)
    if isinstance(indices_or_sections, (list, tuple)):
        bounds = [0, *(operator.index(i) for i in indices_or_sections), None]
        return [vc._along(x, axis, start, stop) for start, stop in zip(bounds, bounds[1:])]
    sections = operator.index(indices_or_sections)
    n = x.shape[axis]
    why = (f"np.split: dimension {axis} of {x.describe()} into {sections} equal pieces: the extent must be a "
           f"multiple of {sections}")
    if sections < 1 or (n.is_const and n.value % sections):
        raise FusionDefinitionError(f"{why}, got {n.value if n.is_const else n} ({sections} sections)")
    size = n.value // sections if n.is_const else n // sections
    if not n.is_const:
        x.fusion.require_equal(size * sections, n, why)
    return [vc._along(x, axis, size * i, size * (i + 1)) for i in range(sections)]


def _array_split(ary, indices_or_sections, axis=0) -> list[TensorView]:
    """NumPy's np.array_split: as np.split, but n pieces of an extent n does not divide are allowed (the
    first ones one longer); it needs the extent known when the function is traced."""
    x = vc.tensor_arg("np.array_split", ary)
    axis = vc._axis("np.array_split", x, axis)
    if isinstance(indices_or_sections, (list, tuple)):
        return _split(x, indices_or_sections, axis)
    sections, n = operator.index(indices_or_sections), x.shape[axis]
    if sections < 1:
        raise FusionDefinitionError(f"np.array_split: expected a positive number of sections, got {sections}")
    extent = concrete_value(n)  # under @bz.jit the trace specializes on it
    if extent is None:
        raise UnsupportedError(f"np.array_split: dimension {axis} of {x.describe()} is symbolic ({n}): its pieces' "
                               "lengths would depend on it; use np.split into pieces that divide it")
    size, longer = divmod(extent, sections)
    bounds = [0]
    for i in range(sections):
        bounds.append(bounds[-1] + size + (i < longer))
    return [vc._along(x, axis, start, stop) for start, stop in zip(bounds, bounds[1:])]


def _at_least(ndim: int) -> Callable[..., TensorView | list[TensorView]]:
    """np.atleast_1d, _2d, _3d: new axes of 1 where NumPy puts them (a vector becomes a row, and in 3-d
    the middle of (1, n, 1))."""
    def at_least(*arrays):
        shaped = []
        for a in arrays:
            x = vc.tensor_arg(f"np.atleast_{ndim}d", a)
            if x.ndim == 0:
                x = views.reshape(x, [1] * ndim)
            elif x.ndim == 1 and ndim > 1:
                x = views.reshape(x, [1, x.shape[0], 1][:ndim])
            elif x.ndim == 2 and ndim == 3:
                x = views.reshape(x, [*x.shape, 1])
            shaped.append(x)
        return shaped[0] if len(shaped) == 1 else shaped

    return at_least


def _as_dtype(joined: TensorView, dtype: object, out: object, what: str) -> TensorView:
    """A join's result in the `dtype=` it was given (NumPy's joins take one; it was dropped)."""
    if out is not None:
        raise UnsupportedError(f"{what}: out=: a fusion's values are not buffers; use the result")
    return joined if dtype is None else cast(joined, dtype)


def _stacker(name: str, ndim: int, axis: int) -> Callable[..., TensorView]:
    """np.hstack (1-d arrays end to end, else along axis 1), np.vstack (rows), np.dstack (depth) and
    np.column_stack (1-d arrays as columns): each array made at least `ndim`-d as NumPy makes it, then
    joined along `axis`."""
    def join(tup, *, dtype=None, casting="same_kind"):
        arrays = [vc.tensor_arg(f"np.{name}", a) for a in tup]
        if name == "column_stack":
            arrays = [views.reshape(a, [a.shape[0], 1]) if a.ndim == 1 else a for a in arrays]
        else:
            arrays = [_at_least(ndim)(a) for a in arrays]
        along = 0 if name == "hstack" and all(a.ndim == 1 for a in arrays) else axis
        return _as_dtype(views.cat(arrays, along), dtype, None, f"np.{name}")

    return join


def _broadcast_arrays(*args, subok=False) -> tuple[TensorView, ...]:
    """np.broadcast_arrays: each array expanded to the shape they broadcast to together."""
    arrays = [trace_operand("np.broadcast_arrays", a) for a in args]
    arrays = [creation.full([], a, dt.from_numpy(np.asarray(a).dtype)) if isinstance(a, (bool, int, float, np.generic))
              else a for a in arrays]  # a number is NumPy's 0-d array of it
    tensors = [vc.tensor_arg("np.broadcast_arrays", a) for a in arrays]
    rank = max(t.ndim for t in tensors)
    tensors = [views.reshape(t, [1] * (rank - t.ndim) + list(t.shape)) for t in tensors]
    tensors = broadcast_one_element_slices("np.broadcast_arrays", tensors)  # `x[:, :1]` broadcasts as NumPy's
    shape = [d.extent for d in broadcast_domains("np.broadcast_arrays", tensors)]
    return tuple(expand(t, shape) for t in tensors)


def _like(a: TensorView, value: object, dtype: object, shape: object) -> TensorView:
    """np.zeros_like, ones_like, empty_like and full_like: a's shape and dtype, or those given (`shape=` is
    how a function makes a new array of its own size to write into: np.zeros_like(x, shape=(n, 3)))."""
    if shape is None:
        return creation.full_like(vc.tensor_arg("np.full_like", a), value, dtype)
    return creation.full(_shape(shape), value, a.dtype if dtype is None else dtype)


def take(a, indices, axis=None, out=None, mode="raise"):
    """np.take: indices given as a traced tensor, an array or a list (taken in as an input), or an int.
    An index out of range gives what `take_along_axis` gives, whatever `mode` says."""
    _no_out("take", out)
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):  # one slice, no gather
        x = vc.tensor_arg("np.take", a)
        return vc.select(views.reshape(x, [-1]) if axis is None else x, 0 if axis is None else axis, int(indices))
    if isinstance(indices, (list, tuple, np.ndarray)):
        indices = trace_operand("np.take", np.asarray(indices))
    return vc.take(a, indices, axis)


def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """np.meshgrid: the 1-d coordinates broadcast against each other ('xy': the first two axes swapped,
    as NumPy's default is)."""
    if indexing not in ("xy", "ij"):
        raise FusionDefinitionError(f"np.meshgrid: indexing: expected 'xy' or 'ij', got {indexing!r}")
    vectors = [views.reshape(vc.tensor_arg("np.meshgrid", x), [-1]) for x in xi]
    n = len(vectors)
    order = list(range(n))
    if indexing == "xy" and n > 1:
        order[0], order[1] = 1, 0
    grids = [views.reshape(v, [-1 if order[i] == a else 1 for a in range(n)]) for i, v in enumerate(vectors)]
    if sparse:
        return grids
    shape = [vectors[order.index(a)].shape[0] for a in range(n)]
    return [expand(g, shape) for g in grids]


def _unravel_index(indices, shape, order="C"):
    """np.unravel_index of a traced flat index (an argmax): one index a dimension, row-major."""
    if order != "C":
        raise UnsupportedError(f"np.unravel_index: order: expected 'C', got {order!r}")
    flat = vc.tensor_arg("np.unravel_index", indices)
    shape = _shape(shape)
    coordinates, rest = [], flat
    for extent in reversed(shape[1:]):
        coordinates.append(elementwise("remainder", rest, extent))
        rest = elementwise("floordiv", rest, extent)
    return (rest, *reversed(coordinates))


_FUNCTIONS: dict[Callable, Callable[..., TensorView]] = {
    np.sum: _reduction(red.sum), np.prod: _reduction(red.prod), np.mean: _reduction(red.mean),
    np.max: _reduction(red.max), np.amax: _reduction(red.max), np.min: _reduction(red.min),
    np.amin: _reduction(red.min), np.any: _reduction(red.any), np.all: _reduction(red.all),
    np.argmax: lambda a, axis=None, out=None, keepdims=False: _reduction(red.argmax)(a, axis, None, out, keepdims),
    np.argmin: lambda a, axis=None, out=None, keepdims=False: _reduction(red.argmin)(a, axis, None, out, keepdims),
    np.var: _moments(red.var), np.std: _moments(red.std),
    np.cumsum: _scan(scans.cumsum), np.cumprod: _scan(scans.cumprod),
    np.where: _where, np.clip: _clip,
    np.round: round_decimals, np.around: round_decimals,
    np.concatenate: lambda arrays, axis=0, out=None, dtype=None, casting="same_kind": _as_dtype(
        views.cat(list(arrays), axis) if axis is not None else views.cat([views.reshape(a, [-1]) for a in arrays], 0),
        dtype, out, "np.concatenate"),
    np.stack: lambda arrays, axis=0, out=None, dtype=None, casting="same_kind": _as_dtype(
        vc.stack(list(arrays), axis), dtype, out, "np.stack"),
    np.expand_dims: _expand_dims, np.squeeze: lambda a, axis=None: views.squeeze(a, axis),
    np.transpose: _transpose, np.swapaxes: lambda a, axis1, axis2: views.transpose(a, axis1, axis2),
    np.moveaxis: lambda a, source, destination: a.movedim(source, destination),
    np.reshape: lambda a, shape=None, order="C", **k: views.reshape(a, _shape(shape if shape is not None
                                                                                else k["newshape"])),
    np.ravel: lambda a, order="C": views.reshape(a, [-1]), np.broadcast_to: _broadcast_to,
    np.broadcast_arrays: _broadcast_arrays, np.fix: lambda x, out=None: elementwise("trunc", x),
    np.flip: lambda m, axis=None: views.flip(m, axis), np.split: _split, np.array_split: _array_split,
    np.atleast_1d: _at_least(1), np.atleast_2d: _at_least(2), np.atleast_3d: _at_least(3),
    np.zeros_like: lambda a, dtype=None, order="K", subok=True, shape=None, **k: _like(a, 0, dtype, shape),
    # NumPy leaves empty_like's values unset; code that uses it writes every element it reads.
    np.empty_like: lambda a, dtype=None, order="K", subok=True, shape=None, **k: _like(a, 0, dtype, shape),
    np.ones_like: lambda a, dtype=None, order="K", subok=True, shape=None, **k: _like(a, 1, dtype, shape),
    np.full_like: lambda a, fill_value, dtype=None, order="K", subok=True, shape=None, **k:
        _like(a, fill_value, dtype, shape),
    np.linalg.norm: _norm, np.pad: _pad, np.nan_to_num: lambda x, copy=True, nan=0.0, posinf=None, neginf=None:
        activations.nan_to_num(x, nan, posinf, neginf),
    np.roll: lambda a, shift, axis=None: vc.roll(a, shift, axis), np.tril: lambda m, k=0: vc.tril(m, k),
    np.triu: lambda m, k=0: vc.triu(m, k), np.tile: lambda a, reps: vc.tile(a, reps),
    np.repeat: lambda a, repeats, axis=None: vc.repeat_interleave(a, repeats, axis),
    np.diff: _diff, np.einsum: einsum, np.dot: _dot,
    np.take_along_axis: lambda arr, indices, axis: vc.take_along_axis(
        views.reshape(arr, [-1]) if axis is None else arr, indices, 0 if axis is None else axis),
    np.take: take,
    np.hstack: _stacker("hstack", 1, 1), np.vstack: _stacker("vstack", 2, 0), np.dstack: _stacker("dstack", 3, 2),
    np.column_stack: _stacker("column_stack", 2, 1), np.meshgrid: _meshgrid, np.unravel_index: _unravel_index,
    np.ndim: lambda a: a.ndim, np.shape: lambda a: tuple(a.shape), np.size: _size,
    **NAN_REDUCTIONS, **STATISTICS, **CALCULUS, **SIGNAL, **CHOICES, **MATRICES,
}


def _shape(shape) -> list:
    return [shape] if isinstance(shape, (int, np.integer, Scalar)) else list(shape)  # one extent, or a sequence


def array_function(self: TensorView, func: Callable, types: tuple, args: tuple, kwargs: dict) -> TensorView:
    """NEP 18: `np.sum(x, axis=0)`, `np.where(m, x, y)`, `np.concatenate([x, y])`, ..."""
    handler = _FUNCTIONS.get(func)
    if handler is None:
        raise _refused(getattr(func, "__name__", repr(func)), func)
    args = tuple(_arrays_as_operands(f"np.{func.__name__}", a) for a in args)
    return handler(*args, **kwargs)


def _arrays_as_operands(what: str, arg: object) -> object:
    """An ndarray argument as an operand, and those in a list or tuple of them (`np.concatenate([np.zeros(1),
    x])` of a trace takes the array in as an input, where it was refused as an array made outside the
    fusion)."""
    if isinstance(arg, np.ndarray):
        return trace_operand(what, arg)
    if isinstance(arg, (list, tuple)) and any(isinstance(a, np.ndarray) for a in arg):
        return type(arg)(trace_operand(what, a) if isinstance(a, np.ndarray) else a for a in arg)
    return arg


def install(cls: type = TensorView) -> None:
    cls.__array_ufunc__ = array_ufunc
    cls.__array_function__ = array_function
