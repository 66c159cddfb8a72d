"""The cached call of a fusion, on a GPU or the host (docs/architecture.md, "The cached call").

The first run of a fusion on inputs of one *description* (per array: its type, dtype, shape,
strides and device; per scalar: its type) goes through the host program. Afterwards a
`PreparedCall` holds everything such a run computes that the description fixes, and a later call
with the same description reads the key (`FastCalls`), looks it up, allocates, patches and launches.
Anything the fast path does not cover (profiling, a `bz.graph()` recording, another configuration, a
busy block on another thread, an unknown array type) answers `None`, and the caller takes the host
program. On torch tensors the call taken last is also one native builtin (native/torch_call.py) that
`Fusion.execute` calls first (`FastCalls.native`); the fusion's own attributes are never replaced.
"""

from __future__ import annotations

import ctypes
import operator
import struct
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from braze import config
from braze.native.torch_call import describe_tensor
from braze.record import profiling, record_state
from braze.runtime.graph import open_graphs
from braze.runtime.rng import next_seed_offset

MAX_DESCRIPTIONS = 256  # prepared calls kept per fusion, @bz.jit function or @bz.kernel (beyond: the oldest goes)
UNSEEN = object()  # a memo not filled yet


# --- describing the inputs ----------------------------------------------------------------------
def _numpy_pointer_reader() -> Callable[[np.ndarray], int]:
    """The fastest reader of an ndarray's data pointer. NumPy's C struct keeps `data` right
    after the object header (PyArrayObject_fields), so reading it there costs ~0.3 us where
    `__array_interface__` builds a dict (~1-2 us); checked once against the public answer."""
    from_address = ctypes.c_void_p.from_address
    header = object.__basicsize__
    probe = np.arange(3.0)[1:]

    def read(a: np.ndarray) -> int:
        return from_address(id(a) + header).value or 0

    if read(probe) == probe.__array_interface__["data"][0]:
        return read
    return lambda a: a.__array_interface__["data"][0]


numpy_pointer = _numpy_pointer_reader()
_cupy_pointer = operator.attrgetter("data.ptr")
_device_array_pointer = operator.attrgetter("ptr")


@dataclass(frozen=True)
class ArrayKind:
    """How the fast path reads one library's arrays."""

    describe: Callable[[object], tuple]
    pointer: Callable[[object], int]
    stream: Callable[[object, int], int]  # (an input, its device) -> the stream to run on
    device_stream: Callable[[int], int] | None = None  # the same from the device alone, where it needs no input


_KINDS: dict[type, ArrayKind | None] = {}  # by type, filled as types are first seen
_SCALARS = (int, float, bool)


def _kind_of_type(cls: type) -> ArrayKind | None:
    """How to read arrays of type `cls` (its library is imported, since an object of it exists)."""
    from braze.runtime.device_arrays import DeviceArray

    if cls is np.ndarray:  # exactly: a subclass may mean something else by its strides or data
        return ArrayKind(operator.attrgetter("dtype", "shape", "strides"), numpy_pointer, lambda a, device: 0)
    if issubclass(cls, DeviceArray):  # its outputs are allocated on its stream: the stream describes it too
        return ArrayKind(operator.attrgetter("dtype", "shape", "strides", "device", "stream"), _device_array_pointer,
                         lambda a, device: a.stream)
    library = sys.modules.get(cls.__module__.partition(".")[0])
    if library is None:
        return None
    if library.__name__ == "torch" and issubclass(cls, library.Tensor) \
            and hasattr(library._C, "_cuda_getCurrentRawStream"):
        raw_stream = library._C._cuda_getCurrentRawStream
        return ArrayKind(lambda t: (t.dtype, t.shape, t.stride(), t.get_device()), library.Tensor.data_ptr,
                         lambda t, device: raw_stream(device), raw_stream)
    if library.__name__ == "cupy" and issubclass(cls, library.ndarray):
        return ArrayKind(operator.attrgetter("dtype", "shape", "strides", "data.device_id"), _cupy_pointer,
                         lambda a, device: library.cuda.get_current_stream().ptr)
    return None


