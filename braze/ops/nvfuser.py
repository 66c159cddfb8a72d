"""`f.ops` of a `bz.Fusion`: `bz.ops` as nvFuser's Python frontend spells it, so a fusion definition
written for nvFuser (`fd.ops.var_mean(t, [-1])`, `fd.ops.pad(t, [1, 1])`, `fd.ops.select(t, i, dim)`)
means there what it means in nvFuser.

Every name not defined here is `bz.ops`'s. The ones here are where nvFuser's arguments differ from
braze's (an order, a default, a flat list of widths) or where nvFuser names an op braze has under
another name. Read through `bz.ops`, the same call would mean something else or be refused:
`bz.ops.var` defaults to NumPy's population variance where nvFuser's defaults to `correction=1`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from braze import dtypes as dt
from braze import ops as _ops
from braze.errors import FusionDefinitionError
from braze.ir.tensor import Shape, TensorView, normalize_axis
from braze.ops import reductions as _reductions
from braze.ops import torch_math as _torch_math
from braze.ops import view_composites as _view_composites
from braze.ops.elementwise import elementwise
from braze.ops.reductions import keyword_aliases
from braze.ops.table import size_value
from braze.ops.torch_methods import _div as _torch_div

_DIMS = keyword_aliases(dims=("axes", "axis", "dim"), keepdim=("keepdims",))


def __getattr__(name: str) -> object:
    return getattr(_ops, name)  # bz.ops's op, or its error for an nvFuser name it has no op for


# --- reductions: nvFuser's (arg, dims, keepdim, dtype), and its (arg, dtype) overload -------------------
def _dims_and_dtype(dims: object, dtype: object) -> tuple[object, object]:
    """nvFuser's `sum(t, DataType.Float)` reduces every dimension into that dtype."""
    if isinstance(dims, dt.DType):
        if dtype is not None:
            raise FusionDefinitionError(f"expected one dtype, got {dims.name} in place of dims and dtype={dtype!r}")
        return None, dims
    return dims, dtype


def _with_dtype(name: str):
    op = getattr(_reductions, name)

    @_DIMS
    def reduce(arg: TensorView, dims=None, keepdim: bool = False, dtype: object = None) -> TensorView:
        dims, dtype = _dims_and_dtype(dims, dtype)
        return op(arg, dims, keepdim, dtype=dtype)

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = f"nvFuser's `{name}(arg, dims, keepdim, dtype)`, or `{name}(arg, dtype)` over every dimension."
    return reduce


def _dtype_ignored(name: str):
    op = getattr(_reductions, name)

    @_DIMS
    def reduce(arg: TensorView, dims=None, keepdim: bool = False, dtype: object = None) -> TensorView:
        dims, _ = _dims_and_dtype(dims, dtype)  # nvFuser takes a dtype here and does not use it
        return op(arg, dims, keepdim)

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = f"nvFuser's `{name}(arg, dims, keepdim, dtype)`; as there, the dtype is not used."
    return reduce


sum, prod = _with_dtype("sum"), _with_dtype("prod")  # noqa: A001
max, min = _dtype_ignored("max"), _dtype_ignored("min")  # noqa: A001


@_DIMS
def var(arg: TensorView, dims=None, correction: float = 1, keepdim: bool = False) -> TensorView:
    """nvFuser's `var(arg, dims, correction=1, keepdim=False)`: the sample variance unless told otherwise."""
    return _ops.var(arg, dims, keepdim, correction=correction)


@_DIMS
def var_mean(arg: TensorView, dims=None, correction: float = 1, keepdim: bool = False
             ) -> tuple[TensorView, TensorView]:
    """nvFuser's `var_mean(arg, dims, correction=1, keepdim=False)`: (var, mean)."""
    return _ops.var_mean(arg, dims, keepdim, correction=correction)


