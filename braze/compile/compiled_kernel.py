"""CompiledKernel: Kernel IR, its source and its binary for one set of compile params.

It has no execution state: executors hold the launch state. `recompile` gives a new
CompiledKernel for other params.

Kernels may compile ahead of their first call, on worker threads, many at once (`compile_ahead`).
NVRTC and LLVM release the GIL while they compile, so the kernels of a program compile side by side
on as many cores as there are. The torch backend knows every region of a graph when the graph is
compiled (frontend/torch/backend.py): it starts their kernels here, and the first call of each waits
only for its own. A kernel still compiles once: a worker and a first call meet on the kernel's own
lock (`CompilesOnce`), and a call that comes before any worker took the kernel compiles it itself,
the worker then finding it done.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

from braze import config
from braze.codegen import llvm as llvm_codegen
from braze.compile import disk_cache, elf, llvm_toolchain
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.record import Recording, active_recordings, note_compile, push_recording


@dataclass(frozen=True)
class CompileParams:
    """What a compilation depends on besides the kernel itself."""

    index_type: str = "int64"
    block_size: int | None = None
    max_registers: int | None = None
    arch: str = "host"
    fast_math: bool = False
    reverse_order: bool = False  # the CPU's parallel loops run their indices from last to first (a race check)


def host_params() -> CompileParams:
    """The CPU's compile params as the knobs set them."""
    return CompileParams(fast_math=config.enabled("fast_math"), reverse_order=config.enabled("reverse_parallel"))


class CompilesOnce:
    """A compiled kernel's `compile()`: the binary is filled once, under the kernel's own lock,
    whichever of the threads racing on a first call asks first; later calls take no lock."""

    def __init__(self) -> None:
        self.binary: bytes | tuple[bytes, ...] | None = None  # a CUDA kernel split in programs: one a program
        self.from_disk = False
        self._lock = threading.Lock()

    def compile(self):
        """Fills `binary` from the disk cache or by compiling, once; returns the kernel."""
        if self.binary is None:
            with self._lock:
                if self.binary is None:
                    self._compile()
        return self

    def _compile(self) -> None:
        raise NotImplementedError


def worker_count() -> int:
    """The cores this process may run on: the compile pool's workers, and the CPU runtime's."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="braze-compile")


if hasattr(os, "register_at_fork"):  # a forked child has none of the pool's threads: it makes its own
    os.register_at_fork(after_in_child=_pool.cache_clear)


def compile_ahead(kernel: CompilesOnce) -> Future:
    """Starts compiling `kernel` on a worker thread; the future gives the kernel. A failure is left
    to the first call, which compiles again and reports it."""
    return _pool().submit(_compile, kernel, config.current, tuple(active_recordings()))


def _compile(kernel: CompilesOnce, knobs: config.Config, recordings: tuple[Recording, ...]) -> CompilesOnce:
    if config.current is not knobs:  # the knobs changed since (a scope ended): the first call compiles under its own
        return kernel
    with ExitStack() as stack:  # the compile is noted where the caller was recording
        for recording in recordings:
            stack.enter_context(push_recording(recording))
        return kernel.compile()


class CompiledKernel(CompilesOnce):
    """One kernel compiled for the CPU (LLVM); `functions[i]` runs task i over [lo, hi).

    Threads share it: it compiles and loads once, under its own lock, and its loaded code lives as
    long as it does, so a function pointer handed out stays valid while anything holds the kernel.
    """

    def __init__(self, kernel: k.Kernel, params: CompileParams | None = None) -> None:
        super().__init__()
        self.kernel = kernel
        params = params or host_params()
        self.params = dataclasses.replace(params, index_type=kernel.index_type.name)  # the Kernel IR decides
        self.source = llvm_codegen.generate(kernel, self.params.fast_math, self.params.reverse_order)
        self._loaded: llvm_toolchain.LoadedObject | None = None

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
