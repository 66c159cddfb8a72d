"""The executor's recompile (docs/architecture.md, "Runtime"): a launch whose block needs more threads
than the compiled kernel allows, or whose register use must drop, recompiles the kernel through
`CompiledKernel.recompile` and keeps both. The driver is faked: a module answers, per function, the
threads a block may have and the registers a thread takes, from the params the kernel was compiled
with; nothing is compiled by NVRTC or launched.
"""

from __future__ import annotations

import functools
import gc
import weakref

import numpy as np
from cuda_on_cpu import FakeDevice

import braze as bz
from braze import engine
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaCompiledKernel, registers_for_block
from braze.runtime.backends.cuda import CudaExecutor
from braze.runtime.inputs import bind_inputs

UNBOUNDED_REGISTERS = 255  # what a function takes when nothing caps it below that


class RegisterHungryModule:
    """A loaded module whose functions take every register they are allowed: at 255 a thread a block
    holds only 128 threads (as a function compiled with registers to spare for its launch bounds would)."""

    def __init__(self, compiled: CudaCompiledKernel) -> None:
        self.params = compiled.params
        self.functions = {name: 0x100 + n for n, name in enumerate(compiled.generated.functions)}

    def registers(self, name: str) -> int:
        return self.params.max_registers or UNBOUNDED_REGISTERS

    def max_threads(self, name: str) -> int:
        return min(1024, 65536 // self.registers(name) // 32 * 32)

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        pass

    def resident_blocks(self, name: str, block: int, shared: int) -> int:
        return 1


class FakeKernel(CudaCompiledKernel):
    """A CudaCompiledKernel whose compile is noted (per kernel, its params) instead of run."""

    compiles: list[CompileParams] = []

    def _compile(self) -> None:
        FakeKernel.compiles.append(self.params)
        self.binary = b"cubin"

    def module(self, device) -> RegisterHungryModule:
        self.compile()
        return RegisterHungryModule(self)


@functools.cache
def _pointwise_kernel():
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(bz.ops.exp(x) * 2.0)
    bound = bind_inputs(f, [np.ones(8, np.float32)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    return kernel


def _compiled(max_registers: int | None) -> FakeKernel:
    FakeKernel.compiles.clear()
    params = CompileParams(block_size=256, max_registers=max_registers, arch="sm_90")
    return FakeKernel(_pointwise_kernel(), params, restrict=True).compile()


def test_a_function_short_of_threads_is_recompiled_with_fewer_registers_and_both_are_kept() -> None:
    device, uncapped = FakeDevice(), _compiled(max_registers=None)  # 255 registers: a block of 256 fits
    assert RegisterHungryModule(uncapped).max_threads("any") == 256 and uncapped.for_block(device, 256) is uncapped
    hungry = _compiled(max_registers=512)  # a cap the module answers as 512 registers: 128 threads a block
    assert RegisterHungryModule(hungry).max_threads("any") == 128
    leaner = hungry.for_block(device, 256)
    # 512 registers for 128 threads: 256 take at most 256 each, and 255 is the most a thread has.
    assert leaner is not hungry and leaner.params.max_registers == registers_for_block(256) == 255
    assert leaner.params.block_size == 256 and leaner.kernel is hungry.kernel
    assert hungry.params.max_registers == 512  # the original stays as it was, and usable
    assert hungry.for_block(device, 256) is leaner and hungry.for_block(FakeDevice(index=-2), 256) is leaner
    assert [p.max_registers for p in FakeKernel.compiles] == [512, 255]  # each compiled once


def test_the_registers_drop_in_proportion_to_the_threads_missing() -> None:
    device, hungry = FakeDevice(), _compiled(max_registers=200)  # 200 registers: 320 threads a block
    assert hungry.for_block(device, 256) is hungry
    wide = hungry.for_block(device, 512)  # a block the kernel was not compiled for: new launch bounds
    assert (wide.params.block_size, wide.params.max_registers) == (512, 128)
    assert "__launch_bounds__(512)" in wide.source and "__launch_bounds__(256)" in hungry.source
    assert RegisterHungryModule(wide).max_threads("any") >= 512


def test_an_executor_for_a_block_the_kernel_cannot_launch_runs_the_recompile() -> None:
    device, hungry = FakeDevice(), _compiled(max_registers=512)
    executor = CudaExecutor(hungry, device)
    assert executor.block == 256 and executor.compiled is hungry.for_block(device, 256)
    assert executor.compiled.params.max_registers == 255
    assert all(executor.module.max_threads(name) >= executor.block for name in executor.module.functions)
    wider = CudaExecutor(hungry, device, block=1024)
    assert wider.block == 1024 and wider.compiled.params.block_size == 1024
    assert wider.compiled.params.max_registers == 64  # 65536 registers an SM over 1024 threads
    assert [p.block_size for p in FakeKernel.compiles] == [256, 256, 1024]


def _planned_rows(build, shape: tuple[int, int], sm_count: int = 4) -> list:
    """The launches an executor plans for `build(x)` over float32 rows of `shape` on a fake GPU of
    `sm_count` SMs, its kernel compiled for blocks of 256 (FakeKernel.compiles notes each compile)."""
    with bz.Fusion() as f:
        f.add_output(build(f.define_tensor((-1, -1))))
    bound = bind_inputs(f, [np.ones(shape, np.float32)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    FakeKernel.compiles.clear()
    params = CompileParams(block_size=256, max_registers=None, arch="sm_90")
    executor = CudaExecutor(FakeKernel(kernel, params, restrict=True).compile(), FakeDevice(sm_count=sm_count))
    return executor.plan(bound.bindings, executor.workspace(0, bound.bindings))


def log_softmax(x):
    return bz.ops.log_softmax(x, -1)


def test_rows_read_twice_that_registers_hold_only_at_a_wider_block_launch_its_recompile() -> None:
    # 256 threads hold 8192 float32 in registers, 512 hold 16384, 1024 hold 32768.
    for length, block in [(12000, 512), (32000, 1024)]:
        (planned,) = _planned_rows(log_softmax, (64, length))
        assert (planned.block, planned.scalars[0]) == (block, block)  # a block a row
        assert [p.block_size for p in FakeKernel.compiles] == [256, block]
    (own,) = _planned_rows(log_softmax, (64, 8192))
    assert own.block == 0 and [p.block_size for p in FakeKernel.compiles] == [256]
    (longer,) = _planned_rows(log_softmax, (64, 40000))  # held by no block: the kernel's own
    assert longer.block == 0


def logsumexp(x):
    return bz.ops.logsumexp(x, -1)


def test_rows_too_few_to_fill_the_gpu_a_block_each_take_wider_blocks() -> None:
    # 4 SMs hold 8192 threads; a block doubles while the rows' threads at it fill at most half of them.
    assert [p.block for p in _planned_rows(logsumexp, (3, 100_003))] == [1024]
    assert [p.block for p in _planned_rows(logsumexp, (12, 100_003))] == [512]
    assert [p.block for p in _planned_rows(logsumexp, (40, 100_003))] == [0]
    assert [p.block for p in _planned_rows(logsumexp, (3, 500))] == [0]  # short rows: lanes of a warp or fewer


def test_an_executor_that_planned_a_wider_block_goes_with_its_last_reference() -> None:
    # The planner's `wider` callback holds the wide executors, not the executor that asks: no cycle
    # keeps the executor, and the modules it holds loaded, until the cycle collector runs.
    with bz.Fusion() as f:
        f.add_output(bz.ops.log_softmax(f.define_tensor((-1, -1)), -1))
    bound = bind_inputs(f, [np.ones((64, 12000), np.float32)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    params = CompileParams(block_size=256, max_registers=None, arch="sm_90")
    executor = CudaExecutor(FakeKernel(kernel, params, restrict=True).compile(), FakeDevice())
    (planned,) = executor.plan(bound.bindings, executor.workspace(0, bound.bindings))
    assert planned.block == 512
    gone = weakref.ref(executor)
    gc.disable()
    try:
        del executor
        assert gone() is None
    finally:
        gc.enable()
