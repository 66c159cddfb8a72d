"""Proposes the regions of an ATen graph: FX's capability-based partitioning, with a cycle check of a
few bitset operations instead of a walk of the graph.

FX's `CapabilityBasedPartitioner.propose_partitions` visits the nodes last to first. A supported node
starts a partition, which then absorbs every partition it can without making a cycle; at a node FX
does not take, the oldest partition absorbs what it can (FX's horizontal fusion, which puts a
layer's independent casts and sums into one region). Its cycle check walks every descendant of the
merged partitions' users for every candidate pair: proposing is quadratic in the graph and worse, 7 s
of a 12-layer GPT-2's first step on a CPU. `propose_partitions` here proposes the same partitions in
the same greedy order, and checks a merge with bitsets over the nodes' places in the graph: each
node's descendants and ancestors (computed once), and each partition's union of them. A merge of
partitions S and O makes a cycle exactly when some path leaves S | O and comes back, where a path
may pass through another partition anywhere and leave it anywhere (partitions become single nodes).
`fuse_by_partitions` (FX) then fuses them as before.

FX's pass that moves `getitem` nodes into their producer's partition is left out: no node braze
supports gives a tuple.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from torch import fx
from torch.fx.passes.infra.partitioner import Partition


class Group:
    """A partition being built: its nodes (with FX's node order), and as bitsets over graph positions
    its members, their strict descendants and their strict ancestors."""

    __slots__ = ("id", "order", "nodes", "members", "below", "above", "version")
    _versions = itertools.count()

    def __init__(self, id: int, order: int, nodes: dict[fx.Node, int], members: int, below: int,
                 above: int) -> None:
        self.id, self.order, self.nodes = id, order, nodes  # FX's partition id and order
        self.members, self.below, self.above = members, below, above
        self.version = next(self._versions)  # a group never changes: a merge makes a new one

    @classmethod
    def of(cls, nodes: list[fx.Node], positions: list[int], below: list[int], above: list[int]) -> Group:
        """The group of `nodes` at `positions`, given every node's descendants and ancestors (`reachability`)."""
        members = sum(1 << p for p in positions)
        return cls(0, 0, dict.fromkeys(nodes, 0), members, _union(below, positions), _union(above, positions))


def reachability(nodes: list[fx.Node]) -> tuple[list[int], list[int]]:
    """For nodes in topological order, each one's strict descendants and strict ancestors as bitsets
    of positions in `nodes` (bit i: nodes[i])."""
    position = {node: i for i, node in enumerate(nodes)}
    below = [0] * len(nodes)
    for i in range(len(nodes) - 1, -1, -1):
        reach = 0
        for user in nodes[i].users:
            j = position[user]
            reach |= below[j] | (1 << j)
        below[i] = reach
    above = [0] * len(nodes)
    for i, node in enumerate(nodes):
        reach = 0
        for producer in node.all_input_nodes:
            j = position[producer]
            reach |= above[j] | (1 << j)
        above[i] = reach
    return below, above


def _union(bitsets: list[int], positions: list[int]) -> int:
    union = 0
    for p in positions:
        union |= bitsets[p]
    return union


def makes_cycle(first: Group, second: Group, others: list[Group]) -> bool:
    """Whether merging `first` and `second` makes a cycle among the partitions: a path out of their
    union and back, through plain nodes and through other partitions (each entered at one node and
    left at any of its nodes)."""
    merged = first.members | second.members
    reach = (first.below | second.below) & ~merged
    into = (first.above | second.above) & ~merged  # nodes with a path into the union
    if reach & into:
        return True
    pending = [g for g in others if g is not first and g is not second]
    grew = True
    while grew and pending:
        grew, rest = False, []
        for group in pending:
            if group.members & reach:
                if group.members & into:
                    return True
                reach |= group.below & ~merged
                grew = True
                if reach & into:
                    return True
            else:
                rest.append(group)
        pending = rest
    return False


def propose_partitions(gm: fx.GraphModule, is_supported: Callable[[fx.Node], bool]) -> list[Partition]:
    """FX's `CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    .propose_partitions()` (see the module docstring), each partition's nodes in graph order."""
    nodes = list(gm.graph.nodes)
    below, above = reachability(nodes)
    groups: list[Group] = []  # alive, oldest first (FX's partition order)
    failed: set[tuple[int, int]] = set()  # versions of pairs known to make a cycle: merges only add paths
    ids = iter(range(len(nodes)))
    for order, position in enumerate(range(len(nodes) - 1, -1, -1)):
        node = nodes[position]
        candidates = list(groups)
        if is_supported(node):
            new = Group(next(ids), order, {node: order}, 1 << position, below[position], above[position])
            groups.append(new)
            candidates = [new, *candidates]
        if len(candidates) > 1:
            _absorb(candidates, groups, failed)
    return [Partition(id=g.id, nodes=sorted(g.nodes, key=g.nodes.get, reverse=True),
                      node_orders=sorted(g.nodes.values(), reverse=True))
            for g in sorted(groups, key=lambda g: g.id)]


def _absorb(candidates: list[Group], groups: list[Group], failed: set[tuple[int, int]]) -> None:
    """Merges each later candidate into the first where no cycle comes of it (FX's order: the smaller
    group goes into the larger, whose id the merge keeps)."""
    current = candidates[0]
    for other in candidates[1:]:
        pair = (min(current.version, other.version), max(current.version, other.version))
        if pair in failed:
            continue
        if makes_cycle(current, other, groups):
            failed.add(pair)
            continue
        keep, gone = (other, current) if len(current.nodes) < len(other.nodes) else (current, other)
        merged = Group(keep.id, min(keep.order, gone.order), {**keep.nodes, **gone.nodes},
                        keep.members | gone.members, keep.below | gone.below, keep.above | gone.above)
        _replace(groups, current, other, merged)
        current = merged


def _replace(groups: list[Group], first: Group, second: Group, merged: Group) -> None:
    """`merged` in the place of the older of `first` and `second` (groups stay sorted by order)."""
    places = sorted((groups.index(first), groups.index(second)))
    groups[places[0]] = merged
    del groups[places[1]]
