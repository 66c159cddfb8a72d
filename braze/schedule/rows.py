"""How many trailing axes a pointwise task's rows span: the innermost axis, or the innermost few merged
into one row loop where every tensor the task touches allows it.

A per-channel batch_norm over [32, 256, 56, 56] walked row by row along its innermost axis has
458,752 rows of 56 elements: per-row index arithmetic and setup for a handful of 4-wide vectors. Its
statistics vary only along (n, c) and x and the output are laid out contiguously, so H and W make one
row of 3,136 elements (8,192 rows) with no division per element (nvFuser merges such contiguous axes
before scheduling; Inductor flattens them).

The rows take the trailing axes S (of a row-major output) when:
- every tensor the task reads through ops that move whole axes (transpose.traced_reads) either varies
  along all of S, as its own trailing axes in order and laid out row-major (ReadLayouts.row_major), or
  along none of them (a broadcast statistic);
- every other tensor it reads (through a reshape, say) is laid out row-major;
- some tensor read varies along the axis just outside S but along none of S: the broadcast pattern
  breaks there. Without such a break the rows would merge axes for no broadcast's sake, and their
  count is no longer bounded below by what the broadcast tensors span;
- at least two axes stay outside S, so the rows keep the product of two extents.

The lowering (lower/fusion_kernel.py) keeps the merge exact whatever is read: it gives each merged
axis its index decomposed from the row position, and a load of a row-major tensor indexed by exactly
those indices reads the row position instead (lower/values.py), so no division is left where every
tensor is row-major.
"""

from __future__ import annotations

from braze.ir.tensor import TensorView
from braze.ops.table import lookup
from braze.schedule.transpose import ReadLayouts, traced_reads

# Ops a flat pointwise task may compute: each output element from the same element of each input.
_SAME_ELEMENT = frozenset({"elementwise", "cast"})


def _varying(read: TensorView, axes: tuple, among: tuple[int, ...]) -> list[int]:
    """The positions of `read`'s axes that walk one of the task's axes `among` (not broadcast)."""
    return [p for p, a in enumerate(axes) if a in among and not read.visible[p].is_broadcast]


def _rows_fit(tv: TensorView, traced: list[tuple[TensorView, tuple]], others: list[TensorView],
              reads: ReadLayouts, merged: tuple[int, ...]) -> bool:
    """Whether rows over the task's axes `merged` (its trailing ones) read every tensor exactly and
    contiguously, and the broadcast pattern breaks just outside them."""
    if not all(reads.row_major(t) for t in others):
        return False
    outside, breaks = merged[0] - 1, False
    for read, axes in traced:
        along = _varying(read, axes, merged)
        if not along:
            breaks = breaks or bool(_varying(read, axes, (outside,)))
            continue
        trailing = tuple(range(read.ndim - len(merged), read.ndim))
        if tuple(along) != trailing or tuple(axes[p] for p in trailing) != merged or not reads.row_major(read):
            return False
    return breaks


def row_axes(tv: TensorView, reads: ReadLayouts, cone: list[TensorView]) -> int:
    """How many trailing axes of the pointwise task writing `tv` (whose cone, the tensors it computes
    or reads, is `cone`) its rows span: 1 (the innermost) unless merging more fits (see above)."""
    if tv.ndim < 3 or not tv.has_default_allocation:
        return 1
    traced = list(traced_reads(tv, reads.is_read))
    seen = {id(t) for t, _ in traced}
    others = [t for t in cone if t.ndim and reads.is_read(t) and id(t) not in seen and t is not tv]
    for count in range(tv.ndim - 2, 1, -1):
        if _rows_fit(tv, traced, others, reads, tuple(range(tv.ndim - count, tv.ndim))):
            return count
    return 1


def flat_pointwise(tv: TensorView, reads: ReadLayouts, cone: list[TensorView]) -> bool:
    """Whether a GPU's pointwise task writing `tv` may walk every axis as one flat range: each element
    computed from the same element of every tensor it reads, each of them laid out row-major like
    `tv` (dense at this signature, no axis broadcast). Element i of every array then sits at flat
    index i, so the task reads and writes 16-byte vectors along that index with no division (the
    kernel of a 1-D fusion), where rows of the innermost axis would set a row up every few vectors
    (a bfloat16 cast of [8192, 8192] moved 92% of the bytes a copy does, row by row)."""
    if tv.ndim < 2 or not tv.has_default_allocation:
        return False
    for t in cone:
        if t.ndim == 0:
            continue
        if reads.is_read(t):
            if t.ndim != tv.ndim or any(d.is_broadcast for d in t.visible) or not reads.row_major(t):
                return False
        elif t.definition is None or lookup(t.definition.op).category not in _SAME_ELEMENT or t.ndim != tv.ndim:
            return False
    return True
