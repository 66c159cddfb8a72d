"""The CPU backend's launch: every task of one compiled kernel over its index range, the range split
across the cores where it has the work for it, for fusions (`KernelExecutor`) and loop kernels
(`KernelLauncher`) alike.

Task bounds are Kernel IR expressions; they are turned into Python functions once (kir/python.py),
when the executor or launcher is built, so a run evaluates nothing symbolic. A launch notes itself in
an open `bz.record()`, adds itself to an open `bz.graph()` and is dumped (`launch_params`,
`kernel_args`) in one place, `CpuTasks.launch`, which the prepared calls of runtime/fast_call.py take too.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from braze import config
from braze.compile.compiled_kernel import CompiledKernel
from braze.errors import KernelAssertionError, OutOfMemoryError
from braze.host.program import Alias, Allocate, CpuDevice, Frame, buffer_name, host_buffer
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.kir.python import evaluable, python_function, scalar_by_name
from braze.record import RecordedLaunch, dump_launch, note_launch, record_state, recording
from braze.runtime.arrays import OverlapCheck, overlaps_itself, pack_array, writable
from braze.runtime.device_arrays import dense_strides
from braze.runtime.fast_call import CallPlan, PreparedCall, ScalarSlot, numpy_pointer
from braze.runtime.graph import host_block, host_copy, host_task
from braze.runtime.scalars import scalar_packer
from braze.runtime.thread_pool import MIN_CHUNK_WORK, parallel_for

MIN_PARALLEL_WORK = 1 << 20  # statement-indices (a vectorized statement costs well under 1 ns per index)
# worth waking other threads for in a loop kernel: below it, handing chunks to the pool costs more than it saves

TaskRange = tuple[int, int, int]  # (begin, end, work per index) of one task's launch


class CpuTasks:
    """The task functions of one compiled kernel and how a launch of them runs (a fusion's executor
    and a loop kernel's launcher are both): `min_work` is the work (in the units of the ranges'
    work per index) a chunk needs before another thread takes it."""

    def __init__(self, compiled: CompiledKernel, what: str, min_work: int = MIN_CHUNK_WORK) -> None:
        self.compiled = compiled  # its loaded code lives as long as it does: the functions stay valid
        self.kernel = compiled.kernel
        self.functions = compiled.functions
        self.what, self.min_work = what, min_work
        self.one_chunk = 2 * min_work  # below it parallel_for makes one chunk: a cached call skips asking it
        if compiled.params.reverse_order:  # decreasing order over the whole range: one chunk, whatever its work
            self.one_chunk = float("inf")

    def launch(self, block: object, address: int, ranges: Sequence[TaskRange], arguments: Sequence[object] = (),
               status: np.ndarray | None = None, messages: Sequence[str] = ()) -> None:
        """Runs every task over its range on the argument block at `address` (`block`: that block, for
        a graph's copy and the dumps). A `bz.graph()` recording the launch keeps `arguments` (what the
        block points into) alive. `status`: the debug checks' status word, whose failure raises
        KernelAssertionError with its message from `messages`."""
        record = recording()
        replayed = record and host_block(block, arguments, self.what, status is not None)
        for task, fn, (begin, end, work) in zip(self.kernel.tasks, self.functions, ranges):
            if (end - begin) * work < self.one_chunk:  # the calling thread runs it, as parallel_for would
                if end > begin:
                    fn(begin, end, address)
                chunks = 1
            else:
                chunks = parallel_for(fn, begin, end, address, work, self.min_work)
            if record:
                note_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks))
                if replayed:
                    host_task(fn, begin, end, replayed, work, self.min_work, chunks)
            if config.current.dump:
                dump_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks), block,
                            ArgLayout.of(self.kernel.params).slots)
            if status is not None and status[0]:
                raise KernelAssertionError(f"{self.what}: {messages[int(status[0]) - 1]}")


# --- fusions --------------------------------------------------------------------------------------
def host_function(exprs: list[k.Expr]) -> Callable[[dict[str, int]], tuple[int, ...]]:
    """Compiles expressions over scalar parameters into one Python function of their values by name
    (kir/python.py: a division by zero gives 0, as in the kernels)."""
    return python_function(exprs, "s", scalar_by_name)


def inner_extent(task: k.Task) -> k.Expr:
    """The elements of work one index of the task's range does: its own estimate, else the extent of
    its last top-level loop (when the host can evaluate it)."""
    if task.work is not None:
        return task.work
    loops = [s for s in task.body if isinstance(s, k.For)]
    if loops and evaluable(loops[-1].end, scalar_by_name):
        return loops[-1].end
    return k.Const(1, task.begin.dtype)


class KernelExecutor(CpuTasks):
    """Runs every task of one compiled fusion kernel, in order."""

    def __init__(self, compiled: CompiledKernel) -> None:
        super().__init__(compiled, f"fusion kernel {compiled.kernel.name!r}")
        self.bounds = [host_function([t.begin, t.end, inner_extent(t)]) for t in self.kernel.tasks]
        # Per input description, the prepared call of runs of it (runtime/fast_call.py), held by the
        # fusion's FastCalls: a prepared call holds its executor, so the index must not hold it back.
        self.entries: weakref.WeakValueDictionary[tuple, object] = weakref.WeakValueDictionary()

    def ranges(self, scalars: dict[str, int]) -> list[TaskRange]:
        """Each task's (begin, end, work per index) for the extents in `scalars`."""
        return [(begin, end, max(work, 1)) for begin, end, work in (bounds(scalars) for bounds in self.bounds)]

    def run(self, block: np.ndarray, scalars: dict[str, int], arguments: Sequence[object] = ()) -> None:
        """Runs all tasks with the argument block `block` (int64 slots); `scalars` holds extent values.
        A `bz.graph()` recording the run keeps `arguments` (what the block points into) alive."""
        self.launch(block, block.ctypes.data, self.ranges(scalars), arguments)


