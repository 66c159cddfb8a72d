"""A fusion's generated CUDA run on the CPU, for schedules whose blocks cooperate (barriers, shared
memory, partial results that a second launch folds) where NVRTC alone checks only that they compile.

The kernels are compiled with g++ against tests/cuda_on_cpu.h (each thread of a block an OS thread,
blocks in turn) and launched as the executor's LaunchPlanner (codegen/cuda_launch.py) plans them for
a small fake GPU of `sm_count` SMs, through the CPU runtime's host program (it allocates and packs
the same argument block).
Dynamic shared memory and the workspace start as 0xFF / 0xEE bytes, so a value read before it is
written shows.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import hashlib
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from unittest import mock

import numpy as np

from braze import engine
from braze.codegen.cuda import PRELUDE
from braze.compile import cuda_driver
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaCompiledKernel
from braze.runtime.backends.cuda import CudaExecutor
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import bind_inputs

HEADER = Path(__file__).with_name("cuda_on_cpu.h")
_BUILD = Path(tempfile.mkdtemp(prefix="braze-cuda-on-cpu-"))
atexit.register(shutil.rmtree, _BUILD, ignore_errors=True)


def available() -> bool:
    return shutil.which("g++") is not None


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    index: int = -1  # no real device's: the workspaces the runtime keeps by device are this one's own
    sm_count: int = 2
    arch: str = "sm_90"
    name: str = "CUDA on the CPU"

    @contextmanager
    def current(self):
        yield


class FakeModule:
    def __init__(self, names: tuple[str, ...], resident: int) -> None:
        self.functions = {name: n for n, name in enumerate(names)}
        self.resident = resident

    def resident_blocks(self, name: str, block: int, shared: int) -> int:
        return self.resident

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        pass

    def max_threads(self, name: str) -> int:
        return 1024

    def registers(self, name: str) -> int:
        return 32


class _HostMemory:
    """cuda.alloc / fill_bytes / free over host buffers (the workspace), kept until the process ends:
    the runtime keeps a device's workspaces from run to run."""

    def __init__(self) -> None:
        self.buffers: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int, stream: int = 0) -> int:
        buffer = np.full(max(nbytes, 1), 0xEE, np.uint8)
        self.buffers[buffer.ctypes.data] = buffer
        return buffer.ctypes.data

    @staticmethod
    def fill_bytes(pointer: int, byte: int, nbytes: int, stream: int = 0) -> None:
        ctypes.memset(pointer, byte, nbytes)


# The options every library is compiled with; its precompiled header must be built with the same ones.
_GXX = ["g++", "-std=c++20", "-O0", "-fPIC", "-w", f"-I{HEADER.parent}", f"-I{_BUILD}"]
_PCH_LOCK = threading.Lock()


def _prelude_header() -> str:
    """The include that stands for tests/cuda_on_cpu.h and braze's CUDA prelude, built once a process as a
    precompiled header: every kernel's source starts with both, and parsing them took half of each g++
    run. Where g++ cannot use the .gch it reads the header's text: the same program, only slower."""
    with _PCH_LOCK:  # the programs of a kernel are built on threads: the first builds it, the others wait
        return _built_prelude_header()


@cache
def _built_prelude_header() -> str:
    header = _BUILD / "bz_prelude.h"
    header.write_text(f'#include "{HEADER.name}"\n{PRELUDE}')
    subprocess.run([*_GXX, "-x", "c++-header", str(header), "-o", f"{header}.gch"], check=True)
    return f'#include "{header.name}"\n'


# A cast of an address to a vector type's pointer in a kernel: the vector accesses, which the harness checks
# aligned (bz_vector_cast of tests/cuda_on_cpu.h).
_VECTOR_CAST = re.compile(r"reinterpret_cast<((?:const )?"
                          r"(?:float4|int4|uint4|bz_(?:double|half|bfloat16|bool)\d)\*)>\(")


def _translation_unit(text: str) -> str:
    """`text` (a program's source, the prelude first) as C++ for tests/cuda_on_cpu.h."""
    text = re.sub(r"extern __shared__ __align__\(16\) unsigned char (\w+)\[\];",
                  r"unsigned char* \1 = bz_dynamic_shared;", text)
    text = text.replace("#include <cuda_fp16.h>\n", "").replace("#include <cuda_bf16.h>\n", "")
    if text.startswith(PRELUDE):
        return _prelude_header() + _VECTOR_CAST.sub(r"bz_vector_cast<\1>(", text[len(PRELUDE):])
    return f'#include "{HEADER.name}"\n{text}'


def _library(source: str, functions: tuple[str, ...]) -> ctypes.CDLL:
    """The kernels as a shared library, each launched by `run_<name>(args, grid, block, shared, the
    four launch scalars)`."""
    text = _translation_unit(source)
    launchers = []
    for name in functions:
        found = re.search(rf"\n{name}\(const BzArgs<(\d+)> a, const long long lanes,\n    const long long cached_row, "
                          r"unsigned char\* const bz_partials, ([^)]*)\)", text)
        slots, last = found.group(1), "(long long)" if "long long" in found.group(2) else "(unsigned*)"
        launchers.append(f'''
extern "C" void run_{name}(const long long* args, long long grid, long long block, long long shared, long long lanes,
                           long long cached_row, long long partials, long long last) {{
  BzArgs<{slots}> a;
  std::memcpy(a.s, args, sizeof(a.s));
  bz_launch(grid, block, shared, [&]() {{ {name}(a, lanes, cached_row, (unsigned char*)partials, {last}last); }});
}}''')
    return shared_library(f"{text}\n" + "\n".join(launchers) + "\n", functions, 7)


