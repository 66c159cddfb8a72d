"""A CUDA kernel of many tasks as several NVRTC programs (braze/compile/cuda_kernel.py): how the
source splits (codegen/cuda.py, CudaSource.programs), each program compiled once even with threads
racing, from the disk cache the second time, loaded as a module of its own behind the kernel, each
task launched through its own module's function, and every module unloaded after the kernel's last
holder. NVRTC and the driver are fakes here except in the last test, which compiles the programs."""

from __future__ import annotations

import functools
import gc
import re
import threading
from collections.abc import Iterator

import cuda_on_cpu
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from many_task_fusions import inputs, many_tasks, reference
from test_cuda_resources import FakeDevice, FakeGpu, FakeModule

from braze import config, engine
from braze.codegen.cuda import CudaSource
from braze.compile import cuda_kernel, nvrtc
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaCompiledKernel
from braze.runtime.backends.cuda import CudaExecutor
from braze.runtime.inputs import bind_inputs

TASKS = 3  # inputs of the fusion: 9 tasks
PARAMS = CompileParams(block_size=256, arch="sm_90")


@functools.cache
def kernel_and_scalars() -> tuple:
    f = many_tasks(TASKS)
    bound = bind_inputs(f, inputs(TASKS))
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    return kernel, dict(bound.bindings)


def compiled_kernel() -> CudaCompiledKernel:
    return CudaCompiledKernel(kernel_and_scalars()[0], PARAMS, restrict=True)


def one_input_kernel() -> CudaCompiledKernel:
    """The fusion of one input: three tasks."""
    f = many_tasks(1)
    bound = bind_inputs(f, inputs(1))
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    return CudaCompiledKernel(kernel, PARAMS, restrict=True)


def defined(text: str) -> list[str]:
    """The `__global__` functions a translation unit defines."""
    return re.findall(r'extern "C" __global__ void\s+(?:__launch_bounds__\([\d, ]+\)\s+)?(\w+)\(', text)


# --- how a source splits ----------------------------------------------------------------------------
def test_a_source_within_the_limit_is_one_program_the_kernels_whole_source() -> None:
    generated = compiled_kernel().generated
    (program,) = generated.programs(10**9)
    assert program.text == generated.text and program.functions == generated.functions


@pytest.mark.parametrize("most_chars", [1, 20_000, 40_000, 80_000])
def test_each_function_is_defined_in_exactly_one_program_with_the_prelude_it_needs(most_chars) -> None:
    generated = compiled_kernel().generated
    programs = generated.programs(most_chars)
    assert sum(len(p.functions) for p in programs) == len(generated.functions)
    # each once; a task's own functions (its warp and split ones) beside it, the tasks in order
    assert sorted(name for p in programs for name in p.functions) == sorted(generated.functions)
    tasks = [name for p in programs for name in p.functions if name in generated.functions[:len(generated.lane_plans)]]
    assert tasks == list(generated.functions[:len(generated.lane_plans)])
    for program in programs:
        assert sorted(defined(program.text)) == sorted(program.functions)
        assert program.text.count("__device__") >= 1 and "#define" in program.text  # the prelude
    sizes = [sum(map(len, generated.sections))]
    assert len(programs) <= -(-sizes[0] // most_chars)


def fake_source(sizes: list[int], warps: list[bool]) -> CudaSource:
    """A source of tasks whose functions have `sizes` characters, some with a warp function after
    every task's function (as codegen/cuda.py orders them)."""
    names = [f"t{n}" for n in range(len(sizes))]
    warp_names = [f"t{n}_warp" if warp else "" for n, warp in enumerate(warps)]
    functions = names + [w for w in warp_names if w]
    sections = [f'extern "C" __global__ void {name}() {{}}'.ljust(size) for name, size in zip(names, sizes)]
    sections += [f'extern "C" __global__ void {w}() {{}}'.ljust(100) for w in warp_names if w]
    return CudaSource("// k: tasks\n\n" + "\n\n".join(sections) + "\n", tuple(functions), (None,) * len(sizes),
                      ((),) * len(sizes), (0,) * len(sizes), warp_functions=tuple(warp_names), sections=tuple(sections))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(40, 5000), st.booleans()), min_size=1, max_size=30),
       st.integers(100, 20_000))
