"""braze's random numbers in torch graphs: keyed by a seed from torch's generator, replayed in backward.

Dropout decomposes into `mask = rand_like(x) > p` and `bernoulli` (timm's drop path,
`x.new_empty(shape).bernoulli_(keep)`) into `mask = rand_like(x) < p` (`bernoulli_decompositions`); the
backward reads `mask`. Eager PyTorch and AOTAutograd's default partition save that mask from the
forward for the backward: one byte per element of every dropped-out activation. The backend (with
`options['random'] == 'braze'`) instead:

1. draws one seed per run of a graph from torch's default generator (`draw_seed`, a 0-d int64 CPU
   tensor), so `torch.manual_seed` makes runs repeat;
2. rewrites each `rand`, `rand_like`, `randn` and `randn_like` node, the i-th of its graph, into
   `philox_random(seed, i, size, ...)`: element j is element j of braze's Philox stream
   (seed, offset i) of `braze/ops/philox.py`, which a region computes inside its kernel from the
   seed it reads as a number (`bz.ops.rand(..., seed=, offset=)`);
3. in a training graph, gives every backward use of a value computed from those numbers alone (the
   mask, its cast) a copy of that computation in the backward, so the partition saves the seed and
   the sizes, and the backward's region draws the same mask again, bit for bit.

The numbers are braze's, not eager PyTorch's: after the same `torch.manual_seed`, a compiled model
drops other elements than the eager one (as under Inductor), with the same distribution; a compiled
model run twice from one seed repeats itself exactly.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np
import torch
from torch import fx
from torch._functorch.partitioners import _has_tag_is_forward, _is_fwd_seed_offset, _is_primal, _is_tangent
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils.checkpoint import CheckpointPolicy

from braze.frontend.torch.symbols import size_expr
from braze.ops import philox

aten = torch.ops.aten
RANDOM_OPS = frozenset({aten.rand.default, aten.rand_like.default, aten.randn.default, aten.randn_like.default})
_NORMAL = frozenset({aten.randn.default, aten.randn_like.default})


def draw_seed() -> torch.Tensor:
    """The seed of one run of a graph's random ops, from torch's default (CPU) generator."""
    return torch.empty((), dtype=torch.int64).random_()


def philox_random(seed: torch.Tensor, offset: int, size: list[int], dtype: torch.dtype, device: torch.device,
                  normal: bool) -> torch.Tensor:
    """Uniform [0, 1) (or standard normal) numbers of `size`: element j of braze's Philox stream
    (seed, offset), as braze's kernels compute it. This is the PyTorch path, for a region that
    falls back; a braze region computes the numbers in its kernel."""
    draw = philox.normal if normal else philox.uniform
    values = draw(tuple(int(s) for s in size), _NUMPY[dtype], int(seed) % 2**64, offset)
    if dtype == torch.bfloat16:
        return torch.from_numpy(values.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(values).to(device)


def bernoulli_decompositions() -> dict:
    """`aten.bernoulli.p` and `aten.bernoulli.Tensor` (the in-place `bernoulli_` functionalized) as a
    uniform draw below `p`, in the tensor's dtype, so braze draws the mask as it does dropout's, and
    the backward draws it again. `aten.bernoulli.default` has core ATen's decomposition of that form.
    A draw from a `torch.Generator` of the user's, or a probability eager PyTorch refuses, stays an op
    of PyTorch's."""
    return {aten.bernoulli.p: _bernoulli_of_number, aten.bernoulli.Tensor: _bernoulli_of_tensor}


def _bernoulli_of_number(x: torch.Tensor, p: float = 0.5, *, generator: object = None) -> object:
    if generator is not None or not 0 <= p <= 1:
        return NotImplemented
    return (torch.rand_like(x, dtype=_uniform_dtype(x.dtype)) < p).to(x.dtype)


def _bernoulli_of_tensor(x: torch.Tensor, p: torch.Tensor, *, generator: object = None) -> object:
    if generator is not None or not p.dtype.is_floating_point:
        return NotImplemented
    # `p` broadcasts to `x`'s shape, not the other way (as eager's bernoulli_ expands it).
    return (torch.rand_like(x, dtype=_uniform_dtype(p.dtype)) < p.expand_as(x)).to(x.dtype)


