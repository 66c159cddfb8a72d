"""`@bz.kernel` calls with GPU arrays (torch, CuPy, braze's DeviceArray, any `__cuda_array_interface__`).

The first call with arguments of one description binds and checks them, finds (or compiles) the
signature's CUDA kernel, and prepares the call (`PreparedKernelCall`); later calls with the same
description take the prepared call from the call cache fusions use (`FastCalls`: the same key,
and on torch tensors the same guard).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from braze import engine
from braze.errors import Error, InputError
from braze.record import note_entry
from braze.runtime.arrays import OverlapCheck
from braze.runtime.device_arrays import DeviceView, as_device_view, is_device_array

if TYPE_CHECKING:
    from braze.frontend.kernel import KernelFunction


def bind_and_run(fn: KernelFunction, args: Sequence[object]) -> None:
    """A GPU call the kernel's call cache (`KernelFunction.calls`, which its host calls share) did not
    take: check the arguments, compile if needed, prepare (the first call of a description) and run."""
    views = bind_arrays(fn, args)
    scalars = [fn._scalar(n, s, args[i]) for i, n, s in fn.scalar_specs]
    overlapping = OverlapCheck(views)([v.ptr for v in views])  # any view overlapping itself counts
    device = views[0].device
    described = tuple((v.dtype, v.ndim, v.ndim > 0 and v.strides[-1] == v.itemsize) for v in views)
    classes = fn.extent_classes((*described, overlapping), [v.shape for v in views])
    key = (*described, overlapping, classes, *fn.knob_key(), ("cuda", device))
    entry = fn.entries.get(key)
    if entry is None:
        kernel, arrays, scalar_params, fuse, _ = fn.signature_ir(key)
        entry = fn.entries[key] = engine.loop_kernel_entry(kernel, arrays, scalar_params, fuse=fuse,
                                                           device_index=device, restrict=not overlapping)
    fn.last_entry = entry
    fn.check_writable(entry, views)  # (read-only GPU arrays have no cached call: checked each call)
    note_entry(f"prepared call {fn.__name__}")
    prepared = entry.launcher.prepare(views, scalars, args, fn.array_positions, [i for i, _, _ in fn.scalar_specs],
                                      overlapping)
    # Within one description only the arrays' overlap picks the kernel: a call filed for the other
    # kernel takes this one as its pair. Else (none, or the cache refused it) this call is filed.
    filed = fn.calls.filed(args)
    if filed is not None and filed.executor is not entry.launcher and filed.other is None:
        filed.pair(prepared)
    else:
        fn.calls.learn(args, prepared)
    if prepared.run(args) is None:
        raise Error(f"kernel {fn.__name__}: a freshly prepared call refused its own arguments")


def bind_arrays(fn: KernelFunction, args: Sequence[object]) -> list[DeviceView]:
    """Views of the array arguments, all checked to be GPU arrays on one device."""
    first = next(p for p in fn.array_positions if is_device_array(args[p]))
    first_name = fn.specs[first][0]
    views = []
    device = None
    for position in fn.array_positions:
        name, spec = fn.specs[position]
        where = f"{fn.label}: argument '{name}'"
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
    except Error:  # an InputError is a ValueError too: it names what is wrong already
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{where}: could not read the GPU array ({type(value).__name__}): "
                         f"__cuda_array_interface__ is incomplete ({error!r})") from None