@_DIMS
def welford(arg: TensorView, dims=None) -> tuple[TensorView, TensorView, TensorView]:
    """nvFuser's `welford(arg, dims)`: (mean, the sum of squared deviations from it, the count), the
    count an int64 tensor of the mean's shape. Computed as `var_mean`, which braze fuses the same way."""
    variance, mean = _ops.var_mean(arg, dims, correction=0)
    count = _ops.sum(_ops.full_like(arg, 1, dt.int64), dims)
    return mean, elementwise("mul", variance, count), count


# --- views -----------------------------------------------------------------------------------------
def select(arg: TensorView, index: int | TensorView, dim: int) -> TensorView:
    """nvFuser's `select(arg, index, dim)`: the index before the dimension (torch's `x.select(dim,
    index)` and `bz.ops.select(x, axis, index)` put them the other way round)."""
    return _ops.select(arg, dim, size_value(index, "select: index"))


def gather(arg: TensorView, index: TensorView, dim: int) -> TensorView:
    """nvFuser's `gather(arg, index, dim)`: torch's `arg.gather(dim, index)` (the index's extents, at most
    arg's, on the other dimensions)."""
    return _view_composites.gather(arg, dim, index)


def index_select(arg: TensorView, index: TensorView, dim: int) -> TensorView:
    """nvFuser's `index_select(arg, index, dim)`: the slices of `dim` a 1-d index names, in its order; a 0-d
    index keeps `dim`, of extent 1, as torch's `index_select` does."""
    if isinstance(index, TensorView) and index.ndim == 0:
        index = _ops.reshape(index, [1])
    return _view_composites.take(arg, index, dim)


def embedding_fwd(input: TensorView, weight: TensorView, padding_idx: object = None,  # noqa: A002
                  max_norm: object = None, norm_type: object = None, scale_grad_by_freq: object = None,
                  sparse: object = None) -> TensorView:
    """nvFuser's `embedding_fwd`: torch's `F.embedding`, the rows of `weight` that `input` names. With
    `max_norm`, each row whose `norm_type`-norm (2 by default) exceeds it is scaled down to it, as torch's
    renormalization does, in the result only (torch also rewrites those rows of `weight` in place).
    `padding_idx`, `scale_grad_by_freq` and `sparse` change only the gradient."""
    rows = _view_composites.take(weight, input, 0)
    if max_norm is None:
        return rows
    p = 2.0 if norm_type is None else norm_type
    wide = _ops.cast(rows, dt.float32) if rows.dtype.itemsize < 4 else rows
    inverse = 1.0 / p if isinstance(p, (int, float)) else elementwise("truediv", 1.0, p)
    norm = elementwise("pow", _ops.sum(elementwise("pow", _ops.abs(wide), p), -1, keepdims=True), inverse)
    # torch's embedding_renorm_: scale by max_norm / (norm + 1e-7) where the norm exceeds max_norm
    scale = elementwise("where", elementwise("gt", norm, max_norm),
                        elementwise("truediv", max_norm, elementwise("add", norm, 1e-7)), 1.0)
    return _ops.cast(elementwise("mul", wide, scale), rows.dtype)


def signbit(arg: TensorView) -> TensorView:
    """nvFuser's `signbit(arg)`: whether the sign bit is set (-0.0 too), torch's `signbit`."""
    return _torch_math.signbit(arg)


def frac(arg: TensorView) -> TensorView:
    """nvFuser's `frac(arg)`: x - trunc(x), the sign of x kept (torch's `frac`)."""
    return _torch_math.frac(arg)


def mod(lhs: object, rhs: object) -> TensorView:
    """nvFuser's `mod(a, b)`: C's remainder, the dividend's sign (torch's `fmod`), for integers and floats."""
    return _ops.fmod(lhs, rhs)


def isposinf(arg: TensorView) -> TensorView:
    """nvFuser's `isposinf(arg)`: x == +inf."""
    return elementwise("eq", arg, float("inf"))


def isneginf(arg: TensorView) -> TensorView:
    """nvFuser's `isneginf(arg)`: x == -inf."""
    return elementwise("eq", arg, float("-inf"))


