"""Extent carriers: tensors a region takes only for their sizes.

braze knows a symbolic size only as an extent of one of a fusion's input tensors. A region may need
a size that none of its inputs has as a whole dimension: it reads a (s0*s1, 96) matrix and views it
as (s0, s1, 96). The graph then hands the region one more input that has the size as a dimension,
its "carrier": a graph input with that dimension where there is one, else a zero-stride tensor
expanded from the symbolic size itself. braze reads the carrier's extents and none of its elements.
A size braze's extents cannot compute from the symbols (`TruncToInt(1.5*ToFloat(s0))`: symbols.py's
atoms) is carried the same way, PyTorch computing it on the host.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import sympy
import torch
from torch import fx

from braze.frontend.torch.region_builder import meta
from braze.frontend.torch.symbols import is_atom, sign_range, size_atoms, size_expr

_ZEROS: dict[torch.device, torch.Tensor] = {}


def extent_carrier(size: int, device: torch.device) -> torch.Tensor:
    """A tensor of shape (size,) that reads one zero: it carries `size` into a fusion."""
    zero = _ZEROS.get(device)
    if zero is None:
        zero = _ZEROS[device] = torch.zeros((), dtype=torch.int8, device=device)
    return zero.expand(size)


def _symbols(value: object) -> set[sympy.Expr]:
    """The size atoms (symbols.size_atoms) of a value's sizes."""
    if isinstance(value, torch.Tensor):
        return set().union(*(size_atoms(size_expr(size)) for size in value.shape))
    if isinstance(value, torch.SymInt):
        return size_atoms(size_expr(value))
    if isinstance(value, (list, tuple)):
        return set().union(*[_symbols(v) for v in value]) if value else set()
    return set()


def _bare_symbols(value: object) -> set[sympy.Expr]:
    if not isinstance(value, torch.Tensor):
        return set()
    return {e for e in (size_expr(s) for s in value.shape) if is_atom(e)}


def missing_symbols(region: fx.GraphModule) -> set[sympy.Expr]:
    """The size atoms (symbols, sizes braze cannot compute) a region's sizes use that no input tensor
    of it has as a whole dimension."""
    known, needed = set(), set()
    for node in region.graph.nodes:
        if node.op == "placeholder":
            known |= _bare_symbols(meta(node))
        elif node.op == "call_function":
            needed |= _symbols(meta(node))
            for position, arg in enumerate(node.args):
                if not _read_as_number(node, position, arg):
                    needed |= _symbols([meta(a) for a in arg] if isinstance(arg, (list, tuple)) else meta(arg))
    return needed - known


def _read_as_number(node: fx.Node, position: int, arg: object) -> bool:
    """Whether an op reads a symbolic int argument as a number, not a size (`x + n`, `torch.full(shape, n)`:
    its schema says `number`, or `Tensor` for a number it wraps): the region reads it as a scalar then,
    needing no carrier, which could carry no negative number."""
    schema = getattr(node.target, "_schema", None)
    if not isinstance(meta(arg), torch.SymInt) or schema is None or position >= len(schema.arguments):
        return False
    return "int" not in str(schema.arguments[position].type)


@dataclass(frozen=True)
class Carrier:
    """What the region builder needs of a carrier: its sizes (ints and sympy expressions) and dtype."""

    sizes: tuple[object, ...]
    dtype: torch.dtype


def add_carriers(gm: fx.GraphModule, call: fx.Node, symbols: set[sympy.Expr], device: torch.device
                 ) -> list[Carrier]:
    """Adds a carrier of each symbol, on the region's `device`, to the region call's arguments (one
    graph input may carry several); returns them in that order."""
    nodes, carriers = [], []
    for symbol in sorted(symbols, key=str):
        if any(symbol in c.sizes for c in carriers):
            continue
        found = _carrier(gm, call, symbol, device)
        if found is not None:
            nodes.append(found[0])
            carriers.append(found[1])
    call.args = (*call.args, *nodes)
    return carriers


def add_device_anchor(gm: fx.GraphModule, call: fx.Node, device: torch.device) -> list[Carrier]:
    """Gives a region that reads no tensor (an `arange`, a `full`) one to read, on the graph's device:
    braze runs a fusion where its inputs live and gives back their kind, so the region's outputs are
    torch tensors there."""
    with gm.graph.inserting_before(call):
        anchor = gm.graph.call_function(extent_carrier, (1, device))
    call.args = (*call.args, anchor)
    return [Carrier((1,), torch.int8)]


def _carrier(gm: fx.GraphModule, call: fx.Node, symbol: sympy.Expr, device: torch.device
             ) -> tuple[fx.Node, Carrier] | None:
    # On the region's device: braze runs a fusion where its arrays live, all of them (a graph may
    # hold CPU tensors beside CUDA ones, like the seed of random ops).
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        value = meta(node)
        if symbol in _bare_symbols(value) and value.device == device:
            return node, Carrier(tuple(size_expr(s) for s in value.shape), value.dtype)
    # A size the graph computes (`trunc(1.5 * sym_float(s0))`) is an argument of the region call.
    numbers = placeholders + [a for a in call.args if isinstance(a, fx.Node) and a.op == "call_function"]
    for node in numbers:
        value = meta(node)
        if isinstance(value, torch.SymInt) and size_expr(value) == symbol:
            return _number_carrier(gm, call, node, symbol, device)
    return None  # the region build then names the size it cannot find


def _number_carrier(gm: fx.GraphModule, call: fx.Node, number: fx.Node, symbol: sympy.Expr,
                    device: torch.device) -> tuple[fx.Node, Carrier] | None:
    """A carrier of a symbolic int the graph has as a number: the number itself where its range (the
    shape environment's guards) has it never negative, its negation where always negative (`x[:, :n]`
    with n = -1: a slice bound from the end, the slice's size `s0 + n`); None where it may be either,
    as an extent can be neither (the region then stays in PyTorch)."""
    never_negative, always_negative = sign_range(meta(number))
    if never_negative:
        carried, sizes = number, (symbol,)
    elif always_negative:
        with gm.graph.inserting_before(call):
            carried = gm.graph.call_function(operator.neg, (number,))
        sizes = (-symbol,)
    else:
        return None
    with gm.graph.inserting_before(call):
        carrier = gm.graph.call_function(extent_carrier, (carried, device))
    return carrier, Carrier(sizes, torch.int8)
