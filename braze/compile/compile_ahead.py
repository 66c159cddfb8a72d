"""Kernels compiled ahead of their first call, on worker threads, many at once.

NVRTC and LLVM release the GIL while they compile (a Python thread keeps running beside an NVRTC
compile), so the kernels of a program compile side by side on as many cores as there are. The torch
backend knows every region of a graph when the graph is compiled (frontend/torch/backend.py): it
starts their kernels here, and the first call of each waits only for its own. A kernel still
compiles once: a worker and a first call meet on the kernel's own lock (`CompilesOnce`), and a call
that comes before any worker took the kernel compiles it itself, the worker then finding it done.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack

from braze import config
from braze.compile.compiled_kernel import CompilesOnce
from braze.record import Recording, active_recordings, push_recording


def worker_count() -> int:
    """The cores this process may run on: the compile pool's workers, and the CPU runtime's."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="braze-compile")


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