def array_kind(value: object) -> ArrayKind | None:
    """How to read `value` on the fast path; None for scalars and unknown types."""
    cls = type(value)
    if cls not in _KINDS:
        _KINDS[cls] = _kind_of_type(cls)
    return _KINDS[cls]


# Any other object with `__cuda_array_interface__`: read through it, run on the default stream. Such
# arguments have no description (`description` answers None), so no prepared call is kept for them.
_CUDA_ARRAY_INTERFACE = ArrayKind(lambda a: None, lambda a: int(a.__cuda_array_interface__["data"][0]),
                                  lambda a, device: 0)


def gpu_array_kind(value: object) -> ArrayKind:
    """How to read a GPU array the slow path accepted: its library's kind, else through its
    `__cuda_array_interface__`."""
    return array_kind(value) or _CUDA_ARRAY_INTERFACE


def buffer_pointer(kind: str) -> Callable[[object], int]:
    """Reads the address of a buffer made for inputs of `kind` ("numpy", "torch", "cupy" or "cuda")."""
    if kind == "torch":
        import torch

        return torch.Tensor.data_ptr
    return {"numpy": numpy_pointer, "cupy": _cupy_pointer}.get(kind, _device_array_pointer)


def description(inputs: Sequence[object], scalar_positions: frozenset[int], any_scalar: bool = False
                ) -> tuple | None:
    """The key of a call: per array input its description, per scalar its type; None when an
    input is of a type the fast path does not know (a scalar not int, float or bool, unless
    `any_scalar`: a loop kernel's prepared call checks every scalar's value as it packs it)."""
    key = []
    for position, value in enumerate(inputs):
        kind = array_kind(value)
        if kind is not None:
            key.append(kind.describe(value))
        elif position in scalar_positions and (any_scalar or type(value) in _SCALARS):
            key.append(type(value))
        else:
            return None
    return tuple(key)


# --- a prepared call ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ScalarSlot:
    slot: int
    position: int  # the input
    pack: Callable[[object], int]  # value -> the int64 the slot holds; raises on a value out of range


@dataclass
class CallPlan:
    """What a prepared call patches and allocates, whatever the device (a loop kernel's allocates,
    draws and returns nothing)."""

    block: list[int]  # the argument block of the first run: every extent, stride and constant in place
    input_pointers: list[tuple[int, int, Callable[[object], int]]]  # (slot, input position, its pointer reader)
    scalars: list[ScalarSlot]
    allocations: list[Callable[[], object]] = field(default_factory=list)  # per buffer, a function making it
    buffer_pointers: list[tuple[int, int]] = field(default_factory=list)  # (slot, buffer)
    buffer_pointer: Callable[[object], int] | None = None  # reads a buffer's address
    seeds: list[tuple[int, int] | None] = field(default_factory=list)  # per random op, its (seed, offset) slots or None
    copies_back: list[tuple[int, Callable, int, int]] = field(default_factory=list)  # (input, reader, buffer, bytes)
    returned: list[tuple[str, int]] = field(default_factory=list)  # per visible output: ("buffer", n) or ("input", n)


