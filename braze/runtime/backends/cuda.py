"""The CUDA backend: a fusion's device (`CudaDevice`: buffers, launches and the cached call on the
inputs' GPU and stream), the prepared call's launches on the inputs' stream, for fusions and loop
kernels (cuda_loop_kernels.py) alike, a launch under `bz.record()` (noted, and timed with CUDA
events when profiling), a compiled kernel loaded on a device (`LoadedKernel`) and the executor of a
fusion's (`CudaExecutor`), and `RtcKernel` for a user's own CUDA source."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from braze import config
from braze.codegen.cuda_launch import ROW_CACHE_BYTES, LaunchPlanner, PlannedLaunch, task_launches
from braze.compile import cuda_driver as cuda
from braze.compile import disk_cache, elf, nvrtc
from braze.compile.cuda_kernel import CudaCompiledKernel
from braze.errors import InputError
from braze.host.program import Alias, Allocate, CpuDevice, Frame
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.native import host_jit
from braze.native.launch_jit import NEW_STREAM, STREAM_TABLES, LaunchSpec, NativeLaunches, native_launches
from braze.native.torch_call import Conditions, TorchApi, TorchCall, torch_api
from braze.record import (
    OPEN_RECORDINGS,
    RecordedLaunch,
    dump_kernel_args,
    note_compile,
    note_launch,
    profiling,
    record_state,
    recording,
)
from braze.runtime import device_arrays
from braze.runtime.cuda_resources import Workspace, stream_workspaces
from braze.runtime.fast_call import UNSEEN, ArrayKind, CallPlan, PreparedCall, patch_lines
from braze.runtime.graph import capture_stream


@dataclass
class PreparedLaunch:
    """One cuLaunchKernel: the function, its grid and block, and its parameter array (the argument
    block's address, then the addresses of its launch scalars)."""

    function: int
    grid: int
    block: int
    shared: int
    params: ctypes.Array  # void*[]: the argument block's address (set by the caller), then the scalars'
    scalars: ctypes.Array  # int64[4], kept alive here
    record: tuple  # (kernel, task, begin, end, grid) for bz.record()
    workspace: object = None  # the grid reductions' workspace the scalars point into, kept alive here

    @property
    def params_address(self) -> int:
        return ctypes.addressof(self.params)

    def launch(self, stream: int) -> None:
        """cuLaunchKernel on `stream`, in the context current."""
        cuda.launch(self.function, (self.grid, 1, 1), (self.block, 1, 1), self.params_address, stream, self.shared,
                    self.record[1])


def launch_in_order(launches: Sequence[PreparedLaunch], stream: int, device: cuda.Device, pairs: bool,
                    launch: Callable[[PreparedLaunch], None] | None = None) -> None:
    """Each of `launches` on `stream` (or by `launch(x)`), in order, in `device`'s context; under the
    pair lock of their workspace where they include an inner-outer pair (runtime/cuda_resources.Workspace)."""
    if not launches:
        return
    with device.current(), launches[0].workspace.pair_lock if pairs else contextlib.nullcontext():
        for x in launches:
            if launch is None:
                x.launch(stream)
            else:
                launch(x)


def recorded_launch(recorded: RecordedLaunch, stream: int, launch: Callable[[], None] | None,
                    nbytes: Callable[[], int] | None = None) -> None:
    """Makes a launch (`launch()`; None: an empty one, only noted) noted as `recorded`. Under
    bz.record(profile=True) it is timed with events on `stream`, and `nbytes()` (the bytes of its
    array arguments, where known) over that time is its bandwidth."""
    timed = launch is not None and profiling()
    if timed:
        start, end = cuda.Event(), cuda.Event()
        cuda.record_event(start, stream)
    if launch is not None:
        launch()
    if timed:
        cuda.record_event(end, stream)
        recorded.device_ms = cuda.elapsed_ms(start, end)
        if nbytes is not None:
            recorded.gbps = nbytes() / recorded.device_ms / 1e6
    note_launch(recorded)


class CudaPreparedCall(PreparedCall):
    """Launches on the inputs' stream: all launches through one native function when the host JIT
    builds it, else one by one through ctypes.

    Where the kernels take a grid reduction's workspace, each stream has launches of its own
    (`per_stream(stream)` makes them, their scalars pointing into that stream's workspace), up to
    STREAM_TABLES streams: the native function looks the stream's up, and on a stream it has none
    for yet answers NEW_STREAM, and the call files them and launches again.

    Where they include an inner-outer pair (`pairs`), the launches go one by one, under the lock of
    the stream's workspace (runtime/cuda_resources.Workspace): never one native call, which could
    come between another thread's two launches of a pair."""

    _native_execute: Callable[..., list] | None | object = UNSEEN  # `native_execute`'s memo
    _launch_all: NativeLaunches | None | object = UNSEEN  # `launch_all`'s memo

    def __init__(self, plan: CallPlan, launches: list[PreparedLaunch], kind: ArrayKind, stream_input: int,
                 device: cuda.Device, stream: int = 0,
                 per_stream: Callable[[int], list[PreparedLaunch]] | None = None, pairs: bool = False) -> None:
        """`kind`: how the inputs' library is read, `stream_input` the input whose stream the call
        takes; `launches` are those on `stream` (on every stream where `per_stream` is None)."""
        super().__init__(plan)
        self.pairs = pairs
        self.launches, self.stream, self.stream_input, self.device = launches, kind.stream, stream_input, device
        self.device_stream = kind.device_stream
        self.per_stream, self.first_stream = per_stream, stream
        # Per stream its launches (where they differ by stream), the most recently filed last.
        self.stream_launches: OrderedDict[int, list[PreparedLaunch]] = OrderedDict()
        self._streams_lock, self._build_lock = threading.Lock(), threading.Lock()
        self._file(stream, launches)

    def _file(self, stream: int, launches: list[PreparedLaunch]) -> None:
        for launch in launches:
            launch.params[0] = self.address
        if self.per_stream is not None:
            self.stream_launches[stream] = launches
            while len(self.stream_launches) > STREAM_TABLES:
                self.stream_launches.popitem(last=False)

    def launches_on(self, stream: int) -> list[PreparedLaunch]:
        """The call's launches on `stream` (made the first time, where they differ by stream)."""
        if self.per_stream is None:
            return self.launches
        launches = self.stream_launches.get(stream)
        if launches is None:
            with self._streams_lock:
                launches = self.stream_launches.get(stream)
                if launches is None:
                    launches = self.per_stream(stream)
                    self._file(stream, launches)
        return launches

    def _new_stream(self, native: NativeLaunches, stream: int) -> None:
        """Files `stream`'s launches in the tables of `native`, the launcher that answered
        NEW_STREAM: its first native launch there."""
        launches = self.launches_on(stream)
        native.add_stream(stream, launch_specs(launches), launches)

    @property
    def launch_all(self) -> NativeLaunches | None:
        """The native launch functions over this call's tables, the patched one writing the input
        and buffer pointers (None where the host JIT is off or failed, or with an inner-outer pair:
        see the class docstring). Built when the call is first taken, not when it is prepared: the
        fusion's first call then needs no LLVM engine. Built once, under a lock: threads taking
        the call for the first time together would otherwise each build launchers, and a stream
        filed in one's tables while another's launched would answer NEW_STREAM forever."""
        if self._launch_all is UNSEEN:
            with self._build_lock:
                if self._launch_all is UNSEEN:
                    self._launch_all = self._build_launch_all()
        return self._launch_all

    def _build_launch_all(self) -> NativeLaunches | None:
        if self.pairs:
            return None
        slots = [slot for slot, _, _ in self.plan.input_pointers] + [slot for slot, _ in self.plan.buffer_pointers]
        return native_launches(self.device.driver_calls, launch_specs(self.launches), self.address, slots,
                               None if self.per_stream is None else self.first_stream)

    def _copy_on_device(self, target: int, source: int, nbytes: int, stream: int) -> None:
        with self.device.current():  # stream 0 is the null stream of whichever context is current
            cuda.copy_on_device(target, source, nbytes, stream)

    def _begin_source(self, names: dict[str, object]) -> list[str]:
        names.update(device=self.device, stream_of=self.stream, device_stream=self.device_stream)
        stream = f"device_stream({self.device.index})" if self.device_stream is not None else \
            f"stream_of(inputs[{self.stream_input}], {self.device.index})"
        return [f"order = {stream}"]  # (the launches make the device's context current themselves)

    def _launch_source(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        native = self.launch_all
        if native is None:
            return super()._launch_source(names, pointers)
        names.update(failed=self._native_failed, recorders=record_state(), note=self._note_launches)
        if native.patched is not None:  # its slots are the pointers', in this order
            names["launch_patched"] = native.patched
            launch = f"code = launch_patched(order, {', '.join(expression for _, expression in pointers)})"
            lines = [launch]
        else:  # (the block is then patched under the call's lock: launching again reads it as it is)
            names["launch_all"] = native.call
            launch = "code = launch_all(order)"
            lines = [*patch_lines(pointers), launch]
        lines.append("if code:")
        if self.per_stream is not None:  # the first launch on a stream files its launches, then launches
            names.update(new_stream=functools.partial(self._new_stream, native), NEW_STREAM=NEW_STREAM)
            lines += ["    while code == NEW_STREAM:", "        new_stream(order)", f"        {launch}",
                      "    if code:", "        failed(code)"]
        else:
            lines.append("    failed(code)")
        return [*lines, "if recorders.__dict__.get('stack'):", "    note()"]

    def _patches_atomically(self) -> bool:
        # The builtin is made only where a GIL keeps other threads out of it (host_jit.builtins_available).
        native = self.launch_all
        return native is not None and native.patched is not None

    def native_execute(self, settings: config.Config, fallback: Callable[..., list]) -> Callable[..., list] | None:
        """This call as one native builtin that `Fusion.execute` calls first on torch tensors: the
        checks, allocation, patching and launches (native/torch_call.py), `fallback` answering the
        calls it declines. Made once; None where some of it must run in Python: scalars, seeds,
        buffers kept between calls, copies back, or outputs that are inputs."""
        if self._native_execute is UNSEEN:
            self._native_execute = self._make_native_execute(settings, fallback)
        return self._native_execute

    def _make_native_execute(self, settings: config.Config, fallback: Callable[..., list]
                             ) -> Callable[..., list] | None:
        tensors, plan = getattr(self.matches, "tensors", ()), self.plan
        if not tensors or self.matches.scalars or self._needs_lock() or \
                any(where != "buffer" for where, _ in plan.returned):
            return None
        api = torch_api()
        if api is None or api.api.stream is None:
            return None
        outputs = [_torch_output(api, allocate, tensors[0][5]) for allocate in plan.allocations]
        if any(output is None for output in outputs):
            return None
        check_of = {position: k for k, (position, *_) in enumerate(tensors)}
        slots = [(slot, check_of[position]) for slot, position, _ in plan.input_pointers] + \
                [(slot, len(tensors) + n) for slot, n in plan.buffer_pointers]
        failed = _calling_weakly(weakref.WeakMethod(self._native_failed))
        conditions = Conditions(settings, ctypes.addressof(OPEN_RECORDINGS), self.device.driver_calls.get_context,
                                self.device.context, fallback, failed)
        try:
            return TorchCall(api, self.matches.count, tensors, outputs, [n for _, n in plan.returned],
                             self.launch_all, self.address, slots, self.device.index, conditions).call
        except Exception as error:  # a JIT failure: the Python call runs it
            host_jit.fall_back("the native call on torch tensors", error)
            return None

    def _native_failed(self, code: int) -> None:
        if code < 0:
            raise RuntimeError(f"braze internal error: the patched launch of {self.launches[0].record[0]} "
                               "was given the wrong number of pointers")
        x = self.launches[code >> 16]
        cuda.raise_launch_error(code & 0xFFFF, x.record[1], (x.grid, 1, 1), (x.block, 1, 1))

    def _note_launches(self) -> None:
        for x in self.launches:
            note_launch(RecordedLaunch(*x.record))

    def _launch(self, stream: int) -> None:
        """The launches one by one through ctypes (the host JIT is off or failed)."""
        launch_in_order(self.launches_on(stream), stream, self.device, self.pairs)
        if recording():
            self._note_launches()


def _torch_output(api: TorchApi, allocate: Callable[[], object], device: object) -> tuple | None:
    """(sizes, strides in elements, dtype, device) of the buffer `allocate` makes, where it is
    torch.empty_strided on `device` (the inputs'); else None."""
    torch = api.torch
    if not (isinstance(allocate, functools.partial) and allocate.func is torch.empty_strided):
        return None
    sizes, strides = allocate.args
    if torch.device(allocate.keywords["device"]) != device or device.type != "cuda":
        return None
    return sizes, strides, allocate.keywords["dtype"], device


def launch_specs(launches: Sequence[PreparedLaunch]) -> list[LaunchSpec]:
    return [(x.function, x.grid, x.block, x.shared, x.params_address) for x in launches]


def _calling_weakly(method: weakref.WeakMethod) -> Callable[[int], None]:
    """`method` for a native call to call, not holding its object. A cycle from the prepared call
    through its builtin back to itself was never collected (on a GPU, about one dropped fusion in
    four kept its executor and CUDA module loaded), whatever in the builtin hides it."""
    def call(code: int) -> None:
        bound = method()
        if bound is not None:
            bound(code)
    return call


class CudaDevice(CpuDevice):
    """A fusion's device on a GPU (runtime/fusion_runtime.py): buffers from the inputs' library on
    their device, kernels on the inputs' stream, and the cached call (`CudaPreparedCall`) for
    inputs of the description a run had."""

    def allocate(self, frame: Frame, tv: TensorView, numel: int, sizes: list[int], strides: list[int],
                 zero: bool = False) -> object:
        bound = frame.bound
        view = device_arrays.allocate(bound.kind, tuple(sizes), tv.dtype, bound.device, bound.stream,
                                      *_layout(tv, numel, strides))
        if zero:  # in stream order with the launches: a graph replays it with them
            nbytes = numel * tv.dtype.itemsize if _laid_out_by_domain(tv) else view.size * view.itemsize
            # In the inputs' stream, or an open `bz.graph()`'s capture stream.
            stream = capture_stream(bound.stream, cuda.device(bound.device), (view,), f"buffer {tv.name}") \
                if recording() else bound.stream
            cuda.fill_bytes(view.ptr, 0, nbytes, stream)
        return view

    def launch(self, executor: CudaExecutor, block: np.ndarray, frame: Frame) -> None:
        executor.run(block, frame.bindings, frame.bound.stream, [v for v in frame.values if v is not None])

    def copy_into(self, target: object, source: object) -> None:
        device_arrays.copy_into(target, source, lambda stream: capture_stream(
            stream, cuda.device(target.device), (target, source), "an output written back into its input"))

    def can_prepare(self, frame: Frame, instructions: Sequence[object]) -> bool:
        return not config.enabled("poison_outputs")

    def allocator(self, frame: Frame, instruction: Allocate) -> Callable[[], object]:
        bound, tv = frame.bound, instruction.tv
        numel, sizes, strides = instruction.extents(frame)
        return device_arrays.allocator(bound.kind, sizes, tv.dtype, bound.device, bound.stream,
                                       *_layout(tv, numel, strides))

    def prepared_call(self, executor: CudaExecutor, frame: Frame, plan: CallPlan, kind: ArrayKind,
                      first_array: int) -> CudaPreparedCall:
        # The stream is the first array input's library's, as binding picks it. Grid reductions take
        # the workspace of the stream they run on: such a call's launches are made again per stream.
        stream = frame.bound.stream
        per_stream = functools.partial(prepared_launches, executor, dict(frame.bindings)) \
            if executor.workspaces is not None else None
        return CudaPreparedCall(plan, prepared_launches(executor, frame.bindings, stream), kind,
                                first_array, executor.device, stream, per_stream, executor.pairs)

    def copies_back(self, frame: Frame, instructions: Sequence[object], buffer_of: dict[int, int],
                    kinds: list) -> list[tuple] | None:
        """(input position, its pointer reader, buffer, bytes) of each in-place output; None when a
        layout differs."""
        copies = []
        for instruction in instructions:
            if isinstance(instruction, Alias) and instruction.view is None:
                target, tv = frame.values[instruction.source], instruction.out
                strides = device_arrays.dense_strides(target.shape, tv.dtype.itemsize, tv.stride_order)
                if tuple(strides) != tuple(target.strides) and target.size > 1:
                    return None
                nbytes = device_arrays.span_bytes(target.shape, target.strides, target.itemsize)
                copies.append((instruction.source, kinds[instruction.source].pointer, buffer_of[instruction.written],
                               nbytes))
        return copies


def prepared_launches(executor: CudaExecutor, bindings: dict[str, int], stream: int) -> list[PreparedLaunch]:
    """The launches of `executor`'s tasks for the extents in `bindings` on `stream`, each with its
    parameters (the argument block's address, set by the prepared call, then its launch scalars)."""
    workspace = executor.workspace(stream, bindings)
    launches = []
    for planned in executor.plan(bindings, workspace):
        scalars = (ctypes.c_int64 * 4)(*planned.scalars)
        params = (ctypes.c_void_p * 5)(0, *[ctypes.addressof(scalars) + 8 * n for n in range(4)])
        block = planned.block or executor.block
        record = (executor.kernel.name, planned.function_name, planned.begin, planned.end, planned.grid)
        launches.append(PreparedLaunch(int(planned.function), planned.grid, block, planned.shared, params, scalars,
                                       record, workspace))
    return launches


def _layout(tv: TensorView, numel: int, strides: Sequence[int]) -> tuple:
    """(stride order, layout) of `tv`'s buffer for device_arrays.allocate and allocator."""
    return (None, (numel, tuple(strides))) if _laid_out_by_domain(tv) else (tv.stride_order, None)


def _laid_out_by_domain(tv: TensorView) -> bool:
    """An allocation domain of splits and merges: the host program's sizes and strides lay it out
    (a plain stride order is a dense layout the array libraries make themselves)."""
    return not tv.has_default_allocation and tv.stride_order is None


# --- the executor of a fusion's kernel ---------------------------------------------------------------
class LoadedKernel:
    """A compiled kernel (a fusion's or a loop kernel's) loaded on one device for launches of `block`
    threads a block (by default the kernel's own); a kernel whose functions cannot launch that many
    is recompiled for them (`CudaCompiledKernel.for_block`)."""

    def __init__(self, compiled: CudaCompiledKernel, device: cuda.Device, block: int | None = None) -> None:
        self.block = block or compiled.block_size
        self.compiled, self.device = compiled.for_block(device, self.block), device
        self.kernel = self.compiled.kernel
        self.module = self.compiled.module(device)


class CudaExecutor(LoadedKernel):
    """Launches every task of one compiled kernel, in order, on one device and stream."""

    def __init__(self, compiled: CudaCompiledKernel, device: cuda.Device, block: int | None = None) -> None:
        super().__init__(compiled, device, block)
        compiled, module = self.compiled, self.module
        self.entries = weakref.WeakValueDictionary()  # per input description, its prepared call (runtime/fast_call.py)
        tasks = task_launches(self.kernel, compiled.generated, module.functions)
        # The kernel recompiled for wider blocks, an executor by block, made on a first plan that
        # takes one (LaunchPlanner._plan_own_or_wide); none for one of those itself.
        wider = functools.partial(_wide_planner, compiled, device, {}, threading.Lock()) if block is None else None
        self.planner = LaunchPlanner(tasks, self.block, device.sm_count, module.resident_blocks, wider)
        for task in tasks:
            if task.cache_itemsizes or task.schedule.kind == "inner_outer":
                for name in filter(None, (task.name, task.warp_name, task.narrow_warp_name)):
                    module.allow_shared_memory(name, ROW_CACHE_BYTES)
        self.layout = ArgLayout.of(self.kernel.params)
        # Grid reductions' partial results (LaunchPlanner.partial_bytes) and a finished-block counter
        # per strip, in the workspace of the stream a launch goes to (runtime/cuda_resources.py).
        self.workspaces = stream_workspaces(device, 4 * self.planner.max_grid) if self.planner.partial_bytes else None
        # Inner-outer pairs: their two launches go to a stream under its workspace's pair lock.
        self.pairs = any(task.schedule.kind == "inner_outer" for task in tasks)

    def workspace(self, stream: int, scalars: dict[str, int] | None = None) -> Workspace | None:
        """The workspace the grid reductions of launches on `stream` take (None: the kernel has none),
        with room for the inner-outer tasks' partial results at the extents in `scalars`."""
        if self.workspaces is None:
            return None
        return self.workspaces.get(stream, self.planner.partial_bytes, self.planner.inner_outer_bytes(scalars or {}))

    def run(self, block: np.ndarray, scalars: dict[str, int], stream: int, arguments: Sequence[object] = ()) -> None:
        """Launches every task on `stream` (an open `bz.graph()`'s capture stream instead, which then
        keeps `arguments`, what the block points into, alive). The launches are the prepared call's
        (each with parameters of its own: threads racing on a first call launch at once), into the
        workspace of `stream`, where a graph replays."""
        launches = prepared_launches(self, scalars, stream)
        for x in launches:
            x.params[0] = block.ctypes.data
        record = recording()
        if record:
            stream = capture_stream(stream, self.device, (*arguments, self, self.workspace(stream, scalars)),
                                    f"fusion kernel {self.kernel.name!r}")

        def launch(x: PreparedLaunch) -> None:
            if config.current.dump:  # launch_params: plan() wrote each launch
                dump_kernel_args(RecordedLaunch(*x.record), block, self.layout.slots)
            if record:  # noted, and timed with CUDA events when profiling
                recorded_launch(RecordedLaunch(*x.record), stream, functools.partial(x.launch, stream),
                                functools.partial(self._argument_bytes, block))
            else:
                x.launch(stream)

        launch_in_order(launches, stream, self.device, self.pairs, launch)

    def plan(self, scalars: dict[str, int], workspace: Workspace | None) -> list[PlannedLaunch]:
        """Each task's launch for the extents in `scalars` (LaunchPlanner.plan), grid reductions and
        inner-outer pairs into `workspace` (`workspace(stream, scalars)` of the stream they go to)."""
        if workspace is None:
            return self.planner.plan(scalars)
        return self.planner.plan(scalars, workspace.pointers, workspace.pair_pointer)

    def _argument_bytes(self, block: np.ndarray) -> int:
        """Bytes of the kernel's array arguments (extents from the argument block)."""
        total = 0
        for p in self.kernel.params:
            if isinstance(p, k.ArrayParam):
                at = self.layout.slots[p.name]
                total += int(np.prod(block[at + 1: at + 1 + p.ndim])) * p.dtype.itemsize
        return total


def _wide_planner(compiled: CudaCompiledKernel, device: cuda.Device, executors: dict[int, CudaExecutor],
                  lock: threading.Lock, block: int) -> LaunchPlanner:
    """The planner of `compiled` recompiled for blocks of `block` threads on `device`: its executor's,
    made once into `executors`. (Not a method of the executor asking: its planner would then hold
    it, a cycle that keeps the loaded modules until the cycle collector runs.)"""
    with lock:
        wide = executors.get(block) or executors.setdefault(block, CudaExecutor(compiled, device, block))
    return wide.planner


# --- a user's own CUDA --------------------------------------------------------------------------
class RtcKernel:
    """A user's CUDA C++ `source`, compiled with NVRTC for the device, and its `__global__` `name`
    (declared `extern "C"`). Arguments may be GPU arrays (passed as pointers), ints (as int64 unless
    the kernel is told otherwise) and floats (as float32)."""

    def __init__(self, source: str, name: str, device: int = 0, options: tuple[str, ...] = ()) -> None:
        self.source, self.name, self.options = source, name, tuple(options)
        self.device = cuda.device(device)
        key = disk_cache.cache_key(source=source, name=name, arch=self.device.arch, options=self.options,
                                   toolchain=nvrtc.toolchain_id())
        binary = disk_cache.load(key, elf.cubin_check((name,)))
        if binary is None:
            binary = nvrtc.compile_cubin(source, name, self.device.arch, self.options)
            note_compile(name)
            disk_cache.store(key, binary)
        self.module = cuda.loaded_module(self.device, binary, (name,))
        self.function = self.module.functions[name]
        self.parameter_sizes = cuda.parameter_sizes(self.function)

    def launch(self, grid, block, args, shared_mem: int = 0, stream: int | None = None) -> None:
        sizes = self.parameter_sizes
        if sizes is not None and len(args) != len(sizes):
            raise InputError(f"RtcKernel {self.name}: expected {len(sizes)} arguments, got {len(args)}")
        holders = [_argument(a, self.name, i, sizes[i] if sizes else 0) for i, a in enumerate(args)]
        pointers = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
        with self.device.current():
            cuda.launch(self.function, _dim3(grid), _dim3(block), ctypes.addressof(pointers),
                        _stream_of(args) if stream is None else int(stream), shared_mem, self.name)


def _dim3(value) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    return tuple(int(d) for d in (*dims, 1, 1, 1)[:3])


_INTS = {1: ctypes.c_int8, 2: ctypes.c_int16, 4: ctypes.c_int32, 8: ctypes.c_int64}


def _argument(value, kernel: str, position: int, size: int):
    """A ctypes holder of one argument, sized as the kernel's parameter (4-byte ints, 8-byte
    doubles); of unknown `size` (0), an int64 or a float32."""
    if device_arrays.is_device_array(value):
        return ctypes.c_void_p(device_arrays.as_device_view(value, f"{kernel} argument {position}").ptr)
    if isinstance(value, (bool, np.bool_)):
        return ctypes.c_bool(bool(value))
    if isinstance(value, (int, np.integer)):
        return _INTS.get(size, ctypes.c_int64)(int(value))
    if isinstance(value, (float, np.floating)):
        return ctypes.c_double(float(value)) if size == 8 else ctypes.c_float(float(value))
    if isinstance(value, np.generic):
        return np.ctypeslib.as_ctypes(np.asarray(value).reshape(1))[0]
    raise InputError(f"RtcKernel {kernel} argument {position}: expected a GPU array, int or float, "
                     f"got {type(value).__name__}")


def _stream_of(args) -> int:
    for a in args:
        if device_arrays.is_device_array(a):
            return device_arrays.as_device_view(a, "argument").stream
    return 0
