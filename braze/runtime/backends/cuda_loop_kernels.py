"""Loop kernels (`@bz.kernel`) on a GPU: `CudaKernelLauncher` holds the loaded functions of one
compiled loop kernel (compile/cuda_kernel.py, `CudaLoopKernel`) on one device and plans each task's
grid, and `PreparedKernelCall` is its cached call for arguments of one description (the CUDA
prepared call of cuda.py with runtime/loop_calls.py's `LoopCall`), filed in the fusions' call cache
(`fast_call.FastCalls`).
"""
from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from braze.codegen.cuda_launch import BLOCKS_PER_SM
from braze.compile import cuda_driver as cuda
from braze.compile.cuda_kernel import CudaLoopKernel
from braze.errors import KernelAssertionError
from braze.kir import nodes as k
from braze.native.launch_jit import NativeLaunches, native_launches
from braze.record import RecordedLaunch, record_state, recording
from braze.runtime.backends.cuda import CudaPreparedCall, LoadedKernel, PreparedLaunch, launch_specs, recorded_launch
from braze.runtime.device_arrays import DeviceView
from braze.runtime.fast_call import ArrayKind, gpu_array_kind
from braze.runtime.graph import capture_stream
from braze.runtime.loop_calls import LoopArguments, LoopCall, bounds_function, bounds_read_scalars


@dataclass(frozen=True)
class TaskFunction:
    """One task's `__global__` function on the device."""

    name: str  # the task's name (bz.record() shows it)
    function: str  # the C++ name
    address: int  # the CUfunction handle
    serial: bool
    max_grid: int  # blocks the device runs at once: a grid-stride loop needs no more


@dataclass(frozen=True)
class LoopTaskLaunch:
    task: TaskFunction
    begin: int
    end: int
    grid: int  # 0: an empty range, nothing to launch
    threads: int