class PreparedCall:
    """A fusion's run (or a loop kernel's) on inputs of one description, with all host arithmetic
    done ahead.

    Buffers that are not returned (intermediates, the results copied back into inputs) are kept
    from one call to the next in the same stream order (`_begin_source` sets it): that order makes
    reusing them safe, and a call then allocates only what it returns. A backend's subclass
    launches the kernels (runtime/backends/cpu.py, runtime/backends/cuda.py; a loop kernel's on a
    GPU: runtime/backends/cuda_loop_kernels.py), a loop kernel's with runtime/loop_calls.py's `LoopCall`.
    """

    def __init__(self, plan: CallPlan) -> None:
        self.plan = plan
        self.block = (ctypes.c_int64 * max(len(plan.block), 1))(*plan.block)
        self.address = ctypes.addressof(self.block)
        fresh = {n for where, n in plan.returned if where == "buffer"}
        self.fresh = [n in fresh for n in range(len(plan.allocations))]
        self.kept: list | None = None  # the kept buffers (None where a buffer is fresh per call)...
        self.kept_order: int | None = None  # ...and the stream they were last used on
        self.entries: dict[tuple, PreparedCall] = {}  # its kernel executor's entries, where it is filed
        self.executor: object = None  # the executor whose compiled code it launches, held while it lives
        self.busy = threading.Lock()  # the block is patched in place: one caller at a time
        self.matches: Guard | None = None  # FastCalls.learn sets the guard
        self._guarded: Callable[[Sequence[object]], list | None] | None = None

    def run(self, inputs: Sequence[object]) -> list | None:
        """The outputs, or None when another thread is patching the block (take the host program)."""
        self.run = self._generated()  # this instance's calls take the generated function from now on
        return self.run(inputs)

    def guarded(self, config_now: config.Config, otherwise: weakref.WeakMethod
                ) -> Callable[[Sequence[object]], list | None] | None:
        """`run` behind this call's guard, as one function (FastCalls runs it first): inputs the guard
        refuses, another configuration or an open `bz.record()` go to the method `otherwise` refers
        to. None without a guard."""
        if self.matches is None:
            return None
        if self._guarded is None:
            names: dict[str, object] = {"config": config, "settings": config_now, "otherwise": otherwise,
                                        "recorders": record_state()}
            test = self.matches.condition(names)
            self._guarded = self._generated([
                "try:", f"    hit = {test}", "except (TypeError, IndexError):", "    hit = False",
                "if not hit or config.current is not settings or recorders.__dict__.get('stack'):",
                "    return otherwise()(inputs)"], names)
        return self._guarded

    def _generated(self, checks: Sequence[str] = (), names: dict[str, object] | None = None
                   ) -> Callable[[Sequence[object]], list | None]:
        """The call as one generated function of the inputs: `checks` (lines that may return
        first), then straight-line patching and returns, with every reader, packer and slot a
        constant (a loop over the plan's lists costs more than the work it does). It holds the
        lock while it patches the shared block and launches, where that is not one native call."""
        plan = self.plan
        names = dict(names or {})
        names.update({"block": self.block, "buffers_of": self._buffers, "pointer": plan.buffer_pointer,
                      "draw": next_seed_offset, "signed": _signed, "copy": self._copy_on_device,
                      "acquire": self.busy.acquire, "release": self.busy.release,
                      "Refused": (OverflowError, struct.error, TypeError, ValueError)})
        lines = []
        pointers = []  # (slot, the expression of the pointer it takes): patched by `_launch_source`
        for n, (slot, position, reader) in enumerate(plan.input_pointers):
            names[f"read{n}"] = reader
            pointers.append((slot, f"read{n}(inputs[{position}])"))
        if plan.scalars:  # a value the packer refuses goes to the host program, which says why
            lines.append("try:")
            for n, s in enumerate(plan.scalars):
                names[f"pack{n}"] = s.pack
                lines.append(f"    block[{s.slot}] = pack{n}(inputs[{s.position}])")
            lines += ["except Refused:", "    return None"]
        lines += self._begin_source(names)
        if all(self.fresh):  # nothing kept between calls: allocate each buffer in place
            names.update((f"allocate{n}", allocate) for n, allocate in enumerate(plan.allocations))
            lines.append(f"buffers = ({''.join(f'allocate{n}(), ' for n in range(len(plan.allocations)))})")
        else:
            lines.append("buffers = buffers_of(order)")
        pointers += [(slot, f"pointer(buffers[{n}])") for slot, n in plan.buffer_pointers]
        for slots in plan.seeds:  # every random op draws, as the host program does, used or not
            lines.append("seed, offset = draw()")
            if slots is not None:
                lines.append(f"block[{slots[0]}], block[{slots[1]}] = signed(seed), signed(offset)")
        lines += self._launch_source(names, pointers)
        for n, (position, reader, buffer, nbytes) in enumerate(plan.copies_back):
            names[f"input{n}"] = reader
            lines.append(f"copy(input{n}(inputs[{position}]), pointer(buffers[{buffer}]), {nbytes}, order)")
        returned = ", ".join(f"buffers[{n}]" if where == "buffer" else f"inputs[{n}]" for where, n in plan.returned)
        lines.append(f"return [{returned}]")
        source = "def run(inputs):\n" + "".join(f"    {line}\n" for line in checks)
        if self._needs_lock():
            source += ("    if not acquire(False):\n        return None\n    try:\n"
                       + "".join(f"        {line}\n" for line in lines) + "    finally:\n        release()\n")
        else:
            source += "".join(f"    {line}\n" for line in lines)
        exec(source, names)  # noqa: S102  (built above from the plan's slots and positions only)
        return names.pop("run")  # not left in its own globals: a cycle only the collector frees

    def native_execute(self, settings: config.Config, fallback: Callable[..., list]) -> Callable[..., list] | None:
        """A native builtin that the fusion's `execute` calls first while this call is taken first
        (None: the Python call serves; a device's subclass may make one)."""
        return None

    def _needs_lock(self) -> bool:
        """Whether the call writes shared state another thread could see half-written: scalars or
        seeds patched from Python, buffers kept between calls, copies back. Pointers patched and
        launched by one native call under the GIL (`_patches_atomically`) are not."""
        plan = self.plan
        return not (self._patches_atomically() and not plan.scalars and not plan.seeds and all(self.fresh)
                    and not plan.copies_back)

    def _patches_atomically(self) -> bool:
        return False

    def _buffers(self, order: int) -> list:
        allocations = self.plan.allocations
        kept = self.kept  # read once: another thread's KEPT_BUFFERS may drop it meanwhile
        if kept is None or order != self.kept_order:
            kept = [None if fresh else allocate() for allocate, fresh in zip(allocations, self.fresh)]
            # Kept first, then counted: a call evicting this one meanwhile finds it holding them.
            self.kept, self.kept_order = kept, order
            if not KEPT_BUFFERS.keep(self, sum(_nbytes(b) for b in kept if b is not None)):
                self.drop_kept()  # over the budget on its own: allocated per call
        else:
            KEPT_BUFFERS.touch(self)
        return [allocate() if buffer is None else buffer for allocate, buffer in zip(allocations, kept)]

    def release(self) -> None:
        """Drops the generated and native functions made from this call (they refer back to it), so
        that reference counting alone frees it once its owner (FastCalls) lets it go."""
        for made in ("run", "_native_execute", "_launch_all"):
            self.__dict__.pop(made, None)
        self._guarded = None

    def drop_kept(self) -> None:
        """Gives up the buffers kept between calls (the next call allocates them again)."""
        self.kept, self.kept_order = None, None

    def _copy_on_device(self, target: int, source: int, nbytes: int, stream: int) -> None:
        """An output copied back into the input it replaces (a GPU's: a host call has none)."""
        raise NotImplementedError

    def _begin_source(self, names: dict[str, object]) -> list[str]:
        """The generated call's lines setting `order`, the stream the call runs on (0 on the host),
        with the names they use added."""
        return ["order = 0"]

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        """The generated call's lines writing `pointers` (slot, expression) into the block and
        launching on `order` (`_launch`)."""
        names["launch"] = self._launch
        return [*patch_lines(pointers), "launch(order)"]

    def _launch(self, order: int) -> None:
        raise NotImplementedError


