"""Array interop: reading inputs as NumPy views without copies, and giving outputs back in the
inputs' own kind (a torch tensor in, a torch tensor out)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from braze import dtypes as dt
from braze.errors import InputError, UnsupportedError

_DLPACK_CPU = 1


def is_torch_tensor(obj: object) -> bool:
    """Whether `obj` is a torch tensor (a parameter, or a subclass of the user's, too), without
    importing torch: an object of it exists only where torch is imported."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def check_torch_tensor(t: Any, where: str) -> None:
    """Refuses a tensor whose memory does not hold its values as a strided array of them: a sparse
    one, or one with torch's lazy negation or conjugation bit set (read raw, its values would come
    out negated or conjugated)."""
    torch = sys.modules["torch"]
    if t.layout is not torch.strided:
        raise InputError(f"{where}: expected a dense (strided) tensor, got one of layout {t.layout}; "
                         "pass `.to_dense()`")
    if t.is_conj():  # only complex tensors have the bit, and braze has no complex dtype
        raise _unsupported_dtype(where, t.dtype)
    if t.is_neg():
        raise InputError(f"{where}: expected a tensor without torch's lazy negation bit, got one with it set (as "
                         "`z.conj().imag` gives); pass `.resolve_neg()`")


def _torch_to_numpy(t: Any, where: str) -> np.ndarray:
    if t.device.type != "cpu":  # a CUDA tensor is a GPU array (device_arrays.is_device_array): not here
        raise UnsupportedError(f"{where}: expected a tensor on the CPU or a CUDA GPU, got one on {t.device}")
    check_torch_tensor(t, where)
    t = t.detach()
    if str(t.dtype) == "torch.bfloat16":  # NumPy has no bfloat16; reinterpret the bits
        return t.view(sys.modules["torch"].int16).numpy().view(dt.bfloat16.numpy)
    try:
        return t.numpy()
    except TypeError:  # a dtype NumPy has no type for: float8, complex32, quantized, sub-byte integers
        raise _unsupported_dtype(where, t.dtype) from None


def _unsupported_dtype(where: str, dtype: object) -> UnsupportedError:
    return UnsupportedError(f"{where}: expected one of {', '.join(d.name for d in dt.ALL_DTYPES)}, got {dtype}")


def as_host_array(obj: object, where: str) -> tuple[np.ndarray, str]:
    """A NumPy view of `obj` and the kind it came as ("numpy", "torch"). `where` names the input."""
    if isinstance(obj, np.ma.MaskedArray):  # braze would read masked elements as any others
        raise InputError(f"{where}: expected an array without a mask, got a NumPy masked array; pass "
                         "`.filled(value)` to choose what masked elements hold, or `.data` to ignore the mask")
    if isinstance(obj, np.ndarray):
        return obj, "numpy"
    if is_torch_tensor(obj):
        return _torch_to_numpy(obj, where), "torch"
    if hasattr(obj, "__cuda_array_interface__"):
        raise UnsupportedError(f"{where}: expected a host array, got a CUDA array ({type(obj).__name__}); "
                               "a call's arrays must all be on the host or all on one GPU")
    if hasattr(obj, "__array_interface__"):
        return _read_through("__array_interface__", np.asarray, obj, where), "numpy"
    if hasattr(obj, "__dlpack__"):
        device = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _DLPACK_CPU
        if device != _DLPACK_CPU:
            raise UnsupportedError(f"{where}: expected a host array, got a DLPack array on device type {device}")
        return _read_through("__dlpack__", np.from_dlpack, obj, where), "numpy"
    raise InputError(f"{where}: expected an array (NumPy, torch, or with __array_interface__ or __dlpack__), "
                     f"got {type(obj).__name__}")


def _read_through(protocol: str, read: Any, obj: object, where: str) -> np.ndarray:
    """`read(obj)`, where an error of the object's protocol (a BufferError for what DLPack cannot carry: a
    read-only array in its old version, the other byte order) names the input."""
    try:
        return read(obj)
    except (BufferError, ValueError, TypeError, RuntimeError) as error:
        raise InputError(f"{where}: could not read the array ({type(obj).__name__}) through {protocol}: "
                         f"{type(error).__name__}: {error}") from None


def to_kind(array: np.ndarray, kind: str) -> Any:
    """Gives `array` back as the kind of the inputs (sharing memory)."""
    if hasattr(array, "owner") and hasattr(array, "ptr"):  # a GPU output: the library's own array
        return array.owner
    if kind != "torch":
        return array
    import torch

    if any(s < 0 for s in array.strides):  # torch has no negative strides: a flipped view becomes a copy
        array = array.copy()
    if array.dtype == dt.bfloat16.numpy:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def pack_array(block: object, slot: int, pointer: int, shape: Sequence[int], strides: Sequence[int],
               itemsize: int) -> None:
    """Writes an array argument into an argument block as every kernel reads it (kir/layout.py):
    the data pointer at `slot`, then the extents, then the strides in elements (`strides` in bytes)."""
    ndim = len(shape)
    block[slot] = pointer
    block[slot + 1: slot + 1 + ndim] = shape
    block[slot + 1 + ndim: slot + 1 + 2 * ndim] = [s // itemsize for s in strides]


def overlaps_itself(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether two index tuples of an array reach one address (a sliding-window view, torch's
    `unfold`, a broadcast): then no element belongs to one index alone, and task fusion must not
    treat two threads' accesses as disjoint. Strides in bytes."""
    if 0 in shape:
        return False
    span = itemsize  # bytes the dimensions seen so far cover
    for n, stride in sorted(((n, abs(s)) for n, s in zip(shape, strides) if n > 1), key=lambda d: d[1]):
        if stride < span:
            return True
        span = stride * (n - 1) + span
    return False


def byte_span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int] | None:
    """[first byte, last byte + 1) of an array relative to its data pointer; None when it is empty.
    Strides in bytes."""
    if 0 in shape:
        return None
    lo = hi = 0
    for n, stride in zip(shape, strides):
        if stride < 0:
            lo += (n - 1) * stride
        else:
            hi += (n - 1) * stride
    return lo, hi + itemsize


def writable(array: Any) -> bool:
    """Whether a host array overlapping itself counts as overlapping: only where a kernel may write it."""
    return array.flags.writeable


class OverlapCheck:
    """The one overlap check of loop-kernel calls on every backend: whether arrays of one
    description (shapes and strides), at the data pointers a call gives, may share memory, or one
    of them overlaps itself where `counts(array)` says that counts (on the host, a writable one).
    Task fusion treats parameters as distinct resources, so such a call gets a kernel compiled
    without fusion."""

    def __init__(self, arrays: Sequence[Any], counts: Callable[[Any], bool] = lambda array: True) -> None:
        self.spans = [byte_span(a.shape, a.strides, a.itemsize) for a in arrays]
        self.overlaps_itself = any(counts(a) and overlaps_itself(a.shape, a.strides, a.itemsize) for a in arrays)

    def __call__(self, pointers: Sequence[int]) -> bool:
        if self.overlaps_itself:
            return True
        placed = sorted((p + span[0], p + span[1]) for p, span in zip(pointers, self.spans) if span is not None)
        return any(later[0] < earlier[1] for earlier, later in zip(placed, placed[1:]))
