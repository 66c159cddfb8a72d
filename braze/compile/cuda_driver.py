"""The CUDA driver layer: libcuda's C API through ctypes. Devices and their primary contexts (the
ones torch and CuPy use too), modules, launches, stream-ordered memory, copies and events.

libcuda is called directly: importing `cuda.bindings.driver` costs 25-30 ms, more than everything else
a first call with a warm disk cache does. Each function is taken with cuGetProcAddress at the CUDA 12.0
ABI (so `cuMemcpyHtoDAsync` is the 64-bit `_v2` one). NVRTC still comes through `cuda.bindings.nvrtc`.

A module is loaded once per device and binary (`loaded_module`) and unloaded when the last holder of
its `Module` (a compiled kernel, an executor, a prepared call, a graph) lets it go. The driver's unload
waits for the module's queued kernels, so it is put off while a stream capture is open on the calling
thread (a wait there would end the capture in error), and skipped while the interpreter exits (the
driver frees everything with the context).

Every driver call goes through `call`, which names the call and the error. Importing this module
needs no CUDA library; using it without one raises an error that says what to install.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import sys
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from ctypes import POINTER, c_char_p, c_float, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p
from dataclasses import dataclass
from typing import NamedTuple

from braze.errors import CudaError, UnsupportedError
from braze.record import active_recordings

_LIBRARY = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
_ABI_VERSION = 12000  # the CUDA version whose signatures the table below has...
_INTRODUCED = {"cuFuncGetParamInfo": 12040}  # ...or the one that introduced a function, if later

# Driver functions braze calls: name -> argument types (every one returns a CUresult).
_SIGNATURES: dict[str, tuple] = {
    "cuInit": (c_uint,),
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuGetErrorString": (c_int, POINTER(c_char_p)),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetName": (c_char_p, c_int, c_int),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(c_void_p), c_int),
    "cuCtxSetCurrent": (c_void_p,),
    "cuCtxGetCurrent": (POINTER(c_void_p),),
    "cuModuleLoadData": (POINTER(c_void_p), c_char_p),
    "cuModuleGetFunction": (POINTER(c_void_p), c_void_p, c_char_p),
    "cuModuleUnload": (c_void_p,),
    "cuFuncGetAttribute": (POINTER(c_int), c_int, c_void_p),
    "cuFuncSetAttribute": (c_void_p, c_int, c_int),
    "cuFuncGetParamInfo": (c_void_p, c_size_t, POINTER(c_size_t), POINTER(c_size_t)),
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": (POINTER(c_int), c_void_p, c_int, c_size_t),
    "cuLaunchKernel": (c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, c_void_p, c_void_p),
    "cuPointerGetAttribute": (POINTER(c_int), c_int, c_uint64),  # int attributes only
    "cuMemAllocAsync": (POINTER(c_uint64), c_size_t, c_void_p),
    "cuMemFreeAsync": (c_uint64, c_void_p),
    "cuMemcpyHtoDAsync": (c_uint64, c_void_p, c_size_t, c_void_p),
    "cuMemcpyDtoHAsync": (c_void_p, c_uint64, c_size_t, c_void_p),
    "cuMemcpyDtoDAsync": (c_uint64, c_uint64, c_size_t, c_void_p),
    "cuMemsetD8Async": (c_uint64, c_ubyte, c_size_t, c_void_p),
    "cuStreamSynchronize": (c_void_p,),
    "cuEventCreate": (POINTER(c_void_p), c_uint),
    "cuEventDestroy": (c_void_p,),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuEventSynchronize": (c_void_p,),
    "cuEventElapsedTime": (POINTER(c_float), c_void_p, c_void_p),
    "cuStreamCreate": (POINTER(c_void_p), c_uint),
    "cuStreamDestroy": (c_void_p,),
    "cuStreamBeginCapture": (c_void_p, c_int),
    "cuStreamEndCapture": (c_void_p, POINTER(c_void_p)),
    "cuGraphInstantiateWithFlags": (POINTER(c_void_p), c_void_p, c_uint64),
    "cuGraphGetNodes": (c_void_p, c_void_p, POINTER(c_size_t)),
    "cuGraphLaunch": (c_void_p, c_void_p),
    "cuGraphExecDestroy": (c_void_p,),
    "cuGraphDestroy": (c_void_p,),
}

# The attribute numbers of cuda.h that braze asks for.
_DEVICE_ATTRIBUTES = {"max_threads_per_block": 1, "sm_count": 16, "major": 75, "minor": 76, "shared_per_sm": 81}
FUNCTION_ATTRIBUTES = {"MAX_THREADS_PER_BLOCK": 0, "SHARED_SIZE_BYTES": 1, "LOCAL_SIZE_BYTES": 3, "NUM_REGS": 4,
                       "MAX_DYNAMIC_SHARED_SIZE_BYTES": 8}
_POINTER_DEVICE_ORDINAL = 9

_log = logging.getLogger(__name__)


class Driver:
    """libcuda's functions as attributes, each a ctypes function returning the CUresult as an int
    (None where this driver lacks it); `address` holds their addresses, for native code."""

    def __init__(self, library: ctypes.CDLL) -> None:
        try:
            lookup = library.cuGetProcAddress_v2
        except AttributeError:
            raise UnsupportedError("CUDA: the NVIDIA driver is older than CUDA 12 (no cuGetProcAddress_v2); "
                                   "braze needs a driver for CUDA 12.0 or later") from None
        lookup.restype = c_int
        lookup.argtypes = (c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int))
        self.address: dict[str, int] = {}
        for name, arguments in _SIGNATURES.items():
            pointer, found = c_void_p(), c_int()
            version = _INTRODUCED.get(name, _ABI_VERSION)
            code = lookup(name.encode(), ctypes.byref(pointer), version, 0, ctypes.byref(found))
            if code or not pointer.value:
                setattr(self, name, None)
                continue
            self.address[name] = pointer.value
            setattr(self, name, ctypes.CFUNCTYPE(c_int, *arguments)(pointer.value))


@functools.cache
def driver() -> Driver:
    """libcuda, initialized."""
    try:
        library = ctypes.CDLL(_LIBRARY)
    except OSError as e:
        raise UnsupportedError(f"CUDA: the NVIDIA driver ({_LIBRARY}) was not found ({e}); braze needs an NVIDIA "
                               "GPU and its driver to run on CUDA") from None
    d = Driver(library)
    code = d.cuInit(0)
    if code:
        raise CudaError(f"CUDA: cuInit failed ({error_text(code, d)}); is there an NVIDIA GPU and driver?")
    return d


def error_text(code: int, d: Driver | None = None) -> str:
    """`NAME: description` of a CUresult."""
    d = d or driver()
    name, text = c_char_p(), c_char_p()
    if d.cuGetErrorName(code, ctypes.byref(name)) == 0:
        d.cuGetErrorString(code, ctypes.byref(text))
    return f"{name.value.decode() if name.value else f'CUresult {code}'}: {text.value.decode() if text.value else ''}"


def call(what: str, fn, *args) -> None:
    """Calls a driver function; raises CudaError naming `what` unless it returns CUDA_SUCCESS."""
    code = fn(*args)
    if code:
        raise CudaError(f"CUDA {what} failed: {error_text(code)}")


def _value(ctype, what: str, fn, *args):
    """Calls a driver function whose first parameter is where its answer goes; returns the answer."""
    answer = ctype()
    call(what, fn, ctypes.byref(answer), *args)
    return answer.value


def device_count() -> int:
    """GPUs visible to the driver; 0 when there is no driver."""
    try:
        return _value(c_int, "cuDeviceGetCount", driver().cuDeviceGetCount)
    except (UnsupportedError, CudaError):
        return 0


class DriverCalls(NamedTuple):
    """What native launches need of the driver: the addresses of `cuLaunchKernel`,
    `cuCtxGetCurrent` and `cuCtxSetCurrent`, and the context the kernels were loaded in."""

    launch: int
    get_context: int
    set_context: int
    context: int


@dataclass(frozen=True)
class Device:
    """One GPU and its retained primary context."""

    index: int
    handle: int
    context: int
    name: str
    arch: str  # "sm_90"
    sm_count: int
    max_threads_per_block: int
    shared_per_sm: int  # bytes of shared memory an SM has for blocks

    @contextmanager
    def current(self) -> Iterator[None]:
        """This device's context current on the calling thread for the body, and the one current
        before it current again after, as torch's device guard does. The driver is asked each
        time, not a note of braze's own: user code (`torch.cuda.set_device`, another library)
        changes the current context between braze calls. Cached calls do the same in native code
        (native/launch_jit.py)."""
        previous = _value(c_void_p, "cuCtxGetCurrent", driver().cuCtxGetCurrent)
        if previous == self.context:
            yield
            return
        call("cuCtxSetCurrent", driver().cuCtxSetCurrent, self.context)
        try:
            yield
        finally:
            if previous is not None:  # a thread with no context current keeps this one
                call("cuCtxSetCurrent", driver().cuCtxSetCurrent, previous)

    @functools.cached_property
    def driver_calls(self) -> DriverCalls:
        """What native launches into this device's context need of the driver."""
        address = driver().address
        return DriverCalls(address["cuLaunchKernel"], address["cuCtxGetCurrent"], address["cuCtxSetCurrent"],
                           self.context)


