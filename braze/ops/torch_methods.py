"""The torch-style methods on TensorView that users of PyTorch write (`x[:, :1].expand(3, 4)`,
`x.view(n, -1)`, `x.float()`, `x.clamp(min=0)`, `x.masked_fill(mask, 0.0)`, `x.chunk(3, dim=-1)`),
each a thin wrapper of an op in `braze.ops`, installed by `braze/ops/methods.py`.

Three names mean something else in braze already, and keep it where torch's spelling is ambiguous:
- `x.max(1)` / `x.max(axis=1)` are NumPy's reductions (values); `x.max(dim=1)`, the spelling torch
  code uses, returns torch's (values, indices). The same for `min`.
- `x.var(1)` is NumPy's population variance; `x.var(dim=1)` torch's sample variance; `x.var(1, True)`
  (torch's unbiased, or keepdim) is refused as ambiguous. The same for `std`.
- `x.split(axis, factor)` with two positional ints (the factor may be an extent) is the loop-domain
  split of `braze/ir/tensor.py`; one size or a list of sizes, or a `dim=`/`axis=` keyword, is
  torch's `split` into pieces."""

from __future__ import annotations

from types import MethodType
from typing import NamedTuple

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.fusion import defining
from braze.ir.scalar import Scalar, as_scalar
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import activations, composites, creation, losses, numpy_api, numpy_matrices, scans, views
from braze.ops import reductions as red
from braze.ops import torch_math as tm
from braze.ops import view_composites as vc
from braze.ops.broadcast import broadcast, expand
from braze.ops.elementwise import BINARY, TERNARY, UNARY, cast, elementwise
from braze.ops.math_compositions import NUMPY_NAMES
from braze.ops.math_functions import FUNCTIONS

# The op table's names that are not torch's method names, or that have a method of their own here.
_NOT_METHODS = frozenset({"set", "clamp", "where", "truediv"})
_CASTS = {"float": dt.float32, "double": dt.float64, "half": dt.float16, "bfloat16": dt.bfloat16,
          "int": dt.int32, "long": dt.int64, "bool": dt.bool_}


def sizes(args: tuple) -> tuple:
    """`x.view(3, 4)` and `x.view((3, 4))` alike: the sizes as one tuple."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else args


def _expand(x: TensorView, *shape: int | Scalar) -> TensorView:
    """torch's `expand`: size-1 dimensions grow to `shape`, -1 keeps one, and extra sizes add
    leading dimensions."""
    shape = sizes(shape)
    extra = len(shape) - x.ndim
    if extra < 0:
        raise FusionDefinitionError(
            f"expand: {x.describe()} has {x.ndim} dimensions, expected a shape of at least that many, got {shape}")
    if extra:
        x = broadcast(x, [True] * extra + [False] * x.ndim)
    return expand(x, shape)


def _new_filled(name: str, value: object):
    """torch's `x.new_zeros(size)` and friends: a new tensor of `size` in x's dtype (or `dtype=`)."""
    def method(self: TensorView, *size: object, dtype: object = None, **ignored: object) -> TensorView:
        with defining(self.fusion):
            return creation.full(sizes(size), value, self.dtype if dtype is None else dtype, _op=name)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch's `{name}(size)`: {value} in x's dtype unless `dtype=` is given."
    return method


def _new_full(x: TensorView, size: object, fill_value: object, dtype: object = None, **ignored: object) -> TensorView:
    """torch's `x.new_full(size, fill_value)`: a new tensor of `size` in x's dtype (or `dtype=`)."""
    with defining(x.fusion):
        return creation.full(sizes((size,)), fill_value, x.dtype if dtype is None else dtype, _op="new_full")


def _to(x: TensorView, *args: object, dtype: object = None, **ignored: object) -> TensorView:
    """torch's `to`: a dtype, or another tensor's dtype; a device has no meaning inside a fusion."""
    targets = [a.dtype if isinstance(a, TensorView) else a for a in (*args, dtype) if a is not None]
    if len(targets) != 1:
        raise UnsupportedError(f"to: expected one dtype or tensor, got {args} and dtype={dtype!r}")
    return cast(x, dt.as_dtype(targets[0]))


def _clamp(x: TensorView, min: object = None, max: object = None) -> TensorView:  # noqa: A002
    """torch's `clamp`: either bound may be left out (None), not both."""
    if min is None and max is None:
        raise FusionDefinitionError("clamp: expected min or max (or both), got neither")
    if max is None:
        return elementwise("maximum", x, min)
    if min is None:
        return elementwise("minimum", x, max)
    return elementwise("clamp", x, min, max)


