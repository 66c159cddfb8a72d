"""Pads the matrix multiplies of an ATen graph whose extents break 16-byte alignment.

cuBLAS picks its fast tensor-core kernels only when every leading dimension (and pointer) is a
multiple of 16 bytes; one odd extent, like a GPT-2 vocabulary of 50257 in the tied output projection
`logits = h @ wte.t()` and its two backward products, sends all three to kernels several times slower
(`align1` ones). braze leaves matrix multiplies to PyTorch, so this pass rewrites each such
`aten.mm`, `aten.addmm` or `aten.bmm` before the graph is cut into regions:

- an unaligned K is padded with zeros on both operands: the extra products are zero, so the result
  is the same sum (up to the kernel cuBLAS then picks);
- an unaligned M or N is padded with zeros on the operand that has it (and on an `addmm` bias that
  is not broadcast along it), and the result is sliced back: a view, no copy;
- each pad is an `aten.constant_pad_nd`, which braze fuses: in the region of the operand's producer
  (layer norm, the cast of a weight to bf16, cross-entropy's backward) the padded tensor is written
  directly. A pad of a transposed view pads the tensor under the view instead and transposes back,
  so the forward's `wte.t()` and the backward's `wte` share one padded weight, and the backward's
  `grad_logits` and `grad_logits.t()` one padded gradient.

As in PyTorch Inductor's `pad_mm` pass, every unaligned extent (of 2 or more) is padded, whatever
the layouts, and only extents known when the graph is traced (a symbolic batch size is left alone).
Inductor times both variants; this pass decides by size instead (`pays_to_pad`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx
from torch.utils._pytree import tree_leaves

from braze.frontend.torch.region_builder import meta

aten = torch.ops.aten

# Elements per 16 bytes: cuBLAS's fast kernels read 16-byte vectors along a leading dimension.
ALIGNMENT = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}
# When padding pays: a misaligned bf16 kernel reaches about 1/7 of the aligned ones' rate on an
# H100 or H200 (the GPT-2 LM head: 6.7 ms against 0.9 ms). A pad that cannot join its producer's
# region costs a copy of the operand and a launch of a few microseconds; m*n*k of 2**27 (a 512-cube)
# is about 3 us misaligned, so below it the saving cannot pay for that launch. And the product must
# do at least 32 multiply-adds per element it reads and writes, else it is bound by memory, not by
# the kernel's arithmetic rate, and the copy costs as much as the misalignment.
MIN_VOLUME = 1 << 27
MIN_INTENSITY = 32
MODES = ("auto", "always", "off")

# The matrix multiplies: where mat1 and mat2 sit in the arguments.
_OPERANDS = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2), aten.bmm.default: (0, 1)}
# Views that only reorder dimensions: a pad under them is the same pad, moved.
_PERMUTATIONS = (aten.t.default, aten.transpose.int, aten.permute.default)


@dataclass(frozen=True)
class Padding:
    """Zeros added at the end of the M, K and N extents of one matrix multiply."""

    m: int
    k: int
    n: int


def pad_matmuls(gm: fx.GraphModule, mode: str = "auto") -> int:
    """Pads `gm`'s unaligned matrix multiplies in place (the module docstring says how). `mode`:
    `"auto"` pads those on a GPU large enough for it to pay, `"always"` every unaligned one on any
    device, `"off"` none. Returns how many it padded."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off":
        return 0
    padder = _Padder(gm.graph)
    for node in list(gm.graph.nodes):
        padding = plan(node, always=mode == "always")
        if padding is not None:
            padder.rewrite(node, padding)
    if padder.count:
        gm.graph.lint()
        gm.recompile()
    return padder.count


def plan(node: fx.Node, always: bool = False) -> Padding | None:
    """The padding `node` gets, or None: not a float matrix multiply, aligned already, or (unless
    `always`) not on a GPU or too small for padding to pay."""
    if node.op != "call_function" or node.target not in _OPERANDS:
        return None
    first, second = _OPERANDS[node.target]
    mat1, mat2 = meta(node.args[first]), meta(node.args[second])
    if not all(isinstance(t, torch.Tensor) for t in (mat1, mat2)) or mat1.dtype != mat2.dtype:
        return None
    alignment = ALIGNMENT.get(mat1.dtype)
    if alignment is None or (not always and mat1.device.type != "cuda"):
        return None
    m, k, n = mat1.shape[-2], mat1.shape[-1], mat2.shape[-1]
    padding = Padding(*(_shortfall(extent, alignment) for extent in (m, k, n)))
    if padding == Padding(0, 0, 0) or not (always or pays_to_pad(m, k, n)):
        return None
    return padding


def pays_to_pad(m: int | torch.SymInt, k: int | torch.SymInt, n: int | torch.SymInt) -> bool:
    """Whether an m x k by k x n product is large enough, and bound enough by arithmetic, for
    padding it to pay (`MIN_VOLUME`, `MIN_INTENSITY`); symbolic extents count at their traced size."""
    m, k, n = (_hint(extent) for extent in (m, k, n))
    if min(m, k, n) <= 0:
        return False
    return m * k * n >= MIN_VOLUME and m * k * n >= MIN_INTENSITY * (m * k + k * n + m * n)