def isreal(arg: TensorView) -> TensorView:
    """nvFuser's `isreal(arg)`: True everywhere, braze having no complex dtypes."""
    return _ops.full_like(arg, True, dt.bool_)


def erfcinv(arg: TensorView) -> TensorView:
    """nvFuser's `erfcinv(arg)`: erfinv(1 - x)."""
    return _ops.erfinv(elementwise("sub", 1.0, arg))


def logical_right_shift(lhs: TensorView, rhs: object) -> TensorView:
    """nvFuser's `logical_right_shift(x, n)`: x >> n with zeros shifted in, whatever x's sign (x's bits
    as the unsigned integer of its width, shifted, read back as x's dtype)."""
    lhs = _view_composites.tensor_arg("logical_right_shift", lhs)
    rhs = rhs if isinstance(rhs, TensorView) else _ops.full([], rhs, lhs.dtype)
    if not lhs.dtype.is_integer:
        raise FusionDefinitionError(f"logical_right_shift: {lhs.describe()}: expected an integer dtype, got "
                                    f"{lhs.dtype.name}")
    if lhs.dtype.is_unsigned:
        return elementwise("right_shift", lhs, rhs)
    bits = dt.as_dtype(f"uint{8 * lhs.dtype.itemsize}")
    # integer casts between one width wrap, keeping the bits
    return _ops.cast(elementwise("right_shift", _ops.cast(lhs, bits), _ops.cast(rhs, bits)), lhs.dtype)


def slice(arg: TensorView, start_indices: Sequence[object] | None = None,  # noqa: A001
          end_indices: Sequence[object] | None = None, strides: Sequence[int] | None = None,
          manual_normalization: object = False) -> TensorView:
    """nvFuser's `slice(arg, start_indices, end_indices, strides, manual_normalization)`; braze's bounds
    follow Python's rules whatever `manual_normalization` says (nvFuser's normalization of negative
    bounds and its clamping, done for it there)."""
    return _ops.slice(arg, start_indices=start_indices, end_indices=end_indices, strides=strides)


def pad(arg: TensorView, pad_widths: Sequence[int | TensorView], value: object = None) -> TensorView:
    """nvFuser's `pad(arg, pad_widths, value)`: widths flat and from the last dimension, as torch's
    `F.pad` takes them (`[left, right, top, bottom]`); `value` 0 when not given. A negative width cuts
    that many elements off, as in torch and nvFuser."""
    if not isinstance(pad_widths, Sequence) or len(pad_widths) % 2 or any(
            isinstance(w, Sequence) for w in pad_widths):
        raise FusionDefinitionError(f"pad: pad_widths: expected an even number of widths, (before, after) for the "
                                    f"last dimension first, got {pad_widths!r}")
    pairs = [tuple(size_value(w, "pad: widths") for w in pad_widths[i:i + 2]) for i in range(0, len(pad_widths), 2)]
    pairs = pairs[::-1]
    cuts = [(-lo if _negative(lo) else None, hi if _negative(hi) else None) for lo, hi in pairs]
    if any(cut != (None, None) for cut in cuts):
        whole = [builtins.slice(None)] * (arg.ndim - len(cuts))  # `slice` here is nvFuser's op
        arg = _ops.slice(arg, whole + [builtins.slice(*cut) for cut in cuts])
        pairs = [(0 if _negative(lo) else lo, 0 if _negative(hi) else hi) for lo, hi in pairs]
    return _ops.pad(arg, pairs, 0 if value is None else value)


def _negative(width: object) -> bool:
    return isinstance(width, int) and width < 0


def cat(tensors: Sequence[TensorView], dim: int = 0, manual_padding: object = False) -> TensorView:
    """nvFuser's `cat(tensors, dim, manual_padding)`; how nvFuser lowers it (`manual_padding`) is its own."""
    return _ops.cat(tensors, dim)


def squeeze(arg: TensorView, dims: object = None, squeeze_expanded: object = False) -> TensorView:
    """nvFuser's `squeeze(arg, dims, squeeze_expanded)`: the dims must have extent 1 (checked at run time)."""
    return _ops.squeeze(arg, dims)