def _nbytes(buffer: object) -> int:
    """The bytes a buffer holds: a NumPy view's whole storage (padding included), else `nbytes`."""
    base = getattr(buffer, "base", None)
    return int(getattr(base if isinstance(base, np.ndarray) else buffer, "nbytes", 0))


class KeptBuffers:
    """The buffers prepared calls keep between calls (intermediates, hidden outputs, results copied
    back), bounded in bytes over the process by `BRAZE_KEPT_BUFFER_BYTES`: the call that used its
    buffers least recently gives them up first, and allocates them again at its next call. A call
    that dies takes its bytes off the count."""

    def __init__(self) -> None:
        self.holders: OrderedDict[int, tuple[weakref.ref, int]] = OrderedDict()  # id(call) -> (call, bytes)
        self.total = 0
        self.lock = threading.RLock()  # a dying call's callback may come while this thread holds it

    def keep(self, call: PreparedCall, nbytes: int) -> bool:
        """Counts `call`'s new buffers, dropping other calls' to stay in budget; False when they
        alone are over it (then they are not kept)."""
        budget = config.current.kept_buffer_bytes
        with self.lock:
            self._forget(id(call))
            if nbytes > budget:
                return False
            key = id(call)
            self.holders[key] = (weakref.ref(call, lambda _, key=key: self._forget(key)), nbytes)
            self.total += nbytes
            while self.total > budget:
                _, (holder, size) = self.holders.popitem(last=False)
                self.total -= size
                victim = holder()
                if victim is not None:
                    victim.drop_kept()
        return True

    def touch(self, call: PreparedCall) -> None:
        """Marks `call`'s buffers used (one dict operation, atomic under the GIL)."""
        try:
            self.holders.move_to_end(id(call))
        except KeyError:  # dropped meanwhile: its next call keeps them again
            pass

    def _forget(self, key: int) -> None:
        with self.lock:
            entry = self.holders.pop(key, None)
            if entry is not None:
                self.total -= entry[1]


