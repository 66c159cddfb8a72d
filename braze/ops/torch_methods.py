"""The torch-style methods on TensorView that users of PyTorch write (`x[:, :1].expand(3, 4)`,
`x.view(n, -1)`, `x.float()`, `x.clamp(min=0)`, `x.masked_fill(mask, 0.0)`), each a thin wrapper
of an op in `braze.ops`, installed by `braze/ops/methods.py`."""

from __future__ import annotations

import functools
import operator

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import composites, views
from braze.ops.broadcast import broadcast, expand
from braze.ops.elementwise import BINARY, UNARY, cast, elementwise

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


def _flatten(x: TensorView, start_dim: int = 0, end_dim: int = -1) -> TensorView:
    """torch's `flatten`: dimensions `start_dim` to `end_dim` (both included) become one."""
    if x.ndim == 0:
        return views.reshape(x, (1,))
    start = normalize_axis(start_dim, x.ndim, "flatten start_dim")
    end = normalize_axis(end_dim, x.ndim, "flatten end_dim")
    if start > end:
        raise FusionDefinitionError(f"flatten: expected start_dim <= end_dim, got {start_dim} and {end_dim}")
    merged = functools.reduce(operator.mul, x.shape[start : end + 1], 1)
    return views.reshape(x, (*x.shape[:start], merged, *x.shape[end + 1 :]))


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


def _masked_fill(x: TensorView, mask: TensorView, value: object) -> TensorView:
    """`value` where `mask` holds, else `x`, in x's dtype (as torch keeps it)."""
    return cast(elementwise("where", mask, value, x), x.dtype)


def _size(x: TensorView, dim: int | None = None) -> tuple[Scalar, ...] | Scalar:
    return x.shape if dim is None else x.shape[normalize_axis(dim, x.ndim, "size dim")]


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


def install(cls: type = TensorView) -> None:
    """Puts the torch-style methods on TensorView; attributes it already has stay."""
    for name in (*UNARY, *BINARY):
        if name not in _NOT_METHODS and not hasattr(cls, name):
            setattr(cls, name, _op_method(name))
    for name, dtype in _CASTS.items():
        setattr(cls, name, _cast_method(name, dtype))
    cls.div = _op_method("truediv")
    cls.expand = _expand
    cls.view = lambda self, *shape: views.reshape(self, sizes(shape))
    cls.flatten = _flatten
    cls.to = _to
    cls.clamp = cls.clip = _clamp
    cls.masked_fill = _masked_fill
    cls.where = lambda self, condition, other: elementwise("where", condition, self, other)
    cls.softmax = composites.softmax
    cls.log_softmax = composites.log_softmax
    cls.size = _size
    cls.dim = lambda self: self.ndim
    cls.type_as = lambda self, other: cast(self, other.dtype)
    # A fusion's tensors are values: no layout to make contiguous, no storage to share or copy, no graph.
    cls.contiguous = cls.clone = cls.detach = lambda self: self