def _add_sub(op: str):
    def method(self: TensorView, other: object, *, alpha: object = 1) -> TensorView:
        """torch's `x.add(y, alpha=a)`: x + a * y (`sub` likewise)."""
        if isinstance(alpha, TensorView):  # a runtime number of @bz.jit
            return elementwise(op, self, elementwise("mul", other, alpha))
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise FusionDefinitionError(f"{op}: alpha: expected a number, got {type(alpha).__name__} {alpha!r}")
        if alpha == 1:
            return elementwise(op, self, other)
        scaled = elementwise("mul", other, alpha) if isinstance(other, TensorView) else other * alpha
        return elementwise(op, self, scaled)

    method.__name__ = method.__qualname__ = op
    return method


def _div(x: TensorView, other: object, *, rounding_mode: str | None = None) -> TensorView:
    """torch's `x.div(y, rounding_mode=...)`: true division (None), floor division ("floor", Python's
    rule for floats as torch's), or the quotient rounded toward zero ("trunc")."""
    if rounding_mode is None:
        return elementwise("truediv", x, other)
    if rounding_mode == "floor":
        return elementwise("floordiv", x, other)
    if rounding_mode != "trunc":
        raise FusionDefinitionError(f"div: rounding_mode: expected None, 'floor' or 'trunc', got {rounding_mode!r}")
    quotient = elementwise("truediv", x, other)
    if quotient.dtype.is_floating and not (x.dtype.is_integer or x.dtype.is_bool):
        return elementwise("trunc", quotient)
    # integers: floor division, one up where it is inexact and the signs differ
    floor, rest = elementwise("floordiv", x, other), elementwise("remainder", x, other)
    inexact_negative = elementwise("logical_and", elementwise("ne", rest, 0),
                                   elementwise("ne", elementwise("lt", x, 0), elementwise("lt", other, 0)))
    return elementwise("where", inexact_negative, elementwise("add", floor, 1), floor)


def _type(x: TensorView, dtype: object = None) -> object:
    """torch's `x.type(dtype)`: x cast to dtype (a torch or braze dtype, or a name)."""
    if dtype is None:
        raise UnsupportedError("type(): the type name of a traced tensor; use x.dtype")
    return cast(x, dt.as_dtype(dtype))


def _in_place(name: str, instead: str):
    def refuse(self: TensorView, *args: object, **kwargs: object) -> TensorView:
        raise UnsupportedError(
            f"{self.describe()}.{name}(...): a tensor of a fusion is a value, not a buffer, so it has no in-place "
            f"methods; write {instead} instead")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


_OUT_OF_PLACE = ("add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
                 "relu", "clamp", "clamp_min", "clamp_max", "masked_fill", "addcmul", "addcdiv", "lerp", "floor",
                 "round", "sign", "erf", "erfc", "nan_to_num", "reciprocal", "sin", "cos", "square")
# torch's in-place methods model code calls, each with what to write in a fusion instead.
IN_PLACE = {**{f"{name}_": f"x = x.{name}(...)" for name in _OUT_OF_PLACE},
            "zero_": "x = bz.ops.zeros_like(x)", "fill_": "x = bz.ops.full_like(x, value)",
            "copy_": "x = source (cast with .to(x.dtype) if needed)", "uniform_": "x = bz.ops.rand(...)",
            "normal_": "x = bz.ops.randn(...)", "bernoulli_": "x = (bz.ops.rand(...) < p)"}


