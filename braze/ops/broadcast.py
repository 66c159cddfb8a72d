"""Broadcasting: NumPy's implicit rules, `broadcast` (new size-1 dimensions), `expand` and
`broadcast_in_dim`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from braze.errors import FusionDefinitionError
from braze.ir.domain import IterDomain, IterType
from braze.ir.scalar import Scalar, as_scalar, smin
from braze.ir.tensor import TensorView
from braze.ops.table import OpDef, RefContext, apply, register, size_value


def _same_dtype(inputs: Sequence[TensorView], attrs: dict):
    return inputs[0].dtype


# --- broadcast: insert size-1 broadcast dimensions ------------------------------------------------
def _broadcast_shape(inputs: Sequence[TensorView], attrs: dict) -> list[IterDomain]:
    source = iter(inputs[0].visible)
    return [IterDomain(1, IterType.BROADCAST) if new else next(source).clone() for new in attrs["is_new"]]


def _broadcast_reference(ctx: RefContext, args, out: TensorView, attrs: dict) -> np.ndarray:
    new_axes = tuple(i for i, new in enumerate(attrs["is_new"]) if new)
    return np.expand_dims(args[0], new_axes) if new_axes else args[0]


register(OpDef("broadcast", "view", _broadcast_shape, _same_dtype, _broadcast_reference))


def broadcast(x: TensorView, is_new: Sequence[bool]) -> TensorView:
    """Inserts a broadcast dimension wherever `is_new` is True; the others take x's dimensions in order."""
    is_new = tuple(bool(b) for b in is_new)
    if sum(not b for b in is_new) != x.ndim:
        raise FusionDefinitionError(
            f"broadcast: {x.describe()} has {x.ndim} dimensions, but is_new keeps {sum(not b for b in is_new)}"
        )
    if not any(is_new):
        return x
    out = apply("broadcast", [x], is_new=is_new)
    out.label = x.label
    return out


# --- expand: give broadcast dimensions an extent ------------------------------------------------
def _expand_shape(inputs: Sequence[TensorView], attrs: dict) -> list[IterDomain]:
    x = inputs[0]
    out = []
    for axis, (dim, extent) in enumerate(zip(x.visible, attrs["shape"])):
        if dim.is_broadcast and not (extent.is_const and extent.value == 1):
            out.append(IterDomain(extent, IterType.ITERATION))
            continue
        x.fusion.require_equal(dim.extent, extent, f"expand: dimension {axis} of {x.describe()}")
        out.append(dim.clone())
    return out


def _expand_reference(ctx: RefContext, args, out: TensorView, attrs: dict) -> np.ndarray:
    return np.broadcast_to(args[0], ctx.shape(out.logical))


register(OpDef("expand", "view", _expand_shape, _same_dtype, _expand_reference))


def expand(x: TensorView, shape: Sequence[int | Scalar]) -> TensorView:
    """Expands broadcast (size-1) dimensions to `shape`; -1 keeps a dimension's extent."""
    if len(shape) != x.ndim:
        raise FusionDefinitionError(f"expand: {x.describe()} has {x.ndim} dimensions, got shape of length {len(shape)}")
    extents = tuple(
        dim.extent if isinstance(e, int) and e == -1 else _extent_arg(e, "expand") for dim, e in zip(x.visible, shape)
    )
    if all(e == d.extent for e, d in zip(extents, x.visible)):
        return x
    (x,) = broadcast_one_element_slices("expand", [x], extents)
    return apply("expand", [x], shape=extents)


def _extent_arg(value: int | Scalar, what: str) -> Scalar:
    value = size_value(value, what)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise FusionDefinitionError(f"{what}: expected a non-negative extent or -1, got {value}")
    try:
        return as_scalar(value)
    except TypeError:
        raise FusionDefinitionError(f"{what}: expected an int or a symbolic extent, got {value!r}") from None


