"""Views and layout ops: permute, reshape, squeeze, slice, pad, cat, flip (and the helpers built
on them: transpose, unsqueeze)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from braze import dtypes as dt
from braze.errors import FusionDefinitionError
from braze.ir.domain import IterDomain, IterType
from braze.ir.scalar import Scalar, as_scalar, ceildiv, concrete_value, smax, smin
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops.broadcast import broadcast
from braze.ops.elementwise import as_operand, check_fill, not_a_tensor
from braze.ops.reductions import keyword_aliases, normalize_axes
from braze.ops.table import OpDef, RefContext, apply, register, size_value

_first_dtype = lambda inputs, attrs: inputs[0].dtype


def _entry(name: str, shape, reference, dtype=_first_dtype) -> None:
    register(OpDef(name, "view", shape, dtype, reference))


def _check_tensor(op: str, x: object) -> TensorView:
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    return x


# --- permute ----------------------------------------------------------------------------------
_entry(
    "permute",
    lambda ins, a: [ins[0].visible[d].clone() for d in a["dims"]],
    lambda ctx, args, out, a: np.transpose(args[0], a["dims"]),
)


def permute(x: TensorView, dims: Sequence[int]) -> TensorView:
    """Output dimension i is x's dimension dims[i]."""
    x = _check_tensor("permute", x)
    normalized = tuple(normalize_axis(d, x.ndim, "permute dims") for d in dims)
    if sorted(normalized) != list(range(x.ndim)):
        raise FusionDefinitionError(f"permute: expected a permutation of {x.ndim} dimensions, got {tuple(dims)}")
    return x if normalized == tuple(range(x.ndim)) else apply("permute", [x], dims=normalized)


def transpose(x: TensorView, dim0: int = -2, dim1: int = -1) -> TensorView:
    """Swaps two dimensions (the last two by default)."""
    x = _check_tensor("transpose", x)
    dims = list(range(x.ndim))
    a, b = normalize_axis(dim0, x.ndim, "transpose dim0"), normalize_axis(dim1, x.ndim, "transpose dim1")
    dims[a], dims[b] = dims[b], dims[a]
    return permute(x, dims)


# --- reshape ----------------------------------------------------------------------------------
def _product(extents: Sequence[Scalar]) -> Scalar:
    total = as_scalar(1)
    for e in extents:
        total = total * e
    return total


_entry(
    "reshape",
    lambda ins, a: [IterDomain(e, IterType.BROADCAST if e.same_as(1) else IterType.ITERATION) for e in a["shape"]],
    lambda ctx, args, out, a: np.reshape(args[0], ctx.shape(out.logical)),
)


@keyword_aliases(shape=("new_shape",))
def reshape(x: TensorView, shape: Sequence[int | Scalar]) -> TensorView:
    """Same elements, row-major, in a new shape (nvFuser's `new_shape=`); one extent may be -1 (inferred)."""
    x = _check_tensor("reshape", x)
    shape = [_reshape_extent(e, i) for i, e in enumerate(shape)]
    inferred = [i for i, e in enumerate(shape) if isinstance(e, int) and e == -1]
    if len(inferred) > 1 or any(isinstance(e, int) and e < -1 for e in shape):
        raise FusionDefinitionError(f"reshape: expected non-negative extents and at most one -1, got {shape}")
    numel = _product(x.shape)
    if inferred:
        known = _product([as_scalar(e) for i, e in enumerate(shape) if i != inferred[0]])
        if known.is_const and known.value == 0:
            raise FusionDefinitionError(f"reshape: cannot infer -1 in {shape} when the other extents multiply to 0")
        shape[inferred[0]] = numel // known
    extents = tuple(as_scalar(e) for e in shape)
    shown = "[" + ", ".join(str(e) for e in extents) + "]"
    x.fusion.require_equal(numel, _product(extents), f"reshape of {x.describe()} to {shown}: element counts")
    if len(extents) == x.ndim and all(a == b for a, b in zip(extents, x.shape)):
        return x
    return apply("reshape", [x], shape=extents)