class ValuesIndices(NamedTuple):
    """What torch's `x.max(dim=d)`, `x.min(dim=d)`, `x.cummax(dim=d)` and `x.cummin(dim=d)` return."""

    values: TensorView
    indices: TensorView


def _moment(name: str):
    """`x.var` and `x.std`: NumPy's population default, but torch's sample variance where torch's
    spelling says so (`dim=`), and no guess where the two read one call differently."""
    op = getattr(red, name)

    def method(self: TensorView, *args: object, **kwargs: object) -> TensorView:
        if len(args) > 1 and isinstance(args[1], bool):
            raise FusionDefinitionError(
                f"{name}: x.{name}({args[0]!r}, {args[1]}) is ambiguous: torch reads the bool as unbiased=, "
                f"braze's x.{name} as keepdim=; pass it by keyword (unbiased={args[1]} or keepdim={args[1]})")
        if "dim" in kwargs and not {"correction", "unbiased", "ddof"} & kwargs.keys():
            kwargs["correction"] = 1  # torch's x.var(dim=1) removes a degree of freedom
        return op(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def _values_or_pair(name: str):
    """NumPy's reduction, or torch's (values, indices) when `dim=` names one axis."""
    reduction, index = getattr(red, name), getattr(red, f"arg{name}")

    def method(self: TensorView, *args: object, **kwargs: object):
        if len(args) == 1 and isinstance(args[0], TensorView) and not kwargs:  # torch's x.max(other)
            return elementwise("maximum" if name == "max" else "minimum", self, args[0])
        if {"where", "initial", "out"} & kwargs.keys():  # NumPy's x.max(initial=0.0, where=mask)
            return numpy_api.reduction(name)(self, *args, **kwargs)
        if "dim" not in kwargs:
            return reduction(self, *args, **kwargs)
        dim = kwargs.pop("dim")
        if not isinstance(dim, int) or isinstance(dim, bool) or args:
            raise FusionDefinitionError(
                f"{name}: dim: expected one int axis (torch's {name}(dim=) returns values and indices), got "
                f"dim={dim!r}{f' and positional {args!r}' if args else ''}; axis= reduces over several axes")
        if "keepdim" in kwargs and "keepdims" in kwargs:
            raise FusionDefinitionError(f"{name}: expected one of keepdim=, keepdims=, got both")
        keepdim = kwargs.pop("keepdim", kwargs.pop("keepdims", False))
        if kwargs:
            raise FusionDefinitionError(f"{name}: expected only dim= and keepdim=, got {sorted(kwargs)}")
        return ValuesIndices(reduction(self, dim, keepdim), index(self, dim, keepdim))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"NumPy's `{name}` over axes; with `dim=` (one axis) torch's: a `ValuesIndices` of "
                      "the values and their (first) indices; of another tensor, torch's elementwise one.")
    return method


def cumulative_extreme(name: str, x: TensorView, dim: int) -> ValuesIndices:
    """torch's `cummax(x, dim)` and `cummin(x, dim)`: the running values and, for each, the index it came
    from. Like torch, the last of equal values and a NaN (which then stays) take the index: element i
    keeps its own index where it equals the running value or is NaN, and the running maximum of those
    indices is the last one up to i."""
    values = getattr(scans, name)(x, dim)
    if x.ndim == 0:
        with defining(x.fusion):
            return ValuesIndices(values, creation.full((), 0, dt.int64))
    axis = normalize_axis(dim, x.ndim, f"{name} dim")
    with defining(x.fusion):
        positions = broadcast(creation.arange(x.shape[axis]), [i != axis for i in range(x.ndim)])
    reached = elementwise("logical_or", elementwise("eq", x, values), elementwise("ne", x, x))
    return ValuesIndices(values, scans.cummax(elementwise("where", reached, positions, 0), axis))


