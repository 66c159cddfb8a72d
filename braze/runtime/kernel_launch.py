"""KernelLauncher: runs a compiled loop kernel (`@bz.kernel`) on the CPU.

Built once per signature. A launch packs the argument block (per array its data pointer,
extents and strides; per scalar its bits), evaluates each task's bounds with a Python function
compiled from Kernel IR when the launcher was built, and runs the tasks in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from braze import config
from braze.errors import KernelAssertionError
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.kir.python import python_function
from braze.runtime import thread_pool
from braze.runtime.compiled_kernel import CompiledKernel
from braze.runtime.record import RecordedLaunch, dump_launch, note_launch, recording
from braze.runtime.scalars import scalar_packer

MIN_PARALLEL_WORK = 1 << 20  # statement-indices (a vectorized statement costs well under 1 ns per index)
# worth waking other threads for: below it, handing chunks to the pool costs more than it saves


def bounds_function(kernel: k.Kernel, arrays: Sequence[k.ArrayParam],
                    scalars: Sequence[k.ScalarParam]) -> Callable[[Sequence, Sequence], tuple]:
    """`(shapes, scalars) -> ((begin, end) per task)`: Python compiled from the tasks' bounds
    (kir/python.py), reading the array arguments' shapes and the scalars in parameter order."""
    array_index = {p.name: n for n, p in enumerate(arrays)}
    scalar_index = {p.name: n for n, p in enumerate(scalars)}

    def leaf(e: k.Expr) -> str | None:
        if isinstance(e, k.ScalarRef):
            return f"S[{scalar_index[e.param.name]}]"
        if isinstance(e, k.ArrayExtent):
            return f"A[{array_index[e.param.name]}][{e.axis}]"
        return None

    return python_function([(t.begin, t.end) for t in kernel.tasks], "A, S", leaf)


def _work_per_index(stmts: tuple[k.Stmt, ...], weight: int = 1) -> int:
    """A rough cost of one index of a task (statements, with serial loop bodies counted 8 times), in
    the units of `thread_pool.parallel_for`, so that small loops stay on the calling thread."""
    total = 0
    for s in stmts:
        total += weight
        if isinstance(s, (k.For, k.While)):
            total += _work_per_index(s.body, weight * 8)
        elif isinstance(s, k.If):
            total += _work_per_index(s.then, weight) + _work_per_index(s.orelse, weight)
    return total


class KernelLauncher:
    """Launches every task of one compiled loop kernel with arrays and scalars bound in parameter order."""

    def __init__(self, compiled: CompiledKernel, arrays: Sequence[k.ArrayParam],
                 scalars: Sequence[k.ScalarParam]) -> None:
        self.compiled = compiled
        self.kernel = compiled.kernel
        self.functions = compiled.functions
        layout = ArgLayout.of(self.kernel.params)
        self.block_size = layout.size
        self.array_slots = [(layout.slots[p.name], p.ndim) for p in arrays]
        self.scalar_slots = [(layout.slots[p.name], scalar_packer(p)) for p in scalars]
        self.messages = k.assert_messages(self.kernel)
        self.status_slot = layout.slots.get(k.ASSERT_STATUS)
        self.bounds = bounds_function(self.kernel, arrays, scalars)
        self.work = [max(1, _work_per_index(t.body)) for t in self.kernel.tasks]

    def pack(self, arrays: Sequence[np.ndarray]) -> PackedArgs:
        """The argument block with the arrays' pointers, extents and strides (scalars are written per run)."""
        block = [0] * self.block_size
        for (slot, ndim), array in zip(self.array_slots, arrays):
            itemsize = array.itemsize
            block[slot] = array.__array_interface__["data"][0]
            block[slot + 1: slot + 1 + ndim] = array.shape
            block[slot + 1 + ndim: slot + 1 + 2 * ndim] = [s // itemsize for s in array.strides]
        status = None
        if self.status_slot is not None:
            status = np.zeros(1, np.int64)
            block[self.status_slot: self.status_slot + 3] = [status.ctypes.data, 1, 1]
        packed = np.array(block, dtype=np.int64)
        return PackedArgs(packed, packed.ctypes.data, tuple([a.shape for a in arrays]), status)

    def launch(self, arrays: Sequence[np.ndarray], scalars: Sequence[object]) -> None:
        """Runs the kernel once; raises KernelAssertionError when a debug check failed."""
        self.run(self.pack(arrays), scalars)

    def run(self, packed: PackedArgs, scalars: Sequence[object]) -> None:
        """Runs the kernel on a packed block (kept by the caller while the same arrays come again,
        unchanged: the block holds their pointers, not the arrays)."""
        block = packed.block
        for (slot, pack), value in zip(self.scalar_slots, scalars):
            block[slot] = pack(value)
        if packed.status is not None:
            packed.status[0] = 0
        record = recording()
        bounds = self.bounds(packed.shapes, scalars)
        for task, fn, (begin, end), work in zip(self.kernel.tasks, self.functions, bounds, self.work):
            if (end - begin) * work < MIN_PARALLEL_WORK:  # small: the calling thread runs it
                if end > begin:
                    fn(begin, end, packed.address)
                chunks = 1
            else:
                chunks = thread_pool.parallel_for(fn, begin, end, packed.address, work, MIN_PARALLEL_WORK)
            if record:
                note_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks))
            if config.current.dump:
                dump_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks), block,
                            ArgLayout.of(self.kernel.params).slots)
            if packed.status is not None and packed.status[0]:
                raise KernelAssertionError(f"kernel {self.kernel.name!r}: {self.messages[int(packed.status[0]) - 1]}")


@dataclass(frozen=True)
class PackedArgs:
    """A packed argument block: the arrays' pointers, extents and strides. It holds no array: a
    caller replaying it must make sure the same arrays, unchanged, are still alive."""

    block: np.ndarray
    address: int
    shapes: tuple[tuple[int, ...], ...]  # per array argument its shape: what the task bounds read
    status: np.ndarray | None  # the debug checks' status word
