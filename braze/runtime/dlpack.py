"""DLPack export for braze's DeviceArray (`__dlpack__`), so torch, CuPy and JAX take it without a
copy. The capsule holds a DLManagedTensor whose deleter drops braze's reference to the array."""

from __future__ import annotations

import ctypes

import numpy as np

KDL_CUDA = 2
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2}  # kDLBool, kDLInt, kDLUInt, kDLFloat
KDL_BFLOAT = 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_alive: dict[int, tuple] = {}  # address of a DLManagedTensor -> what must outlive it


@_DELETER
def _delete(managed) -> None:
    _alive.pop(ctypes.addressof(managed.contents), None)


# The destructor gets the dying capsule as a raw pointer: making it a Python object again there
# would touch a reference count that has reached zero.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Private prototypes of the capsule API (`ctypes.pythonapi.X` is one shared object whose argtypes
# anyone may change).
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@_CAPSULE_DESTRUCTOR
def _destroy_capsule(capsule) -> None:
    # Never consumed (still named "dltensor"): the tensor is ours to delete.
    if _capsule_is_valid(capsule, b"dltensor"):
        _delete(ctypes.cast(_capsule_pointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor)))


def _data_type(dtype: np.dtype) -> DLDataType:
    code = KDL_BFLOAT if dtype.name == "bfloat16" else _CODES[dtype.kind]
    return DLDataType(code, dtype.itemsize * 8, 1)


def to_capsule(array) -> object:
    """A "dltensor" capsule viewing `array` (a DeviceArray), keeping it alive until deleted."""
    ndim = len(array.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // array.dtype.itemsize for s in array.strides))
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(array.ptr, DLDevice(KDL_CUDA, array.device), ndim, _data_type(array.dtype),
                                 ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                                 ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0)
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _alive[address] = (managed, shape, strides, array)
    return _capsule_new(address, b"dltensor", ctypes.cast(_destroy_capsule, ctypes.c_void_p))