@functools.cache
def device(index: int = 0) -> Device:
    d = driver()
    count = device_count()
    if not 0 <= index < count:
        raise CudaError(f"device: expected a CUDA device index in [0, {count}), got {index}")
    handle = _value(c_int, "cuDeviceGet", d.cuDeviceGet, index)
    context = _value(c_void_p, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, handle)
    attribute = {name: _value(c_int, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, number, handle)
                 for name, number in _DEVICE_ATTRIBUTES.items()}
    name = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", d.cuDeviceGetName, name, len(name), handle)
    return Device(index, handle, context, name.value.decode(), f"sm_{attribute['major']}{attribute['minor']}",
                  attribute["sm_count"], attribute["max_threads_per_block"], attribute["shared_per_sm"])


class Module:
    """A cubin loaded into a device's context, and its functions (CUfunction handles) by name
    (`loaded_module` loads each once and unloads it when the last holder goes)."""

    def __init__(self, dev: Device, cubin: bytes, names: tuple[str, ...]) -> None:
        d = driver()
        self.device = dev
        with dev.current():
            self.handle = _value(c_void_p, "cuModuleLoadData", d.cuModuleLoadData, cubin)
        self.functions = {n: _value(c_void_p, f"cuModuleGetFunction({n})", d.cuModuleGetFunction, self.handle,
                                    n.encode())
                          for n in names}

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        """Lets `name` take up to `nbytes` of dynamic shared memory (above 48 KiB needs asking)."""
        call("cuFuncSetAttribute", driver().cuFuncSetAttribute, self.functions[name],
             FUNCTION_ATTRIBUTES["MAX_DYNAMIC_SHARED_SIZE_BYTES"], nbytes)

    def resident_blocks(self, name: str, block: int, shared_mem: int) -> int:
        """How many blocks of `name` an SM runs at once (registers, shared memory and warps decide)."""
        return _value(c_int, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                      driver().cuOccupancyMaxActiveBlocksPerMultiprocessor, self.functions[name], block, shared_mem)

    def max_threads(self, name: str) -> int:
        """The most threads a block of `name` may have (its register use and launch bounds decide)."""
        return function_attribute(self.functions[name], "MAX_THREADS_PER_BLOCK")

    def registers(self, name: str) -> int:
        """The registers a thread of `name` takes."""
        return function_attribute(self.functions[name], "NUM_REGS")


