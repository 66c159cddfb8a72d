"""KernelExecutor: runs a CompiledKernel's tasks on the CPU from a packed argument block.

Task bounds are Kernel IR expressions over extent parameters; they are turned into Python
functions once (kir/python.py), when the executor is built, so a run evaluates nothing symbolic.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from braze import config
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.kir.python import evaluable, python_function, scalar_by_name
from braze.runtime import thread_pool
from braze.runtime.compiled_kernel import CompiledKernel
from braze.runtime.record import RecordedLaunch, dump_launch, note_launch, recording


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


class KernelExecutor:
    """Runs every task of one compiled kernel, in order."""

    def __init__(self, compiled: CompiledKernel) -> None:
        self.compiled = compiled
        self.kernel = compiled.kernel
        self.functions = compiled.functions
        self.bounds = [host_function([t.begin, t.end, inner_extent(t)]) for t in self.kernel.tasks]
        # Per input description, the prepared call of runs of it (runtime/fast_call.py), held by the
        # fusion's FastCalls: a prepared call holds its executor, so the index must not hold it back.
        self.entries: weakref.WeakValueDictionary[tuple, object] = weakref.WeakValueDictionary()

    def run(self, block: np.ndarray, scalars: dict[str, int]) -> None:
        """Runs all tasks with the argument block `block` (int64 slots); `scalars` holds extent values."""
        address = block.ctypes.data
        for task, fn, bounds in zip(self.kernel.tasks, self.functions, self.bounds):
            begin, end, work = bounds(scalars)
            chunks = thread_pool.parallel_for(fn, begin, end, address, max(work, 1))
            if recording():
                note_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks))
            if config.current.dump:
                dump_launch(RecordedLaunch(self.kernel.name, task.name, begin, end, chunks), block,
                            ArgLayout.of(self.kernel.params).slots)