def _reshape_extent(extent: object, position: int) -> int | Scalar:
    """An int (NumPy's too, as a Python int: `np.int64(-1)` infers) or an extent. A runtime number of
    `@bz.jit` is a tensor of the fusion, whose value no shape can depend on."""
    extent = size_value(extent, f"reshape: shape[{position}]")
    if isinstance(extent, Scalar):
        return extent
    if isinstance(extent, (int, np.integer)) and not isinstance(extent, (bool, np.bool_)):
        return int(extent)
    raise FusionDefinitionError(f"reshape: shape[{position}]: expected an int or an extent (x.shape[0]), "
                                f"got {_describe_value(extent)}")


def _describe_value(value: object) -> str:
    if isinstance(value, TensorView):
        return f"tensor {value.describe()} of type {value.type_text()}"
    return f"{type(value).__name__} {value!r}"


# --- squeeze / unsqueeze ------------------------------------------------------------------------
def _squeezed(array: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """np.squeeze, where an axis of extent 0 may be among `axes`: a one-element slice of an empty
    dimension broadcast against another empty one (broadcast.py, `_as_broadcast`), whose result is
    empty, so any value of the squeezed shape will do."""
    if any(array.shape[axis] == 0 for axis in axes):
        return np.zeros([n for i, n in enumerate(array.shape) if i not in axes], array.dtype)
    return np.squeeze(array, axes) if axes else array


_entry(
    "squeeze",
    lambda ins, a: [d.clone() for i, d in enumerate(ins[0].visible) if i not in a["axes"]],
    lambda ctx, args, out, a: _squeezed(args[0], a["axes"]),
)


@keyword_aliases(axes=("axis", "dim", "dims"))
def squeeze(x: TensorView, axes: int | Sequence[int] | None = None) -> TensorView:
    """Removes size-1 dimensions: the given ones (which must have extent 1), or all static ones."""
    x = _check_tensor("squeeze", x)
    if axes is None:
        normalized = tuple(i for i, e in enumerate(x.shape) if e.is_const and e.value == 1)
    else:
        normalized = normalize_axes(x, axes, "squeeze")
    for axis in normalized:
        x.fusion.require_equal(x.shape[axis], as_scalar(1), f"squeeze: dimension {axis} of {x.describe()}")
    return apply("squeeze", [x], axes=normalized) if normalized else x


@keyword_aliases(axis=("dim",))
def unsqueeze(x: TensorView, axis: int) -> TensorView:
    """Inserts a size-1 dimension at `axis` (negative counts from the end of the result)."""
    x = _check_tensor("unsqueeze", x)
    axis = normalize_axis(axis, x.ndim + 1, "unsqueeze axis")
    return broadcast(x, [i == axis for i in range(x.ndim + 1)])


# --- slice --------------------------------------------------------------------------------------
Bound = int | Scalar | None  # a slice bound: an int (Python's rules), an extent expression, or none


def _slice_extent(n: Scalar, start: Bound, stop: Bound, step: int) -> tuple[Scalar, Scalar]:
    """Python's slice rules on a symbolic extent: (first index, number of elements). An extent
    expression as a bound counts from the start, clamped to the dimension (it never wraps)."""
    def clamp(i: Bound, default: Scalar, low: int, high: Scalar) -> Scalar:
        if i is None:
            return default
        if isinstance(i, Scalar):
            return smin(smax(i, low), high)
        return smin(smax(n + i if i < 0 else as_scalar(i), low), high)

    if step > 0:
        end = clamp(stop, n, 0, n)
        if start is None or (isinstance(start, int) and start == 0):
            # From the start of an extent (never negative): min(stop, n) elements, in the form a slice of it
            # gives again (x[:1][:1] has x[:1]'s extent, which then need not broadcast against it).
            return as_scalar(0), ceildiv(end, step)
        first = clamp(start, as_scalar(0), 0, n)
        return first, smax(ceildiv(end - first, step), 0)
    first, end = clamp(start, n - 1, -1, n - 1), clamp(stop, as_scalar(-1), -1, n - 1)
    return first, smax(ceildiv(first - end, -step), 0)


def is_whole(bounds: tuple[Bound, Bound, int]) -> bool:
    """Whether a (start, stop, step) slice keeps its dimension as it is."""
    start, stop, step = bounds
    return start is None and stop is None and step == 1


def _one_element(start: Bound, stop: Bound, step: int) -> bool:
    """Whether int bounds of one sign (`:1`, `3:4`, `-1:`, `-2:-1`) ask for exactly one element, so the
    result is one element wherever the dimension is long enough, whatever its extent."""
    if isinstance(start, Scalar) or isinstance(stop, Scalar) or step < 0:
        return False
    first = 0 if start is None else start
    if stop is None:
        return first == -1
    return (first >= 0) == (stop >= 0) and 0 < stop - first <= step


def _slice_dim(x: TensorView, d: IterDomain, bounds: tuple[Bound, Bound, int]) -> IterDomain:
    if is_whole(bounds):
        return d.clone()
    extent = _slice_extent(d.extent, *bounds)[1]
    if d.is_broadcast:  # sliced to nothing it is no longer a broadcast: it has extent 0
        return d.clone() if extent.same_as(1) else d.clone(IterType.ITERATION, extent)
    if extent.same_as(1):  # one element of a static extent broadcasts, as NumPy's size-1 dimensions do
        return IterDomain(1, IterType.BROADCAST)
    if _one_element(*bounds):  # one element wherever the dimension is long enough: broadcasts when used so
        x.fusion.one_element_extents.add(extent)
    return d.clone(IterType.ITERATION, extent)


def _slice_shape(ins, a):
    x = ins[0]
    return [_slice_dim(x, d, bounds) for d, bounds in zip(x.visible, a["slices"])]


def _slice_reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
    x = args[0]
    index = []
    for n, (start, stop, step) in zip(x.shape, a["slices"]):
        bound = lambda b, n=n: min(max(ctx.extent(b), 0), n) if isinstance(b, Scalar) else b  # noqa: E731
        index.append(slice(bound(start), bound(stop), step))
    return x[tuple(index)]


_entry("slice", _slice_shape, _slice_reference)


def slice_tensor(x: TensorView, slices: Sequence[slice | tuple] | None = None,
                 end_indices: Sequence[Bound] | None = None, strides: Sequence[int] | None = None, *,
                 start_indices: Sequence[Bound] | None = None) -> TensorView:
    """`x[s0, s1, ...]` for Python slices (steps may be negative); missing trailing dims are kept.
    Start and stop may also be extent expressions (`y.shape[0]`, `n - 2`) with a positive step:
    the slice's bounds then come from the inputs' extents on each run. nvFuser's form,
    `slice(x, start_indices, end_indices, strides=None)`, is `x[start:end:stride, ...]`."""
    x = _check_tensor("slice", x)
    if start_indices is not None or end_indices is not None:
        if start_indices is not None and slices is not None:
            raise FusionDefinitionError("slice: expected slices or start_indices=, got both")
        slices = _slices_from_indices(slices if start_indices is None else start_indices, end_indices, strides)
    elif slices is None or strides is not None:
        raise FusionDefinitionError("slice: expected slices, or start_indices and end_indices (nvFuser's form)")
    if len(slices) > x.ndim:
        raise FusionDefinitionError(f"slice: {x.describe()} has {x.ndim} dimensions, got {len(slices)} slices")
    triples = []
    for axis, s in enumerate(list(slices) + [slice(None)] * (x.ndim - len(slices))):
        if not isinstance(s, slice) and not (isinstance(s, (tuple, list)) and len(s) == 3):
            raise FusionDefinitionError(f"slice: dimension {axis}: expected a slice or a (start, stop, step) "
                                        f"tuple, got {s!r} (nvFuser's form: slice(x, start_indices, end_indices))")
        start, stop, step = (size_value(v, f"slice: dimension {axis}")
                             for v in ((s.start, s.stop, s.step) if isinstance(s, slice) else tuple(s)))
        step = 1 if step is None else step
        for what, v in (("start", start), ("stop", stop)):
            if v is not None and not isinstance(v, Scalar) and (not isinstance(v, int) or isinstance(v, bool)):
                raise FusionDefinitionError(f"slice: {what} of dimension {axis}: expected an int or an extent, "
                                            f"got {v!r}")
        if not isinstance(step, int) or isinstance(step, bool) or step == 0:
            raise FusionDefinitionError(f"slice: step of dimension {axis}: expected a non-zero int, got {step!r}")
        if step < 0 and (isinstance(start, Scalar) or isinstance(stop, Scalar)):
            raise FusionDefinitionError(f"slice: dimension {axis}: extent bounds need a positive step, got {step}")
        triples.append((start, stop, step))
    if all(is_whole(t) for t in triples):
        return x
    return apply("slice", [x], slices=tuple(triples))


def _slices_from_indices(starts: Sequence[Bound] | None, ends: Sequence[Bound] | None,
                         strides: Sequence[int] | None) -> list[slice]:
    """nvFuser's (start_indices, end_indices, strides) as one Python slice per dimension."""
    parts = {"start_indices": starts, "end_indices": ends}
    if strides is not None:
        parts["strides"] = strides
    for what, values in parts.items():
        if not isinstance(values, Sequence):
            raise FusionDefinitionError(f"slice: {what}: expected one bound per dimension, got {values!r}")
    lengths = {what: len(values) for what, values in parts.items()}
    if len(set(lengths.values())) != 1:
        raise FusionDefinitionError(f"slice: expected as many start_indices, end_indices and strides, got {lengths}")
    steps = strides if strides is not None else [1] * len(starts)
    return [slice(start, end, step) for start, end, step in zip(starts, ends, steps)]


# --- pad --------------------------------------------------------------------------------------
def _pad_reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
    with np.errstate(all="ignore"):  # the fill converts as a cast does (1e6 in float16 is inf)
        fill = args[1].astype(args[0].dtype)
    return np.pad(args[0], a["widths"], constant_values=fill)


_entry(
    "pad",
    lambda ins, a: [d.clone(IterType.ITERATION, d.extent + lo + hi) if lo or hi else d.clone()
                    for d, (lo, hi) in zip(ins[0].visible, a["widths"])],
    _pad_reference,
)


def _pad_width(width: object) -> int:
    """An int. An extent (`x.shape[0]`, `(-n) % 8` padding to a multiple) is its number where it has one: a
    static extent, or a size a @bz.jit trace specializes on; a width computed in the fusion (a tensor) has no
    value when it is defined."""
    width = size_value(width, "pad: widths")
    if isinstance(width, Scalar):
        number = concrete_value(width)
        if number is None:
            raise FusionDefinitionError(f"pad: widths: expected ints, got the symbolic extent {width}; the widths "
                                        "set the padded shape when the fusion is defined")
        return number
    if isinstance(width, (int, np.integer)) and not isinstance(width, (bool, np.bool_)):
        return int(width)
    raise FusionDefinitionError(f"pad: widths: expected ints or extents (x.shape[0]), got {_describe_value(width)}")


def pad(x: TensorView, widths: Sequence[tuple[int, int]], value: float | int | bool = 0) -> TensorView:
    """Pads with `value`: widths[i] = (before, after) for dimension i (missing leading dims get none)."""
    x = _check_tensor("pad", x)
    if not isinstance(widths, Sequence) or not all(isinstance(w, Sequence) for w in widths):
        raise FusionDefinitionError(
            f"pad: widths: expected (before, after) pairs, one per dimension from the first as NumPy's pad "
            f"takes them, got {widths!r}; torch's F.pad(x, (left, right)) starts from the last dimension: "
            f"write [(0, 0), ..., (left, right)]")
    widths = [tuple(_pad_width(v) for v in w) for w in widths]
    if len(widths) > x.ndim or any(len(w) != 2 or min(w) < 0 for w in widths):
        raise FusionDefinitionError(
            f"pad: expected at most {x.ndim} pairs of non-negative (before, after) widths, got {widths}"
        )
    widths = [(0, 0)] * (x.ndim - len(widths)) + widths
    check_fill("pad", value, x.dtype)
    fill = as_operand("pad", x.fusion, value, 1)
    if fill.ndim != 0:
        raise FusionDefinitionError(f"pad: value: expected a scalar, got a tensor of rank {fill.ndim}")
    return apply("pad", [x, fill], widths=tuple(widths))


# --- cat --------------------------------------------------------------------------------------
def _cat_shape(ins, a):
    axis = a["axis"]
    first = ins[0]
    for tv in ins[1:]:
        for i in range(first.ndim):
            if i != axis:
                why = f"cat: dimension {i} of {first.describe()} and {tv.describe()} must match"
                first.fusion.require_equal(first.shape[i], tv.shape[i], why)
    total = _whole_extent(ins, axis)
    if total is None:
        total = as_scalar(0)
        for tv in ins:
            total = total + tv.shape[axis]
    # An axis of extent 1 in every input stays a broadcast (it broadcasts against others as NumPy's does);
    # one of extent 1 in some inputs only is known to be 1 at run time alone.
    every_broadcast = [all(tv.visible[i].is_broadcast for tv in ins) for i in range(first.ndim)]
    return [IterDomain(total) if i == axis else d.clone(None if every_broadcast[i] else IterType.ITERATION)
            for i, d in enumerate(first.visible)]


def _whole_extent(ins, axis: int) -> Scalar | None:
    """The extent of `x` along `axis` when `ins` are `x[c:]` and `x[:c]` there (a roll), in either order:
    their extents add up to it for any `c`, as Python clamps slice bounds. Summed symbolically they give
    an expression that nests with each roll of a roll (`max(n - min(c, n), 0) + min(c, n)`), and so do
    the indices of every read through them: a heat equation stepped by np.roll in a Python loop
    compiled in minutes. None for any other cat."""
    if len(ins) != 2 or any(tv.definition is None or tv.definition.op != "slice" for tv in ins):
        return None
    source = ins[0].definition.inputs[0]
    if ins[1].definition.inputs[0] is not source:
        return None
    triples = [tv.definition.attrs["slices"] for tv in ins]
    whole = (None, None, 1)
    if any(t[n] != whole for t in triples for n in range(len(t)) if n != axis):
        return None
    tail, head = sorted((t[axis] for t in triples), key=lambda bounds: bounds[1] is not None)
    (cut, tail_stop, tail_step), (head_start, head_stop, head_step) = tail, head
    if tail_stop is not None or tail_step != 1 or head_step != 1 or head_start not in (None, 0):
        return None
    if cut is None or head_stop is None or not as_scalar(cut).same_as(head_stop):
        return None
    return source.shape[axis]


def _cat_reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
    return np.concatenate([x.astype(out.dtype.numpy) for x in args], axis=a["axis"])


_entry("cat", _cat_shape, _cat_reference,
       dtype=lambda ins, a: dt.result_type(*[(t.dtype, False) for t in ins]))


@keyword_aliases(axis=("dim",))
def cat(tensors: Sequence[TensorView], axis: int = 0) -> TensorView:
    """Concatenates along `axis`; the other extents must match. The dtype is their promoted type."""
    tensors = [_check_tensor("cat", t) for t in tensors]
    if not tensors:
        raise FusionDefinitionError("cat: expected at least one tensor, got none")
    ranks = {t.ndim for t in tensors}
    if len(ranks) != 1 or 0 in ranks:
        raise FusionDefinitionError(f"cat: expected tensors of one rank >= 1, got ranks {[t.ndim for t in tensors]}")
    axis = normalize_axis(axis, tensors[0].ndim, "cat axis")
    return tensors[0] if len(tensors) == 1 else apply("cat", tensors, axis=axis)


# --- flip -------------------------------------------------------------------------------------
_entry(
    "flip",
    lambda ins, a: [d.clone() for d in ins[0].visible],
    lambda ctx, args, out, a: np.flip(args[0], a["axes"]),
)


@keyword_aliases(axes=("axis", "dims"))
def flip(x: TensorView, axes: int | Sequence[int] | None = None) -> TensorView:
    """Reverses the order of elements along `axes` (all by default)."""
    x = _check_tensor("flip", x)
    normalized = normalize_axes(x, axes, "flip")
    return apply("flip", [x], axes=normalized) if normalized else x
