"""The cached call of a fusion on a GPU (DESIGN section 6, "The hot path").

The first run of a fusion on inputs of one *description* (per array: its type, dtype, shape,
strides and device; per scalar: its type) goes through the host program. Afterwards a
`PreparedCall` holds everything such a run computes that the description fixes: the size and
strides of every buffer, the argument block with every extent and stride filled in, and each
launch's grid, shared memory and launch scalars. A later call with the same description does only

    1. the key: the description of the inputs, read with the cheapest attribute of each library;
    2. a dict lookup;
    3. allocate the outputs and intermediates, from the prepared sizes;
    4. patch the pointers, scalar values and random seeds into the argument block;
    5. launch (libcuda's cuLaunchKernel through ctypes), and copy in-place outputs back.

Anything the fast path does not cover (profiling, another configuration, a busy block on another
thread, an unknown array type) answers `None`, and the caller takes the host program.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from braze import config
from braze.host.launch_jit import native_launches
from braze.runtime import cuda_driver as cuda
from braze.runtime.record import Launch, note_launch, profiling, recording
from braze.runtime.rng import next_seed_offset

MAX_DESCRIPTIONS = 256  # prepared calls kept per fusion (new shapes beyond that evict the oldest)


# --- describing the inputs ----------------------------------------------------------------------
def _describe_torch(t) -> tuple:
    return t.dtype, t.shape, t.stride(), t.get_device()


def _describe_cupy(a) -> tuple:
    return a.dtype, a.shape, a.strides, a.data.device_id


def _describe_device_array(a) -> tuple:
    return a.dtype, a.shape, a.strides, a.device, a.stream  # its outputs are allocated on its stream


@dataclass(frozen=True)
class ArrayKind:
    """How the fast path reads one library's GPU arrays."""

    describe: Callable[[object], tuple]
    pointer: Callable[[object], int]
    stream: Callable[[object, int], int]  # (an input, its device) -> the stream to run on


_KINDS: dict[type, ArrayKind | None] = {}  # by type, filled as types are first seen
_SCALARS = (int, float, bool)


def _kind_of_type(cls: type) -> ArrayKind | None:
    """How to read arrays of type `cls` (its library is imported, since an object of it exists)."""
    from braze.runtime.device_arrays import DeviceArray

    if issubclass(cls, DeviceArray):
        return ArrayKind(_describe_device_array, _device_array_pointer, lambda a, device: a.stream)
    library = sys.modules.get(cls.__module__.partition(".")[0])
    if library is None:
        return None
    if library.__name__ == "torch" and issubclass(cls, library.Tensor) \
            and hasattr(library._C, "_cuda_getCurrentRawStream"):
        raw_stream = library._C._cuda_getCurrentRawStream
        return ArrayKind(_describe_torch, library.Tensor.data_ptr, lambda t, device: raw_stream(device))
    if library.__name__ == "cupy" and issubclass(cls, library.ndarray):
        return ArrayKind(_describe_cupy, _cupy_pointer, lambda a, device: library.cuda.get_current_stream().ptr)
    return None


def _device_array_pointer(a) -> int:
    return a.ptr


def _cupy_pointer(a) -> int:
    return a.data.ptr


def array_kind(value: object) -> ArrayKind | None:
    """How to read `value` on the fast path; None for scalars and unknown types."""
    cls = type(value)
    if cls not in _KINDS:
        _KINDS[cls] = _kind_of_type(cls)
    return _KINDS[cls]


def buffer_pointer(kind: str) -> Callable[[object], int]:
    """Reads the address of a buffer made for inputs of `kind` ("torch", "cupy" or "cuda")."""
    if kind == "torch":
        import torch

        return torch.Tensor.data_ptr
    return _cupy_pointer if kind == "cupy" else _device_array_pointer