class CudaKernelLauncher(LoadedKernel):
    """Launches the tasks of one compiled loop kernel on one device, arguments in parameter order."""

    def __init__(self, compiled: CudaLoopKernel, device: cuda.Device, arrays: Sequence[k.ArrayParam],
                 scalars: Sequence[k.ScalarParam], block: int | None = None) -> None:
        super().__init__(compiled, device, block)
        self.tasks = [self._task(t, f) for t, f in zip(self.kernel.tasks, self.compiled.generated.functions)]
        self.arguments = LoopArguments(self.kernel, arrays, scalars)
        self.bounds = bounds_function(self.kernel, arrays, scalars)
        self.bounds_read_scalars = bounds_read_scalars(self.kernel)

    def _task(self, task: k.Task, function: str) -> TaskFunction:
        resident = max(1, min(BLOCKS_PER_SM, self.module.resident_blocks(function, self.block, 0)))
        return TaskFunction(task.name, function, self.module.functions[function], task.kind != "range_for",
                            self.device.sm_count * resident)

    def plan(self, bounds: Sequence[tuple[int, int]]) -> list[LoopTaskLaunch]:
        """Each task's launch: a serial task is one thread; a parallel one enough blocks to give each
        index a thread, capped at what runs at once (the threads then loop)."""
        planned = []
        for task, (begin, end) in zip(self.tasks, bounds):
            if task.serial:
                planned.append(LoopTaskLaunch(task, 0, 1, 1, 1))
                continue
            blocks = -(-(end - begin) // self.block) if end > begin else 0
            planned.append(LoopTaskLaunch(task, begin, end, min(blocks, task.max_grid), self.block))
        return planned

    def prepare(self, views: Sequence[DeviceView], scalars: Sequence[object], arguments: Sequence[object],
                array_positions: Sequence[int], scalar_positions: Sequence[int],
                overlapping: bool) -> PreparedKernelCall:
        """The cached call for arguments described as `views` (the scalars only fix the launch when
        the task bounds read them)."""
        readers = [gpu_array_kind(arguments[p]) for p in array_positions]
        launches = None if self.bounds_read_scalars else self.plan(self.bounds([v.shape for v in views], scalars))
        return PreparedKernelCall(self, views, readers, list(array_positions), list(scalar_positions),
                                  launches, overlapping)


# --- the cached call ----------------------------------------------------------------------------
class PreparedKernelCall(LoopCall, CudaPreparedCall):
    """A loop kernel's call for arguments of one description: the fusions' CUDA prepared call (one
    generated function packing the scalars and launching every task on the arguments' stream, from
    one native function where the grids are fixed), with what loop kernels add (runtime/loop_calls.py:
    the data pointers are checked and patched from Python). Grids that follow scalar arguments, a
    debug kernel's checks and `bz.record()` take the launches from Python (`_launch_general`). A call
    answers [] (a loop kernel returns nothing), None to bind again."""

    def __init__(self, launcher: CudaKernelLauncher, views: Sequence[DeviceView],
                 readers: list[ArrayKind], array_positions: list[int], scalar_positions: list[int],
                 launches: list[LoopTaskLaunch] | None, overlapping: bool) -> None:
        self.planned = launches
        self.status = None if launcher.arguments.status_slot is None else _StatusWord(launcher.device)
        plan = launcher.arguments.plan(views, array_positions, [reader.pointer for reader in readers],
                                       scalar_positions, self.status.address if self.status else 0)
        self.fixed_grids = launches is not None and self.status is None  # launched from one native function
        super().__init__(plan, [_prepared_launch(launcher.kernel.name, x) for x in launches if x.grid]
                         if self.fixed_grids else [], readers[0], array_positions[0], launcher.device)
        self.bind_loop(launcher, views, scalar_positions, overlapping)  # (a GPU array has no read-only flag)
        self.params = (ctypes.c_void_p * 1)(self.address)  # the block is the one kernel parameter
        self.params_address = ctypes.addressof(self.params)

    def _build_launch_all(self) -> NativeLaunches | None:
        """The native launch of fixed grids (the pointers are patched from Python: see the class)."""
        return native_launches(self.device.driver_calls, launch_specs(self.launches)) if self.fixed_grids else None

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        names.update(general=self._launch_general, recorders=record_state())
        lines = self._pointer_lines(names, pointers)
        native = self.launch_all
        if native is None:
            return [*lines, "general(inputs, order)"]
        names.update(launch_all=native.call, failed=self._native_failed)
        return [*lines, "if recorders.__dict__.get('stack'):", "    general(inputs, order)", "else:",
                "    code = launch_all(order)", "    if code:", "        failed(code)"]

    def _launch_general(self, args: Sequence[object], stream: int) -> None:
        """The general launch: grids that follow scalar arguments, debug checks, bz.record()."""
        launches = self.planned
        if launches is None:
            launches = self.executor.plan(self.executor.bounds(self.shapes, self.scalars(args)))
        record = recording()
        with self.device.current():
            if record:  # an open bz.graph() takes the launches onto its capture stream, keeping their module loaded
                stream = capture_stream(stream, self.device, (*args, self.executor),
                                        f"kernel {self.executor.kernel.name!r}", self.status is not None)
            if self.status is not None:
                self.status.reset(stream)
            for x in launches:
                if record:
                    recorded_launch(RecordedLaunch(self.executor.kernel.name, x.task.name, x.begin, x.end, x.grid),
                                    stream, functools.partial(self._launch_task, x, stream) if x.grid else None)
                elif x.grid:
                    self._launch_task(x, stream)
                if self.status is not None:
                    self._check(stream)

    def _launch_task(self, x: LoopTaskLaunch, stream: int) -> None:
        cuda.launch(x.task.address, (x.grid, 1, 1), (x.threads, 1, 1), self.params_address, stream, 0, x.task.function)

    def _check(self, stream: int) -> None:
        """After a task of a debug kernel: raise the first failed check's message, as the CPU does."""
        code = self.status.read(stream)
        if code:
            messages = self.executor.arguments.messages
            raise KernelAssertionError(f"kernel {self.executor.kernel.name!r}: {messages[code - 1]}")


def _prepared_launch(kernel: str, x: LoopTaskLaunch) -> PreparedLaunch:
    """A task's launch with a fixed grid, its one parameter the argument block (set by the call)."""
    return PreparedLaunch(x.task.address, x.grid, x.threads, 0, (ctypes.c_void_p * 1)(), _NO_SCALARS,
                          (kernel, x.task.function, x.begin, x.end, x.grid))


_NO_SCALARS = (ctypes.c_int64 * 0)()


class _StatusWord:
    """The int64 a debug kernel's failed checks write their message number into."""

    def __init__(self, device: cuda.Device) -> None:
        with device.current():
            self.address = cuda.alloc(8)
            cuda.synchronize(0)  # allocated on the default stream; calls use others
        self.host = np.zeros(1, np.int64)
        free = weakref.finalize(self, cuda.free_on, device, self.address)
        free.atexit = False  # the context's teardown frees it

    def reset(self, stream: int) -> None:
        cuda.fill_bytes(self.address, 0, 8, stream)

    def read(self, stream: int) -> int:
        cuda.copy_to_host(self.host.ctypes.data, self.address, 8, stream)
        cuda.synchronize(stream)
        return int(self.host[0])
