"""A scheduler's decisions applied as transforms: the loop domain each written tensor is lowered from.

Every written tensor gets fresh dimensions for its logical axes (the user's tensor keeps its own
loop domain), which the scheduler then transforms: `reorder` to its loop order, `merge` of every
dimension but the innermost into one, `parallelize` of that merged dimension across the task
(threads on the CPU, the grid on a GPU) and of the innermost one as the vectorized loop. Lowering
reads the loop order and the vectorized loop back from this domain, through the recorded transforms.

Column strips (CPU outer reductions and normalizations, `schedule_strips`) `split` the innermost
axis into strips: the strip index is merged into the parallel dimension, the axes a task walks
whole stay serial loops, and the strip's columns are the vectorized loop.

Tiles (transposes, `schedule_tiles`) `split` the two innermost axes into tiles, one per task index:
on the CPU TILE x TILE, so what a transposed read touches of a tile stays in L1 while the tile's rows
are written; on a GPU one block a tile, staged through shared memory (codegen/cuda_tiles.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from braze.ir.domain import IterDomain, Merge, ParallelType, Reorder, Split, merge, split
from braze.ir.scalar import Scalar, ceildiv, smax, smin
from braze.ir.tensor import TensorView

# Column strips: a task's strip is a whole row up to STRIP_CAPACITY columns (16 KiB of float32: the
# lane arrays stay in L1), in whole 64-element vector loops. Narrower strips read each row in pieces:
# on the 2-core machine a [1024, 4096] column sum took 0.42 ms as one strip and 0.8-1.0 ms as two
# strips on two threads, and four strips of 256 were 2x slower than one strip on one thread.
STRIP_CAPACITY = 4096
STRIP_VECTOR = 64
# Tiles: 32 x 32 float32 is 4 KiB of each operand. On the 2-core machine x + y.T of [2048, 2048] ran in
# less than half the time of row by row, with tiles of 8 to 128 alike.
TILE = 32


@dataclass(frozen=True)
class ScheduledLoops:
    """The scheduled loop domain of one written tensor (outer first) and how it was made."""

    roots: tuple[IterDomain, ...]  # one fresh dimension per visible axis of the tensor, in axis order
    domain: tuple[IterDomain, ...]
    transforms: tuple[Reorder | Merge | Split, ...]
    strip_capacity: int = 0  # column strips: the widest strip; 0 without strips
    tile: int = 0  # tiles: the rows and columns of one; 0 without tiles
    flat: bool = False  # every axis merged, read and written at the flat index (rows.flat_pointwise)

    @property
    def loop_order(self) -> tuple[int, ...]:
        """The tensor's axes from the outermost loop to the innermost, read back through the merges
        (a strip-split axis counts where its strip's loop is)."""
        axes = self._axes(self.domain)
        return tuple(a for n, a in enumerate(axes) if a not in axes[n + 1:])

    @property
    def parallel_axes(self) -> tuple[int, ...]:
        """The axes the task's range covers (merged into its parallel dimension)."""
        return self._axes(d for d in self.domain if d.parallel is ParallelType.GRID_X)

    def _axes(self, domain: Iterable[IterDomain]) -> tuple[int, ...]:
        axis = {id(root): n for n, root in enumerate(self.roots)}
        return tuple(axis[id(leaf)] for d in domain for leaf in _leaves(d))

    @property
    def strip(self) -> Split | None:
        """The split of the innermost axis into column strips, if the task owns strips."""
        return next((t for t in self.transforms if isinstance(t, Split)), None) if self.strip_capacity else None

    @property
    def row_axes(self) -> tuple[int, ...]:
        """The axes the vectorized row loop walks (merged, outer first); none without one."""
        return self._axes(self.domain[-1:]) if self.vectorized else ()

    @property
    def serial_axes(self) -> tuple[int, ...]:
        """Column strips: the axes each task walks whole, between the parallel and the strip's loop."""
        return self._axes(self.domain[1:-1]) if self.strip is not None else ()

    @property
    def vectorized(self) -> bool:
        """Whether the innermost axis is a loop of its own, vectorized inside each task index."""
        return bool(self.domain) and self.domain[-1].parallel is ParallelType.VECTORIZE

    def text(self) -> str:
        """`[merge(i0, i1){blockIdx.x}, i2{vectorize}]`: the domain with its transforms written out."""
        names = {id(root): f"i{n}" for n, root in enumerate(self.roots)}

        def name(d: IterDomain) -> str:
            if id(d) in names:
                return names[id(d)]
            t = d.definition
            if isinstance(t, Split):
                kind = "tile" if self.tile else "strip"
                return f"{kind + 's' if d is t.outer else kind}({name(t.inp)}, {t.factor})"
            return f"merge({name(t.outer)}, {name(t.inner)})" if isinstance(t, Merge) else "?"

        def parallel(d: IterDomain) -> str:
            return "" if d.parallel is ParallelType.SERIAL else f"{{{d.parallel.value}}}"

        return "[" + ", ".join(name(d) + parallel(d) for d in self.domain) + "]"


def _leaves(d: IterDomain) -> Iterator[IterDomain]:
    t = d.definition
    if isinstance(t, Merge):
        yield from _leaves(t.outer)
        yield from _leaves(t.inner)
    elif isinstance(t, Split):  # a strip (or the strips) of an axis stands for the axis
        yield from _leaves(t.inp)
    else:
        yield d


def strip_width(columns: Scalar) -> Scalar:
    """The width of one column strip for `columns` columns: the row rounded up to whole vector
    loops, at least one (so no extent divides by zero), at most STRIP_CAPACITY."""
    return smin(STRIP_CAPACITY, smax(STRIP_VECTOR, ceildiv(columns, STRIP_VECTOR) * STRIP_VECTOR))


def _parallel(dims: list[IterDomain], transforms: list) -> IterDomain:
    """`dims` merged (outer first) into the task's parallel dimension; the merges join `transforms`."""
    while len(dims) > 1:
        merged = merge(dims[0], dims[1])
        transforms.append(merged)
        dims = [merged.out, *dims[2:]]
    dims[0].parallelize(ParallelType.GRID_X)
    return dims[0]


def schedule_strips(tv: TensorView, loop_order: tuple[int, ...], serial: int) -> ScheduledLoops:
    """Column strips: `loop_order` ends with the `serial` axes each task walks whole and then the
    innermost axis, which is split into strips; the strip index joins the parallel dimension."""
    roots = tuple(d.clone() for d in tv.visible)
    positions = {axis: n for n, axis in enumerate(loop_order)}
    transforms: list[Reorder | Merge | Split] = [Reorder(tuple(positions[axis] for axis in range(len(roots))))]
    loop = [roots[axis] for axis in loop_order]
    strips = split(loop[-1], strip_width(loop[-1].extent))
    transforms.append(strips)
    parallel = _parallel(loop[: len(loop) - 1 - serial] + [strips.outer], transforms)
    strips.inner.parallelize(ParallelType.VECTORIZE)
    domain = (parallel, *loop[len(loop) - 1 - serial: -1], strips.inner)
    return ScheduledLoops(roots, domain, tuple(transforms), STRIP_CAPACITY)


def schedule_tiles(tv: TensorView, loop_order: tuple[int, ...], tile: int = TILE) -> ScheduledLoops:
    """Tiles: the two innermost axes of `loop_order` split by `tile`; the row and column tiles join the
    parallel dimension (merged with the outer axes), and each task index walks the rows of its tile,
    and the tile's columns as the vectorized loop."""
    roots = tuple(d.clone() for d in tv.visible)
    positions = {axis: n for n, axis in enumerate(loop_order)}
    transforms: list[Reorder | Merge | Split] = [Reorder(tuple(positions[axis] for axis in range(len(roots))))]
    loop = [roots[axis] for axis in loop_order]
    rows, columns = split(loop[-2], tile), split(loop[-1], tile)
    transforms += [rows, columns]
    parallel = _parallel(loop[:-2] + [rows.outer, columns.outer], transforms)
    columns.inner.parallelize(ParallelType.VECTORIZE)
    domain = (parallel, rows.inner, columns.inner)
    return ScheduledLoops(roots, domain, tuple(transforms), tile=tile)


def schedule_loops(tv: TensorView, loop_order: tuple[int, ...], vectorize: bool = True, row_axes: int = 1,
                   flat: bool = False) -> ScheduledLoops:
    """Applies a loop order to fresh dimensions of `tv`: reorder, merge the outer ones (all of them
    without `vectorize`), parallelize. With `vectorize`, the last `row_axes` of the loop order are
    merged into the one vectorized row loop (schedule/rows.py says when). `flat`: all of them merged,
    the lowering reading row-major arrays at the merged index."""
    roots = tuple(d.clone() for d in tv.visible)
    transforms: list[Reorder | Merge] = []
    if not roots:
        return ScheduledLoops(roots, (), ())
    positions = {axis: n for n, axis in enumerate(loop_order)}
    transforms.append(Reorder(tuple(positions[axis] for axis in range(len(roots)))))
    loop = [roots[axis] for axis in loop_order]
    while vectorize and row_axes > 1 and len(loop) > 2:  # the row: the innermost axes merged, outer first
        merged = merge(loop[-row_axes], loop[-row_axes + 1])
        transforms.append(merged)
        loop[-row_axes:-row_axes + 2 or None] = [merged.out]
        row_axes -= 1
    while len(loop) > (2 if vectorize else 1):  # one parallel dimension over every axis but the row
        merged = merge(loop[0], loop[1])
        transforms.append(merged)
        loop[:2] = [merged.out]
    loop[0].parallelize(ParallelType.GRID_X)
    if len(loop) == 2:
        loop[1].parallelize(ParallelType.VECTORIZE)
    return ScheduledLoops(roots, tuple(loop), tuple(transforms), flat=flat and not vectorize)
