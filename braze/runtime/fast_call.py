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
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from braze import config
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


_KINDS: dict[type, ArrayKind] = {}
_SCALARS = (int, float, bool)


def _register_kinds() -> None:
    """Fills `_KINDS` with the libraries that are already imported (none is imported for it)."""
    import sys

    from braze.runtime.device_arrays import DeviceArray

    _KINDS[DeviceArray] = ArrayKind(_describe_device_array, _device_array_pointer, lambda a, device: a.stream)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch._C, "_cuda_getCurrentRawStream"):
        raw_stream = torch._C._cuda_getCurrentRawStream
        kind = ArrayKind(_describe_torch, torch.Tensor.data_ptr, lambda t, device: raw_stream(device))
        _KINDS[torch.Tensor] = kind
        _KINDS[torch.nn.Parameter] = kind
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        _KINDS[cupy.ndarray] = ArrayKind(_describe_cupy, _cupy_pointer,
                                         lambda a, device: cupy.cuda.get_current_stream().ptr)


def _device_array_pointer(a) -> int:
    return a.ptr


def _cupy_pointer(a) -> int:
    return a.data.ptr


def array_kind(value: object) -> ArrayKind | None:
    """How to read `value` on the fast path; None for scalars and unknown types."""
    if not _KINDS:
        _register_kinds()
    return _KINDS.get(type(value))


def buffer_pointer(kind: str) -> Callable[[object], int]:
    """Reads the address of a buffer made for inputs of `kind` ("torch", "cupy" or "cuda")."""
    if kind == "torch":
        import torch

        return torch.Tensor.data_ptr
    return _cupy_pointer if kind == "cupy" else _device_array_pointer


def description(inputs: Sequence[object], scalar_positions: frozenset[int]) -> tuple | None:
    """The key of a call: per array input its description, per scalar its type; None when an
    input is of a type the fast path does not know."""
    if not _KINDS:
        _register_kinds()
    key = []
    for position, value in enumerate(inputs):
        kind = _KINDS.get(type(value))
        if kind is not None:
            key.append(kind.describe(value))
        elif position in scalar_positions and type(value) in _SCALARS:
            key.append(type(value))
        else:
            return None
    return tuple(key)


# --- a prepared call ----------------------------------------------------------------------------
@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ScalarSlot:
    slot: int
    position: int  # the input
    pack: Callable[[object], int]  # value -> the int64 the slot holds; raises on a value out of range


class PreparedCall:
    """A fusion's run on inputs of one description, with all host arithmetic done ahead."""

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
        # What each launch passes, as plain ints: the loop below does nothing else.
        self.calls = [(x.function, x.grid, x.block, x.shared, x.params_address, x) for x in launches]
        self.copies_back, self.returned = copies_back, returned
        self.stream, self.stream_input, self.device = stream, stream_input, device
        self.busy = threading.Lock()  # the block is patched in place: one caller at a time

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
        buffers = [allocate() for allocate in self.allocations]
        pointer = self.buffer_pointer
        for slot, n in self.buffer_pointers:
            block[slot] = pointer(buffers[n])
        for slots in self.seeds:  # every random op draws, as the host program does, used or not
            seed, offset = next_seed_offset()
            if slots is not None:
                block[slots[0]], block[slots[1]] = _signed(seed), _signed(offset)
        device = self.device
        device.activate()
        stream = self.stream(inputs[self.stream_input], device.index)
        launch = _raw_launch
        for function, grid, threads, shared, params, _ in self.calls:
            code = launch(function, grid, 1, 1, threads, 1, 1, shared, stream, params, None)
            if code:
                self._launch_failed(code, function)
        if self.launches and recording():
            for x in self.launches:
                note_launch(Launch(*x.record))
        for position, input_pointer, n, nbytes in self.copies_back:
            cuda.copy_on_device(input_pointer(inputs[position]), pointer(buffers[n]), nbytes, stream)
        return [buffers[n] if where == "buffer" else inputs[n] for where, n in self.returned]


    def _launch_failed(self, code: int, function: int) -> None:
        x = next(x for x in self.launches if x.function == function)
        cuda.raise_launch_error(code, x.record[1], (x.grid, 1, 1), (x.block, 1, 1))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_raw_launch = None  # libcuda's cuLaunchKernel, bound when the first prepared call is made


class FastCalls:
    """One fusion's prepared calls by input description (a `None` value: that description always
    takes the host program)."""

    def __init__(self, scalar_positions: frozenset[int]) -> None:
        self.scalar_positions = scalar_positions
        self.config = config.current
        self.prepared: OrderedDict[tuple, PreparedCall | None] = OrderedDict()

    def run(self, inputs: Sequence[object]) -> list | None:
        """The outputs of a prepared call, or None: take the host program."""
        if config.current is not self.config or profiling():
            return None
        key = description(inputs, self.scalar_positions)
        prepared = self.prepared.get(key)
        return prepared.run(inputs) if prepared is not None else None

    def learn(self, inputs: Sequence[object], prepared: PreparedCall | None) -> None:
        """Keeps `prepared` for the description of `inputs` (after the host program ran them)."""
        global _raw_launch
        if config.current is not self.config:
            return
        key = description(inputs, self.scalar_positions)
        if key is None:
            return
        if prepared is not None and _raw_launch is None:
            _raw_launch = cuda.raw_launch_function()
            if _raw_launch is None:
                return
        self.prepared[key] = prepared
        if len(self.prepared) > MAX_DESCRIPTIONS:
            self.prepared.popitem(last=False)