def _scan_values_or_pair(name: str):
    """The values of the scan (`x.cummax(1)`, NumPy's `maximum.accumulate`), or with `dim=` torch's
    (values, indices), as `x.max(dim=1)` is."""
    values_only = getattr(scans, name)

    def method(self: TensorView, *args: object, **kwargs: object):
        if "dim" not in kwargs:
            return values_only(self, *args, **kwargs)
        if args or len(kwargs) > 1:
            raise FusionDefinitionError(f"{name}: expected only dim= (torch's {name}(dim=) returns values and "
                                        f"indices), got positional {args!r} and {sorted(kwargs)}")
        return cumulative_extreme(name, self, kwargs["dim"])

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"The running {name[3:]} along an axis (the values); with `dim=` torch's: a `ValuesIndices` "
                      "of the values and their (last) indices.")
    return method


# torch's names of braze's composed math functions (braze/ops/math_functions.py): x.asin(), x.log10(),
# x.hypot(y), x.arcsinh(), x.deg2rad(); torch has no degrees() or radians().
MATH_FUNCTIONS = {**{name: FUNCTIONS[name] for name in FUNCTIONS if name not in ("degrees", "radians")},
                  **{torch_name: FUNCTIONS[name] for torch_name, name in NUMPY_NAMES.items()}}


# torch's methods composed in braze/ops/torch_math.py, each installed under its own name.
TORCH_MATH = ("logit", "xlogy", "sinc", "sign", "signbit", "isclose", "frac", "heaviside", "float_power", "logaddexp2",
              "fmax", "fmin", "outer", "fliplr", "flipud", "count_nonzero", "nansum", "nanmean", "aminmax")

_LOOP_SPLIT = TensorView.split  # taken before `install` puts `_split` in its place


def _split(self: TensorView, *args: object, **kwargs: object):
    """torch's `split` into pieces, or (two positional ints, the factor maybe an extent) the loop-domain
    split of a schedule."""
    if len(args) == 2 and not kwargs and all(isinstance(a, (int, Scalar)) and not isinstance(a, bool) for a in args):
        return _LOOP_SPLIT(self, *args)
    return vc.split(self, *args, **kwargs)


def _size(x: TensorView, dim: int | None = None) -> tuple[Scalar, ...] | Scalar:
    return x.shape if dim is None else x.shape[normalize_axis(dim, x.ndim, "size dim")]


@red.keyword_aliases(dim=("axis", "axes"), keepdim=("keepdims",))
def _norm(x: TensorView, p: float | str = 2, dim=None, keepdim: bool = False) -> TensorView:
    """torch's `x.norm(p, dim)`: the vector p-norm over `dim` (every axis when None); `p` may be
    "fro" (2), `inf` or `-inf` (the largest or smallest magnitude)."""
    if p == "fro":
        p = 2
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise FusionDefinitionError(f"norm: p: expected a number, 'fro', inf or -inf, got {p!r}")
    magnitude = elementwise("abs", x)
    if p in (float("inf"), float("-inf")):
        return (red.max if p > 0 else red.min)(magnitude, dim, keepdim)
    if p == 0:
        return red.sum(cast(elementwise("ne", x, 0), x.dtype), dim, keepdim)
    if p == 1:
        return red.sum(magnitude, dim, keepdim)
    if p == 2:
        return elementwise("sqrt", red.sum(elementwise("mul", x, x), dim, keepdim))
    return elementwise("pow", red.sum(elementwise("pow", magnitude, p), dim, keepdim), 1.0 / p)


def _size_attribute(x: TensorView) -> int | Scalar | MethodType:
    """`x.size`: NumPy's element count in a trace of NumPy arrays (`x * x.size`), torch's method
    `x.size(dim)` elsewhere; as a bound method there, NumPy code reading it fails with a braze error."""
    if getattr(x.fusion, "numpy_size", False):
        return _numel(x)
    return MethodType(_size, x)


def _numel(x: TensorView) -> int | Scalar:
    """torch's `x.numel()`: a Python int when every extent is static, else a symbolic extent."""
    count = as_scalar(1)
    for extent in x.shape:
        count = count * extent
    return count.value if count.is_const else count


