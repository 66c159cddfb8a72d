"""`@bz.kernel` calls with GPU arrays (torch, CuPy, braze's DeviceArray, any `__cuda_array_interface__`).

The first call with arguments of one description binds and checks them, finds (or compiles) the
signature's CUDA kernel, and prepares the call (`PreparedKernelCall`); later calls with the same
description take the prepared call directly. A description is read with the cheapest attributes
each library has: for torch, one generated function reads `dtype`, `shape`, `stride()` and
`get_device()` of every tensor argument.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from braze import config, engine
from braze.errors import Error, InputError
from braze.runtime.device_arrays import DeviceView, as_device_view, is_device_array
from braze.runtime.fast_call import MAX_DESCRIPTIONS, description, key_function
from braze.runtime.kernel_launch_cuda import PreparedKernelCall, views_overlap
from braze.runtime.record import note_entry

if TYPE_CHECKING:
    from braze.frontend.kernel import KernelFunction


class GpuCalls:
    """The GPU calls of one `@bz.kernel`: prepared calls by argument description, the description
    read as the fusions' cached calls read theirs (runtime/fast_call.py)."""

    def __init__(self, fn: KernelFunction) -> None:
        self.fn = fn
        self.config = config.current
        self.prepared: OrderedDict[tuple, PreparedKernelCall] = OrderedDict()
        self.scalar_positions = frozenset(i for i, _, _ in fn.scalar_specs)
        self.torch_key = _torch_key_function(len(fn.specs), self.scalar_positions)
        self.torch_first = True  # whether the last description read was of torch tensors

    def key(self, args: Sequence[object]) -> tuple | None:
        """The description of `args`: read as torch tensors by one generated function (the common
        case), else argument by argument; None when an argument is of no library braze knows.
        The way that worked last time is tried first (a failed try raises, which costs)."""
        if self.torch_first:
            try:
                return self.torch_key(*args)
            except (AttributeError, TypeError):
                pass
        key = description(args, self.scalar_positions, any_scalar=True)
        if key is None and not self.torch_first:
            try:
                return self.torch_key(*args)
            except (AttributeError, TypeError):
                pass
        return key

    def run(self, args: Sequence[object]) -> bool:
        """The cached call: True when a prepared call ran `args`, else False (bind them)."""
        if config.current is not self.config:
            return False
        try:  # torch tensors, the common case, read inline: each call saved counts here
            key = self.torch_key(*args) if self.torch_first else self.key(args)
        except (AttributeError, TypeError):
            key = self.key(args)
        prepared = self.prepared.get(key)
        return prepared is not None and prepared.run(args)

    def bind_and_run(self, args: Sequence[object]) -> None:
        """The first call of a description: check the arguments, compile if needed, prepare and run."""
        fn = self.fn
        views = bind_arrays(fn, args)
        scalars = [fn._scalar(n, s, args[i]) for i, n, s in fn.scalar_specs]
        overlapping = views_overlap(views)
        device = views[0].device
        described = tuple((v.dtype, v.ndim, v.ndim > 0 and v.strides[-1] == v.itemsize) for v in views)
        classes = fn.extent_classes((*described, overlapping), [v.shape for v in views])
        key = (*described, overlapping, classes, *fn.knob_key(), ("cuda", device))
        entry = fn.entries.get(key)
        if entry is None:
            entry = fn.entries[key] = self.compile(key, device)
        fn.last_entry = entry
        fn.check_writable(entry, views)  # (read-only GPU arrays have no cached call: checked each call)
        note_entry(f"prepared call {fn.__name__}")
        prepared = entry.launcher.prepare(views, scalars, args, fn.array_positions,
                                          [i for i, _, _ in fn.scalar_specs], overlapping)
        if config.current is not self.config:
            self.prepared.clear()
            self.config = config.current
        try:
            self.torch_key(*args)
            self.torch_first = True
        except (AttributeError, TypeError):
            self.torch_first = False
        description = self.key(args)
        if description is not None:
            self.prepared[description] = prepared
            if len(self.prepared) > MAX_DESCRIPTIONS:
                self.prepared.popitem(last=False)
        if not prepared.run(args):
            raise Error(f"kernel {fn.__name__}: a freshly prepared call refused its own arguments")

    def compile(self, key: tuple, device: int) -> engine.KernelEntry:
        kernel, arrays, scalars, fuse, overlapping = self.fn.signature_ir(key)
        return engine.loop_kernel_entry(kernel, arrays, scalars, fuse=fuse, device_index=device,
                                        restrict=not overlapping)


def bind_arrays(fn: KernelFunction, args: Sequence[object]) -> list[DeviceView]:
    """Views of the array arguments, all checked to be GPU arrays on one device."""
    first = next(p for p in fn.array_positions if is_device_array(args[p]))
    first_name = fn.specs[first][0]
    views = []
    device = None
    for position in fn.array_positions:
        name, spec = fn.specs[position]
        where = f"kernel {fn.__name__}: argument '{name}'"
        value = args[position]
        if not is_device_array(value):
            raise InputError(f"{where}: expected a GPU array (argument '{first_name}' is one), got a host array "
                             f"({type(value).__name__}); pass every array on the same GPU")
        view = _view(value, where)
        if device is None:
            device = view.device
        elif view.device != device:
            raise InputError(f"{where}: expected an array on cuda:{device} (where argument '{first_name}' is), "
                             f"got one on cuda:{view.device}")
        fn.check_layout(where, spec, view.dtype, view.shape, view.strides, view.itemsize)
        views.append(view)
    return views


def _view(value: object, where: str) -> DeviceView:
    try:
        return as_device_view(value, where)
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{where}: could not read the GPU array ({type(value).__name__}): "
                         f"__cuda_array_interface__ is incomplete ({error!r})") from None


def _torch_key_function(count: int, scalars: frozenset[int]) -> Callable[..., tuple]:
    """A function of the arguments giving their description, reading every array as a torch tensor
    (an AttributeError or TypeError on any other): per tensor its dtype, shape, strides and device
    (-1 on the host, whose calls then take the CPU), per scalar its type. The fusions' key of torch
    inputs without each tensor's type: any tensor is read alike by a loop kernel's call."""
    torch = sys.modules.get("torch")
    if torch is None:
        return _no_torch
    return key_function(torch.Tensor, count, scalars, typed=False)


def _no_torch(*args: object) -> tuple:
    raise TypeError("torch is not imported: no argument is a torch tensor")
