"""The parameters of a lowered kernel, and which fusion value each one carries.

Tensors are fusion TensorViews, known here only by `id()` and their `name`: Kernel IR imports
no other braze package.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from braze.dtypes import DType, int64
from braze.kir import nodes as k


@dataclass
class KernelParams:
    """The kernel's parameters and which fusion value each one carries."""

    arrays: dict[int, k.ArrayParam] = field(default_factory=dict)  # id(input tv) -> param
    writes: dict[int, k.ArrayParam] = field(default_factory=dict)  # id(written tv) -> param
    scalars: dict[int, k.ScalarParam] = field(default_factory=dict)  # id(scalar input tv) -> param
    symbols: dict[str, k.ScalarParam] = field(default_factory=dict)  # extent symbol -> param
    seeds: dict[int, tuple[k.ScalarParam, k.ScalarParam]] = field(default_factory=dict)
    written: set[int] = field(default_factory=set)  # tensors computed by tasks emitted so far
    index: DType = int64  # the kernel's index type: extent symbols are read as it
    dense: frozenset[int] = frozenset()  # ids of the inputs whose elements sit at their flat index
    # Extent symbols the fusion requires equal at run time (an elementwise op's operands), each read
    # as one of its class: the outputs of one shape then share their tasks' bounds (see `equal_extents`).
    same_as: dict[str, str] = field(default_factory=dict)

    def readable(self, tv) -> k.Param | None:
        """The parameter to read `tv` from, if it is an input or was written by an earlier task."""
        if id(tv) in self.scalars:
            return self.scalars[id(tv)]
        if id(tv) in self.written:
            return self.writes[id(tv)]
        return self.arrays.get(id(tv))

    def symbol(self, name: str) -> k.ScalarParam:
        name = self.same_as.get(name, name)
        return self.symbols.setdefault(name, k.ScalarParam(name, self.index))

    def rng(self, tv) -> tuple[k.ScalarParam, k.ScalarParam]:
        if id(tv) not in self.seeds:
            self.seeds[id(tv)] = (k.ScalarParam(f"{tv.name}_seed", int64),
                                  k.ScalarParam(f"{tv.name}_offset", int64))
        return self.seeds[id(tv)]

    def ordered(self) -> tuple[k.Param, ...]:
        seeds = [p for pair in self.seeds.values() for p in pair]
        return (*self.arrays.values(), *self.writes.values(), *self.scalars.values(), *self.symbols.values(), *seeds)


def equal_extents(checks, order: list[str]) -> dict[str, str]:
    """Each extent symbol that run-time checks (`ExtentCheck`s of a fusion: two plain symbols that
    must be equal) tie to others -> the first of its class in `order` (the inputs' extents, in
    input order)."""
    rank = {name: n for n, name in enumerate(order)}
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    for check in checks:
        if check.lhs.is_symbol and check.rhs.is_symbol:
            a, b = sorted((root(check.lhs.name), root(check.rhs.name)), key=lambda n: (rank.get(n, len(rank)), n))
            if a != b:
                parent[b] = a
    return {name: root(name) for name in parent}
