"""A graph's regions compiled ahead of its first run, all at once (engine.compile_ahead).

When a graph is compiled, every region's inputs are known by their example values (FakeTensors:
shapes, strides, dtype, device, no memory). Each region's fusion is planned for stand-ins with that
layout and its kernel starts compiling on a worker thread; the first run then finds the kernels
done, or waits for the one it needs. `BRAZE_DISABLE=compile_ahead` compiles at the first call.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import fx

from braze import config, engine
from braze import dtypes as dt
from braze.errors import Error
from braze.frontend.torch.carriers import extent_carrier
from braze.frontend.torch.region import BrazeRegion
from braze.frontend.torch.region_builder import meta
from braze.runtime.device_arrays import DeviceView


class _NoStandIn(Exception):
    """An input whose layout the graph does not say: that region compiles at its first call."""


def compile_regions_ahead(gm: fx.GraphModule) -> None:
    """Starts compiling the kernel of each region of `gm` that braze built (once per fusion)."""
    if config.disabled("compile_ahead"):
        return
    started: set[int] = set()
    for node in gm.graph.nodes:
        region = getattr(gm, node.target) if node.op == "call_module" else None
        built = region.built if isinstance(region, BrazeRegion) else None
        if built is None or id(built.fusion) in started:
            continue
        started.add(id(built.fusion))
        try:
            inputs = [_stand_in(node.args[i], n in built.seed_inputs) for n, i in enumerate(built.input_positions)]
            engine.compile_ahead(built.fusion, inputs)
        except (_NoStandIn, Error):  # the first call plans it, and reports what is wrong
            continue


def _stand_in(arg: object, seed: bool) -> object:
    """An input like the one `arg` gives at run time: a number for a scalar, else an array of its
    shape, strides, dtype and device that owns no memory."""
    if seed:
        return 0
    if isinstance(arg, fx.Node) and arg.target is extent_carrier:  # reads one zero: (size,) of stride 0
        size, device = arg.args
        return _array((_hint(meta(size)),), (0,), torch.int8, device)
    value = meta(arg)
    if isinstance(value, torch.Tensor):
        return _array(tuple(_hint(n) for n in value.shape), tuple(_hint(s) for s in value.stride()), value.dtype,
                      value.device)
    if isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _hint(value)
    raise _NoStandIn(arg)


def _hint(value: object) -> object:
    """A size's value: itself, or a symbolic size's example value."""
    if isinstance(value, (bool, int, float)):
        return value
    hint = getattr(getattr(value, "node", None), "hint", None)
    if hint is None:
        raise _NoStandIn(value)
    return hint


def _array(shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> object:
    numpy_dtype = dt.as_dtype(str(dtype).removeprefix("torch.")).numpy
    byte_strides = tuple(s * numpy_dtype.itemsize for s in strides)
    if device.type == "cuda":
        return DeviceView(0, shape, byte_strides, numpy_dtype, device.index or 0, "torch")
    return np.lib.stride_tricks.as_strided(np.zeros(1, numpy_dtype), shape, byte_strides)