# --- modules, loaded once and unloaded after their last holder -----------------------------------
# (device, cubin digest, functions) -> module, while anything holds it.
_loaded_modules: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_loaded_modules_lock = threading.Lock()
# (device, handle) of modules to unload, in order. No lock: a finalizer may append while this thread
# drains, and deque's append and popleft are atomic.
_retired: deque[tuple[Device, int]] = deque()


def loaded_module(device: Device, binary: bytes, functions: tuple[str, ...]) -> Module:
    """`binary` loaded on `device`: one module however many hold it, unloaded after the last."""
    key = (device.index, hashlib.sha256(binary).digest(), functions)
    with _loaded_modules_lock:
        module = _loaded_modules.get(key)
        if module is None:
            module = _loaded_modules[key] = Module(device, binary, functions)
            retire = weakref.finalize(module, _retire, device, module.handle)
            retire.atexit = False  # the context's teardown unloads it
    unload_retired()  # a load is a point where unloading is safe, if anything waits for it
    return module


def unload_module(handle: int) -> None:
    """cuModuleUnload, in the current context (the module's)."""
    call("cuModuleUnload", driver().cuModuleUnload, handle)


def loaded_module_count() -> int:
    """Modules loaded through `loaded_module` and not unloaded yet (those waiting included)."""
    return len(_loaded_modules) + len(_retired)


