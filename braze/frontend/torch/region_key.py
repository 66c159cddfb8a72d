"""What makes two regions alike: the same fusion built from either, so they share one.

A model's layers give regions that differ only in their nodes' names (`add_7`, `primals_40`). The
region builder (region_builder.py) reads a node's op, arguments and recorded example value (dtype,
device, sizes and strides, symbolic ones as expressions) and nothing else but its name, and each
carrier's sizes and dtype. Regions equal in all of these get one `BuiltRegion`: one fusion, planned,
lowered, compiled and given a host program once, and one cached call for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx

from braze.frontend.torch.carriers import Carrier
from braze.frontend.torch.region_builder import meta


class _Unkeyed(Exception):
    """A value the key does not know how to compare: the region is built on its own."""


_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def region_key(region: fx.GraphModule, carriers: Sequence[Carrier]) -> tuple | None:
    """A key equal for regions the builder makes the same fusion of (see the module docstring); None
    for a region with an argument it cannot compare."""
    places: dict[fx.Node, int] = {}
    parts = []
    try:
        for place, node in enumerate(region.graph.nodes):
            if node.op not in ("placeholder", "call_function", "output"):
                raise _Unkeyed  # an attribute of the region's own module, say
            places[node] = place
            parts.append((node.op, node.target if node.op == "call_function" else None,
                          _argument(node.args, places), _argument(node.kwargs, places), _example(meta(node))))
    except _Unkeyed:
        return None
    return tuple(parts), tuple((tuple(str(s) for s in c.sizes), c.dtype) for c in carriers)


def _argument(value: object, places: dict[fx.Node, int]) -> object:
    if isinstance(value, fx.Node):
        return ("node", places[value])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_argument(v, places) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _argument(v, places)) for k, v in value.items()))
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))  # repr: -0.0 and 0.0, nan, 1 and True apart
    raise _Unkeyed


def _example(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.device, tuple(map(str, value.shape)), tuple(map(str, value.stride())))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return (type(value).__name__, str(value))
    if isinstance(value, (list, tuple)):
        return ("sequence", *(_example(v) for v in value))
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))
    raise _Unkeyed
