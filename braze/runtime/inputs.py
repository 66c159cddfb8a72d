"""Checking execute() inputs against a fusion's definition and binding its symbolic extents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from braze import dtypes as dt
from braze.errors import InputError, a_or_an
from braze.ir.fusion import AliasKind, FusionGraph, value_symbol_name
from braze.ir.tensor import TensorView
from braze.runtime.arrays import as_host_array, overlaps_itself
from braze.runtime.device_arrays import DeviceView, as_device_view, is_device_array


@dataclass
class BoundInputs:
    """Inputs as NumPy arrays (scalars as 0-d arrays), the value of every input extent symbol, and
    the kind of array the outputs go back as."""

    arrays: list  # np.ndarray, or DeviceView for GPU arrays
    bindings: dict[str, int]
    kind: str  # "numpy", "torch", "cupy" or "cuda": what the outputs are made as
    device: int | None = None  # the GPU all array inputs live on; None for host arrays
    stream: int = 0  # the stream GPU work runs on (the inputs' library's current stream)


def stride_order_of(array: np.ndarray) -> tuple[int, ...]:
    """stride_order[i] = rank of dimension i's stride (0 the fastest); ties keep row-major order."""
    by_speed = sorted(range(array.ndim), key=lambda i: (abs(array.strides[i]), -i))
    order = [0] * array.ndim
    for rank, axis in enumerate(by_speed):
        order[axis] = rank
    return tuple(order)


def _matches_stride_order(array: np.ndarray, expected: tuple[int, ...]) -> bool:
    """True when every dimension of extent > 1 is laid out no faster than the ones ranked below it."""
    dims = [i for i in range(array.ndim) if array.shape[i] > 1 and array.strides[i] != 0]
    dims.sort(key=lambda i: expected[i])
    strides = [abs(array.strides[i]) for i in dims]
    return all(a <= b for a, b in zip(strides, strides[1:]))


def check_scalar_fits(value: object, dtype: dt.DType, where: str, error: type[Exception] = InputError) -> None:
    """Raises `error` unless `value` is a bool/int/float that `dtype` holds without a change of kind or range."""
    if not isinstance(value, (bool, int, float)):
        raise error(f"{where}: expected {a_or_an(dtype.name)} scalar, got {type(value).__name__}")
    kind = dt.python_scalar_dtype(value).kind
    if "bif".index(kind) > "bif".index(dtype.category):
        raise error(f"{where}: expected {a_or_an(dtype.name)} scalar, got {type(value).__name__} {value!r}")
    if dtype.is_integer and not isinstance(value, bool):
        info = np.iinfo(dtype.numpy)
        if not info.min <= value <= info.max:
            raise error(f"{where}: expected {a_or_an(dtype.name)} scalar in [{info.min}, {info.max}], got {value}")


def _bind_scalar(tv: TensorView, value: object, where: str) -> np.ndarray:
    if isinstance(value, (np.ndarray, np.generic)) and value.ndim == 0:
        value = value.item()
    check_scalar_fits(value, tv.dtype, where)
    return np.asarray(value, dtype=tv.dtype.numpy)


def _as_array(value: object, where: str) -> tuple[np.ndarray | DeviceView, str]:
    if isinstance(value, DeviceView):  # a description of a GPU array (engine.compile_ahead's stand-ins)
        return value, value.kind
    if is_device_array(value):
        view = as_device_view(value, where)
        return view, view.kind
    return as_host_array(value, where)


@dataclass(frozen=True)
class TensorSpec:
    """What binding checks of one input, read from its TensorView once (not on every call)."""

    dtype: dt.DType
    numpy_dtype: np.dtype
    ndim: int
    extents: tuple[tuple[int | None, str | None], ...]  # per dimension: (static extent, symbol name)
    stride_order: tuple[int, ...] | None
    broadcast: tuple[bool, ...]  # per dimension: a broadcast (extent-1) dimension
    type_text: str

    @staticmethod
    def of(tv: TensorView) -> TensorSpec:
        spec = tv.__dict__.get("_binding_spec")
        if spec is None:
            extents = tuple((e.value if e.is_const else None, e.name if e.is_symbol else None) for e in tv.shape)
            spec = TensorSpec(tv.dtype, tv.dtype.numpy, tv.ndim, extents, tv.stride_order,
                              tuple(d.is_broadcast for d in tv.visible), tv.type_text())
            tv.__dict__["_binding_spec"] = spec
        return spec