def _retire(device: Device, handle: int) -> None:
    """The last holder of a module went: unload it now, or at the next safe point."""
    _retired.append((device, handle))
    unload_retired()


def unload_retired() -> None:
    """Unloads the modules whose last holder went, unless unloading is unsafe now."""
    if not _retired or not _unloading_is_safe():
        return
    while _retired:
        try:
            device, handle = _retired.popleft()
        except IndexError:  # another thread took the last
            return
        try:
            with device.current():
                unload_module(handle)
        except CudaError as error:  # a context torn down already: its modules went with it
            _log.debug("module %#x not unloaded: %s", handle, error)


def _unloading_is_safe() -> bool:
    """Not while the interpreter exits, nor while this thread captures a stream: a `bz.graph()`,
    or torch's current stream (torch.cuda.graph)."""
    if sys.is_finalizing() or any(r.captures for r in active_recordings()):
        return False
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return True
    try:
        return not torch.cuda.is_current_stream_capturing()
    except Exception:  # noqa: BLE001  (a torch that cannot tell: it captures nothing braze can see)
        return True


def function_attribute(function: int, name: str) -> int:
    """A CUfunction's attribute by its name in cuda.h without the prefix ("NUM_REGS", ...)."""
    return _value(c_int, f"cuFuncGetAttribute({name})", driver().cuFuncGetAttribute, FUNCTION_ATTRIBUTES[name],
                  function)


def parameter_sizes(function: int) -> list[int] | None:
    """The byte size of each parameter of a CUfunction; None where the driver cannot tell (before
    CUDA 12.4)."""
    query = driver().cuFuncGetParamInfo
    if query is None:
        return None
    sizes = []
    offset, size = c_size_t(), c_size_t()
    while query(function, len(sizes), ctypes.byref(offset), ctypes.byref(size)) == 0:
        sizes.append(size.value)
    return sizes


def launch(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], params_address: int,
           stream: int = 0, shared_mem: int = 0, name: str = "kernel") -> None:
    """cuLaunchKernel with a prepared `void*[]` of parameter addresses."""
    code = raw_launch_function()(function, *grid, *block, shared_mem, stream, params_address, None)
    if code:
        raise_launch_error(code, name, grid, block)


def raw_launch_function():
    """libcuda's cuLaunchKernel as a ctypes function (function handle as an int, grid x/y/z, block
    x/y/z, shared bytes, stream, parameter array address, None), returning the CUresult."""
    return driver().cuLaunchKernel


