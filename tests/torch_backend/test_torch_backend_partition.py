"""The regions the backend proposes (braze/frontend/torch/partition.py): on random graphs of nodes
braze takes and nodes it leaves to PyTorch, the partitions are FX's own, valid (each node in one
partition at most, only nodes braze takes, no cycle once each partition is one node), and the graph
fused by them computes what it did before; through `torch.compile`, random programs equal eager."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import fx  # noqa: E402
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner  # noqa: E402
from torch.fx.passes.operator_support import OperatorSupportBase  # noqa: E402
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions  # noqa: E402

from braze.frontend.torch.partition import Group, makes_cycle, propose_partitions, reachability  # noqa: E402

# A node: (is it taken, its op, which earlier values it reads: indices counted back from it).
_NODE = st.tuples(st.booleans(), st.sampled_from([operator.add, operator.sub, operator.mul]),
                  st.lists(st.integers(1, 6), min_size=1, max_size=2))


def _random_graph(inputs: int, nodes: list[tuple]) -> tuple[fx.GraphModule, set[str]]:
    """A graph of `nodes` over `inputs` placeholders whose outputs are its values no node reads, and
    the names of the nodes braze 'takes'."""
    graph = fx.Graph()
    values = [graph.placeholder(f"x{i}") for i in range(inputs)]
    taken = set()
    for taken_here, op, back in nodes:
        operands = [values[max(len(values) - b, 0)] for b in back]
        node = graph.call_function(op, (operands[0], operands[-1]))
        values.append(node)
        if taken_here:
            taken.add(node.name)
    graph.output(tuple(v for v in values[inputs:] if not v.users) or values[0])
    return fx.GraphModule(torch.nn.Module(), graph), taken


class _Names(OperatorSupportBase):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def is_node_supported(self, submodules: dict, node: fx.Node) -> bool:
        return node.name in self.names


def _quotient_is_acyclic(gm: fx.GraphModule, parts: list[list[fx.Node]]) -> bool:
    """Whether the graph stays a DAG with each partition contracted to one node (a DFS for a back edge)."""
    owner = {node: ("part", i) for i, nodes in enumerate(parts) for node in nodes}
    successors: dict[object, set[object]] = {}
    for node in gm.graph.nodes:
        for user in node.users:
            a, b = owner.get(node, node), owner.get(user, user)
            if a != b:
                successors.setdefault(a, set()).add(b)
    state: dict[object, int] = {}  # 1: on the stack, 2: done

    def acyclic_from(start: object) -> bool:
        stack = [(start, iter(successors.get(start, ())))]
        state[start] = 1
        while stack:
            vertex, rest = stack[-1]
            step = next(rest, None)
            if step is None:
                state[vertex] = 2
                stack.pop()
            elif state.get(step) == 1:
                return False
            elif step not in state:
                state[step] = 1
                stack.append((step, iter(successors.get(step, ()))))
        return True

    return all(acyclic_from(v) for v in list(successors) if v not in state)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.lists(_NODE, min_size=1, max_size=24))
def test_partitions_are_fxs_valid_and_keep_the_results(inputs: int, nodes: list[tuple]) -> None:
    gm, taken = _random_graph(inputs, nodes)
    proposed = propose_partitions(gm, lambda node: node.name in taken)
    parts = [list(p.nodes) for p in proposed]
    fx_parts = CapabilityBasedPartitioner(gm, _Names(taken), allows_single_node_partition=True).propose_partitions()
    assert parts == [list(p.nodes) for p in fx_parts]
    members = [node for nodes_ in parts for node in nodes_]
    assert len(members) == len(set(members)), "a node in two partitions"
    assert {node.name for node in members} == taken, "every node taken is in a partition, and only those"
    assert _quotient_is_acyclic(gm, parts)
    arguments = [torch.tensor(float(i + 2)) for i in range(inputs)]
    expected = gm(*arguments)
    fused = fuse_by_partitions(gm, parts, prefix="region_")
    fused.graph.lint()
    assert str(fused(*arguments)) == str(expected)


def test_a_path_through_pytorch_keeps_the_ends_apart() -> None:
    # a (taken) -> b (left to PyTorch) -> c (taken) -> d (taken), and d reads a: one region of a, c and d
    # would run both before and after b.
    graph = fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(operator.neg, (x,), name="a")
    b = graph.call_function(operator.pos, (a,), name="b")
    c = graph.call_function(operator.neg, (b,), name="c")
    d = graph.call_function(operator.add, (c, a), name="d")
    graph.output((d,))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    parts = [sorted(n.name for n in p.nodes) for p in propose_partitions(gm, lambda n: n.name in {"a", "c", "d"})]
    assert sorted(parts) == [["a"], ["c", "d"]]


_OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b.tanh(), "exp": lambda a, b: (a * 0.1).exp(),
        "mm": lambda a, b: a @ b, "cumsum": lambda a, b: a.cumsum(0), "sum": lambda a, b: a + b.sum(0),
        "gather": lambda a, b: a + a.gather(1, b.argmax(1, keepdim=True)),
        "scatter": lambda a, b: a.scatter(1, b.argmin(1, keepdim=True), 0.5)}


def _program(ops: list[tuple[str, int]]) -> object:
    """A random program of ops braze fuses and ops it leaves to PyTorch (a matrix multiply, a cumsum)."""
    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        values = [x, w]
        for op, back in ops:
            values.append(_OPS[op](values[-1], values[max(len(values) - back, 0)]))
        return sum(v.sum() for v in values[2:])

    return run


@settings(max_examples=3, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(_OPS)), st.integers(1, 4)),
                min_size=2, max_size=8))
def test_random_programs_through_the_backend_equal_eager(ops: list[tuple[str, int]]) -> None:
    torch._dynamo.reset()
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    run = _program(ops)
    expected = run(x, w)
    actual = torch.compile(run, backend="braze", options={"fallback": "error"})(x, w)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_a_path_through_another_partition_is_a_cycle() -> None:
    # p -> r1 and r2 -> q, with r1 and r2 one partition: merging p and q would need r before and after.
    graph = fx.Graph()
    x = graph.placeholder("x")
    p = graph.call_function(operator.neg, (x,), name="p")
    r1 = graph.call_function(operator.neg, (p,), name="r1")
    r2 = graph.call_function(operator.neg, (x,), name="r2")
    q = graph.call_function(operator.add, (r2, p), name="q")
    graph.output((r1, q))
    nodes = list(graph.nodes)
    below, above = reachability(nodes)
    at = {node: i for i, node in enumerate(nodes)}

    def group(*members: fx.Node) -> Group:
        return Group.of(list(members), [at[m] for m in members], below, above)

    first, middle, last = group(p), group(r1, r2), group(q)
    assert makes_cycle(first, last, [first, middle, last])
    assert not makes_cycle(first, last, [first, last])  # no path from p to q but the edge between them
    assert not makes_cycle(first, middle, [first, middle, last])