def _uniform_dtype(dtype: torch.dtype) -> torch.dtype:
    """The uniform numbers' dtype: float32 (a float16 one is too coarse a probability) or float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _example(node: fx.Node) -> object:
    """The example value torch's tracing recorded for a node."""
    return node.meta.get("val")


_NUMPY = {torch.float16: np.float16, torch.bfloat16: philox._SUPPORTED_DTYPES["bfloat16"],
          torch.float32: np.float32, torch.float64: np.float64}


def is_seed_argument(node: fx.Node, argument: fx.Node) -> bool:
    """Whether `argument` is the seed `node` (a `philox_random`) reads: a CPU tensor braze reads as a
    number, whatever device the graph runs on."""
    return node.target is philox_random and node.args[0] is argument


def key_random_ops(gm: fx.GraphModule, takes: Callable[[fx.Node], bool]) -> list[fx.Node]:
    """Rewrites each random node of `gm` that `takes` accepts into a `philox_random` of one seed
    drawn at the graph's first random op (step 2 of the module docstring); returns the new nodes."""
    random_nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in RANDOM_OPS and takes(n)]
    if not random_nodes:
        return []
    with gm.graph.inserting_before(random_nodes[0]):
        seed = gm.graph.call_function(draw_seed, ())
    _tag_like(seed, random_nodes[0])
    with _fake_mode(gm.graph):
        seed.meta["val"] = torch.empty((), dtype=torch.int64)
    keyed = []
    for offset, node in enumerate(random_nodes):
        value = _example(node)
        with gm.graph.inserting_before(node):
            size = [_size_node(gm.graph, node, d) for d in range(value.dim())]
            new = gm.graph.call_function(philox_random, (seed, offset, size, value.dtype, value.device,
                                                         node.target in _NORMAL))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        like = node.args[0]
        gm.graph.erase_node(node)
        _erase_if_unread(gm.graph, like)
        keyed.append(new)
    gm.graph.lint()
    gm.recompile()
    return keyed


def _erase_if_unread(graph: fx.Graph, like: object) -> None:
    """Erases the tensor a `rand_like` took its shape from when nothing else reads it: bernoulli's
    `x.new_empty(shape)`, which PyTorch would otherwise allocate at every run for nothing."""
    if isinstance(like, fx.Node) and like.op == "call_function" and not like.users and _pure(like):
        graph.erase_node(like)


def _fake_mode(graph: fx.Graph) -> FakeTensorMode:
    for node in graph.nodes:
        if isinstance(_example(node), FakeTensor):
            return _example(node).fake_mode
    return FakeTensorMode()


def _size_node(graph: fx.Graph, node: fx.Node, dim: int) -> int | fx.Node:
    """Dimension `dim` of the random node's result: an int, or a node of the graph giving that
    symbolic size (one that exists where there is one, else the op's size argument or a read of the
    size of the tensor the op is like)."""
    size = _example(node).shape[dim]
    if not isinstance(size, torch.SymInt):
        return int(size)
    expr = size_expr(size)
    for other in graph.nodes:
        if other is node:
            break
        if isinstance(_example(other), torch.SymInt) and size_expr(_example(other)) == expr and not _is_tangent(other):
            return other
    if node.target in (aten.rand.default, aten.randn.default):
        return node.args[0][dim]  # the size the op was given
    reader = graph.call_function(aten.sym_size.int, (node.args[0], dim))
    reader.meta["val"] = size
    _tag_like(reader, node)
    return reader


def _tag_like(new: fx.Node, node: fx.Node) -> None:
    """Gives a node inserted for `node` its forward or backward tag of AOTAutograd's joint graph."""
    if "partitioner_tag" in node.meta:
        new.meta["partitioner_tag"] = node.meta["partitioner_tag"]


