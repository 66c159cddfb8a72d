"""One FX partition (ATen ops only) -> one `bz.Fusion`, defined with Dynamo's sizes as braze extents.

The builder walks the partition's graph in order. Tensor inputs become `define_tensor` inputs
(a symbolic size -1, a static one its value, 1 a broadcast dimension); each ATen node becomes braze
ops through the rule of its op (`rules.RULES`); each partition output becomes a fusion output laid
out with the strides torch expects of it, so the PyTorch ops around the region see the tensors
eager PyTorch would have given them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import fx

from braze import dtypes as dt
from braze import ops as bz_ops
from braze.errors import UnsupportedError
from braze.frontend.fusion import VIEW_OPS, Fusion
from braze.frontend.torch.rng import philox_random
from braze.frontend.torch.symbols import ExtentMap, size_expr

if TYPE_CHECKING:
    from braze.frontend.torch.carriers import Carrier
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView

# uint16, uint32 and uint64 exist from torch 2.3 on (with few ops): mapped where this torch has them.
TORCH_DTYPES: dict[torch.dtype, dt.DType] = {
    getattr(torch, d.name if d is not dt.bool_ else "bool"): d for d in dt.ALL_DTYPES
    if hasattr(torch, d.name if d is not dt.bool_ else "bool")
}


def braze_dtype(dtype: torch.dtype) -> dt.DType:
    if dtype not in TORCH_DTYPES:
        raise UnsupportedError(f"dtype {dtype} has no braze dtype")
    return TORCH_DTYPES[dtype]


def meta(node: object) -> object:
    """The example value torch's tracing recorded for a node (a FakeTensor, SymInt, ...), else the
    argument itself (a Python number, None)."""
    return node.meta.get("val") if isinstance(node, fx.Node) else node


def bind(node: fx.Node) -> dict[str, object]:
    """The node's arguments by their schema names, defaults filled in (`self` stays `self`)."""
    bound = {}
    positional = iter(node.args)
    for argument in node.target._schema.arguments:
        if not argument.kwarg_only:
            value = next(positional, _MISSING)
            if value is not _MISSING:
                bound[argument.name] = value
                continue
        if argument.name in node.kwargs:
            bound[argument.name] = node.kwargs[argument.name]
        else:
            bound[argument.name] = argument.default_value if argument.has_default_value() else None
    return bound


_MISSING = object()


@dataclass
class BuiltRegion:
    """A fusion and how to call it: which of the partition's inputs it takes, and which of its
    outputs gives each of the partition's outputs."""

    fusion: Fusion
    input_positions: list[int]
    output_slots: list[int]
    fused_ops: Counter = field(default_factory=Counter)
    seed_inputs: list[int] = field(default_factory=list)  # fusion inputs given as ints: 0-d seed tensors


