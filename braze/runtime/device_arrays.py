"""GPU arrays: reading torch, CuPy and `__cuda_array_interface__` inputs without copies, braze's own
`DeviceArray`, and making outputs with the inputs' own library (so they share its allocator and
stream).

A `DeviceView` is what the runtime sees of any GPU array: pointer, shape, byte strides, dtype,
device, the library it came from, and the stream work on it runs on. It carries the few NumPy
attributes input binding reads (dtype, ndim, shape, strides, itemsize, size, flags).
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from braze import config
from braze import dtypes as dt
from braze.compile import cuda_driver as cuda
from braze.errors import InputError, UnsupportedError
from braze.runtime.arrays import check_torch_tensor, is_torch_tensor

_WRITABLE = SimpleNamespace(writeable=True)


@dataclass(eq=False)
class DeviceView:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes, as NumPy's
    dtype: np.dtype
    device: int
    kind: str  # "torch", "cupy" or "cuda" (braze's DeviceArray or any __cuda_array_interface__)
    stream: int = 0
    owner: object = field(default=None, repr=False)
    flags: SimpleNamespace = field(default_factory=lambda: _WRITABLE, repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def is_device_array(obj: object) -> bool:
    if is_torch_tensor(obj):
        return obj.device.type == "cuda"
    return hasattr(obj, "__cuda_array_interface__")


def as_device_view(obj: object, where: str) -> DeviceView:
    """A view of a GPU array `obj` (torch, CuPy, DeviceArray, or any __cuda_array_interface__)."""
    return _in_whole_elements(_device_view(obj, where), where)


def _in_whole_elements(view: DeviceView, where: str) -> DeviceView:
    """GPU code reads an element at an address aligned to its size, a misaligned one being a fault that
    ends the CUDA context, and steps by whole elements: a pointer or stride off that is refused (a
    host array's is read from a copy instead, runtime/fusion_runtime.py)."""
    size = view.itemsize
    if view.ptr % size or any(s % size for s in view.strides):
        raise InputError(f"{where}: expected a pointer and strides in whole {size}-byte elements, got pointer "
                         f"{view.ptr:#x} and strides {view.strides}")
    return view


def _device_view(obj: object, where: str) -> DeviceView:
    if is_torch_tensor(obj):
        import torch

        name = str(obj.dtype).removeprefix("torch.")
        try:
            dtype = dt.as_dtype(name).numpy
        except Exception:  # noqa: BLE001
            raise InputError(f"{where}: expected a braze dtype, got torch.{name}") from None
        check_torch_tensor(obj, where)
        index = obj.device.index or 0
        itemsize = obj.element_size()
        return DeviceView(obj.data_ptr(), tuple(obj.shape), tuple(s * itemsize for s in obj.stride()),
                          dtype, index, "torch", _torch_stream(torch, index), obj)
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or tuple(int(s) for s in dense_strides(shape, dtype.itemsize))
    kind = "cupy" if type(obj).__module__.startswith("cupy") else "cuda"
    if isinstance(obj, DeviceArray):
        return DeviceView(obj.ptr, obj.shape, obj.strides, obj.dtype, obj.device, "cuda", obj.stream, obj)
    stream = sys.modules["cupy"].cuda.get_current_stream().ptr if kind == "cupy" else 0
    pointer, readonly = int(cai["data"][0]), cai["data"][1]
    return DeviceView(pointer, shape, tuple(strides), dtype, cuda.device_of_pointer(pointer) if pointer else 0, kind,
                      stream, obj, SimpleNamespace(writeable=False) if readonly else _WRITABLE)


def _torch_stream(torch, index: int) -> int:
    """torch's current stream on device `index` (its raw handle: the public call costs ~10 µs)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def dense_strides(shape: tuple[int, ...], itemsize: int, order: tuple[int, ...] | None = None) -> list[int]:
    """Byte strides of a dense layout: row-major, or by `order` (stride_order: 0 the fastest)."""
    order = order if order is not None else tuple(reversed(range(len(shape))))
    strides = [0] * len(shape)
    step = itemsize
    for axis in sorted(range(len(shape)), key=lambda i: order[i]):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return strides


class DeviceArray:
    """braze's own GPU array, for NumPy users of the CUDA backend. Memory comes from the
    stream-ordered allocator and goes back when the array is collected. It speaks
    `__cuda_array_interface__` and DLPack, so CuPy, Numba and torch take it without a copy."""

    def __init__(self, shape, dtype, device: int = 0, stream: int = 0,
                 stride_order: tuple[int, ...] | None = None, element_strides: tuple[int, ...] | None = None,
                 numel: int | None = None) -> None:
        """`element_strides` and `numel` lay it out over a buffer of `numel` elements (a layout of
        splits and merges, padding included) instead of densely in `stride_order`."""
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device, self.stream = device, stream
        if element_strides is None:
            self.strides = tuple(dense_strides(self.shape, self.dtype.itemsize, stride_order))
            numel = int(np.prod(self.shape, dtype=np.int64))
        else:
            self.strides = tuple(int(s) * self.dtype.itemsize for s in element_strides)
        self.nbytes = int(numel) * self.dtype.itemsize
        owner = cuda.device(device)
        with owner.current():
            self.ptr = cuda.alloc(self.nbytes, stream)
        self._free = weakref.finalize(self, cuda.free_on, owner, self.ptr, stream)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: int = 0, stream: int = 0) -> DeviceArray:
        host = np.ascontiguousarray(array)
        out = cls(host.shape, host.dtype, device, stream)
        with cuda.device(device).current():
            cuda.copy_to_device(out.ptr, host.ctypes.data, host.nbytes, stream)
            cuda.synchronize(stream)  # the host copy may go away once this returns
        return out

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the work queued on the array's stream)."""
        span = span_bytes(self.shape, self.strides, self.dtype.itemsize)
        storage = np.empty(span // self.dtype.itemsize, self.dtype)
        with cuda.device(self.device).current():
            cuda.copy_to_host(storage.ctypes.data, self.ptr, span, self.stream)
            cuda.synchronize(self.stream)
        return np.lib.stride_tricks.as_strided(storage, self.shape, self.strides).copy()

    def __dlpack__(self, stream=None, **kwargs) -> object:
        """A DLPack capsule (no copy). The work queued on the array's stream is waited for first,
        unless the consumer's stream is this one."""
        from braze.runtime.dlpack import to_capsule

        if stream not in (None, -1) and stream != self.stream:
            cuda.synchronize(self.stream)
        return to_capsule(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return 2, self.device  # kDLCUDA

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": self.strides, "stream": None}

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"


def span_bytes(shape, strides, itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


# --- outputs, made by the inputs' library ---------------------------------------------------------
Layout = tuple[int, tuple[int, ...]]  # (numel, element strides): a layout of splits and merges, padding included


def allocate(kind: str, shape: tuple[int, ...], dtype: dt.DType, device: int, stream: int,
             stride_order: tuple[int, ...] | None = None, layout: Layout | None = None) -> DeviceView:
    """An uninitialized GPU array made by `allocator`. Under BRAZE_ENABLE=poison_outputs its bytes
    are 0xFF (NaN, -1), so an element no kernel writes shows."""
    owner = allocator(kind, shape, dtype, device, stream, stride_order, layout)()
    strides = _byte_strides(shape, dtype, stride_order, layout)
    view = DeviceView(pointer_of(owner), shape, strides, dtype.numpy, device, kind, stream, owner)
    if config.enabled("poison_outputs"):
        cuda.fill_bytes(view.ptr, 0xFF, _buffer_bytes(shape, strides, dtype, layout), stream)
    return view


def allocator(kind: str, shape: tuple[int, ...], dtype: dt.DType, device: int, stream: int,
              stride_order: tuple[int, ...] | None = None, layout: Layout | None = None) -> Callable[[], object]:
    """A function that makes uninitialized arrays of `shape` with the library of `kind` (torch,
    CuPy, or braze's DeviceArray for "cuda"): dense in `stride_order` (row-major when None), or
    over a buffer of `layout`'s numel elements with its strides. The cached call keeps one per buffer."""
    strides = _byte_strides(shape, dtype, stride_order, layout)
    if kind == "torch":
        import torch

        if layout is not None:
            flat = allocator(kind, (layout[0],), dtype, device, stream)
            return lambda: flat().as_strided(shape, layout[1])
        # empty_strided, even for row-major layouts: it costs ~1.9 us a call where torch.empty costs ~3.
        return functools.partial(torch.empty_strided, shape, tuple(s // dtype.itemsize for s in strides),
                                 dtype=getattr(torch, dtype.name), device=_torch_device(torch, device))
    if kind == "cupy":
        import cupy

        nbytes = max(_buffer_bytes(shape, strides, dtype, layout), 1)

        def cupy_array() -> object:
            with cupy.cuda.Device(device):
                return cupy.ndarray(shape, dtype.numpy, cupy.cuda.alloc(nbytes), strides=strides)

        return cupy_array
    if layout is not None:
        return functools.partial(DeviceArray, shape, dtype.numpy, device, stream, None, layout[1], layout[0])
    return functools.partial(DeviceArray, shape, dtype.numpy, device, stream, stride_order)


def _byte_strides(shape: tuple[int, ...], dtype: dt.DType, stride_order: tuple[int, ...] | None,
                  layout: Layout | None) -> tuple[int, ...]:
    if layout is None:
        return tuple(dense_strides(shape, dtype.itemsize, stride_order))
    return tuple(s * dtype.itemsize for s in layout[1])


def _buffer_bytes(shape: tuple[int, ...], strides: tuple[int, ...], dtype: dt.DType, layout: Layout | None) -> int:
    return span_bytes(shape, strides, dtype.itemsize) if layout is None else layout[0] * dtype.itemsize


def pointer_of(owner: object) -> int:
    """The device address of an array made by `allocator`."""
    if isinstance(owner, DeviceArray):
        return owner.ptr
    if hasattr(owner, "data_ptr"):
        return owner.data_ptr()
    return owner.data.ptr


@functools.cache
def _torch_device(torch, index: int):
    return torch.device("cuda", index)


def copy_into(target: DeviceView, source: DeviceView,
              stream_for: Callable[[int], int] | None = None) -> None:
    """Writes `source` into `target` (same shape; an in-place output). `stream_for` maps the target's
    stream to the one the copy is queued on (a graph's capture stream)."""
    stream = target.stream if stream_for is None else stream_for(target.stream)
    if target.strides == source.strides or target.size <= 1:
        cuda.copy_on_device(target.ptr, source.ptr, span_bytes(source.shape, source.strides, source.itemsize),
                            stream)
        return
    if stream != target.stream:
        raise UnsupportedError("bz.graph: an output written back into a differently strided input is copied by "
                               f"{target.kind}, outside the graph: pass the input contiguous")
    if target.kind == "torch":
        target.owner.copy_(source.owner)
    elif target.kind == "cupy":
        import cupy

        cupy.copyto(target.owner, cupy.asarray(source.owner))
    else:
        raise InputError(f"an in-place output into a {target.strides}-strided DeviceArray: expected the layout "
                         f"{source.strides} of the computed result")