def broadcast(arg: TensorView, is_broadcast_dim: Sequence[bool]) -> TensorView:
    """nvFuser's `broadcast(arg, is_broadcast_dim)`."""
    return _ops.broadcast(arg, is_broadcast_dim)


def size(arg: TensorView, dim: int) -> object:
    """nvFuser's `size(arg, dim)`: the extent `arg.size(dim)`, which reshape, broadcast_in_dim and slice take."""
    return _extents(arg, "size")[normalize_axis(dim, arg.ndim, "size: dim")]


def shape(arg: TensorView) -> Shape:
    """nvFuser's `shape(arg)`: `arg.shape`, its extents."""
    return _extents(arg, "shape")


def at(extents: Sequence[object], index: int) -> object:
    """nvFuser's `at(shape, index)`: `shape[index]`."""
    return extents[index]


def _extents(arg: object, op: str) -> Shape:
    if not isinstance(arg, TensorView):
        raise FusionDefinitionError(f"{op}: arg: expected a TensorView, got {type(arg).__name__}")
    return arg.shape


def stride_order(arg: TensorView, stride_order: Sequence[int]) -> TensorView:
    """nvFuser's `stride_order(arg, stride_order)`: a copy of `arg` laid out in that order (0 the fastest
    dimension), the layout an output added from it keeps."""
    out = elementwise("set", arg)
    out.set_stride_order(stride_order)
    return out


def segment_set(arg: TensorView) -> TensorView:
    """nvFuser's `segment_set`: a copy (`bz.ops.set`); braze cuts fusions into segments itself."""
    return elementwise("set", arg)


# --- elementwise -----------------------------------------------------------------------------------
def div(lhs: object, rhs: object) -> TensorView:
    """nvFuser's `div`: C's division, rounded toward zero between integers, true division otherwise."""
    return _torch_div(lhs, rhs, rounding_mode="trunc") if _integers(lhs, rhs) else elementwise("truediv", lhs, rhs)


def _integers(*operands: object) -> bool:
    kinds = [o.dtype for o in operands if isinstance(o, TensorView)]
    kinds += [dt.int64 for o in operands if isinstance(o, int) and not isinstance(o, bool)]
    return all(d.is_integer or d.is_bool for d in kinds) and any(d.is_integer for d in kinds)


def bitwise_left_shift(lhs: object, rhs: object) -> TensorView:
    """nvFuser's name of `left_shift` (x << n)."""
    return elementwise("left_shift", lhs, rhs)


def bitwise_right_shift(lhs: object, rhs: object) -> TensorView:
    """nvFuser's name of `right_shift` (x >> n, arithmetic for signed integers)."""
    return elementwise("right_shift", lhs, rhs)


def iota(length: int | TensorView, start: object = None, step: object = None, dtype: object = dt.int64
         ) -> TensorView:
    """nvFuser's `iota(length, start, step, dtype)`: `start, start + step, ...`, `length` of them."""
    length = size_value(length, "iota: length")
    start, step = (0 if v is None else v if _is_scalar_input(v) else size_value(v, f"iota: {what}")
                   for v, what in ((start, "start"), (step, "step")))
    return elementwise("add", elementwise("mul", _ops.arange(length, dtype=dtype), step), start)


def _is_scalar_input(value: object) -> bool:
    """A scalar passed to execute(): a value in the fusion, not a size."""
    return isinstance(value, TensorView) and value.scalar == "input"


def rand_like(arg: TensorView) -> TensorView:
    """nvFuser's `rand_like(arg)`: `rand(arg.shape, arg.dtype)`."""
    return _ops.rand(_extents(arg, "rand_like"), arg.dtype)


def randn_like(arg: TensorView) -> TensorView:
    """nvFuser's `randn_like(arg)`: `randn(arg.shape, arg.dtype)`."""
    return _ops.randn(_extents(arg, "randn_like"), arg.dtype)