def description(inputs: Sequence[object], scalar_positions: frozenset[int]) -> tuple | None:
    """The key of a call: per array input its description, per scalar its type; None when an
    input is of a type the fast path does not know."""
    key = []
    for position, value in enumerate(inputs):
        kind = array_kind(value)
        if kind is not None:
            key.append(kind.describe(value))
        elif position in scalar_positions and type(value) in _SCALARS:
            key.append(type(value))
        else:
            return None
    return tuple(key)


# --- a prepared call ----------------------------------------------------------------------------
@dataclass
class PreparedLaunch:
    """One cuLaunchKernel: the function, its grid and block, and its parameter array (the argument
    block's address, then the addresses of its launch scalars)."""

    function: int
    grid: int
    block: int
    shared: int
    params: ctypes.Array  # void*[]: the argument block's address (set by the PreparedCall), then the scalars'
    scalars: ctypes.Array  # int64[4], kept alive here
    record: tuple  # (kernel, task, begin, end, grid) for bz.record()

    @property
    def params_address(self) -> int:
        return ctypes.addressof(self.params)

    @functools.cached_property
    def handle(self) -> object:
        """The function as cuda.bindings' CUfunction (for launches made from Python)."""
        return cuda.driver().CUfunction(self.function)


@dataclass(frozen=True)
class ScalarSlot:
    slot: int
    position: int  # the input
    pack: Callable[[object], int]  # value -> the int64 the slot holds; raises on a value out of range


