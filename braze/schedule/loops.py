"""A scheduler's decisions applied as transforms: the loop domain each written tensor is lowered from.

Every written tensor gets fresh dimensions for its logical axes (the user's tensor keeps its own
loop domain), which the scheduler then transforms: `reorder` to its loop order, `merge` of every
dimension but the innermost into one, `parallelize` of that merged dimension across the task
(threads on the CPU, the grid on a GPU) and of the innermost one as the vectorized loop. Lowering
reads the loop order and the vectorized loop back from this domain, through the recorded transforms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from braze.ir.domain import IterDomain, Merge, ParallelType, Reorder, merge
from braze.ir.tensor import TensorView


@dataclass(frozen=True)
class ScheduledLoops:
    """The scheduled loop domain of one written tensor (outer first) and how it was made."""

    roots: tuple[IterDomain, ...]  # one fresh dimension per visible axis of the tensor, in axis order
    domain: tuple[IterDomain, ...]
    transforms: tuple[Reorder | Merge, ...]

    @property
    def loop_order(self) -> tuple[int, ...]:
        """The tensor's axes from the outermost loop to the innermost, read back through the merges."""
        return self._axes(self.domain)

    @property
    def parallel_axes(self) -> tuple[int, ...]:
        """The axes the task's range covers (merged into its parallel dimension)."""
        return self._axes(d for d in self.domain if d.parallel is not ParallelType.VECTORIZE)

    def _axes(self, domain: Iterable[IterDomain]) -> tuple[int, ...]:
        axis = {id(root): n for n, root in enumerate(self.roots)}
        return tuple(axis[id(leaf)] for d in domain for leaf in _leaves(d))

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
            return f"merge({name(t.outer)}, {name(t.inner)})" if isinstance(t, Merge) else "?"

        def parallel(d: IterDomain) -> str:
            return "" if d.parallel is ParallelType.SERIAL else f"{{{d.parallel.value}}}"

        return "[" + ", ".join(name(d) + parallel(d) for d in self.domain) + "]"


def _leaves(d: IterDomain) -> Iterator[IterDomain]:
    t = d.definition
    if isinstance(t, Merge):
        yield from _leaves(t.outer)
        yield from _leaves(t.inner)
    else:
        yield d


def schedule_loops(tv: TensorView, loop_order: tuple[int, ...], vectorize: bool = True) -> ScheduledLoops:
    """Applies a loop order to fresh dimensions of `tv`: reorder, merge the outer ones (all of them
    without `vectorize`), parallelize."""
    roots = tuple(d.clone() for d in tv.visible)
    transforms: list[Reorder | Merge] = []
    if not roots:
        return ScheduledLoops(roots, (), ())
    positions = {axis: n for n, axis in enumerate(loop_order)}
    transforms.append(Reorder(tuple(positions[axis] for axis in range(len(roots)))))
    loop = [roots[axis] for axis in loop_order]
    while len(loop) > (2 if vectorize else 1):  # one parallel dimension over every axis but the innermost
        merged = merge(loop[0], loop[1])
        transforms.append(merged)
        loop[:2] = [merged.out]
    loop[0].parallelize(ParallelType.GRID_X)
    if len(loop) == 2:
        loop[1].parallelize(ParallelType.VECTORIZE)
    return ScheduledLoops(roots, tuple(loop), tuple(transforms))
