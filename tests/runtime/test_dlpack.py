"""The DLPack capsule of a DeviceArray, read back field by field (no GPU: nothing dereferences the
data pointer), and released whether or not a consumer takes it."""

from __future__ import annotations

import ctypes
import gc

import numpy as np

from braze.runtime import dlpack


class FakeDeviceArray:
    shape, strides, dtype, ptr, device = (3, 4), (4, 12), np.dtype(np.float32), 0xDEAD0, 1


def test_capsule_describes_the_array_and_is_released():
    capsule = dlpack.to_capsule(FakeDeviceArray())
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    tensor = ctypes.cast(get(capsule, b"dltensor"), ctypes.POINTER(dlpack.DLManagedTensor)).contents.dl_tensor
    assert (tensor.data, tensor.device.device_type, tensor.device.device_id, tensor.ndim) == (0xDEAD0, 2, 1, 2)
    assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (2, 32, 1)
    assert [tensor.shape[i] for i in range(2)] == [3, 4] and [tensor.strides[i] for i in range(2)] == [1, 3]
    assert len(dlpack._alive) == 1
    del capsule, tensor
    gc.collect()
    assert len(dlpack._alive) == 0  # never consumed: the capsule's destructor deleted it