def _movedim(x: TensorView, source, destination) -> TensorView:
    """torch's `x.movedim(source, destination)`: the dimensions `source` (an int or a sequence) moved to
    the positions `destination`, the others keeping their order."""
    sources = [source] if isinstance(source, int) else list(source)
    destinations = [destination] if isinstance(destination, int) else list(destination)
    if len(sources) != len(destinations):
        raise FusionDefinitionError(f"movedim: expected as many destinations as sources, got {len(destinations)} "
                                    f"for {len(sources)}: source={source!r}, destination={destination!r}")
    sources = [normalize_axis(a, x.ndim, "movedim source") for a in sources]
    destinations = [normalize_axis(a, x.ndim, "movedim destination") for a in destinations]
    for name, axes, given in (("source", sources, source), ("destination", destinations, destination)):
        if len(set(axes)) != len(axes):
            raise FusionDefinitionError(f"movedim: {name}: expected distinct dimensions, got {given!r}")
    order: list[int | None] = [None] * x.ndim
    for s, d in zip(sources, destinations):
        order[d] = s
    rest = iter(a for a in range(x.ndim) if a not in sources)
    return views.permute(x, [next(rest) if a is None else a for a in order])


@red.keyword_aliases(dim=("axis", "axes"))
def _squeeze(x: TensorView, dim: int | tuple[int, ...] | None = None) -> TensorView:
    """torch's `x.squeeze(dim)`: drops those of the named dimensions (an int or a tuple) whose extent is
    1 and leaves the others, where NumPy's squeeze (`bz.ops.squeeze`) requires each to be 1; with no
    `dim`, every dimension of extent 1."""
    if dim is None:
        return views.squeeze(x)
    ones = [axis for axis in red.normalize_axes(x, dim, "squeeze") if _extent_is_one(x, axis)]
    return views.squeeze(x, ones) if ones else x


def _extent_is_one(x: TensorView, axis: int) -> bool:
    """Whether dimension `axis` of x has extent 1, decided when the fusion is defined: the rank of the
    result depends on it, and one compiled fusion has one rank."""
    extent = x.shape[axis]
    if extent.is_const:
        return extent.value == 1
    if extent in x.fusion.one_element_extents:  # `x[:, :1]`: 1 wherever x has an element to give
        return True
    if extent in x.fusion.extents_never_one:
        return False
    raise FusionDefinitionError(
        f"squeeze: dimension {axis} of {x.describe()}: expected an extent known to be 1 or not when the fusion "
        f"is defined (torch's squeeze drops a dimension only where it is 1), got the symbolic extent {extent}; "
        "define that dimension with extent 1 or a static extent, or call bz.ops.squeeze, which requires it to be 1")


def _t(x: TensorView) -> TensorView:
    """torch's `x.t()`: a matrix transposed; 0-d and 1-d tensors as they are."""
    if x.ndim > 2:
        raise FusionDefinitionError(f"t: expected a tensor of at most 2 dimensions, got {x.describe()} of {x.ndim}")
    return views.transpose(x, 0, 1) if x.ndim == 2 else x


# torch methods with no braze op: data-dependent indexing, sorting and selection, and matrix products.
# Each raises a braze error that says so, rather than an AttributeError that reads like a typo.
_NOT_SUPPORTED = {
    **dict.fromkeys(("scatter", "scatter_add", "scatter_reduce", "index_add", "index_fill", "index_copy",
                     "index_put", "masked_select", "masked_scatter", "embedding"),
                    "indexing by a tensor (a gather or scatter) is not supported: do it in the array library "
                    "before or after the fusion (the torch backend leaves it to PyTorch)"),
    **dict.fromkeys(("topk", "sort", "argsort", "msort", "kthvalue", "median", "quantile", "nanmedian", "mode",
                     "unique", "unique_consecutive", "nonzero", "searchsorted", "bincount", "histc"),
                    "sorting and selection are not supported: compute them outside the fusion and pass the "
                    "result in (sorted probabilities, for instance)"),
    **dict.fromkeys(("matmul", "mm", "bmm", "mv", "dot", "inner", "einsum", "baddbmm", "addmm"),
                    "matrix products are not supported: braze fuses the elementwise work around them"),
}