# --- loop kernels ---------------------------------------------------------------------------------
def bounds_function(kernel: k.Kernel, arrays: Sequence[k.ArrayParam], scalars: Sequence[k.ScalarParam],
                    work: Sequence[int] | None = None) -> Callable[[Sequence, Sequence], tuple]:
    """`(shapes, scalars) -> ((begin, end) per task)`: Python compiled from the tasks' bounds
    (kir/python.py), reading the array arguments' shapes and the scalars in parameter order. With
    `work` (per task its work per index), `(begin, end, work)` per task: the ranges of a launch."""
    array_index = {p.name: n for n, p in enumerate(arrays)}
    scalar_index = {p.name: n for n, p in enumerate(scalars)}

    def leaf(e: k.Expr) -> str | None:
        if isinstance(e, k.ScalarRef):
            return f"S[{scalar_index[e.param.name]}]"
        if isinstance(e, k.ArrayExtent):
            return f"A[{array_index[e.param.name]}][{e.axis}]"
        return None

    if work is None:
        return python_function([(t.begin, t.end) for t in kernel.tasks], "A, S", leaf)
    return python_function([(t.begin, t.end, k.Const(w, t.begin.dtype)) for t, w in zip(kernel.tasks, work)],
                           "A, S", leaf)


def _work_per_index(stmts: tuple[k.Stmt, ...], weight: int = 1) -> int:
    """A rough cost of one index of a task (statements, with serial loop bodies counted 8 times), in
    the units of `parallel_for`, so that small loops stay on the calling thread."""
    total = 0
    for s in stmts:
        total += weight
        if isinstance(s, (k.For, k.While)):
            total += _work_per_index(s.body, weight * 8)
        elif isinstance(s, k.If):
            total += _work_per_index(s.then, weight) + _work_per_index(s.orelse, weight)
    return total


