"""The transpose scheduler's test: does a pointwise task read some tensor along an axis other than the
one it writes contiguously, and which?

Row by row, a task walks its output along the innermost axis of its loop order (the axis its output
is laid out contiguous along). A tensor it reads whose own contiguous axis (unit stride: its last
axis, or what the input's strides say) lands on another axis of the output (`x + y.T`, a batched
`q.transpose(1, 2)`, an input passed as a transposed view) is then read one element per cache line.
Tiles fix that (loops.schedule_tiles): the loop order puts that other axis second to last, and a
tile spans both, so the CPU finds the tile's lines in L1 and a GPU block stages the tensor through
shared memory (codegen/cuda_tiles.py).

The axes are traced from the task's tensor back to each tensor it reads, through the ops that move
whole axes (elementwise ops, broadcasts, permutes, slices, flips, pads, cats, squeezes); a reshape
ends the trace (its reads follow the flat index).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from braze.ir.tensor import TensorView
from braze.ops.table import lookup


@dataclass(frozen=True)
class ReadLayouts:
    """What a task reads from memory and along which axis each such tensor is contiguous: the fusion's
    inputs, with the unit-stride axis the call's signature gives each (none known: its last axis),
    and the tensors earlier tasks wrote (laid out by their allocation domain)."""

    unit_axes: dict[int, int | None] = field(default_factory=dict)  # id of an input -> axis (None: no unit stride)
    written: frozenset[int] = frozenset()  # ids of the tensors earlier tasks wrote
    dense: frozenset[int] = frozenset()  # ids of the inputs whose elements sit at their flat index

    def is_read(self, tv: TensorView) -> bool:
        return tv.definition is None and tv.scalar is None or id(tv) in self.written

    def unit_axis(self, tv: TensorView) -> int | None:
        if id(tv) in self.unit_axes:
            return self.unit_axes[id(tv)]
        if tv.stride_order is not None:
            return tv.stride_order.index(0)
        return tv.ndim - 1 if tv.has_default_allocation and tv.ndim else None

    def row_major(self, tv: TensorView) -> bool:
        """Whether element (i0, ..., in) of a tensor read sits at its flat index times the unit stride
        of its last axis that is not broadcast: an input dense at this signature with that stride 1,
        or a tensor an earlier task wrote in its default allocation."""
        if id(tv) in self.written:
            return tv.has_default_allocation
        walked = [axis for axis, d in enumerate(tv.visible) if not d.is_broadcast]
        return id(tv) in self.dense and bool(walked) and self.unit_axes.get(id(tv)) == walked[-1]


# For each view op: the axes of input `n` as axes of the op's output (None: an axis the output lacks).
_SAME_AXES = {"slice", "flip", "pad", "cat", "expand"}


def _permuted(tv: TensorView, n: int) -> tuple[int | None, ...]:
    dims = tv.definition.attrs["dims"]
    return tuple(dims.index(axis) for axis in range(len(dims)))


def _broadcast(tv: TensorView, n: int) -> tuple[int | None, ...]:
    return tuple(axis for axis, new in enumerate(tv.definition.attrs["is_new"]) if not new)


def _squeezed(tv: TensorView, n: int) -> tuple[int | None, ...]:
    axes, rest = tv.definition.attrs["axes"], iter(range(tv.ndim))
    return tuple(None if axis in axes else next(rest) for axis in range(tv.definition.inputs[0].ndim))


_VIEW_AXES: dict[str, Callable[[TensorView, int], tuple[int | None, ...]]] = {
    "permute": _permuted, "broadcast": _broadcast, "squeeze": _squeezed,
}


def _input_axes(tv: TensorView, n: int) -> tuple[int | None, ...] | None:
    """Where the axes of `tv`'s `n`-th input sit among `tv`'s axes, or None where the trace ends."""
    expr = tv.definition
    inp = expr.inputs[n]
    category = lookup(expr.op).category
    if category in ("elementwise", "cast") or expr.op in _SAME_AXES:
        return tuple(range(inp.ndim)) if inp.ndim == tv.ndim else None
    rule = _VIEW_AXES.get(expr.op)
    return rule(tv, n) if rule is not None else None


def traced_reads(tv: TensorView, leaf: Callable[[TensorView], bool]) -> Iterator[tuple[TensorView, tuple]]:
    """(tensor read, the axis of `tv` each of its axes is) for every tensor of `tv`'s cone that `leaf`
    says the task reads from memory, reached through ops that move whole axes."""
    pending = [(tv, tuple(range(tv.ndim)))]
    seen: set[tuple[int, tuple]] = set()  # a DAG: a value read twice is walked once (linear time)
    while pending:
        t, axes = pending.pop()
        if (id(t), axes) in seen:
            continue
        seen.add((id(t), axes))
        if leaf(t):
            yield t, axes
            continue
        if t.definition is None:
            continue
        for n, inp in enumerate(t.definition.inputs):
            mapped = _input_axes(t, n) if inp.ndim else None
            if mapped is not None:
                pending.append((inp, tuple(None if a is None else axes[a] for a in mapped)))


def transposed_reads(tv: TensorView, column: int, unit_axis: Callable[[TensorView], int | None],
                     leaf: Callable[[TensorView], bool]) -> list[tuple[TensorView, int]]:
    """(tensor, axis of `tv`) for each read that walks `tv`'s `column` axis with a stride while its own
    unit-stride axis (`unit_axis`) walks that other axis of `tv`."""
    found = []
    for read, axes in traced_reads(tv, leaf):
        unit = unit_axis(read)
        if unit is None or axes[unit] is None or axes[unit] == column:
            continue
        along_column = [a for a, out in enumerate(axes) if out == column and not read.visible[a].is_broadcast]
        if along_column:
            found.append((read, axes[unit]))
    return found
