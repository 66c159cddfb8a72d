"""The CUDA side of the runtime objects (docs/architecture.md, "Runtime"): a CompiledKernel through NVRTC, the
executor that launches its tasks as codegen/cuda_launch.py's LaunchPlanner plans them, and RtcKernel for a
user's own CUDA source.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from braze import config
from braze.codegen import cuda as cuda_codegen
from braze.codegen.cuda_launch import ROW_CACHE_BYTES, LaunchPlanner, PlannedLaunch, task_launches
from braze.compile import disk_cache, elf
from braze.errors import InputError
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.runtime import cuda_driver as cuda
from braze.runtime import nvrtc
from braze.runtime.backends.cuda import PreparedLaunch, launch_in_order, prepared_launches, recorded_launch
from braze.runtime.compiled_kernel import CompileParams, CompilesOnce
from braze.runtime.cuda_programs import ModuleGroup, ProgramCompile, compile_side_by_side, kernel_programs
from braze.runtime.cuda_resources import Workspace, loaded_module, stream_workspaces
from braze.runtime.graph import capture_stream
from braze.runtime.record import RecordedLaunch, dump_kernel_args, note_compile, recording

_UNPLANNED = object()  # CudaCompiledKernel.for_block: no kernel chosen yet for that device and block
REGISTERS_PER_SM = 65536
MIN_REGISTERS = 16  # the fewest registers a thread a recompile asks for (ptxas raises a lower cap to its minimum)


class CudaCompiledKernel(CompilesOnce):
    """One kernel compiled to a cubin for one architecture; no execution state. Threads share it:
    it compiles once and loads once per device, under its own lock."""

    def __init__(self, kernel: k.Kernel, params: CompileParams, restrict: bool = False) -> None:
        self.kernel, self.restrict = kernel, restrict
        self.params = dataclasses.replace(params, index_type=kernel.index_type.name)  # the Kernel IR decides
        self.generated = self.generate()
        self.source = self.generated.text
        self.programs = kernel_programs(self.generated)  # one, or several compiled side by side
        # The cubin; one per program (a tuple) where the kernel is several.
        self.binary: bytes | tuple[bytes, ...] | None = None
        self.from_disk = False
        self._modules: dict[int, cuda.Module] = {}
        # Per (device index, block): this kernel where its functions launch blocks of that many
        # threads, else its recompile for them (`for_block`); the recompiles live as long as it does.
        self._for_block: dict[tuple[int, int], CudaCompiledKernel | None] = {}
        self._lock = threading.Lock()
        self._for_block_lock = threading.Lock()  # (not `_lock`: `module` takes that one)

    def generate(self):
        """The generated source (a CudaSource: `text`, `body`, `functions`)."""
        return cuda_codegen.generate(self.kernel, self.block_size, self.restrict)

    @property
    def cache_key(self) -> str:
        """The disk cache's key of the whole source: its cubin's, where the kernel is one program
        (a split kernel's programs each have their own: cuda_programs.ProgramCompile)."""
        return disk_cache.cache_key(source=self.source, params=self.params, toolchain=nvrtc.toolchain_id(),
                                    braze=disk_cache.braze_source_hash())

    def options(self) -> tuple[str, ...]:
        opts = ("--use_fast_math",) if self.params.fast_math else ()
        return opts + ((f"--maxrregcount={self.params.max_registers}",) if self.params.max_registers else ())

    def _compile(self) -> None:
        if config.dumping("kernel_ir"):
            config.dump("kernel_ir", kernel_text(self.kernel))
        if config.dumping("cuda_kernel"):
            config.dump("cuda_kernel", self.generated.body)
        if config.dumping("cuda_to_file"):
            self._dump_to_file()
        units = self._program_compiles()
        compile_side_by_side(units)
        self.from_disk = all(unit.from_disk for unit in units)
        if not self.from_disk:
            if config.dumping("ptx"):
                ptx = nvrtc.compile_ptx(self.source, self.kernel.name, self.params.arch, self.options())
                config.dump("ptx", ptx.rstrip(b"\0").decode())
            note_compile(self.kernel.name)
        binaries = tuple(unit.binary for unit in units)
        self.binary = binaries[0] if len(binaries) == 1 else binaries  # last: a thread that sees it set skips the lock

    def _program_compiles(self) -> list[ProgramCompile]:
        """A compile of each program; the one program of a kernel that is one goes by the kernel's
        name (and its cache key is the kernel's), those of a kernel split by `<kernel>_p<n>`."""
        if len(self.programs) == 1:
            return [ProgramCompile(self.programs[0], self.kernel.name, self.params, self.options())]
        return [ProgramCompile(program, f"{self.kernel.name}_p{n}", self.params, self.options())
                for n, program in enumerate(self.programs)]

    def _dump_to_file(self) -> None:
        """Writes the source to `$BRAZE_CACHE_DIR/dump/<kernel>.cu` for each kernel: new files, never
        through a link someone planted there."""
        for name in self.generated.functions:
            if disk_cache.write_private_file("dump", f"{name}.cu", self.source) is None:
                config.diagnostic(f"cuda_to_file: could not write {name}.cu in {config.current.cache_dir / 'dump'}")

    def recompile(self, **changes) -> CudaCompiledKernel:
        return type(self)(self.kernel, dataclasses.replace(self.params, **changes), self.restrict).compile()

    @property
    def block_size(self) -> int:
        """The threads a block of this kernel's launches has (its launch bounds)."""
        return self.params.block_size or cuda_codegen.DEFAULT_BLOCK_SIZE

    def for_block(self, device: cuda.Device, block: int) -> CudaCompiledKernel:
        """This kernel where every function of it launches blocks of `block` threads on `device`,
        else its recompile (`recompile`) for them: new launch bounds for a block other than the one
        it was compiled for, fewer registers a thread where a function's registers leave fewer
        threads a block. The recompile is made once and kept beside this kernel: both stay valid."""
        key = (device.index, block)
        kernel = self._for_block.get(key, _UNPLANNED)
        if kernel is _UNPLANNED:
            with self._for_block_lock:
                kernel = self._for_block.get(key, _UNPLANNED)
                if kernel is _UNPLANNED:
                    recompiled = self._recompiled(self._params_for_block(device, block))
                    # None stands for this kernel: a reference to itself would keep its modules
                    # loaded until the cycle collector runs, after its last fusion is dropped.
                    kernel = self._for_block[key] = None if recompiled is self else recompiled
        return self if kernel is None else kernel

    def _recompiled(self, params: CompileParams) -> CudaCompiledKernel:
        """This kernel for `params`: itself, or its recompile for them, made once (devices alike share it)."""
        if params == self.params:
            return self
        same = next((kernel for kernel in self._for_block.values() if kernel is not None and kernel.params == params),
                    None)
        return same or self.recompile(block_size=params.block_size, max_registers=params.max_registers)

    def _params_for_block(self, device: cuda.Device, block: int) -> CompileParams:
        if block != self.block_size:
            registers = registers_for_block(block)
            if self.params.max_registers:
                registers = min(registers, self.params.max_registers)
            return dataclasses.replace(self.params, block_size=block, max_registers=registers)
        module = self.module(device)
        limits = {name: module.max_threads(name) for name in module.functions}
        short = [name for name, threads in limits.items() if threads < block]
        if not short:
            return self.params
        # The registers a function used let `limits[name]` threads a block: fewer in proportion let `block`.
        registers = min(module.registers(name) * limits[name] // block for name in short)
        registers = max(MIN_REGISTERS, min(registers_for_block(block), registers // 8 * 8))
        return dataclasses.replace(self.params, max_registers=registers)

    def module(self, device: cuda.Device) -> cuda.Module:
        """The kernel loaded on `device`, loaded once; it stays loaded while this kernel, or anything
        else holding the module (executors, prepared calls, graphs), lives."""
        module = self._modules.get(device.index)
        if module is None:
            self.compile()
            with self._lock:
                module = self._modules.get(device.index)
                if module is None:
                    module = self._modules[device.index] = self._load(device)
        return module

    def _load(self, device: cuda.Device) -> cuda.Module | ModuleGroup:
        """The compiled programs loaded on `device`: one module, or a group of one a program."""
        if len(self.programs) == 1:
            return loaded_module(device, self.binary, tuple(self.generated.functions))
        return ModuleGroup([loaded_module(device, binary, program.functions)
                            for binary, program in zip(self.binary, self.programs, strict=True)])


class CudaExecutor:
    """Launches every task of one compiled kernel, in order, on one device and stream."""

    def __init__(self, compiled: CudaCompiledKernel, device: cuda.Device, block: int | None = None) -> None:
        """`block`: the threads a block of its launches has (by default the kernel's own); a kernel
        whose functions cannot launch that many is recompiled for them (`for_block`)."""
        self.block = block or compiled.block_size
        compiled = compiled.for_block(device, self.block)
        self.compiled, self.device = compiled, device
        self.kernel = compiled.kernel
        self.entries = weakref.WeakValueDictionary()  # per input description, its prepared call (runtime/fast_call.py)
        module = self.module = compiled.module(device)
        tasks = task_launches(self.kernel, compiled.generated, module.functions)
        # The kernel recompiled for wider blocks, an executor by block, made on a first plan that
        # takes one (LaunchPlanner._plan_own_or_wide); none for one of those itself.
        wider = functools.partial(_wide_planner, compiled, device, {}, threading.Lock()) if block is None else None
        self.planner = LaunchPlanner(tasks, self.block, device.sm_count, module.resident_blocks, wider)
        for task in tasks:
            if task.cache_itemsizes or task.schedule.kind == "inner_outer":
                for name in filter(None, (task.name, task.warp_name)):
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
        self.module = loaded_module(self.device, binary, (name,))
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
    from braze.runtime.device_arrays import as_device_view, is_device_array

    if is_device_array(value):
        return ctypes.c_void_p(as_device_view(value, f"{kernel} argument {position}").ptr)
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
    from braze.runtime.device_arrays import as_device_view, is_device_array

    for a in args:
        if is_device_array(a):
            return as_device_view(a, "argument").stream
    return 0


def registers_for_block(block: int) -> int:
    """Registers a thread may take so that one block of `block` threads fits on an SM (255 at most;
    a multiple of 8, the granularity registers are allocated in)."""
    return min(255, REGISTERS_PER_SM // block // 8 * 8)


@functools.cache
def default_params(device: cuda.Device) -> CompileParams:
    block = cuda_codegen.DEFAULT_BLOCK_SIZE
    return CompileParams(index_type="int64", block_size=block, max_registers=registers_for_block(block),
                         arch=device.arch, fast_math=config.enabled("fast_math"))