KEPT_BUFFERS = KeptBuffers()


def patch_lines(pointers: list[tuple[int, str]]) -> list[str]:
    return [f"block[{slot}] = {expression}" for slot, expression in pointers]


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Describer:
    """Computes the description of a call's inputs: by a function generated for the library of
    the first array (all arrays of one library: the common case), else array by array."""

    def __init__(self, inputs: int, scalar_positions: frozenset[int], any_scalar: bool = False) -> None:
        self.inputs, self.scalar_positions, self.any_scalar = inputs, scalar_positions, any_scalar
        self.first_array = min(set(range(inputs)) - scalar_positions, default=0)
        self.keys: dict[type, Callable[..., tuple] | None] = {}  # by the first array's type

    def key(self, inputs: Sequence[object]) -> tuple | None:
        try:
            if len(inputs) <= self.first_array:
                return None
        except TypeError:  # not a list (an iterator): the host program's binding says what it expected
            return None
        cls = type(inputs[self.first_array])
        read = self.keys.get(cls, UNSEEN)
        if read is UNSEEN:
            read = self.keys[cls] = key_function(cls, self.inputs, self.scalar_positions)
        if read is not None:
            try:
                return read(*inputs)
            except (AttributeError, TypeError):  # arrays of several libraries, or another count
                pass
        return description(inputs, self.scalar_positions, self.any_scalar)


