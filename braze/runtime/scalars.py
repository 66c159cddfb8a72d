"""Scalar values as the int64 slots of an argument block: floats by their bits, narrower types in
the low bytes. Shared by fusion runtimes and loop kernels."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

import numpy as np

from braze.kir import nodes as k


def scalar_bits(value: object, param: k.ScalarParam) -> int:
    """The int64 slot holding a scalar parameter's value (floats by their bits)."""
    array = np.asarray(value, dtype=param.dtype.numpy).reshape(1)
    padded = np.zeros(8, np.uint8)
    padded[: array.itemsize] = array.view(np.uint8)
    return int(padded.view(np.int64)[0])


def scalar_packer(param: k.ScalarParam) -> Callable[[object], int]:
    """value -> the int64 slot holding it (floats by their bits; narrower types in the low bytes); an
    integer out of the dtype's range raises OverflowError."""
    name = param.dtype.name
    if param.dtype.is_integer:
        info = np.iinfo(param.dtype.numpy)
        return functools.partial(_checked_int, int(info.min), int(info.max))
    if param.dtype.is_bool:
        return int
    if name == "float64":
        return _float64_bits
    if name == "float32":
        return _float32_bits
    return lambda v: scalar_bits(v, param)


def _checked_int(low: int, high: int, value: int) -> int:
    if not low <= value <= high:
        raise OverflowError(f"{value} is out of [{low}, {high}]")
    return int(value)


# Compiled once: a cached call packs its float scalars with them (a format string is parsed per call).
_FLOAT64, _INT64, _FLOAT32, _INT32 = (struct.Struct(f) for f in ("<d", "<q", "<f", "<i"))


def _float64_bits(value: object) -> int:
    return _INT64.unpack(_FLOAT64.pack(value))[0]


def _float32_bits(value: object) -> int:
    try:
        return _INT32.unpack(_FLOAT32.pack(value))[0]
    except OverflowError:  # beyond float32's range: round to infinity, as NumPy does
        return int(np.asarray(value, np.float32).view(np.int32))