# --- replay in the backward --------------------------------------------------------------------------
def replay_in_backward(joint: fx.GraphModule, keyed: list[fx.Node]) -> int:
    """Step 3 of the module docstring on AOTAutograd's joint graph: each forward value computed from
    the keyed random numbers alone that the backward reads is computed again in the backward. The
    copies sit after the last forward node, where AOTAutograd's default partition puts the backward.
    Returns how many values the backward now computes instead of reading."""
    forward = _forward_nodes(joint.graph)
    if not forward:
        return 0
    derived = _derived_from(joint.graph, keyed, forward)
    read_by_backward = [n for n in joint.graph.nodes if n in derived and any(u not in forward for u in n.users)]
    if not read_by_backward:
        return 0
    copies: dict[fx.Node, fx.Node] = {}
    point = [next(n for n in reversed(joint.graph.nodes) if n in forward)]

    def copy_of(node: fx.Node) -> fx.Node:
        if node not in copies:
            for argument in node.all_input_nodes:
                if argument in derived or _is_fill(argument):
                    copy_of(argument)
            sizes = _sizes_of_like(joint.graph, node) if node.target is aten.full_like.default else None
            with joint.graph.inserting_after(point[0]):
                copies[node] = point[0] = (joint.graph.node_copy(node, lambda a: copies.get(a, a)) if sizes is None
                                           else _full_of_sizes(joint.graph, node, sizes))
            copies[node].meta["partitioner_tag"] = "is_backward"  # AOTAutograd's tag: where it belongs
            # The min-cut partition would compute a copy in the forward and save it (a mask), since it
            # never recomputes an op it does not know: the copies are the backward's own by policy.
            copies[node].meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        return copies[node]

    for node in read_by_backward:
        for user in [u for u in node.users if u not in forward and u not in copies.values()]:
            user.replace_input_with(node, copy_of(node))
    joint.graph.lint()
    joint.recompile()
    return len(read_by_backward)


# Tensors of one number: a mask drawn below `torch.full_like(x, p)` (`torch.bernoulli`'s form) is drawn
# again in the backward with the fill made again there, from sizes alone.
_FILLS = frozenset({aten.full.default, aten.full_like.default, aten.scalar_tensor.default})


def _is_fill(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target in _FILLS


def _sizes_of_like(graph: fx.Graph, full_like: fx.Node) -> list[int | fx.Node]:
    """The sizes of a `full_like`'s tensor, read in the forward (where that tensor is): the backward's
    copy of the fill reads these sizes, not the tensor."""
    with graph.inserting_before(full_like):
        return [_size_node(graph, full_like, d) for d in range(_example(full_like).dim())]


def _full_of_sizes(graph: fx.Graph, full_like: fx.Node, sizes: list[int | fx.Node]) -> fx.Node:
    """`full(sizes, value)`: the `full_like` made again with no tensor to read."""
    value = _example(full_like)
    full = graph.call_function(aten.full.default, (sizes, full_like.args[1]), {
        "dtype": value.dtype, "layout": torch.strided, "device": value.device, "pin_memory": False})
    with _fake_mode(graph):
        full.meta["val"] = torch.empty(value.shape, dtype=value.dtype, device=value.device)
    return full


def _forward_nodes(graph: fx.Graph) -> set[fx.Node]:
    """The nodes AOTAutograd's default partition puts in the forward: those up to the last forward
    input or node tagged forward, tangents aside."""
    nodes = list(graph.nodes)
    last = max((i for i, n in enumerate(nodes) if _has_tag_is_forward(n) or _is_primal(n) or _is_fwd_seed_offset(n)),
               default=None)
    if last is None:
        return set()
    return {n for n in nodes[: last + 1] if not _is_tangent(n) and n.op != "output"}


def _derived_from(graph: fx.Graph, keyed: list[fx.Node], forward: set[fx.Node]) -> set[fx.Node]:
    """Forward nodes whose tensor inputs are all keyed random numbers or values derived from them
    alone (numbers, sizes and fills aside): what the backward can compute again from the seed."""
    derived = set(keyed)
    for node in graph.nodes:
        if node in forward and node.op == "call_function" and node not in derived and _pure(node):
            tensors = [a for a in node.all_input_nodes if isinstance(_example(a), torch.Tensor) and not _is_fill(a)]
            if tensors and all(a in derived for a in tensors):
                derived.add(node)
    return derived


def _pure(node: fx.Node) -> bool:
    """A function of its inputs only (random, mutating and effectful ops are not)."""
    if node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    return not schema.is_mutable and torch.Tag.nondeterministic_seeded not in node.target.tags

