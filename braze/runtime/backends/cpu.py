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
from braze.runtime.arrays import overlaps_itself, writable
from braze.runtime.device_arrays import dense_strides
from braze.runtime.fast_call import CallPlan, PreparedCall, numpy_pointer
from braze.runtime.graph import host_block, host_copy, host_task
from braze.runtime.loop_calls import LoopArguments, LoopCall, bounds_function, bounds_read_scalars
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


class CpuPreparedKernelCall(LoopCall, CpuPreparedCall):
    """A loop kernel's call on NumPy arrays of one description: the fusions' host call (one generated
    function), with what loop kernels add (runtime/loop_calls.py). Each call packs the scalars
    (range-checked), checks the data pointers, and each array the kernel writes to be writable; a
    call that fails a check answers None, and the caller binds the arguments, which says what is
    wrong. Ranges that follow scalar arguments and a debug kernel's checks take `_launch_general`."""

    def __init__(self, launcher: KernelLauncher, arrays: Sequence[np.ndarray], array_positions: list[int],
                 scalar_positions: list[int], written: list[int], overlapping: bool) -> None:
        self.status = None if launcher.arguments.status_slot is None else np.zeros(1, np.int64)
        plan = launcher.arguments.plan(arrays, array_positions, [numpy_pointer] * len(arrays), scalar_positions,
                                       0 if self.status is None else self.status.ctypes.data)
        fixed = None if launcher.bounds_read_scalars else launcher.ranges([a.shape for a in arrays], ())
        super().__init__(plan, launcher, fixed)
        # A view that overlaps itself counts as overlapping where it is writable (kernel.py's
        # `_overlapping`): the call serves the writability it was prepared with.
        self.bind_loop(launcher, arrays, scalar_positions, overlapping, writable)
        self.written = written
        self.self_overlapping = [p for p, a in zip(array_positions, arrays)
                                 if overlaps_itself(a.shape, a.strides, a.itemsize)]

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        names["general"] = self._launch_general
        lines = self._pointer_lines(names, pointers)
        for position in self.written:
            lines += [f"if not inputs[{position}].flags.writeable:", "    return None"]
        if self.self_overlapping:
            flags = " or ".join(f"inputs[{p}].flags.writeable" for p in self.self_overlapping)
            lines += [f"if ({flags}) is not {self.overlap.overlaps_itself}:", "    return None"]
        if self.ranges is None or self.status is not None or config.current.dump:
            return [*lines, "general(inputs)"]
        return [*lines, *self._direct_unless_recording(names, "general(inputs)")]

    def _launch_general(self, inputs: Sequence[object]) -> None:
        """The launch through `CpuTasks.launch`: ranges that follow scalar arguments, debug checks,
        `bz.record()`, dumps."""
        ranges = self.ranges
        if ranges is None:
            ranges = self.tasks.ranges(self.shapes, self.scalars(inputs))
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
