"""Loop kernels (`@bz.kernel`) on a GPU: the compiled kernel, its launcher, and the cached call.

`CudaLoopKernel` is a CudaCompiledKernel whose source comes from the loop-kernel code generator
(NVRTC, disk cache and dumps as for fusions). `CudaKernelLauncher` holds the loaded functions of
one kernel on one device. `PreparedKernelCall` is a call for arguments of one *description* (per
array its library, dtype, shape, strides and device; per scalar its type): the argument block
with every extent and stride filled in, and each task's grid. A call with that description only

    1. reads each array's data pointer (the block is patched only when one changed);
    2. writes the scalars into the block;
    3. launches every task on the stream of the arguments' library: through one native function
       that calls cuLaunchKernel for each (host/launch_jit.py) when the grids are fixed, else task
       by task with libcuda's cuLaunchKernel through ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from braze.codegen import cuda_loops
from braze.codegen.cuda_plan import sub_exprs
from braze.errors import KernelAssertionError
from braze.host.launch_jit import native_launches
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.runtime import cuda_driver as cuda
from braze.runtime.arrays import arguments_overlap, byte_span, overlaps_itself
from braze.runtime.backends.cpu import bounds_function
from braze.runtime.backends.cuda import recorded_launch
from braze.runtime.cuda_kernel import BLOCKS_PER_SM, CudaCompiledKernel
from braze.runtime.device_arrays import DeviceView
from braze.runtime.fast_call import ArrayKind, gpu_array_kind
from braze.runtime.graph import capture_stream
from braze.runtime.record import RecordedLaunch, record_state, recording
from braze.runtime.scalars import scalar_packer


class CudaLoopKernel(CudaCompiledKernel):
    """A loop kernel compiled for one architecture. Float arithmetic is not contracted into fused
    multiply-adds (unless fast math is on), so `+ - *` round as they do on the CPU."""

    def generate(self) -> cuda_loops.LoopCudaSource:
        return cuda_loops.generate(self.kernel, self.block_size, self.restrict)

    def options(self) -> tuple[str, ...]:
        return super().options() + (() if self.params.fast_math else ("--fmad=false",))


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


class CudaKernelLauncher:
    """Launches the tasks of one compiled loop kernel on one device, arguments in parameter order."""

    def __init__(self, compiled: CudaLoopKernel, device: cuda.Device, arrays: Sequence[k.ArrayParam],
                 scalars: Sequence[k.ScalarParam], block: int | None = None) -> None:
        """`block`: the threads a block of its launches has (by default the kernel's own); a kernel
        whose functions cannot launch that many is recompiled for them (`CudaCompiledKernel.for_block`)."""
        self.block_size = block or compiled.block_size
        compiled = compiled.for_block(device, self.block_size)
        self.compiled, self.device = compiled, device
        self.kernel = compiled.kernel
        module = compiled.module(device)
        self.tasks = [self._task(module, t, f) for t, f in zip(self.kernel.tasks, compiled.generated.functions)]
        layout = ArgLayout.of(self.kernel.params)
        self.block_slots = max(layout.size, 1)
        self.array_slots = [(layout.slots[p.name], p.ndim) for p in arrays]
        self.scalar_slots = [(layout.slots[p.name], scalar_packer(p, checked=True)) for p in scalars]
        self.status_slot = layout.slots.get(k.ASSERT_STATUS)
        self.messages = k.assert_messages(self.kernel)
        self.bounds = bounds_function(self.kernel, arrays, scalars)
        # Bounds read from scalar arguments change from call to call; bounds of extents do not.
        self.bounds_read_scalars = any(isinstance(e, k.ScalarRef) for t in self.kernel.tasks
                                       for bound in (t.begin, t.end) for e in sub_exprs(bound))

    def _task(self, module: cuda.Module, task: k.Task, function: str) -> TaskFunction:
        handle = module.functions[function]
        resident = max(1, min(BLOCKS_PER_SM, module.resident_blocks(function, self.block_size, 0)))
        return TaskFunction(task.name, function, handle, task.kind != "range_for",
                            self.device.sm_count * resident)

    def plan(self, bounds: Sequence[tuple[int, int]]) -> list[LoopTaskLaunch]:
        """Each task's launch: a serial task is one thread; a parallel one enough blocks to give each
        index a thread, capped at what runs at once (the threads then loop)."""
        planned = []
        for task, (begin, end) in zip(self.tasks, bounds):
            if task.serial:
                planned.append(LoopTaskLaunch(task, 0, 1, 1, 1))
                continue
            blocks = -(-(end - begin) // self.block_size) if end > begin else 0
            planned.append(LoopTaskLaunch(task, begin, end, min(blocks, task.max_grid), self.block_size))
        return planned

    def prepare(self, views: Sequence[DeviceView], scalars: Sequence[object], arguments: Sequence[object],
                array_positions: Sequence[int], scalar_positions: Sequence[int],
                overlapping: bool) -> PreparedKernelCall:
        """The cached call for arguments described as `views` (the scalars only fix the launch when
        the task bounds read them)."""
        block = (ctypes.c_int64 * self.block_slots)()
        for (slot, ndim), view in zip(self.array_slots, views):
            block[slot + 1: slot + 1 + ndim] = list(view.shape)
            block[slot + 1 + ndim: slot + 1 + 2 * ndim] = [s // view.itemsize for s in view.strides]
        readers = [gpu_array_kind(arguments[p]) for p in array_positions]
        launches = None if self.bounds_read_scalars else self.plan(self.bounds([v.shape for v in views], scalars))
        return PreparedKernelCall(self, block, views, readers, list(array_positions), list(scalar_positions),
                                  launches, overlapping)


# --- the cached call ----------------------------------------------------------------------------
class PreparedKernelCall:
    """A loop kernel's call for arguments of one description, with the host arithmetic done ahead."""

    def __init__(self, launcher: CudaKernelLauncher, block: ctypes.Array, views: Sequence[DeviceView],
                 readers: list[ArrayKind], array_positions: list[int], scalar_positions: list[int],
                 launches: list[LoopTaskLaunch] | None, overlapping: bool) -> None:
        self.launcher, self.block, self.launches = launcher, block, launches
        self.device = launcher.device
        self.params = (ctypes.c_void_p * 1)(ctypes.addressof(block))  # the block is the one kernel parameter
        self.params_address = ctypes.addressof(self.params)
        self.pointers = [(slot, position, reader.pointer) for (slot, _), position, reader in
                         zip(launcher.array_slots, array_positions, readers)]
        self.scalars = [(slot, position, pack) for (slot, pack), position in zip(launcher.scalar_slots,
                                                                                 scalar_positions)]
        self.scalar_positions = scalar_positions
        self.stream_of = readers[0].stream if readers else (lambda a, device: 0)
        self.device_stream = readers[0].device_stream if readers else None
        self.stream_position = array_positions[0] if array_positions else 0
        self.spans = [byte_span(v.shape, v.strides, v.itemsize) for v in views]
        # Fixed by the description (shapes and strides), whatever the pointers: a view overlapping itself.
        self.overlaps_itself = any(overlaps_itself(v.shape, v.strides, v.itemsize) for v in views)
        self.shapes = [v.shape for v in views]  # what the bounds function reads
        self.overlapping = overlapping
        self.last_pointers: tuple[int, ...] | None = None
        self.busy = threading.Lock()  # the block is patched in place: one caller at a time
        self.status = None
        if launcher.status_slot is not None:
            self.status = _StatusWord(launcher.device)
            block[launcher.status_slot: launcher.status_slot + 3] = [self.status.address, 1, 1]
        self.raw_launch = cuda.raw_launch_function()
        self.native = self._native_launches()
        if self.native is not None:
            self.run = self._native_call()  # this instance's calls take the generated function

    def _native_launches(self) -> tuple[object, list[LoopTaskLaunch]] | None:
        """Fixed grids and no debug checks: every launch of a call from one native function."""
        if self.launches is None or self.status is not None:
            return None
        launched = [x for x in self.launches if x.grid]
        native = native_launches(self.device.driver_calls,
                                 [(x.task.address, x.grid, x.threads, 0, self.params_address) for x in launched])
        return None if native is None else (native, launched)

    def _native_call(self) -> Callable[[Sequence[object]], bool]:
        """`run` as one generated function: read and patch, launch natively. Every reader, packer,
        slot and position is a constant of its code; anything unusual (new pointers, bz.record())
        goes to the general path. On a cached call Python's own overhead is most of the cost."""
        native, _ = self.native  # self.native holds the launch table as long as this call lives
        names = {"acquire": self.busy.acquire, "release": self.busy.release,
                 "repoint": self._repoint, "general": self._run, "block": self.block, "device": self.device,
                 "stream_of": self.stream_of, "launch_all": native.call,
                 "recorders": record_state(), "failed": self._native_failed, "state": self}
        reads = "".join(f"read{n}(args[{position}]), " for n, (_, position, _) in enumerate(self.pointers))
        names.update((f"read{n}", reader) for n, (_, _, reader) in enumerate(self.pointers))
        if self.device_stream is not None:  # torch: its current stream from the device index, one C call
            names["device_stream"] = self.device_stream
            stream = f"device_stream({self.device.index})"
        else:
            stream = f"stream_of(args[{self.stream_position}], {self.device.index})"
        lines = ["if not acquire(False):", "    return False", "try:",
                 f"    pointers = ({reads})",
                 "    if pointers != state.last_pointers and not repoint(pointers):", "        return False"]
        if self.scalars:
            lines.append("    try:")
            for n, (slot, position, pack) in enumerate(self.scalars):
                names[f"pack{n}"] = pack
                lines.append(f"        block[{slot}] = pack{n}(args[{position}])")
            lines += ["    except OverflowError:", "        return False"]
        lines += ["    if recorders.__dict__.get('stack'):", "        return general(args)",  # (launch_all activates)
                  f"    code = launch_all({stream})",
                  "    if code:", "        failed(code)", "    return True", "finally:", "    release()"]
        source = "def run(args):\n" + "".join(f"    {line}\n" for line in lines)
        exec(source, names)  # noqa: S102  (built above from slots and positions only)
        return names.pop("run")  # not left in its own globals: a cycle only the collector frees

    def _native_failed(self, code: int) -> None:
        x = self.native[1][code >> 16]
        cuda.raise_launch_error(code & 0xFFFF, x.task.function, (x.grid, 1, 1), (x.threads, 1, 1))

    def _repoint(self, pointers: tuple[int, ...]) -> bool:
        """Patches new data pointers into the block; False when the arguments' overlap changed (the
        kernel was compiled for arguments that do, or do not, share memory)."""
        if self._overlap(pointers) != self.overlapping:
            return False
        for (slot, _, _), address in zip(self.pointers, pointers):
            self.block[slot] = address
        self.last_pointers = pointers
        return True

    def run(self, args: Sequence[object]) -> bool:
        """Runs the kernel on `args`; False when this call cannot take them (the caller binds them
        again: another thread holds the block, the arguments now overlap, a scalar is out of range)."""
        if not self.busy.acquire(blocking=False):
            return False
        try:
            return self._run(args)
        finally:
            self.busy.release()

    def _run(self, args: Sequence[object]) -> bool:
        """The general call: grids that follow scalar arguments, debug checks, bz.record()."""
        block = self.block
        pointers = tuple(pointer(args[position]) for _, position, pointer in self.pointers)
        if pointers != self.last_pointers and not self._repoint(pointers):
            return False
        try:
            for slot, position, pack in self.scalars:
                block[slot] = pack(args[position])
        except OverflowError:
            return False
        with self.device.current():
            self._launch_all(args)
        return True

    def _launch_all(self, args: Sequence[object]) -> None:
        stream = self.stream_of(args[self.stream_position], self.device.index)
        launches = self.launches
        if launches is None:
            launches = self.launcher.plan(self.launcher.bounds(self.shapes, [args[p] for p in self.scalar_positions]))
        record = recording()
        if record:  # an open bz.graph() takes the launches onto its capture stream, keeping their module loaded
            stream = capture_stream(stream, self.device, (*args, self.launcher),
                                    f"kernel {self.launcher.kernel.name!r}", self.status is not None)
        if self.status is not None:
            self.status.reset(stream)
        if record:
            self._recorded(launches, stream)
            return
        for x in launches:
            if x.grid:
                self._launch(x, stream)
            if self.status is not None:
                self._check(stream)

    def _launch(self, x: LoopTaskLaunch, stream: int) -> None:
        code = self.raw_launch(x.task.address, x.grid, 1, 1, x.threads, 1, 1, 0, stream, self.params_address, None)
        if code:
            cuda.raise_launch_error(code, x.task.function, (x.grid, 1, 1), (x.threads, 1, 1))

    def _recorded(self, launches: list[LoopTaskLaunch], stream: int) -> None:
        """The launches under bz.record(): each noted, and timed with CUDA events when profiling."""
        for x in launches:
            recorded_launch(RecordedLaunch(self.launcher.kernel.name, x.task.name, x.begin, x.end, x.grid), stream,
                            functools.partial(self._launch, x, stream) if x.grid else None)
            if self.status is not None:
                self._check(stream)

    def _check(self, stream: int) -> None:
        """After a task of a debug kernel: raise the first failed check's message, as the CPU does."""
        code = self.status.read(stream)
        if code:
            raise KernelAssertionError(f"kernel {self.launcher.kernel.name!r}: {self.launcher.messages[code - 1]}")

    def _overlap(self, pointers: tuple[int, ...]) -> bool:
        return arguments_overlap(pointers, self.spans, self.overlaps_itself)


def views_overlap(views: Sequence[DeviceView]) -> bool:
    """Whether two arrays share memory, or one overlaps itself (any: a GPU array has no read-only flag)."""
    return arguments_overlap([v.ptr for v in views], [byte_span(v.shape, v.strides, v.itemsize) for v in views],
                             any(overlaps_itself(v.shape, v.strides, v.itemsize) for v in views))


class _StatusWord:
    """The int64 a debug kernel's failed checks write their message number into."""

    def __init__(self, device: cuda.Device) -> None:
        with device.current():
            self.address = cuda.alloc(8)
            cuda.synchronize(0)  # allocated on the default stream; calls use others
        self.host = np.zeros(1, np.int64)
        free = weakref.finalize(self, _free_on, device, self.address)
        free.atexit = False  # the context's teardown frees it

    def reset(self, stream: int) -> None:
        cuda.fill_bytes(self.address, 0, 8, stream)

    def read(self, stream: int) -> int:
        cuda.copy_to_host(self.host.ctypes.data, self.address, 8, stream)
        cuda.synchronize(stream)
        return int(self.host[0])


def _free_on(device: cuda.Device, address: int) -> None:
    with device.current():
        cuda.free(address, 0)