class PreparedCall:
    """A fusion's run on inputs of one description, with all host arithmetic done ahead.

    Buffers that are not returned (intermediates, the results copied back into inputs) are kept
    from one call to the next on the same stream: its order makes reusing them safe, and a call
    then allocates only what it returns.
    """

    def __init__(self, block: Sequence[int], allocations: list[Callable[[], object]],
                 input_pointers: list[tuple[int, int, Callable[[object], int]]],
                 buffer_pointers: list[tuple[int, int]], buffer_pointer: Callable[[object], int],
                 scalars: list[ScalarSlot], seeds: list[tuple[int, int] | None], launches: list[PreparedLaunch],
                 copies_back: list[tuple[int, Callable[[object], int], int, int]], returned: list[tuple[str, int]],
                 stream: Callable[[object, int], int], stream_input: int, device: cuda.Device) -> None:
        self.block = (ctypes.c_int64 * max(len(block), 1))(*block)
        for launch in launches:
            launch.params[0] = ctypes.addressof(self.block)
        self.allocations, self.input_pointers = allocations, input_pointers
        self.buffer_pointers, self.buffer_pointer = buffer_pointers, buffer_pointer
        self.scalars, self.seeds, self.launches = scalars, seeds, launches
        self.copies_back, self.returned = copies_back, returned
        self.stream, self.stream_input, self.device = stream, stream_input, device
        self.busy = threading.Lock()  # the block is patched in place: one caller at a time
        fresh = {n for where, n in returned if where == "buffer"}
        self.fresh = [n in fresh for n in range(len(allocations))]
        self.kept: list | None = None  # the kept buffers (None where a buffer is fresh per call)...
        self.kept_stream: int | None = None  # ...and the stream they were last used on
        self.launch_all = native_launches(cuda.launch_function_address(),
                                          [(x.function, x.grid, x.block, x.shared, x.params_address)
                                           for x in launches])

    def run(self, inputs: Sequence[object]) -> list | None:
        if not self.busy.acquire(blocking=False):
            return None
        try:
            return self._run(inputs)
        finally:
            self.busy.release()

    def _run(self, inputs: Sequence[object]) -> list | None:
        block = self.block
        for slot, position, pointer in self.input_pointers:
            block[slot] = pointer(inputs[position])
        for s in self.scalars:
            try:
                block[s.slot] = s.pack(inputs[s.position])
            except (OverflowError, struct.error):  # out of the dtype's range: the host program says why
                return None
        device = self.device
        device.activate()
        stream = self.stream(inputs[self.stream_input], device.index)
        buffers = self._buffers(stream)
        pointer = self.buffer_pointer
        for slot, n in self.buffer_pointers:
            block[slot] = pointer(buffers[n])
        for slots in self.seeds:  # every random op draws, as the host program does, used or not
            seed, offset = next_seed_offset()
            if slots is not None:
                block[slots[0]], block[slots[1]] = _signed(seed), _signed(offset)
        self._launch(stream)
        for position, input_pointer, n, nbytes in self.copies_back:
            cuda.copy_on_device(input_pointer(inputs[position]), pointer(buffers[n]), nbytes, stream)
        return [buffers[n] if where == "buffer" else inputs[n] for where, n in self.returned]

    def _buffers(self, stream: int) -> list:
        if stream != self.kept_stream:
            self.kept = [None if fresh else allocate() for allocate, fresh in zip(self.allocations, self.fresh)]
            self.kept_stream = stream
        return [allocate() if kept is None else kept for allocate, kept in zip(self.allocations, self.kept)]

    def _launch(self, stream: int) -> None:
        if self.launch_all is not None:
            failed = self.launch_all.call(stream)
            if failed:
                self._launch_failed(failed >> 16, failed & 0xFFFF)
        else:
            for n, x in enumerate(self.launches):
                code = cuda.launch_code(x.handle, x.grid, x.block, x.shared, stream, x.params_address)
                if code:
                    self._launch_failed(n, code)
        if recording():
            for x in self.launches:
                note_launch(Launch(*x.record))

    def _launch_failed(self, n: int, code: int) -> None:
        x = self.launches[n]
        cuda.raise_launch_error(code, x.record[1], (x.grid, 1, 1), (x.block, 1, 1))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class FastCalls:
    """One fusion's prepared calls by input description (a `None` value: that description always
    takes the host program)."""

    def __init__(self, inputs: int, scalar_positions: frozenset[int]) -> None:
        self.scalar_positions = scalar_positions
        self.config = config.current
        self.prepared: OrderedDict[tuple, PreparedCall | None] = OrderedDict()
        self.torch_key = torch_key_function(inputs, scalar_positions)

    def key(self, inputs: Sequence[object]) -> tuple | None:
        """The description of `inputs`: first read as torch tensors (the common case, by one
        generated function), else array by array."""
        try:
            return self.torch_key(*inputs)
        except (AttributeError, TypeError):
            return description(inputs, self.scalar_positions)

    def run(self, inputs: Sequence[object]) -> list | None:
        """The outputs of a prepared call, or None: take the host program."""
        if config.current is not self.config:
            return None
        prepared = self.prepared.get(self.key(inputs))
        if prepared is None or recording() and profiling():
            return None
        return prepared.run(inputs)

    def learn(self, inputs: Sequence[object], prepared: PreparedCall | None) -> None:
        """Keeps `prepared` for the description of `inputs` (after the host program ran them)."""
        key = self.key(inputs)
        if config.current is not self.config or key is None:
            return
        self.prepared[key] = prepared
        if len(self.prepared) > MAX_DESCRIPTIONS:
            self.prepared.popitem(last=False)


def torch_key_function(inputs: int, scalar_positions: frozenset[int]) -> Callable[..., tuple]:
    """A function of the inputs giving their description, reading every array as a torch tensor
    (raising AttributeError or TypeError on any other): per array its type, dtype, shape, strides
    and device index (-1 on the host), per scalar its type."""
    names = [f"a{n}" for n in range(inputs)]
    parts = [f"type({a})" if n in scalar_positions else
             f"type({a}), {a}.dtype, {a}.shape, {a}.stride(), {a}.get_device()" for n, a in enumerate(names)]
    source = f"def torch_key({', '.join(names)}):\n    return ({', '.join(parts)},)\n"
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  (source built above from input positions only)
    return namespace["torch_key"]