class RegionBuilder:
    """Builds one braze fusion from one partition's `GraphModule` (see the module docstring)."""

    def __init__(self, graph_module: fx.GraphModule, name: str, carriers: Sequence[Carrier] = ()) -> None:
        self.graph_module = graph_module
        self.carriers = carriers
        self.fusion = Fusion(name)
        self.values: dict[fx.Node, object] = {}
        self.extents = ExtentMap()
        self.input_positions: list[int] = []
        self.fused_ops: Counter = Counter()
        self.seed_inputs: list[int] = []
        self._placeholders: dict[fx.Node, int] = {}

    # --- building -------------------------------------------------------------------------------
    def build(self, rules: dict) -> BuiltRegion:
        """The fusion, each node converted by its rule in `rules` (table.RULES)."""
        nodes = list(self.graph_module.graph.nodes)
        with self.fusion:
            placeholders = [n for n in nodes if n.op == "placeholder"]
            for position, node in enumerate(placeholders):
                self._placeholders[node] = position
                if isinstance(meta(node), torch.Tensor) and not is_seed_input(node):
                    value = meta(node)
                    self.values[node] = self._define_tensor(value.shape, value.dtype, position, node.name)
            for k, carrier in enumerate(self.carriers):
                self._define_tensor(carrier.sizes, carrier.dtype, len(placeholders) + k, f"carrier{k}")
            for node in nodes:
                if node.op == "call_function":
                    self.values[node] = broadcastable(rules[node.target].convert(self, node))
                    self.fused_ops[op_name(node.target)] += 1
                elif node.op == "output":
                    slots = self._add_outputs(node.args[0])
        return BuiltRegion(self.fusion, self.input_positions, slots, self.fused_ops, self.seed_inputs)

    def _define_tensor(self, sizes: Sequence[object], dtype: torch.dtype, position: int, name: str) -> TensorView:
        shape = [_defined_extent(size) for size in sizes]
        tv = self.fusion.define_tensor(shape, braze_dtype(dtype), name=name)
        self.extents.learn(sizes, tv.shape)
        self.input_positions.append(position)
        return tv

    def _add_outputs(self, outputs: Sequence[fx.Node]) -> list[int]:
        """Adds each distinct output once; `slots[i]` is the fusion output that is partition output i.
        Outputs are distinct by value and layout: a strided value and its contiguous clone are the
        same TensorView, but PyTorch views each with the strides it recorded for it."""
        slots, added = [], {}
        for node in outputs:
            tv, order = self.values[node], stride_order(meta(node))
            if (id(tv), order) not in added:
                added[id(tv), order] = len(added)
                self._add_output(tv, order)
            slots.append(added[id(tv), order])
        return slots

    def _add_output(self, tv: TensorView, order: tuple[int, ...] | None) -> None:
        # A region's outputs are dense tensors of their own (its views went to PyTorch), so an
        # output braze would give as a view of an input (a clone of a slice) is copied.
        if _is_view_of_input(tv):
            tv = bz_ops.elementwise("set", tv)
        if order is None and tv.stride_order is not None:  # row-major, not the layout of an earlier output
            order = tuple(range(tv.ndim - 1, -1, -1))
        self.fusion.add_output(tv, stride_order=order)

    # --- operands -------------------------------------------------------------------------------
    def tensor(self, arg: object) -> TensorView:
        value = self.operand(arg)
        if not isinstance(value, TensorView):
            raise UnsupportedError(f"expected a tensor operand, got {value!r}")
        return value

    def operand(self, arg: object) -> object:
        """A node's value in the fusion (a TensorView, or an extent for a symbolic size), or a
        Python number as it is."""
        if isinstance(arg, fx.Node):
            if arg not in self.values:
                self.values[arg] = self._number_input(arg)
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return [self.operand(a) for a in arg]
        return arg

    def _number_input(self, node: fx.Node) -> object:
        """A symbolic number the region reads: an extent where it is one of its tensors' sizes, else
        a scalar input of the fusion."""
        value = meta(node)
        if isinstance(value, torch.SymInt):
            try:
                return self.extents.extent(value)
            except UnsupportedError:
                pass
        if node not in self._placeholders:
            raise UnsupportedError(f"{node.name}: a number computed inside the region")
        kinds = {torch.SymInt: dt.int64, torch.SymFloat: dt.float64, torch.SymBool: dt.bool_, int: dt.int64,
                 float: dt.float64, bool: dt.bool_}
        scalar = self.fusion.define_scalar(dtype=kinds[type(value)], name=node.name)
        self.input_positions.append(self._placeholders[node])
        return scalar

    def seed(self, node: fx.Node) -> TensorView:
        """A random op's seed (a 0-d int64 tensor input of the region) as an int64 scalar of the fusion:
        it is read as a number, so it may live on the CPU while the region runs on a GPU."""
        if node not in self.values:
            self.values[node] = self.fusion.define_scalar(dtype=dt.int64, name=node.name)
            self.seed_inputs.append(len(self.input_positions))
            self.input_positions.append(self._placeholders[node])
        return self.values[node]

    def extent(self, size: object) -> int | Scalar:
        """A size argument (int, SymInt node, or SymInt) as an int or a braze extent."""
        if isinstance(size, fx.Node):
            size = meta(size)
        return self.extents.extent(size)

    def shape_of(self, node: fx.Node) -> list[int | Scalar]:
        """The node's own shape (its recorded example value) in braze extents."""
        return self.extents.shape(meta(node).shape)


def broadcastable(tv: TensorView) -> TensorView:
    """`tv` with each dimension of static extent 1 a broadcast one, as every size-1 dimension is in
    torch (braze's slice to one element keeps an iteration dimension, which would not broadcast)."""
    fixed = [i for i, d in enumerate(tv.visible) if not d.is_broadcast and d.extent.same_as(1)]
    if not fixed:
        return tv
    return bz_ops.broadcast(bz_ops.squeeze(tv, fixed), [i in fixed for i in range(tv.ndim)])


def is_seed_input(placeholder: fx.Node) -> bool:
    """Whether a region input is read only as the seed of random ops (`rng.philox_random`)."""
    return bool(placeholder.users) and all(
        u.target is philox_random and u.args[0] is placeholder and placeholder not in u.args[1:]
        for u in placeholder.users)


def _defined_extent(size: object) -> int:
    expr = size_expr(size)
    return expr if isinstance(expr, int) else -1


def _is_view_of_input(tv: TensorView) -> bool:
    while tv.definition is not None and tv.definition.op in VIEW_OPS:
        tv = tv.definition.inputs[0]
    return tv.definition is None


def stride_order(value: torch.Tensor) -> tuple[int, ...] | None:
    """braze's stride order of a torch tensor's layout (0 the fastest dimension), None for row-major.
    Size-1 dimensions keep their row-major place: their stride says nothing."""
    strides, sizes = [_hint(s) for s in value.stride()], [_hint(s) for s in value.shape]
    if None in strides or None in sizes:
        return None  # a size with no example value (data-dependent): row-major
    rank = len(sizes)
    key = [(strides[i] if sizes[i] != 1 else _row_major_stride(sizes, strides, i), -i) for i in range(rank)]
    by_speed = sorted(range(rank), key=lambda i: key[i])
    order = [0] * rank
    for speed, i in enumerate(by_speed):
        order[i] = speed
    return None if order == list(range(rank - 1, -1, -1)) else tuple(order)


def _row_major_stride(sizes: list, strides: list, i: int) -> int:
    """The stride a size-1 dimension would have in place: the next faster dimension's extent span."""
    for j in range(i + 1, len(sizes)):
        if sizes[j] != 1:
            return strides[j] * sizes[j]
    return 1


def _hint(size: object) -> int | None:
    """A size's value in the example inputs torch traced with (its order of strides holds for all)."""
    return size.node.hint if isinstance(size, torch.SymInt) else int(size)


def op_name(target: object) -> str:
    """`aten.add.Tensor` for an OpOverload; the qualified name of anything else."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))