def test_programs_hold_consecutive_tasks_each_with_its_warp_function(tasks, most_chars) -> None:
    sizes, warps = [size for size, _ in tasks], [warp for _, warp in tasks]
    source = fake_source(sizes, warps)
    programs = source.programs(most_chars)
    order = [name for p in programs for name in p.functions if not name.endswith("_warp")]
    assert order == [f"t{n}" for n in range(len(sizes))]  # consecutive, in order, none twice
    for program in programs:
        assert program.functions  # no empty program
        assert sorted(defined(program.text)) == sorted(program.functions)
        for name in program.functions:
            if not name.endswith("_warp") and warps[int(name[1:])]:
                assert f"{name}_warp" in program.functions
    total = sum(len(s) for s in source.sections)
    assert len(programs) <= max(1, -(-total // most_chars))
    if total <= most_chars:
        assert len(programs) == 1 and programs[0].text == source.text


def test_the_split_programs_feature_keeps_one_program(monkeypatch) -> None:
    monkeypatch.setattr(cuda_kernel, "PROGRAM_CHARS", 1)
    assert len(compiled_kernel().programs) == 3 * TASKS
    with config.scope(disable="split_programs"):
        assert len(compiled_kernel().programs) == 1


# --- compiling, loading and launching, with fakes -----------------------------------------------------
class FakeNvrtc:
    """nvrtc.compile_cubin: a 'cubin' naming the functions each program defines, and the thread
    and program of every compile."""

    def __init__(self) -> None:
        self.compiles: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.worker_compiled = threading.Event()

    def compile_cubin(self, source: str, name: str, arch: str, options=()) -> bytes:
        thread = threading.current_thread().name
        if thread.startswith("braze-compile"):
            self.worker_compiled.set()
        else:  # as a real compile takes long enough for a worker to take a program meanwhile
            self.worker_compiled.wait(timeout=5)
        with self.lock:
            self.compiles.append((thread, name))
        return ("cubin:" + ",".join(defined(source))).encode()


@pytest.fixture
def gpu(monkeypatch) -> Iterator[FakeGpu]:
    yield FakeGpu(monkeypatch)
    gc.collect()  # what the test left in reference cycles goes to its own fakes


@pytest.fixture
def split(gpu, monkeypatch) -> FakeNvrtc:
    """Programs of one task each, compiled by a fake NVRTC whose cubins the disk cache keeps."""
    fake = FakeNvrtc()
    monkeypatch.setattr(cuda_kernel, "PROGRAM_CHARS", 1)
    monkeypatch.setattr(nvrtc, "compile_cubin", fake.compile_cubin)
    monkeypatch.setattr(cuda_kernel.elf, "cubin_check",
                        lambda names: lambda data: data == ("cubin:" + ",".join(names)).encode())
    return fake


def test_a_split_kernel_compiles_each_program_once_under_racing_threads(split) -> None:
    compiled = compiled_kernel()
    start = threading.Barrier(6)

    def first_call() -> None:
        start.wait()
        compiled.compile()

    with config.scope(disable="disk_cache"):
        threads = [threading.Thread(target=first_call) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    names = sorted(name for _, name in split.compiles)
    assert names == sorted(f"{compiled.kernel.name}_p{n}" for n in range(len(compiled.programs)))
    assert len(compiled.programs) == 3 * TASKS and not compiled.from_disk
    assert [binary.decode() for binary in compiled.binary] == \
        ["cubin:" + ",".join(p.functions) for p in compiled.programs]
    assert any(thread.startswith("braze-compile") for thread, _ in split.compiles)  # the pool took some


def test_a_split_kernel_compiled_again_loads_every_program_from_the_disk_cache(split, tmp_path) -> None:
    with config.scope(cache_dir=tmp_path):
        first = compiled_kernel().compile()
        count = len(split.compiles)
        again = compiled_kernel().compile()
    assert count == len(first.programs) and len(split.compiles) == count
    assert again.from_disk and again.binary == first.binary


def test_each_task_launches_through_the_function_of_its_own_programs_module(split, gpu) -> None:
    compiled = compiled_kernel()
    with config.scope(disable="disk_cache"):
        compiled.compile()
    device = FakeDevice(0)
    executor = CudaExecutor(compiled, device)
    assert [(index, binary, names) for index, binary, names in FakeModule.loads] == \
        [(0, binary, p.functions) for binary, p in zip(compiled.binary, compiled.programs)]
    handles = {}  # every function's handle, from the module of the program defining it
    for n, program in enumerate(compiled.programs):
        handles.update({name: (0x7000 + n) * 16 + i for i, name in enumerate(program.functions)})
    _, scalars = kernel_and_scalars()
    workspace = executor.workspace(0, scalars)
    planned = executor.plan(scalars, workspace)
    assert {p.function_name for p in planned} == {t.name for t in compiled.kernel.tasks}
    assert all(p.function == handles[p.function_name] for p in planned)
    block = np.zeros(executor.layout.size, np.int64)
    executor.run(block, scalars, 0)
    assert [event[1] for event in gpu.of("launch")] == [handles[p.function_name] for p in planned]


def test_every_module_of_a_split_kernel_unloads_after_its_last_holder(split, gpu) -> None:
    compiled = compiled_kernel()
    with config.scope(disable="disk_cache"):
        compiled.compile()
    executor = CudaExecutor(compiled, FakeDevice(0))
    modules = len(compiled.programs)
    assert len(FakeModule.loads) == modules and not gpu.of("unload")
    del compiled
    gc.collect()
    assert not gpu.of("unload")  # the executor holds the kernel's modules
    del executor
    gc.collect()
    assert sorted(handle for _, handle in gpu.of("unload")) == [0x7000 + n for n in range(modules)]


# --- NVRTC --------------------------------------------------------------------------------------------
@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
def test_each_program_of_a_split_kernel_compiles_alone(monkeypatch) -> None:
    """Every program is a whole translation unit: NVRTC compiles it to PTX defining its functions."""
    monkeypatch.setattr(cuda_kernel, "PROGRAM_CHARS", 1)
    compiled = one_input_kernel()
    assert len(compiled.programs) == 3
    for program in compiled.programs:
        ptx = nvrtc.compile_ptx(program.text, "split", PARAMS.arch, compiled.options()).decode()
        assert sorted(re.findall(r"\.entry (\w+)\(", ptx)) == sorted(program.functions)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="needs g++")
def test_a_kernel_split_into_programs_computes_every_task_run_on_the_cpu(monkeypatch) -> None:
    """Each program built alone (g++, tests/cuda_on_cpu.py) and each task run from its program's
    library, outputs against NumPy in float64."""
    sections = one_input_kernel().generated.sections
    monkeypatch.setattr(cuda_kernel, "PROGRAM_CHARS", -(-sum(map(len, sections)) // 2))  # two programs
    assert len(one_input_kernel().programs) == 2
    arrays = inputs(1, seed=5)
    outputs, launches = cuda_on_cpu.run_on_cpu(many_tasks(1), arrays)
    assert len({name for name, *_ in launches}) == 3
    for got, want in zip(outputs, reference(arrays), strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-6)