def _shortfall(extent: int | torch.SymInt, alignment: int) -> int:
    """How many elements make `extent` a multiple of `alignment`: none for a symbolic extent (its
    value changes between calls) or an extent of 1 (cuBLAS treats a vector apart)."""
    if not isinstance(extent, int) or extent <= 1:
        return 0
    return -extent % alignment


def _hint(extent: int | torch.SymInt) -> int:
    if isinstance(extent, int):
        return extent
    hint = extent.node.hint
    return int(hint) if hint is not None else 0


class _Padder:
    """Rewrites matrix multiplies of one graph, making each distinct pad of a tensor once."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.pads: dict[tuple[fx.Node, tuple[tuple[int, int], ...]], fx.Node] = {}
        self.count = 0

    def rewrite(self, node: fx.Node, padding: Padding) -> None:
        """`node` computed on padded operands, its result sliced back to its own extents."""
        first, second = _OPERANDS[node.target]
        rank = meta(node).dim()
        args = list(node.args)
        args[first] = self.pad(args[first], {rank - 2: padding.m, rank - 1: padding.k}, node)
        args[second] = self.pad(args[second], {rank - 2: padding.k, rank - 1: padding.n}, node)
        if node.target is aten.addmm.default:
            args[0] = self.pad(args[0], _bias_padding(meta(args[0]), padding), node)
        with self.graph.inserting_before(node):
            result = _add(self.graph, node.target, tuple(args), dict(node.kwargs), like=node)
            for dim, extra in ((rank - 2, padding.m), (rank - 1, padding.n)):
                if extra:
                    result = _add(self.graph, aten.slice.Tensor, (result, dim, 0, meta(node).shape[dim]), like=node)
        operands = node.all_input_nodes
        node.replace_all_uses_with(result)
        self.graph.erase_node(node)
        for operand in operands:  # a view the pad moved under, now read by nothing
            _erase_unused_views(self.graph, operand)
        self.count += 1

    def pad(self, operand: fx.Node, widths: dict[int, int], user: fx.Node) -> fx.Node:
        """`operand` with `widths[d]` zeros after the end of each dimension d (made once per operand and
        widths; under a transposing view, the tensor under it is padded and transposed again)."""
        widths = {dim: extra for dim, extra in widths.items() if extra}
        if not widths:
            return operand
        key = (operand, tuple(sorted(widths.items())))
        if key not in self.pads:
            self.pads[key] = self._make_pad(operand, widths, user)
        return self.pads[key]

    def _make_pad(self, operand: fx.Node, widths: dict[int, int], user: fx.Node) -> fx.Node:
        if operand.op == "call_function" and operand.target in _PERMUTATIONS:
            order = _source_dims(operand)
            padded = self.pad(operand.args[0], {order[dim]: extra for dim, extra in widths.items()}, user)
            with self.graph.inserting_after(padded):
                return _add(self.graph, operand.target, (padded, *operand.args[1:]), dict(operand.kwargs),
                            like=padded)
        rank = meta(operand).dim()
        pads = []
        for dim in reversed(range(rank)):  # torch lists the last dimension first
            pads += [0, widths.get(dim, 0)]
        while pads[-2:] == [0, 0]:
            pads = pads[:-2]
        # Right after its producer, so it joins the producer's region (and, in a joint graph, its side
        # of the forward/backward cut); an input is padded where it is used, after all the inputs.
        is_input = operand.op == "placeholder"
        with self.graph.inserting_before(user) if is_input else self.graph.inserting_after(operand):
            return _add(self.graph, aten.constant_pad_nd.default, (operand, pads, 0.0),
                        like=user if is_input else operand)


def _erase_unused_views(graph: fx.Graph, node: fx.Node) -> None:
    while node.op == "call_function" and node.target in _PERMUTATIONS and not node.users:
        source = node.args[0]
        graph.erase_node(node)
        node = source


def _bias_padding(bias: torch.Tensor, padding: Padding) -> dict[int, int]:
    """The pad of an addmm bias: along M and N where it has them (a broadcast extent of 1 stays)."""
    extents = list(bias.shape)
    wanted = [padding.m, padding.n][-len(extents):] if extents else []
    return {dim: extra for dim, (extent, extra) in enumerate(zip(extents, wanted)) if extent != 1}


def _source_dims(view: fx.Node) -> list[int]:
    """For each dimension of a transposing view, the dimension of the tensor under it."""
    rank = meta(view).dim()
    order = list(range(rank))
    if view.target is aten.t.default:
        return order[::-1]
    if view.target is aten.transpose.int:
        a, b = (d % rank for d in view.args[1:3])
        order[a], order[b] = b, a
        return order
    return [d % rank for d in view.args[1]]


def _add(graph: fx.Graph, target: object, args: Sequence, kwargs: dict | None = None, *, like: fx.Node) -> fx.Node:
    """A new node at the graph's insertion point, with its example value computed from its arguments'
    (in their fake mode) and the forward or backward tag of AOTAutograd's joint graph that `like` has."""
    node = graph.call_function(target, tuple(args), kwargs or {})
    examples = fx.node.map_arg((args, kwargs or {}), meta)
    fake_mode = next((t.fake_mode for t in tree_leaves(examples) if hasattr(t, "fake_mode")), None)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        node.meta["val"] = target(*examples[0], **examples[1])
    if "partitioner_tag" in like.meta:
        node.meta["partitioner_tag"] = like.meta["partitioner_tag"]
    return node

