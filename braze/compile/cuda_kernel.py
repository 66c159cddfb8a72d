"""A CUDA kernel compiled with NVRTC (docs/architecture.md, "Runtime"): `CudaCompiledKernel` for a
fusion's Kernel IR, `CudaLoopKernel` for a loop kernel's, each loaded once per device and recompiled
for wider blocks or fewer registers where a launch needs it.

NVRTC compiles a translation unit on one core: a kernel of 124 tasks (GPT-2-small's parameter
gradients, 350 KB of CUDA) took 14 s alone on a 2-core machine, while the other kernels of the graph
had long finished. Its tasks are independent functions, so the kernel's source splits into programs
of a few tasks each (codegen/cuda.py, CudaSource.programs), each compiled on a worker thread of the
compile-ahead pool (compile/compiled_kernel.py) and loaded as a module of its own; `ModuleGroup`
answers for them as the one module of the kernel. `BRAZE_DISABLE=split_programs` keeps one program.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from collections.abc import Sequence

from braze import config
from braze.codegen import cuda as cuda_codegen
from braze.codegen import cuda_loops
from braze.codegen.cuda import CudaProgram, CudaSource
from braze.compile import cuda_driver as cuda
from braze.compile import disk_cache, elf, nvrtc
from braze.compile.compiled_kernel import CompileParams, CompilesOnce, compile_ahead
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.record import note_compile

# Characters of functions a program holds at most (the prelude aside). GPT-2-small's 17 kernels
# (1 MB of CUDA) took 24.1 s of NVRTC one after another on a 2-core machine, 13.9 s of it the
# parameter gradients' kernel alone; as programs of 30 KB, 30 of them, 25.5 s in all and 1.6 s the
# longest (15 KB: 49 programs, 29.4 s, 1.3 s): on 16 workers about 2.3 s against 14 s. The prelude
# and headers each program parses again cost about 0.06 s.
PROGRAM_CHARS = 30_000


def kernel_programs(generated: CudaSource) -> tuple[CudaProgram, ...]:
    """The programs `generated` compiles as: one where `BRAZE_DISABLE=split_programs` says so or the
    source is small, else as many as PROGRAM_CHARS asks for."""
    return generated.programs(sys.maxsize if config.disabled("split_programs") else PROGRAM_CHARS)


class ProgramCompile(CompilesOnce):
    """One program's cubin: from the disk cache, else compiled, once, under its own lock (a worker
    thread and the kernel's compiling thread may both ask)."""

    def __init__(self, program: CudaProgram, name: str, params: CompileParams, options: tuple[str, ...]) -> None:
        super().__init__()
        self.program, self.name, self.params, self.options = program, name, params, options

    @property
    def cache_key(self) -> str:
        return disk_cache.cache_key(source=self.program.text, params=self.params, toolchain=nvrtc.toolchain_id(),
                                    braze=disk_cache.braze_source_hash())

    def _compile(self) -> None:
        key = self.cache_key
        cached = disk_cache.load(key, elf.cubin_check(self.program.functions))
        if cached is not None:
            self.from_disk, self.binary = True, cached
            return
        binary = nvrtc.compile_cubin(self.program.text, self.name, self.params.arch, self.options)
        disk_cache.store(key, binary)
        self.binary = binary  # last: a thread that sees it set skips the lock


def compile_side_by_side(units: Sequence[ProgramCompile]) -> None:
    """Compiles every unit, all but the last on the compile-ahead pool's workers while this thread
    takes them from the other end: it waits only for a unit a worker already holds, never for one
    still queued behind other work (its own thread may be one of the pool's)."""
    for unit in units[:-1]:
        compile_ahead(unit)
    for unit in reversed(units):
        unit.compile()


class ModuleGroup:
    """The modules of one kernel's programs as one module: each function is answered by the module
    that defines it. Holding the group holds every module (they unload after its last holder)."""

    def __init__(self, modules: Sequence[object]) -> None:
        self.modules = tuple(modules)
        self._module_of = {name: module for module in self.modules for name in module.functions}
        self.functions = {name: module.functions[name] for name, module in self._module_of.items()}

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        self._module_of[name].allow_shared_memory(name, nbytes)

    def resident_blocks(self, name: str, block: int, shared_mem: int) -> int:
        return self._module_of[name].resident_blocks(name, block, shared_mem)

    def max_threads(self, name: str) -> int:
        return self._module_of[name].max_threads(name)

    def registers(self, name: str) -> int:
        return self._module_of[name].registers(name)


_UNPLANNED = object()  # CudaCompiledKernel.for_block: no kernel chosen yet for that device and block
REGISTERS_PER_SM = 65536
MIN_REGISTERS = 16  # the fewest registers a thread a recompile asks for (ptxas raises a lower cap to its minimum)


class CudaCompiledKernel(CompilesOnce):
    """One kernel compiled to a cubin for one architecture; no execution state. Threads share it:
    it compiles once and loads once per device, under its own lock."""

    def __init__(self, kernel: k.Kernel, params: CompileParams, restrict: bool = False) -> None:
        super().__init__()
        self.kernel, self.restrict = kernel, restrict
        self.params = dataclasses.replace(params, index_type=kernel.index_type.name)  # the Kernel IR decides
        self.generated = self.generate()
        self.source = self.generated.text
        self.programs = kernel_programs(self.generated)  # one, or several compiled side by side
        self._modules: dict[int, cuda.Module] = {}
        # Per (device index, block): this kernel where its functions launch blocks of that many
        # threads, else its recompile for them (`for_block`); the recompiles live as long as it does.
        self._for_block: dict[tuple[int, int], CudaCompiledKernel | None] = {}
        self._for_block_lock = threading.Lock()  # (not `_lock`: `module` takes that one)

    def generate(self):
        """The generated source (a CudaSource: `text`, `body`, `functions`)."""
        return cuda_codegen.generate(self.kernel, self.block_size, self.restrict)

    @property
    def cache_key(self) -> str:
        """The disk cache's key of the whole source: its cubin's, where the kernel is one program
        (a split kernel's programs each have their own: ProgramCompile)."""
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
        split = len(self.programs) > 1
        return [ProgramCompile(program, f"{self.kernel.name}_p{n}" if split else self.kernel.name, self.params,
                               self.options()) for n, program in enumerate(self.programs)]

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
            return cuda.loaded_module(device, self.binary, tuple(self.generated.functions))
        return ModuleGroup([cuda.loaded_module(device, binary, program.functions)
                            for binary, program in zip(self.binary, self.programs, strict=True)])


def registers_for_block(block: int) -> int:
    """Registers a thread may take so that one block of `block` threads fits on an SM (255 at most;
    a multiple of 8, the granularity registers are allocated in)."""
    return min(255, REGISTERS_PER_SM // block // 8 * 8)


@functools.cache
def default_params(device: cuda.Device) -> CompileParams:
    block = cuda_codegen.DEFAULT_BLOCK_SIZE
    return CompileParams(index_type="int64", block_size=block, max_registers=registers_for_block(block),
                         arch=device.arch, fast_math=config.enabled("fast_math"))


class CudaLoopKernel(CudaCompiledKernel):
    """A loop kernel compiled for one architecture. Float arithmetic is not contracted into fused
    multiply-adds (unless fast math is on), so `+ - *` round as they do on the CPU."""

    def generate(self) -> cuda_loops.LoopCudaSource:
        return cuda_loops.generate(self.kernel, self.block_size, self.restrict)

    def options(self) -> tuple[str, ...]:
        return super().options() + (() if self.params.fast_math else ("--fmad=false",))
