"""A `@bz.kernel`'s generated CUDA run on the CPU, so the GPU code of loop kernels (grid-stride
loops, atomics, local arrays, merged tasks) is checked where NVRTC alone checks only that it compiles.

The kernel goes the GPU path's way: the signature's Kernel IR (frontend/kernel.py), task fusion and
the CUDA kernel and launcher of engine.loop_kernel_entry, for a small fake GPU (tests/cuda_on_cpu.py's
FakeDevice); the launcher packs the argument block and plans each task's grid. Its functions are
compiled with g++ against tests/cuda_on_cpu.h and launched with every thread of every block an OS
thread, all started together, each store yielding the core before it writes (`interleaved`), so
threads that race on a GPU race here too.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from contextlib import contextmanager
from functools import cache
from unittest import mock

import numpy as np
from cuda_on_cpu import FakeDevice, FakeModule, _translation_unit, available, shared_library  # noqa: F401

from braze import engine
from braze.codegen.cuda import with_prelude
from braze.compile import cuda_driver
from braze.compile.cuda_kernel import CudaLoopKernel
from braze.errors import KernelAssertionError
from braze.frontend.kernel import KernelFunction
from braze.runtime.backends.cuda_loop_kernels import CudaKernelLauncher


@contextmanager
def _fake_gpu(device: FakeDevice, resident: int):
    """cuda_driver.device answers `device`, and a loop kernel's module is a FakeModule (no NVRTC)."""
    def module(compiled: CudaLoopKernel, _device) -> FakeModule:
        return FakeModule(tuple(compiled.generated.functions), resident)

    with mock.patch.object(cuda_driver, "device", lambda index: device), \
            mock.patch.object(CudaLoopKernel, "module", module):
        yield


def launcher(kernel: KernelFunction, args: Sequence[object], sm_count: int = 2,
             resident: int = 1) -> tuple[CudaKernelLauncher, list[np.ndarray], list]:
    """The CUDA launcher a GPU call (kernel_gpu.bind_and_run) would make for `args` (host arrays stand
    for GPU ones: the CUDA depends on dtypes, ranks, layouts and overlap only) on a fake GPU of
    `sm_count` SMs holding `resident` blocks each, made once a signature; the arrays and scalars bound."""
    if kernel.vector_params:
        args = kernel._flat_arguments(args)
    arrays, scalars, key = kernel._bind(args)
    made = _LAUNCHERS.get((kernel, key, sm_count, resident))
    if made is None:
        ir, array_params, scalar_params, fuse, overlapping = kernel.signature_ir(key)
        device = FakeDevice(sm_count=sm_count)
        with _fake_gpu(device, resident):
            entry = engine.loop_kernel_entry(ir, array_params, scalar_params, fuse=fuse, device_index=device.index,
                                             restrict=not overlapping)
        made = _LAUNCHERS[kernel, key, sm_count, resident] = entry.launcher
    return made, arrays, scalars


_LAUNCHERS: dict[tuple, CudaKernelLauncher] = {}


# `x[index] = value;`, a line of its own in every store the loop code generator writes.
_STORE = re.compile(r"^( *)(\w+\[[^=]*\]) = (.+);$", re.MULTILINE)


def interleaved(body: str) -> str:
    """`body` with every store made `value; yield the core; store`: two threads' plain read-modify-writes
    of one element, a few instructions each, then overlap as they do on a GPU instead of almost never
    (a few OS threads a core, each running its indices in microseconds)."""
    return _STORE.sub(r"\1{ const auto bz_value = \3; std::this_thread::yield(); \2 = bz_value; }", body)


@cache
def _library(body: str, functions: tuple[str, ...]) -> ctypes.CDLL:
    """The task functions as a shared library, each launched by `run_<name>(args, grid, block, started)`."""
    unit = _translation_unit(with_prelude(interleaved(body)))
    launchers = []
    for name in functions:
        slots = re.search(rf"\n{name}\(const BzArgs<(\d+)> bz_args\)", unit).group(1)
        launchers.append(f'''
extern "C" void run_{name}(const long long* args, long long grid, long long block, long long started) {{
  BzArgs<{slots}> a;
  std::memcpy(a.s, args, sizeof(a.s));
  bz_launch_all(grid, block, started, [&]() {{ {name}(a); }});
}}''')
    return shared_library(f"{unit}\n" + "\n".join(launchers) + "\n", functions, 3, prefix="loop-")


def run_on_cpu(kernel: KernelFunction, *args: object, sm_count: int = 2, resident: int = 1) -> list[tuple]:
    """Runs `kernel`'s CUDA on the CPU on host `args` (its arrays updated in place, as a call updates
    them); returns the launches: (function, grid, threads) each. A failed debug check raises
    KernelAssertionError, as the GPU call does."""
    planned, arrays, scalars = launcher(kernel, args, sm_count, resident)
    compiled = planned.compiled
    library = _library(compiled.generated.body, tuple(compiled.generated.functions))
    status = np.zeros(1, np.int64)
    arguments = planned.arguments
    block = arguments.block(arrays, [a.ctypes.data for a in arrays], status.ctypes.data)
    for (slot, pack), value in zip(arguments.scalar_slots, scalars):
        block[slot] = pack(value)
    packed = np.array([word & (2**64 - 1) for word in block], np.uint64)
    launches = []
    for launch in planned.plan(planned.bounds([a.shape for a in arrays], scalars)):
        if not launch.grid:
            continue
        launches.append((launch.task.function, launch.grid, launch.threads))
        # A thread whose first index is past the task's end runs no iteration of its grid-stride loop:
        # only the others are started (OS threads are slow to make).
        started = min(launch.grid * launch.threads, launch.end - launch.begin)
        getattr(library, f"run_{launch.task.function}")(packed.ctypes.data, launch.grid, launch.threads, started)
        if status[0]:
            raise KernelAssertionError(f"kernel {planned.kernel.name!r}: {arguments.messages[status[0] - 1]}")
    return launches
