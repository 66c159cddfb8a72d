"""A CUDA kernel's source as several NVRTC programs, compiled side by side and loaded as one.

NVRTC compiles a translation unit on one core: a kernel of 124 tasks (GPT-2-small's parameter
gradients, 350 KB of CUDA) took 14 s alone on a 2-core machine, while the other kernels of the graph
had long finished. Its tasks are independent functions, so the kernel's source splits into programs of a
few tasks each (codegen/cuda.py, CudaSource.programs), each compiled on a worker thread of the
compile-ahead pool (compile/compile_ahead.py) and loaded as a module of its own; `ModuleGroup`
answers for them as the one module of the kernel. `BRAZE_DISABLE=split_programs` keeps one program.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from braze import config
from braze.codegen.cuda import CudaProgram, CudaSource
from braze.compile import disk_cache, elf, nvrtc
from braze.compile.compile_ahead import compile_ahead
from braze.compile.compiled_kernel import CompileParams, CompilesOnce

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
        self.program, self.name, self.params, self.options = program, name, params, options
        self.binary: bytes | None = None
        self.from_disk = False
        self._lock = threading.Lock()

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
