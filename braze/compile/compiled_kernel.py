"""CompiledKernel: Kernel IR, its source and its binary for one set of compile params.

It has no execution state: executors hold the launch state. `recompile` gives a new
CompiledKernel for other params.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from braze import config
from braze.codegen import llvm as llvm_codegen
from braze.compile import disk_cache, elf, llvm_toolchain
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.record import note_compile


@dataclass(frozen=True)
class CompileParams:
    """What a compilation depends on besides the kernel itself."""

    index_type: str = "int64"
    block_size: int | None = None
    max_registers: int | None = None
    arch: str = "host"
    fast_math: bool = False


class CompilesOnce:
    """A compiled kernel's `compile()`: the binary is filled once, under the kernel's own lock,
    whichever of the threads racing on a first call asks first; later calls take no lock."""

    binary: bytes | None
    _lock: threading.Lock

    def compile(self):
        """Fills `binary` from the disk cache or by compiling, once; returns the kernel."""
        if self.binary is None:
            with self._lock:
                if self.binary is None:
                    self._compile()
        return self

    def _compile(self) -> None:
        raise NotImplementedError


class CompiledKernel(CompilesOnce):
    """One kernel compiled for the CPU (LLVM); `functions[i]` runs task i over [lo, hi).

    Threads share it: it compiles and loads once, under its own lock, and its loaded code lives as
    long as it does, so a function pointer handed out stays valid while anything holds the kernel.
    """

    def __init__(self, kernel: k.Kernel, params: CompileParams | None = None) -> None:
        self.kernel = kernel
        params = params or CompileParams(fast_math=config.enabled("fast_math"))
        self.params = dataclasses.replace(params, index_type=kernel.index_type.name)  # the Kernel IR decides
        self.source = llvm_codegen.generate(kernel, self.params.fast_math)
        self.binary: bytes | None = None
        self.from_disk = False
        self._loaded: llvm_toolchain.LoadedObject | None = None
        self._lock = threading.Lock()

    @property
    def cache_key(self) -> str:
        return disk_cache.cache_key(source=self.source, params=self.params, toolchain=llvm_toolchain.toolchain_id(),
                                    braze=disk_cache.braze_source_hash())

    def _compile(self) -> None:
        if config.dumping("kernel_ir"):
            config.dump("kernel_ir", kernel_text(self.kernel))
        cached = disk_cache.load(self.cache_key, elf.host_object_check(t.name for t in self.kernel.tasks))
        if cached is not None:
            self.from_disk, self.binary = True, cached
            return
        binary, optimized = llvm_toolchain.compile_object(self.source, self.kernel.name)
        if config.dumping("llvm_ir"):
            config.dump("llvm_ir", optimized)
        note_compile(self.kernel.name)
        disk_cache.store(self.cache_key, binary)
        self.binary = binary  # last: a thread that sees it set skips the lock

    def recompile(self, **changes) -> CompiledKernel:
        """A new CompiledKernel of the same Kernel IR with some compile params changed."""
        return CompiledKernel(self.kernel, dataclasses.replace(self.params, **changes)).compile()

    @property
    def functions(self) -> list:
        if self._loaded is None:
            self.compile()
            with self._lock:
                if self._loaded is None:
                    self._loaded = llvm_toolchain.LoadedObject(self.binary, [t.name for t in self.kernel.tasks])
        return [self._loaded.functions[t.name] for t in self.kernel.tasks]