def raise_launch_error(code: int, name: str, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    """Raises the CudaError of a launch that returned `code`."""
    raise CudaError(f"CUDA launch of {name} (grid {grid}, block {block}) failed: {error_text(code)}")


# --- memory -------------------------------------------------------------------------------------
def alloc(nbytes: int, stream: int = 0) -> int:
    """Device memory from the stream-ordered allocator (at least one byte, so the pointer is real)."""
    return _value(c_uint64, "cuMemAllocAsync", driver().cuMemAllocAsync, max(nbytes, 1), stream)


def free(pointer: int, stream: int = 0) -> None:
    call("cuMemFreeAsync", driver().cuMemFreeAsync, pointer, stream)


def free_on(device: Device, pointer: int, stream: int = 0) -> None:
    """Frees in the device's context: stream 0 is the null stream of whichever context is current."""
    with device.current():
        free(pointer, stream)


def device_of_pointer(pointer: int) -> int:
    """The ordinal of the device that owns a device address."""
    return _value(c_int, "cuPointerGetAttribute", driver().cuPointerGetAttribute, _POINTER_DEVICE_ORDINAL, pointer)


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
class Event:
    """A CUDA event, destroyed with this object."""

    def __init__(self) -> None:
        self.handle = _value(c_void_p, "cuEventCreate", driver().cuEventCreate, 0)

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            driver().cuEventDestroy(self.handle)


def record_event(ev: Event, stream: int = 0) -> None:
    call("cuEventRecord", driver().cuEventRecord, ev.handle, stream)


def elapsed_ms(start: Event, end: Event) -> float:
    call("cuEventSynchronize", driver().cuEventSynchronize, end.handle)
    return _value(c_float, "cuEventElapsedTime", driver().cuEventElapsedTime, start.handle, end.handle)


# --- streams and graphs (bz.graph) ----------------------------------------------------------------
_STREAM_NON_BLOCKING = 1  # no implicit ordering with the legacy default stream, which a capture forbids
_CAPTURE_MODE_RELAXED = 2  # other threads may allocate (torch's caching allocator) while a capture is open


def create_stream() -> int:
    """A new non-blocking stream on the current context."""
    return _value(c_void_p, "cuStreamCreate", driver().cuStreamCreate, _STREAM_NON_BLOCKING)


def destroy_stream(stream: int) -> None:
    call("cuStreamDestroy", driver().cuStreamDestroy, stream)


def begin_capture(stream: int) -> None:
    """Starts recording the work queued on `stream` into a CUDA graph instead of running it."""
    call("cuStreamBeginCapture", driver().cuStreamBeginCapture, stream, _CAPTURE_MODE_RELAXED)


def end_capture(stream: int) -> int:
    """Ends `begin_capture`; returns the captured CUgraph (destroy it with `destroy_graph`)."""
    graph = c_void_p()  # the answer is the second parameter here, not the first as _value has it
    call("cuStreamEndCapture", driver().cuStreamEndCapture, stream, ctypes.byref(graph))
    return graph.value


def graph_nodes(graph: int) -> int:
    """How many nodes (kernel launches, copies, fills) a CUgraph holds."""
    count = c_size_t(0)
    call("cuGraphGetNodes", driver().cuGraphGetNodes, graph, None, ctypes.byref(count))
    return count.value


def instantiate_graph(graph: int) -> int:
    """The executable graph (CUgraphExec) of a CUgraph."""
    return _value(c_void_p, "cuGraphInstantiate", driver().cuGraphInstantiateWithFlags, graph, 0)


def destroy_graph(graph: int) -> None:
    call("cuGraphDestroy", driver().cuGraphDestroy, graph)


def launch_graph(graph_exec: int, stream: int) -> None:
    """Runs every node of an executable graph on `stream`, in the order they were captured."""
    call("cuGraphLaunch", driver().cuGraphLaunch, graph_exec, stream)


def destroy_graph_exec(graph_exec: int) -> None:
    """Frees an executable graph (one still running is freed when it finishes)."""
    call("cuGraphExecDestroy", driver().cuGraphExecDestroy, graph_exec)