class FastCalls:
    """One fusion's prepared calls by input description (a `None` value: that description always
    takes the host program). Each prepared call is its kernel executor's entry for that
    description (`KernelExecutor.entries`, docs/architecture.md); this index over the fusion's
    executors finds it with one lookup from the inputs.

    `run` is the call taken last, behind its guard where the inputs' library has one (a check in
    torch's C++ of every tensor's description: a third of the cost of reading the key; NumPy
    arrays' descriptions compared in line), all in one generated function; inputs it refuses go
    through the key (`find`). A loop kernel's calls are
    filed here as a fusion's are, with `any_scalar` (its prepared call checks each scalar's value).
    """

    def __init__(self, inputs: int, scalar_positions: frozenset[int], any_scalar: bool = False) -> None:
        self.config = config.current
        self.prepared: OrderedDict[tuple, PreparedCall | None] = OrderedDict()
        self.key = Describer(inputs, scalar_positions, any_scalar).key
        self.scalar_positions = scalar_positions
        self.last: PreparedCall | None = None
        # The native builtin of the call taken last, where it has one: `Fusion.execute` calls it
        # first, and it answers None for the calls it declines.
        self.native: Callable[..., list | None] | None = None
        self.recorders = record_state()
        # The prepared calls die with this object (the fusion's), by reference counting: released
        # here, since their generated functions refer back to them.
        weakref.finalize(self, _release_all, self.prepared)
        # `guarded`'s way back to `find`: a weak one, as a prepared call holding a bound method of
        # this object would put it in a reference cycle.
        self._find = weakref.WeakMethod(self.find)

    def find(self, inputs: Sequence[object], key: tuple | None = None) -> list | None:
        """The outputs of the prepared call for the inputs' description (`key`, where the caller has
        it already: `@bz.jit`'s), or None: take the host program. That call is then tried first."""
        if config.current is not self.config:
            return None
        prepared = self.prepared.get(self.key(inputs) if key is None else key)
        if prepared is None:
            return None
        if prepared is not self.last:
            self._take(prepared)
        if self.recorders.__dict__.get("stack") and (profiling() or open_graphs()):
            return None  # the host program times each launch, or notes it into the graph
        return prepared.run(inputs)

    run = find  # the call taken first: `find`, or the last call behind its guard (`_take`)

    def known(self, inputs: Sequence[object]) -> bool:
        """Whether calls described like `inputs` were prepared, or found not to fit a prepared
        call, under the current configuration (the host program then runs without preparing)."""
        return config.current is self.config and self.key(inputs) in self.prepared

    def filed(self, inputs: Sequence[object]) -> PreparedCall | None:
        """The prepared call filed for calls described like `inputs` under the current configuration,
        or None."""
        return self.prepared.get(self.key(inputs)) if config.current is self.config else None

    def learn(self, inputs: Sequence[object], prepared: PreparedCall | None) -> None:
        """Keeps `prepared` for the description of `inputs` (after the host program ran them)."""
        if config.current is not self.config:  # prepared under another configuration: they may not apply
            self.config = config.current
            while self.prepared:
                self._forget(*self.prepared.popitem())
            self._take(None)
        key = self.key(inputs)
        if key is None:
            return
        if key in self.prepared:  # prepared again (a loop kernel's arguments now overlap): the new call serves
            self._forget(key, self.prepared.pop(key))
        if prepared is not None:
            prepared.matches = guard(inputs, self.scalar_positions)
            prepared.entries[key] = prepared
        self.prepared[key] = prepared
        if len(self.prepared) > MAX_DESCRIPTIONS:
            self._forget(*self.prepared.popitem(last=False))

    def _forget(self, key: tuple, prepared: PreparedCall | None) -> None:
        """Drops the prepared call of description `key` from its executor's entries."""
        if prepared is None:
            return
        prepared.entries.pop(key, None)
        if prepared is self.last:
            self._take(None)
        prepared.release()

    def _take(self, prepared: PreparedCall | None) -> None:
        """Makes `prepared` the call tried first (None: none is)."""
        self.last = prepared
        guarded = prepared.guarded(self.config, self._find) if prepared is not None else None
        if guarded is None:
            self.__dict__.pop("run", None)  # the class's `run`: `find`
        else:
            self.run = guarded
        self.native = prepared.native_execute(self.config, _declined) if prepared is not None else None


def _release_all(prepared: dict[tuple, PreparedCall | None]) -> None:
    for call in prepared.values():
        if call is not None:
            call.release()


def _declined(*args: object, **kwargs: object) -> None:
    """What a native call answers where it declines its arguments: None, take the Python path.
    (A function of nothing: a native call must not hold the fusion it serves.)"""
    return None