def _not_supported(name: str, why: str):
    def method(self: TensorView, *args: object, **kwargs: object):
        raise UnsupportedError(f"{name}: {self.describe()}.{name}() has no braze op: {why}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not supported: {why}."
    return method


def _op_method(name: str):
    def method(self: TensorView, *operands: object, **attrs: object) -> TensorView:
        return elementwise(name, self, *operands, **attrs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"`bz.ops.{name}(self, ...)`."
    return method


def _cast_method(name: str, dtype: dt.DType):
    method = lambda self: cast(self, dtype)  # noqa: E731
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"`self` cast to {dtype.name}."
    return method


def _take_along_dim(self: TensorView, indices: TensorView, dim: int | None = None) -> TensorView:
    """torch's `x.take_along_dim(indices, dim)`; with no dim, along the flattened tensor."""
    if dim is None:
        return vc.take_along_axis(views.reshape(self, [-1]), views.reshape(indices, [-1]), 0)
    return vc.take_along_axis(self, indices, dim)


def _take(self: TensorView, indices: object, axis: int | None = None, out: None = None,
          mode: str = "raise") -> TensorView:
    """torch's `x.take(index)` (from the flattened x, in the index's shape) and NumPy's
    `x.take(indices, axis=None)`; an integer array or list is taken in as an input of the trace."""
    if out is not None:
        raise UnsupportedError("take: out=: a fusion's values are not buffers; use the result")
    return numpy_api.take(self, indices, axis)


def _one_dimensional(op: str, index: TensorView) -> TensorView:
    index = vc.tensor_arg(op, index)
    if index.ndim > 1:
        raise FusionDefinitionError(f"{op}: index: expected a tensor of at most 1 dimension, got {index.describe()}")
    return index


def _repeat(self: TensorView, *sizes_: object, axis: int | None = None) -> TensorView:
    """torch's `x.repeat(2, 1)` tiles; NumPy's `x.repeat(2, axis=0)` repeats each element (its
    `repeat_interleave`), and so does `x.repeat(2)` of a trace of NumPy arrays, over the flattened x."""
    if axis is None and len(sizes_) == 1 and getattr(self.fusion, "numpy_size", False):  # NumPy's arrays
        return vc.repeat_interleave(views.reshape(self, [-1]), sizes_[0], 0)
    if axis is None:
        return vc.repeat(self, sizes(sizes_))
    (repeats,) = sizes_
    return vc.repeat_interleave(self, repeats, axis)


def _diagonal(self: TensorView, offset: int = 0, axis1: int = 0, axis2: int = 1, *, dim1: int | None = None,
              dim2: int | None = None) -> TensorView:
    """NumPy's `x.diagonal(offset, axis1, axis2)` and torch's `x.diagonal(offset, dim1, dim2)`."""
    return numpy_matrices.diagonal(self, offset, axis1 if dim1 is None else dim1, axis2 if dim2 is None else dim2)


def install(cls: type = TensorView) -> None:
    """Puts the torch-style methods on TensorView; attributes it already has stay."""
    for name in (*UNARY, *BINARY, *TERNARY):
        if name not in _NOT_METHODS and not hasattr(cls, name):
            setattr(cls, name, _op_method(name))
    for name, dtype in _CASTS.items():
        setattr(cls, name, _cast_method(name, dtype))
    cls.div = cls.divide = cls.true_divide = _div
    cls.floor_divide = _op_method("floordiv")
    cls.add, cls.sub = _add_sub("add"), _add_sub("sub")
    cls.subtract = cls.sub
    cls.type = _type
    for name, instead in IN_PLACE.items():
        setattr(cls, name, _in_place(name, instead))
    cls.expand = _expand
    cls.view = lambda self, *shape: views.reshape(self, sizes(shape))
    cls.flatten, cls.unflatten = vc.flatten, vc.unflatten
    cls.to = _to
    cls.clamp = cls.clip = _clamp
    cls.masked_fill = vc.masked_fill
    cls.max, cls.min = _values_or_pair("max"), _values_or_pair("min")
    cls.var, cls.std = _moment("var"), _moment("std")
    cls.cummax, cls.cummin = _scan_values_or_pair("cummax"), _scan_values_or_pair("cummin")
    for name, function in MATH_FUNCTIONS.items():
        setattr(cls, name, function)
    cls.split = _split
    cls.chunk, cls.unbind, cls.narrow = vc.chunk, vc.unbind, vc.narrow
    cls.repeat = _repeat
    cls.tile = lambda self, *reps: vc.tile(self, sizes(reps))
    cls.repeat_interleave = vc.repeat_interleave
    cls.roll, cls.tril, cls.triu = vc.roll, vc.tril, vc.triu
    cls.diagonal, cls.trace = _diagonal, numpy_matrices.trace
    cls.diag = lambda self, diagonal=0: numpy_matrices.diag(self, diagonal)  # torch's keyword
    cls.gather = vc.gather
    cls.take_along_dim = _take_along_dim
    cls.index_select = lambda self, dim, index: vc.take(self, _one_dimensional("index_select", index), dim)
    cls.take = _take
    cls.mT = property(vc.matrix_transpose)
    cls.expand_as = lambda self, other: _expand(self, *vc.tensor_arg("expand_as", other).shape)
    cls.view_as = lambda self, other: views.reshape(self, vc.tensor_arg("view_as", other).shape)
    cls.reshape_as = lambda self, other: views.reshape(self, vc.tensor_arg("reshape_as", other).shape)
    cls.where = lambda self, condition, other: elementwise("where", condition, self, other)
    cls.amax, cls.amin = red.max, red.min  # torch's names for the values-only reductions
    cls.norm = _norm
    cls.logsumexp = activations.logsumexp
    cls.logaddexp = activations.logaddexp
    cls.nan_to_num = activations.nan_to_num
    cls.addcmul, cls.addcdiv = activations.addcmul, activations.addcdiv
    cls.numel = _numel
    cls.movedim = cls.moveaxis = _movedim
    cls.square = lambda self: elementwise("mul", self, self)
    cls.t = _t
    cls.softmax = composites.softmax
    cls.log_softmax = composites.log_softmax
    cls.size = property(_size_attribute)
    cls.dim = lambda self: self.ndim
    cls.is_floating_point = lambda self: self.dtype.is_floating
    cls.is_complex = lambda self: False
    cls.element_size = lambda self: self.dtype.itemsize
    # `torch.arange(t, device=x.device)`: the device of the arrays the fusion is traced on
    cls.device = property(lambda self: self.fusion.array_device)
    cls.type_as = lambda self, other: cast(self, other.dtype)
    cls.clamp_min = lambda self, min: elementwise("maximum", self, min)  # noqa: A006
    cls.clamp_max = lambda self, max: elementwise("minimum", self, max)  # noqa: A006
    cls.swapaxes = cls.swapdims = views.transpose
    cls.squeeze = _squeeze
    cls.fmod = activations.fmod
    cls.select, cls.diff = vc.select, vc.diff
    for name in TORCH_MATH:
        setattr(cls, name, getattr(tm, name))
    cls.ger = tm.outer
    cls.fix, cls.sgn = _op_method("trunc"), tm.sign  # sgn is sign for real tensors
    cls.broadcast_to = lambda self, size: _expand(self, *sizes((size,)))
    cls.hardshrink, cls.prelu = losses.hardshrink, losses.prelu
    for name, why in _NOT_SUPPORTED.items():
        if not hasattr(cls, name):
            setattr(cls, name, _not_supported(name, why))
    # A fusion's new tensors have no uninitialised memory to offer: new_empty gives zeros.
    for name, value in (("new_zeros", 0), ("new_empty", 0), ("new_ones", 1)):
        setattr(cls, name, _new_filled(name, value))
    cls.new_full = _new_full
    # A fusion's tensors are values: no layout to make contiguous, no storage to share or copy, no graph.
    cls.contiguous = cls.detach = lambda self: self  # torch's share the tensor's memory, as this does
    # copies: a write into one (x[0] = 0) leaves the original alone
    cls.clone = cls.copy = lambda self, *args, **kwargs: elementwise("set", self)