def _bind_tensor(tv: TensorView, value: object, where: str, bindings: dict[str, int]) -> tuple[np.ndarray, str]:
    array, kind = _as_array(value, where)
    spec = TensorSpec.of(tv)
    if array.dtype != spec.numpy_dtype:
        raise InputError(f"{where}: expected {spec.dtype.name}, got {dt.numpy_dtype_text(array.dtype)}")
    if array.ndim != spec.ndim:
        raise InputError(f"{where}: expected rank {spec.ndim} (shape {spec.type_text}), got rank {array.ndim} "
                         f"(shape {array.shape})")
    for axis, ((static, symbol_name), size) in enumerate(zip(spec.extents, array.shape)):
        if static is not None and static != size:
            raise InputError(f"{where}: expected extent {static} at dimension {axis}, got {size} "
                             f"(shape {array.shape})")
        if symbol_name is not None:
            bindings[symbol_name] = int(size)
    if spec.stride_order and not _matches_stride_order(array, spec.stride_order):
        raise InputError(f"{where}: expected stride_order {spec.stride_order}, got strides {array.strides} "
                         f"(stride_order {stride_order_of(array)})")
    return array, kind


def _size_of(value: np.ndarray, where: str) -> int:
    """The value of an integer scalar input that sizes a shape (FusionGraph.sizing_scalars)."""
    size = int(value)
    if size < 0:
        raise InputError(f"{where}: expected a non-negative integer (it sizes a shape of the fusion), got {size}")
    return size


def input_label(position: int, tv: TensorView) -> str:
    """How an error names input `position`: `input 1 ('b')`, by its name where it has one."""
    return f"input {position} ({tv.label!r})" if tv.label else f"input {position} ({tv.name})"


def bind_inputs(fusion: FusionGraph, values: Sequence[object]) -> BoundInputs:
    """Checks count, dtype, rank, static extents and layout of each input; binds extent symbols."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InputError(f"inputs: expected a list of {len(fusion.inputs)} inputs, got {type(values).__name__}")
    if len(values) != len(fusion.inputs):
        raise InputError(f"inputs: expected {len(fusion.inputs)} inputs, got {len(values)}")
    arrays, bindings, kinds = [], {}, set()
    for position, (tv, value) in enumerate(zip(fusion.inputs, values)):
        where = input_label(position, tv)
        if tv.scalar is not None:
            arrays.append(_bind_scalar(tv, value, where))
            if any(tv is t for t in fusion.sizing_scalars):
                bindings[value_symbol_name(tv)] = _size_of(arrays[-1], where)
            continue
        array, kind = _bind_tensor(tv, value, where, bindings)
        arrays.append(array)
        kinds.add(kind)
    _check_extents(fusion, bindings)
    _check_writable(fusion, arrays)
    device, stream = _common_device(fusion, arrays)
    if device is None:
        return BoundInputs(arrays, bindings, "torch" if "torch" in kinds else "numpy")
    kind = next((k for k in ("torch", "cupy") if k in kinds), "cuda")
    return BoundInputs(arrays, bindings, kind, device, stream)


def _common_device(fusion: FusionGraph, arrays: list) -> tuple[int | None, int]:
    """The one GPU the array inputs live on (None: all on the host), and the stream to run on."""
    places = []
    for position, (tv, array) in enumerate(zip(fusion.inputs, arrays)):
        if tv.scalar is None:
            places.append((position, f"cuda:{array.device}" if isinstance(array, DeviceView) else "cpu"))
    distinct = sorted({p for _, p in places})
    if len(distinct) > 1:
        first = {p: n for n, p in reversed(places)}
        detail = ", ".join(f"input {first[p]} on {p}" for p in distinct)
        raise InputError(f"inputs: expected every array on one device, got {detail}")
    if not distinct or distinct[0] == "cpu":
        return None, 0
    views = [a for a in arrays if isinstance(a, DeviceView)]
    return views[0].device, views[0].stream


def _check_writable(fusion: FusionGraph, arrays: list[np.ndarray]) -> None:
    """An input an output is written into in place must be writable, with one address per element:
    where two elements share one (a broadcast, a sliding window), the kernel would read what it
    wrote for another element, as torch refuses such an in-place op."""
    for out in fusion.outputs:
        if out.alias is AliasKind.REUSE_BUFFER:
            position = next(i for i, tv in enumerate(fusion.inputs) if tv is out.aliased_input)
            array, where = arrays[position], input_label(position, out.aliased_input)
            if not array.flags.writeable:
                raise InputError(f"{where}: expected a writable array (an output is written into it in place), "
                                 "got a read-only one")
            if overlaps_itself(array.shape, array.strides, array.itemsize):
                raise InputError(f"{where}: expected an array whose elements lie at distinct addresses (an output "
                                 f"is written into it in place), got shape {array.shape} with strides "
                                 f"{array.strides}, where several share one; pass a copy")


def _check_extents(fusion: FusionGraph, bindings: dict[str, int]) -> None:
    for check in fusion.extent_checks:
        lhs, rhs = check.lhs.evaluate(bindings), check.rhs.evaluate(bindings)
        if lhs != rhs:
            raise InputError(f"{check.why}: got extents {lhs} and {rhs}")