@dataclass(frozen=True)
class Guard:
    """Whether later inputs are described as the ones it was made from are: the count of inputs,
    each scalar's type, and the arrays. NumPy arrays: each one's type, dtype (the same object: another
    that equals it takes the key), shape and strides compared in line, with no key built or hashed.
    torch tensors: torch's C++ tensor guards (dtype, device, shape, strides, and also the tensor type,
    dispatch keys, requires_grad and that no object is passed twice, so it may say no where the key
    would match: that call takes the key)."""

    count: int
    scalars: tuple[tuple[int, type], ...]
    arrays: tuple  # NumPy arrays: (position, dtype, shape, strides) each; torch tensors: their positions
    check: Callable[..., bool] | None = None  # TensorGuards.check over the tensors (None: NumPy arrays)
    tensors: tuple[tuple, ...] = ()  # the tensors' descriptions for a native check (native/torch_call.py)

    def condition(self, names: dict[str, object]) -> str:
        """The test as an expression of `inputs` for generated code, adding the names it uses
        (it may raise TypeError or IndexError: the caller catches them as a no)."""
        names.update((f"scalar{n}", cls) for n, cls in self.scalars)
        if self.check is not None:
            names["check"] = self.check
            arrays = f" and check({', '.join(f'inputs[{n}]' for n in self.arrays)})"
        else:
            names["ndarray"] = np.ndarray
            names.update((f"dtype{n}", dtype) for n, dtype, _, _ in self.arrays)
            arrays = "".join(f" and type(inputs[{n}]) is ndarray and inputs[{n}].dtype is dtype{n}"
                             f" and inputs[{n}].shape == {shape!r} and inputs[{n}].strides == {strides!r}"
                             for n, _, shape, strides in self.arrays)
        return f"len(inputs) == {self.count}{arrays}" + "".join(f" and type(inputs[{n}]) is scalar{n}"
                                                               for n, _ in self.scalars)

    def function(self) -> Callable[[Sequence[object]], bool]:
        """The test as a function of `inputs`, a TypeError or IndexError a no (the guarded call
        inlines the condition instead; this is for what checks or times the guard alone)."""
        names: dict[str, object] = {}
        exec(f"def matches(inputs):\n    try:\n        return bool({self.condition(names)})\n"
             "    except (TypeError, IndexError):\n        return False\n", names)
        return names["matches"]


def guard(inputs: Sequence[object], scalar_positions: frozenset[int]) -> Guard | None:
    """The guard of calls described as `inputs` are; None where the arrays are neither all NumPy
    arrays nor all torch tensors, or this torch has no such guards."""
    arrays = tuple(n for n in range(len(inputs)) if n not in scalar_positions)
    scalars = tuple((n, type(inputs[n])) for n in sorted(scalar_positions))
    if all(type(inputs[n]) is np.ndarray for n in arrays):
        return Guard(len(inputs), scalars, tuple((n, inputs[n].dtype, inputs[n].shape, inputs[n].strides)
                                                 for n in arrays))
    torch = sys.modules.get("torch")
    if torch is None or not all(isinstance(inputs[n], torch.Tensor) for n in arrays):
        return None
    try:
        from torch._C._dynamo.guards import TensorGuards

        # Detached views: the guards refuse a call that passes one object twice, so they are made
        # from one object per position (and a later call passing one tensor twice takes the key).
        tensors = [inputs[n].detach() for n in arrays]
        check = TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                             dynamic_dims_strides=[list(t.stride()) for t in tensors]).check
        if not check(*tensors):
            return None
    except Exception:  # noqa: BLE001  (a private API: where it differs, the key alone decides)
        return None
    tensors = tuple(describe_tensor(n, inputs[n]) for n in arrays)
    return Guard(len(inputs), scalars, arrays, check, tensors)


_KEY_PARTS = {  # per library: what describes one of its arrays (its type comes first)
    "numpy": "{a}.dtype, {a}.shape, {a}.strides",
    "torch": "{a}.dtype, {a}.shape, {a}.stride(), {a}.get_device()",  # the device index: -1 on the host
}


def key_function(cls: type, inputs: int, scalar_positions: frozenset[int]) -> Callable[..., tuple] | None:
    """A function of the inputs giving their description, reading every array as one of `cls`'s
    library (raising AttributeError or TypeError on another): per array its type and what
    `_KEY_PARTS` reads, per scalar its type. None for a library without one."""
    library = "numpy" if cls is np.ndarray else cls.__module__.partition(".")[0]
    if library not in _KEY_PARTS:
        return None
    names = [f"a{n}" for n in range(inputs)]
    parts = [f"type({a})" if n in scalar_positions else f"type({a}), " + _KEY_PARTS[library].format(a=a)
             for n, a in enumerate(names)]
    source = f"def key({', '.join(names)}):\n    return ({', '.join(parts)},)\n"
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  (source built above from input positions only)
    return namespace.pop("key")