class LoopArguments:
    """Where a loop kernel's arguments go in its argument block (kir/layout.py), on every backend:
    arrays and scalars in parameter order, and the word its debug checks write a failure into. A
    scalar out of its dtype's range raises OverflowError as it is packed."""

    def __init__(self, kernel: k.Kernel, arrays: Sequence[k.ArrayParam], scalars: Sequence[k.ScalarParam]) -> None:
        layout = ArgLayout.of(kernel.params)
        self.size = max(layout.size, 1)
        self.array_slots = [layout.slots[p.name] for p in arrays]
        self.scalar_slots = [(layout.slots[p.name], scalar_packer(p)) for p in scalars]
        self.status_slot = layout.slots.get(k.ASSERT_STATUS)
        self.messages = k.assert_messages(kernel)

    def plan(self, arrays: Sequence, array_positions: Sequence[int], readers: Sequence[Callable[[object], int]],
             scalar_positions: Sequence[int], status: int = 0) -> CallPlan:
        """A prepared call's plan for arrays described as `arrays`, at `array_positions` among the
        arguments and each read by its pointer reader, and scalars at `scalar_positions`: the block's
        pointers and scalars are patched per call."""
        return CallPlan(self.block(arrays, [0] * len(arrays), status),
                        [(slot, position, read) for slot, position, read in zip(self.array_slots, array_positions,
                                                                                 readers)],
                        [ScalarSlot(slot, position, pack) for (slot, pack), position in zip(self.scalar_slots,
                                                                                           scalar_positions)])

    def block(self, arrays: Sequence, pointers: Sequence[int], status: int = 0) -> list[int]:
        """The argument block with the arrays' pointers, extents and strides, and the status word's
        address, in place (scalars are written per call)."""
        block = [0] * self.size
        for slot, array, pointer in zip(self.array_slots, arrays, pointers):
            pack_array(block, slot, pointer, array.shape, array.strides, array.itemsize)
        if self.status_slot is not None:
            block[self.status_slot: self.status_slot + 3] = [status, 1, 1]
        return block


class KernelLauncher(CpuTasks):
    """Launches every task of one compiled loop kernel with arrays and scalars bound in parameter order."""

    def __init__(self, compiled: CompiledKernel, arrays: Sequence[k.ArrayParam],
                 scalars: Sequence[k.ScalarParam]) -> None:
        super().__init__(compiled, f"kernel {compiled.kernel.name!r}", MIN_PARALLEL_WORK)
        self.arguments = LoopArguments(self.kernel, arrays, scalars)
        work = [max(1, _work_per_index(t.body)) for t in self.kernel.tasks]
        self.ranges = bounds_function(self.kernel, arrays, scalars, work)
        self.bounds_read_scalars = bounds_read_scalars(self.kernel)

    def run(self, arrays: Sequence[np.ndarray], scalars: Sequence[object], arguments: Sequence[object] = ()) -> None:
        """One call outside the call cache, on an argument block of its own (what the cache refuses: an
        open `bz.graph()` or profile, a prepared call busy on another thread, arrays of another
        library). A `bz.graph()` recording the call keeps `arguments` (what the block points into) alive."""
        status = None if self.arguments.status_slot is None else np.zeros(1, np.int64)
        block = np.array(self.arguments.block(arrays, [numpy_pointer(a) for a in arrays],
                                              0 if status is None else status.ctypes.data), dtype=np.int64)
        for (slot, pack), value in zip(self.arguments.scalar_slots, scalars):
            block[slot] = pack(value)
        self.launch(block, block.ctypes.data, self.ranges([a.shape for a in arrays], scalars), arguments, status,
                    self.arguments.messages)

    def prepare(self, arrays: Sequence[np.ndarray], array_positions: Sequence[int], scalar_positions: Sequence[int],
                written: Sequence[int], overlapping: bool) -> CpuPreparedKernelCall:
        """The cached call for NumPy arrays described as `arrays` are (runtime/fast_call.py), at their
        positions among the arguments; `written`: the arrays the kernel writes (their indices in
        `arrays`); `overlapping`: whether the kernel was compiled for arrays that share memory."""
        return CpuPreparedKernelCall(self, arrays, list(array_positions), list(scalar_positions),
                                     [array_positions[n] for n in written], overlapping)


def bounds_read_scalars(kernel: k.Kernel) -> bool:
    """Whether a task's bounds read a scalar argument: a launch's ranges then change from call to call
    (bounds of extents alone are fixed by the arrays' shapes)."""
    def extent(e: k.Expr) -> str | None:
        return "0" if isinstance(e, k.ArrayExtent) else None

    return not all(evaluable(bound, extent) for t in kernel.tasks for bound in (t.begin, t.end))