def broadcast_in_dim(x: TensorView, shape: Sequence[int | Scalar], broadcast_dims: Sequence[int]) -> TensorView:
    """Places x's dimension i at output dimension broadcast_dims[i], broadcasting the rest to `shape`."""
    rank = len(shape)
    dims = list(broadcast_dims)
    if len(dims) != x.ndim or sorted(set(dims)) != dims or any(not 0 <= d < rank for d in dims):
        raise FusionDefinitionError(
            f"broadcast_in_dim: expected {x.ndim} increasing dimensions in [0, {rank}) for {x.describe()}, got {dims}"
        )
    placed = broadcast(x, [i not in dims for i in range(rank)])
    return expand(placed, shape)


def align_ranks(tensors: Sequence[TensorView]) -> list[TensorView]:
    """NumPy rank alignment: lower-rank tensors get leading broadcast dimensions. Rank 0 stays as is."""
    rank = max((t.ndim for t in tensors), default=0)
    return [t if t.ndim in (0, rank) else broadcast(t, [True] * (rank - t.ndim) + [False] * t.ndim) for t in tensors]


def _as_broadcast(op: str, x: TensorView, axis: int, against: Scalar | None) -> TensorView:
    """x with dimension `axis` (a one-element slice) made a size-1 broadcast dimension; its extent is
    checked to be 1 at run time (an empty slice of too short a dimension would not broadcast), or 0 where
    the extent `against` it broadcasts to is 0 too, as NumPy's (0,) meets (0,) (`x[1:] - x[1:][:1]` of an
    empty x)."""
    extent = x.visible[axis].extent
    why = f"{op}: dimension {axis - x.ndim} of {x.describe()}, one element of a slice, broadcast"
    if against is None:
        x.fusion.require_equal(extent, as_scalar(1), why)
    else:
        x.fusion.require_equal(smin(extent, against), smin(1, against), why)
    squeezed = apply("squeeze", [x], axes=(axis,))
    return broadcast(squeezed, [i == axis for i in range(x.ndim)])


def broadcast_one_element_slices(op: str, tensors: Sequence[TensorView], extents=None) -> list[TensorView]:
    """Rank-aligned `tensors` with each one-element slice of a symbolic extent (`x[:, :1]`) made a
    broadcast dimension wherever another operand (or `extents`, an expand's target) has another extent
    there, so it broadcasts as the size-1 dimension it is in NumPy."""
    tensors = list(tensors)
    shaped = [i for i, t in enumerate(tensors) if t.ndim > 0]
    if not shaped:
        return tensors
    one_element = tensors[shaped[0]].fusion.one_element_extents
    for axis in range(tensors[shaped[0]].ndim):
        full = {tensors[i].visible[axis].extent for i in shaped if not tensors[i].visible[axis].is_broadcast}
        if extents is not None:
            full.add(extents[axis])
        if len(full) < 2 or not full & one_element:
            continue
        # the extent they broadcast to, where one is no one-element slice (which broadcasts itself)
        against = next((e for e in full if e not in one_element), None)
        for i in shaped:
            dim = tensors[i].visible[axis]
            if not dim.is_broadcast and dim.extent in one_element:
                tensors[i] = _as_broadcast(op, tensors[i], axis, against)
    return tensors


def _operand(tv: TensorView) -> str:
    """An operand as the user knows it: a tensor rank-aligned by a broadcast is named by its source
    (`T1 ('b')`, not the broadcast view `T2` the user never made)."""
    while tv.definition is not None and tv.definition.op == "broadcast":
        tv = tv.definition.inputs[0]
    return tv.describe()


def broadcast_domains(op: str, tensors: Sequence[TensorView]) -> list[IterDomain]:
    """The output domain of an elementwise op over rank-aligned tensors (rank 0 ones are scalars)."""
    shaped = [t for t in tensors if t.ndim > 0]
    if not shaped:
        return []
    rank = shaped[0].ndim
    out = []
    for axis in range(rank):
        dims = [(t, t.visible[axis]) for t in shaped]
        full = [(t, d) for t, d in dims if not d.is_broadcast]
        if not full:
            out.append(IterDomain(1, IterType.BROADCAST))
            continue
        first_tv, first = full[0]
        for tv, dim in full[1:]:
            why = f"{op}: dimension {axis - rank} of {_operand(first_tv)} and {_operand(tv)} must match"
            first_tv.fusion.require_equal(first.extent, dim.extent, why)
        out.append(IterDomain(first.extent, IterType.ITERATION))
    return out
