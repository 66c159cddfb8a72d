"""The CUDA driver layer over `cuda.bindings.driver`: devices and their primary contexts (the
ones torch and CuPy use too), modules, launches, stream-ordered memory, copies and events.

Every driver call goes through `call`, which checks the return code and names the call and the
error. Importing this module needs no CUDA library; using it without one raises an error that
says what to install.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

from braze.errors import CudaError, UnsupportedError
from braze.runtime.nvrtc import INSTALL_HINT

_state = threading.local()  # the device whose context is current on this thread


@functools.cache
def driver():
    """`cuda.bindings.driver`, initialized."""
    try:
        from cuda.bindings import driver as cuda
    except ImportError as e:
        raise UnsupportedError(f"CUDA: cuda.bindings is not importable ({e}); {INSTALL_HINT}") from None
    try:
        (result,) = cuda.cuInit(0)
    except Exception as e:  # noqa: BLE001  (cuda.bindings raises its own types when libcuda is missing)
        raise UnsupportedError(f"CUDA: the NVIDIA driver (libcuda) was not found ({e}); braze needs an NVIDIA GPU "
                               "and its driver to run on CUDA") from None
    if result != cuda.CUresult.CUDA_SUCCESS:
        raise CudaError(f"CUDA: cuInit failed ({_error_text(cuda, result)}); is there an NVIDIA GPU and driver?")
    return cuda


def _error_text(cuda, result) -> str:
    _, name = cuda.cuGetErrorName(result)
    _, text = cuda.cuGetErrorString(result)
    return f"{name.decode() if name else result}: {text.decode() if text else ''}"


def call(what: str, fn, *args):
    """Calls a driver function; raises CudaError naming `what` unless it returns CUDA_SUCCESS."""
    result, *values = fn(*args)
    if result != driver().CUresult.CUDA_SUCCESS:
        raise CudaError(f"CUDA {what} failed: {_error_text(driver(), result)}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def device_count() -> int:
    """GPUs visible to the driver; 0 when there is no driver or no CUDA library."""
    try:
        return call("cuDeviceGetCount", driver().cuDeviceGetCount)
    except (UnsupportedError, CudaError):
        return 0


@dataclass(frozen=True)
class Device:
    """One GPU and its retained primary context."""

    index: int
    handle: object
    context: object
    name: str
    arch: str  # "sm_90"
    sm_count: int
    max_threads_per_block: int
    shared_per_sm: int  # bytes of shared memory an SM has for blocks

    def activate(self) -> None:
        """Makes this device's context current on the calling thread (once per thread and device)."""
        if getattr(_state, "device", None) is not self:
            call("cuCtxSetCurrent", driver().cuCtxSetCurrent, self.context)
            _state.device = self


def current_device_state() -> threading.local:
    """The thread-local whose `device` attribute is the Device made current on this thread by
    `Device.activate` (generated hot paths test it before calling activate)."""
    return _state


