"""Iteration domains and the transforms between them (docs/architecture.md, "Fusion IR")."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from braze.ir.scalar import Scalar, as_scalar, ceildiv


class IterType(enum.Enum):
    """What a dimension does: iterate, get reduced, or broadcast (extent 1, always indexed at 0)."""

    ITERATION = "i"
    REDUCTION = "r"
    BROADCAST = "b"


class ParallelType(enum.Enum):
    """How a loop dimension is mapped to hardware when it is lowered."""

    SERIAL = "serial"
    GRID_X = "blockIdx.x"
    GRID_Y = "blockIdx.y"
    GRID_Z = "blockIdx.z"
    BLOCK_X = "threadIdx.x"
    BLOCK_Y = "threadIdx.y"
    BLOCK_Z = "threadIdx.z"
    VECTORIZE = "vectorize"
    UNROLL = "unroll"


class IterDomain:
    """One dimension: a symbolic extent, an IterType and a parallel type.

    IterDomains compare by identity: two dimensions with equal extents are still different
    dimensions, and transforms link them by object.
    """

    __slots__ = ("extent", "iter_type", "parallel", "definition")

    def __init__(self, extent: Scalar | int, iter_type: IterType = IterType.ITERATION) -> None:
        self.extent: Scalar = as_scalar(extent)
        self.iter_type = iter_type
        self.parallel = ParallelType.SERIAL
        self.definition: Split | Merge | None = None  # the transform that produced it

    @property
    def is_reduction(self) -> bool:
        return self.iter_type is IterType.REDUCTION

    @property
    def is_broadcast(self) -> bool:
        return self.iter_type is IterType.BROADCAST

    def parallelize(self, parallel: ParallelType) -> IterDomain:
        """Maps this dimension to `parallel`; returns self so calls chain."""
        self.parallel = parallel
        return self

    def clone(self, iter_type: IterType | None = None, extent: Scalar | int | None = None) -> IterDomain:
        """A fresh dimension with this one's extent and kind (or the ones given)."""
        return IterDomain(self.extent if extent is None else extent, iter_type or self.iter_type)

    def text(self) -> str:
        """`extent`, prefixed by `r` for reductions and `b` for broadcasts, suffixed by the parallel type."""
        prefix = "" if self.iter_type is IterType.ITERATION else self.iter_type.value
        suffix = "" if self.parallel is ParallelType.SERIAL else f"{{{self.parallel.value}}}"
        return f"{prefix}{self.extent}{suffix}"

    def __repr__(self) -> str:
        return f"IterDomain({self.text()})"


@dataclass(eq=False)
class Split:
    """`inp` split by `factor` into (outer = ceildiv(extent, factor), inner = factor)."""

    inp: IterDomain
    factor: Scalar
    outer: IterDomain
    inner: IterDomain

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.inp,)

    def text(self, ids: dict[IterDomain, str]) -> str:
        return f"split({ids[self.inp]}, {self.factor}) -> {ids[self.outer]}, {ids[self.inner]}"


@dataclass(eq=False)
class Merge:
    """`outer` and `inner` merged into one dimension of extent outer * inner."""

    outer: IterDomain
    inner: IterDomain
    out: IterDomain

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.outer, self.inner)

    def text(self, ids: dict[IterDomain, str]) -> str:
        return f"merge({ids[self.outer]}, {ids[self.inner]}) -> {ids[self.out]}"


@dataclass(eq=False)
class Reorder:
    """A permutation of a domain: `old_to_new[i]` is where position i went."""

    old_to_new: tuple[int, ...]

    def text(self, ids: dict[IterDomain, str]) -> str:
        return f"reorder({dict(enumerate(self.old_to_new))})"


def split(inp: IterDomain, factor: Scalar | int) -> Split:
    """Splits `inp`; the outer extent rounds up, so a non-divisible extent gets padded."""
    factor = as_scalar(factor)
    outer = IterDomain(ceildiv(inp.extent, factor), inp.iter_type)
    inner = IterDomain(factor, inp.iter_type)
    transform = Split(inp, factor, outer, inner)
    outer.definition = inner.definition = transform
    return transform


def merge(outer: IterDomain, inner: IterDomain) -> Merge:
    """Merges two adjacent dimensions (outer is the slower one)."""
    iter_type = outer.iter_type if outer.iter_type is inner.iter_type else IterType.ITERATION
    out = IterDomain(outer.extent * inner.extent, iter_type)
    transform = Merge(outer, inner, out)
    out.definition = transform
    return transform


def covers_exactly(domain: list[IterDomain], roots: list[IterDomain]) -> bool:
    """Whether `domain`, undone transform by transform, gives back exactly `roots`.

    A split undoes only when both its halves are present, so a layout that keeps half of a
    split dimension (or one dimension twice) is rejected.
    """
    frontier = {id(d): d for d in domain}
    if len(frontier) != len(domain):
        return False
    changed = True
    while changed:
        changed = False
        for d in list(frontier.values()):
            t = d.definition
            if isinstance(t, Merge) and id(d) in frontier:
                del frontier[id(d)]
                frontier.update({id(t.outer): t.outer, id(t.inner): t.inner})
                changed = True
            elif isinstance(t, Split) and id(t.outer) in frontier and id(t.inner) in frontier:
                del frontier[id(t.outer)], frontier[id(t.inner)]
                frontier[id(t.inp)] = t.inp
                changed = True
    return sorted(frontier) == sorted(id(r) for r in roots)