def shared_library(text: str, functions: Sequence[str], scalars: int, prefix: str = "") -> ctypes.CDLL:
    """`text` built by g++ into a shared library (once: it is filed by its text's hash), whose
    `run_<name>` of each function takes the argument block's address and `scalars` long longs."""
    library = _BUILD / f"{prefix}{hashlib.sha256(text.encode()).hexdigest()[:20]}.so"
    if not library.exists():
        cpp = library.with_suffix(".cpp")
        cpp.write_text(text)
        subprocess.run([*_GXX, "-shared", "-o", str(library), str(cpp), "-lpthread"], check=True)
    lib = ctypes.CDLL(str(library))
    for name in functions:
        getattr(lib, f"run_{name}").argtypes = [ctypes.c_void_p] + [ctypes.c_longlong] * scalars
    return lib


def _libraries(compiled: CudaCompiledKernel) -> dict[str, ctypes.CDLL]:
    """A library of each of the kernel's programs (one, unless it is split: compile/cuda_kernel.py),
    by the functions it defines."""
    with ThreadPoolExecutor(len(compiled.programs)) as pool:  # g++ runs as processes of their own
        built = list(pool.map(lambda program: _library(program.text, program.functions), compiled.programs))
    return {name: library for program, library in zip(compiled.programs, built) for name in program.functions}


class _Executor:
    """A CudaExecutor's launches, each run on the CPU; `launches` records (the function run: the task's,
    or its `_warp` function for one warp a row; schedule kind, grid, dynamic shared bytes, launch
    scalars)."""

    def __init__(self, executor: CudaExecutor, libraries: dict[str, ctypes.CDLL]) -> None:
        """`libraries`: per function, the library of the program defining it."""
        self.executor, self.libraries, self.kernel = executor, libraries, executor.kernel
        self.launches: list[tuple] = []

    def run(self, block: np.ndarray, scalars: dict[str, int], arguments=()) -> None:
        for planned in self.executor.plan(scalars, self.executor.workspace(0, scalars)):
            self.launches.append((planned.function_name, planned.task.schedule.kind, planned.grid, planned.shared,
                                  planned.scalars))
            library = self.libraries[planned.function_name]
            misaligned = ctypes.c_ulonglong.in_dll(library, "bz_misaligned_vectors")
            misaligned.value = 0
            getattr(library, f"run_{planned.function_name}")(block.ctypes.data, planned.grid, self.executor.block,
                                                              planned.shared, *planned.scalars)
            assert misaligned.value == 0, \
                f"{planned.function_name}: {misaligned.value} vector accesses misaligned (a GPU faults on them)"


_MEMORY = _HostMemory()


@contextmanager
def _host_memory():
    with mock.patch.object(cuda_driver, "alloc", _MEMORY.alloc), \
            mock.patch.object(cuda_driver, "fill_bytes", _MEMORY.fill_bytes), \
            mock.patch.object(cuda_driver, "free", lambda pointer, stream=0: None):
        yield


def cuda_executor(fusion, arrays: list[np.ndarray], sm_count: int = 2, resident: int = 3,
                  block_size: int = 256) -> tuple[CudaExecutor, tuple, dict[str, int]]:
    """The fusion's CUDA executor for a fake GPU of `sm_count` SMs (`resident` blocks of any kernel
    an SM), its kernels generated but not compiled; the plan and the extents of `arrays`."""
    bound = bind_inputs(fusion, arrays)
    plan, kernel, params = engine.plan_kernel(fusion, engine.signature(fusion, bound), views_on_host=False, gpu=True)
    compiled = CudaCompiledKernel(kernel, CompileParams(block_size=block_size, max_registers=255, arch="sm_90"),
                                  restrict=True)
    names = tuple(compiled.generated.functions)
    compiled.module = lambda device: FakeModule(names, resident)
    executor = CudaExecutor(compiled, FakeDevice(sm_count=sm_count))
    executor.planner.wider = None  # no recompile for wider blocks: its kernels would need NVRTC and a GPU
    return executor, (plan, params, bound), bound.bindings


def planned_launches(fusion, arrays: list[np.ndarray], **gpu) -> list:
    """What the CUDA executor would launch for `arrays` (PlannedLaunch each), on a fake GPU."""
    executor, _, bindings = cuda_executor(fusion, arrays, **gpu)
    with _host_memory():
        return executor.plan(bindings, executor.workspace(0, bindings))


def run_on_cpu(fusion, arrays: list[np.ndarray], **gpu) -> tuple[list[np.ndarray], list[tuple]]:
    """The fusion's outputs for host `arrays` from its CUDA kernels run on the CPU, and its launches."""
    executor, (plan, params, bound), _ = cuda_executor(fusion, arrays, **gpu)
    with _host_memory():  # the workspace lives as long as the run
        runner = _Executor(executor, _libraries(executor.compiled))
        outputs = FusionRuntime(fusion, runner, plan.writes, params).run(bound)
    return outputs, runner.launches