class CpuPreparedCall(PreparedCall):
    """Runs the kernel's tasks on the host, each over its prepared range."""

    def __init__(self, plan: CallPlan, tasks: CpuTasks, ranges: list[TaskRange]) -> None:
        super().__init__(plan)
        self.tasks, self.ranges = tasks, ranges

    def _launch(self, order: int) -> None:
        self.tasks.launch(self.block, self.address, self.ranges)

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        """With no recorder open, the generated call runs each task itself: on the calling thread where
        `CpuTasks.launch` would, else through `parallel_for`. Noting, dumping and checking each launch
        cost as much as a small call's kernel (two microseconds against NumPy's one for the whole call)."""
        lines = super()._launch_source(names, pointers)
        if config.current.dump:  # a prepared call serves one configuration: FastCalls checks it
            return lines
        *patches, launch = lines
        return [*patches, *self._direct_unless_recording(names, launch)]

    def _direct_unless_recording(self, names: dict[str, object], general: str) -> list[str]:
        """Lines running `general` (a statement launching through `CpuTasks.launch`) where a recorder
        is open, else each task directly."""
        names.update(recorders=record_state(), parallel_for=parallel_for)
        direct = []
        for n, (fn, (begin, end, work)) in enumerate(zip(self.tasks.functions, self.ranges)):
            names[f"task{n}"] = fn
            if (end - begin) * work < self.tasks.one_chunk:
                direct += [f"task{n}({begin}, {end}, {self.address})"] if end > begin else []
            else:
                direct.append(f"parallel_for(task{n}, {begin}, {end}, {self.address}, {work}, {self.tasks.min_work})")
        return ["if recorders.__dict__.get('stack'):", f"    {general}", "else:",
                *(f"    {line}" for line in direct or ["pass"])]


# Pointer sets a loop kernel's prepared call remembers as checked for overlap: a time loop rotating a
# few sets of buffers comes back to each every few steps.
_VERIFIED_POINTER_SETS = 16


class CpuPreparedKernelCall(CpuPreparedCall):
    """A loop kernel's call on NumPy arrays of one description: the fusions' host call (one generated
    function), with what loop kernels add. Each call packs the scalars (range-checked) and reads the
    data pointers; a set of pointers not seen before is checked to overlap as the arrays the kernel
    was compiled for did, and each array the kernel writes to be writable. A call that fails a check
    answers None, and the caller binds the arguments, which says what is wrong or finds the kernel
    they need. Ranges that follow scalar arguments and a debug kernel's checks take `_launch_general`."""

    def __init__(self, launcher: KernelLauncher, arrays: Sequence[np.ndarray], array_positions: list[int],
                 scalar_positions: list[int], written: list[int], overlapping: bool) -> None:
        self.status = None if launcher.arguments.status_slot is None else np.zeros(1, np.int64)
        plan = launcher.arguments.plan(arrays, array_positions, [numpy_pointer] * len(arrays), scalar_positions,
                                       0 if self.status is None else self.status.ctypes.data)
        self.shapes = [a.shape for a in arrays]
        fixed = None if launcher.bounds_read_scalars else launcher.ranges(self.shapes, ())
        super().__init__(plan, launcher, fixed)
        self.executor = launcher  # its compiled code stays loaded while the call lives
        self.scalar_positions, self.written, self.overlapping = scalar_positions, written, overlapping
        # A view that overlaps itself counts as overlapping where it is writable (kernel.py's
        # `_overlapping`): the call serves the writability it was prepared with.
        self.overlap = OverlapCheck(arrays, writable)
        self.self_overlapping = [p for p, a in zip(array_positions, arrays)
                                 if overlaps_itself(a.shape, a.strides, a.itemsize)]
        self.patched: tuple[int, ...] | None = None  # the pointers in the block
        self.verified: dict[tuple[int, ...], bool] = {}  # pointer sets checked: whether they overlap as compiled for
        self.other: CpuPreparedKernelCall | None = None  # the call for arrays that overlap the other way (`pair`)

    def pair(self, other: CpuPreparedKernelCall) -> None:
        """Makes `other`, the call of the same description whose kernel was compiled for arrays that
        overlap the other way (`f(x, x)` beside `f(x, y)`), take the calls that overlap as its
        arrays did, and back: a program calling both ways stays on cached calls."""
        self.other, other.other = other, self

    def release(self) -> None:
        other, self.other = self.other, None
        super().release()
        if other is not None:
            other.release()

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        names.update(state=self, verified=self.verified, overlap_as_compiled=self._overlap_as_compiled,
                     other=self._other_overlap, general=self._launch_general)
        lines = [f"pointers = ({''.join(f'{expression}, ' for _, expression in pointers)})",
                 "if pointers != state.patched:", "    fits = verified.get(pointers)", "    if fits is None:",
                 "        fits = overlap_as_compiled(pointers)", "    if not fits:", "        return other(inputs)",
                 f"    ({''.join(f'block[{slot}], ' for slot, _ in pointers)}) = pointers",
                 "    state.patched = pointers"]
        for position in self.written:
            lines += [f"if not inputs[{position}].flags.writeable:", "    return None"]
        if self.self_overlapping:
            flags = " or ".join(f"inputs[{p}].flags.writeable" for p in self.self_overlapping)
            lines += [f"if ({flags}) is not {self.overlap.overlaps_itself}:", "    return None"]
        if self.ranges is None or self.status is not None or config.current.dump:
            return [*lines, "general(inputs)"]
        return [*lines, *self._direct_unless_recording(names, "general(inputs)")]

    def _overlap_as_compiled(self, pointers: tuple[int, ...]) -> bool:
        """Whether arrays at `pointers` overlap as those the kernel was compiled for did (remembered:
        a set checked once is not checked again)."""
        fits = self.overlap(pointers) == self.overlapping
        if len(self.verified) >= _VERIFIED_POINTER_SETS:
            self.verified.clear()
        self.verified[pointers] = fits
        return fits

    def _other_overlap(self, inputs: Sequence[object]) -> list | None:
        """The call of arguments that overlap otherwise than this call's kernel was compiled for: the
        paired call's (None where there is none yet: the caller binds them, and pairs one)."""
        other = self.other
        return None if other is None else other.run(inputs)

    def _launch_general(self, inputs: Sequence[object]) -> None:
        """The launch through `CpuTasks.launch`: ranges that follow scalar arguments, debug checks,
        `bz.record()`, dumps."""
        ranges = self.ranges
        if ranges is None:
            ranges = self.tasks.ranges(self.shapes, [inputs[p] for p in self.scalar_positions])
        if self.status is not None:
            self.status[0] = 0
        self.tasks.launch(self.block, self.address, ranges, inputs, self.status, self.tasks.arguments.messages)