@functools.cache
def device(index: int = 0) -> Device:
    cuda = driver()
    count = device_count()
    if not 0 <= index < count:
        raise CudaError(f"device: expected a CUDA device index in [0, {count}), got {index}")
    handle = call("cuDeviceGet", cuda.cuDeviceGet, index)
    context = call("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain, handle)
    attribute = lambda a: call("cuDeviceGetAttribute", cuda.cuDeviceGetAttribute, a, handle)
    a = cuda.CUdevice_attribute
    major = attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    name = call("cuDeviceGetName", cuda.cuDeviceGetName, 256, handle)
    return Device(index, handle, context, name.split(b"\0")[0].decode(), f"sm_{major}{minor}",
                  attribute(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                  attribute(a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                  attribute(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR))


class Module:
    """A cubin loaded into a device's context, and its functions by name."""

    def __init__(self, dev: Device, cubin: bytes, names: tuple[str, ...]) -> None:
        dev.activate()
        cuda = driver()
        self.device = dev
        self.handle = call("cuModuleLoadData", cuda.cuModuleLoadData, cubin)
        self.functions = {n: call(f"cuModuleGetFunction({n})", cuda.cuModuleGetFunction, self.handle, n.encode())
                          for n in names}

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        """Lets `name` take up to `nbytes` of dynamic shared memory (above 48 KiB needs asking)."""
        a = driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        call("cuFuncSetAttribute", driver().cuFuncSetAttribute, self.functions[name], a, nbytes)

    def resident_blocks(self, name: str, block: int, shared_mem: int) -> int:
        """How many blocks of `name` an SM runs at once (registers, shared memory and warps decide)."""
        return int(call("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                        driver().cuOccupancyMaxActiveBlocksPerMultiprocessor, self.functions[name], block, shared_mem))

    def max_threads(self, name: str) -> int:
        """The most threads a block of `name` may have (its register use and launch bounds decide)."""
        a = driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        return call("cuFuncGetAttribute", driver().cuFuncGetAttribute, a, self.functions[name])


@functools.cache
def _raw_launch():
    """libcuda's cuLaunchKernel through ctypes: a launch is on every call's path, and this costs a
    few microseconds less than the cuda.bindings wrapper. None when libcuda cannot be opened so."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return fn


def launch(function, grid: tuple[int, int, int], block: tuple[int, int, int], params_address: int,
           stream: int = 0, shared_mem: int = 0, name: str = "kernel") -> None:
    """cuLaunchKernel with a prepared `void*[]` of parameter addresses."""
    raw = _raw_launch()
    if raw is not None:
        code = raw(int(function), *grid, *block, shared_mem, stream, params_address, None)
        if code == 0:
            return
        raise_launch_error(code, name, grid, block)
    (result,) = driver().cuLaunchKernel(function, *grid, *block, shared_mem, stream, params_address, 0)
    if result != driver().CUresult.CUDA_SUCCESS:
        raise_launch_error(int(result), name, grid, block)


def raw_launch_function():
    """libcuda's cuLaunchKernel as a ctypes function (function handle as an int, grid x/y/z, block
    x/y/z, shared bytes, stream, parameter array address, None), or None without libcuda."""
    return _raw_launch()


def launch_function_address() -> int | None:
    """The address of libcuda's cuLaunchKernel (native code calls it), or None without libcuda."""
    raw = _raw_launch()
    return None if raw is None else ctypes.cast(raw, ctypes.c_void_p).value


def launch_code(function: object, grid: int, block: int, shared: int, stream: int, params_address: int) -> int:
    """A 1-D launch of a CUfunction through cuda.bindings; returns the CUresult as an int (0:
    launched). The wrapper costs less per call than ctypes' argument conversion."""
    d = driver()
    (result,) = d.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, shared, stream, params_address, 0)
    return int(result)


def raise_launch_error(code: int, name: str, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    """Raises the CudaError of a raw launch that returned `code`."""
    result = driver().CUresult(code)
    raise CudaError(f"CUDA launch of {name} (grid {grid}, block {block}) failed: {_error_text(driver(), result)}")


# --- memory -------------------------------------------------------------------------------------
def alloc(nbytes: int, stream: int = 0) -> int:
    """Device memory from the stream-ordered allocator (at least one byte, so the pointer is real)."""
    return int(call("cuMemAllocAsync", driver().cuMemAllocAsync, max(nbytes, 1), stream))


def free(pointer: int, stream: int = 0) -> None:
    call("cuMemFreeAsync", driver().cuMemFreeAsync, pointer, stream)


def copy_to_device(pointer: int, host_address: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        call("cuMemcpyHtoDAsync", driver().cuMemcpyHtoDAsync, pointer, host_address, nbytes, stream)


def copy_to_host(host_address: int, pointer: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        call("cuMemcpyDtoHAsync", driver().cuMemcpyDtoHAsync, host_address, pointer, nbytes, stream)


def copy_on_device(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        call("cuMemcpyDtoDAsync", driver().cuMemcpyDtoDAsync, dst, src, nbytes, stream)


def fill_bytes(pointer: int, byte: int, nbytes: int, stream: int = 0) -> None:
    if nbytes:
        call("cuMemsetD8Async", driver().cuMemsetD8Async, pointer, byte, nbytes, stream)


def synchronize(stream: int = 0) -> None:
    call("cuStreamSynchronize", driver().cuStreamSynchronize, stream)


# --- events (profiling) ---------------------------------------------------------------------------
def event() -> object:
    return call("cuEventCreate", driver().cuEventCreate, 0)


def record_event(ev: object, stream: int = 0) -> None:
    call("cuEventRecord", driver().cuEventRecord, ev, stream)


def elapsed_ms(start: object, end: object) -> float:
    call("cuEventSynchronize", driver().cuEventSynchronize, end)
    return float(call("cuEventElapsedTime", driver().cuEventElapsedTime, start, end))