def _row_major_buffer(sizes: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """A dense row-major buffer as `host_buffer` makes it, in one NumPy call: a third of the cost of a
    small cached call went into building the strided view."""
    try:
        return np.empty(sizes, dtype)
    except MemoryError:
        raise OutOfMemoryError(f"{name}: expected {int(np.prod(sizes)) * dtype.itemsize} bytes of host memory "
                               f"for {dtype.name}{list(sizes)}, got none: the allocation failed") from None


class HostDevice(CpuDevice):
    """Host memory and CPU kernels, with every launch and copy noted in the open `bz.graph()`s; the
    cached call of a fusion (runtime/fusion_runtime.py) on NumPy arrays whose strides are whole
    elements, with no aliased outputs."""

    def launch(self, executor: object, block: np.ndarray, frame: Frame) -> None:
        executor.run(block, frame.bindings, [v for v in frame.values if v is not None])

    def copy_into(self, target: object, source: object) -> None:
        super().copy_into(target, source)
        host_copy(target, source)

    def can_prepare(self, frame: Frame, instructions: Sequence[object]) -> bool:
        return frame.bound.kind == "numpy" and all(a is b for a, b in zip(frame.values, frame.bound.arrays)) \
            and not any(isinstance(i, Alias) for i in instructions)

    def allocator(self, frame: Frame, instruction: Allocate) -> Callable[[], object]:
        numel, sizes, strides = instruction.extents(frame)
        dtype, name = instruction.tv.dtype.numpy, buffer_name(instruction.tv)
        if numel > 0 and strides == tuple(dense_strides(sizes, 1)) and numel == np.prod(sizes) \
                and not config.enabled("poison_outputs"):  # a prepared call keeps the configuration it was made in
            return functools.partial(_row_major_buffer, sizes, dtype, name)
        return functools.partial(host_buffer, dtype, numel, sizes, strides, name=name)

    def copies_back(self, frame: Frame, instructions: Sequence[object], buffer_of: dict[int, int],
                    kinds: list) -> list[tuple] | None:
        return []

    def prepared_call(self, executor: KernelExecutor, frame: Frame, plan: CallPlan, kind: object,
                      first_array: int) -> PreparedCall:
        return CpuPreparedCall(plan, executor, executor.ranges(frame.bindings))
