"""What braze holds on a GPU, checked without one (runtime/cuda_resources.py, compile/cuda_driver.py):
the grid reductions' workspace is the stream's own, whichever path launches (the host program, a prepared call natively
or through ctypes, a `bz.graph()`), and a CUDA module is unloaded once, in its device's context,
when the last holder goes. The driver's memory, module and launch calls are fakes that record
what they are asked; the kernels are a real reduction fusion's, generated but never compiled."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from fake_driver import FakeDriver

import braze as bz
from braze import config, engine
from braze.compile import cuda_driver
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaCompiledKernel
from braze.runtime import cuda_resources
from braze.runtime.backends import cuda as cuda_backend
from braze.runtime.backends.cuda import CudaExecutor, CudaPreparedCall, prepared_launches
from braze.runtime.fast_call import ArrayKind, CallPlan
from braze.runtime.inputs import bind_inputs

A, B, C = 0xA000, 0xB000, 0xC000  # three streams


class WorkspaceDriver(FakeDriver):
    """Also notes, at each launch, the workspace pointer its parameters pass."""

    def __init__(self) -> None:
        self.workspaces: list[int] = []
        super().__init__()

    def launch(self, function, gx, gy, gz, bx, by, bz_, shared, stream, params, extra) -> int:
        self.workspaces.append(_workspace_pointer(params))
        return super().launch(function, gx, gy, gz, bx, by, bz_, shared, stream, params, extra)


@dataclass(frozen=True)
class FakeDevice:
    """A device whose `current()` notes which device's context each driver call ran in."""

    index: int
    log: list = field(default_factory=list, compare=False, hash=False)
    driver: WorkspaceDriver = field(default_factory=WorkspaceDriver, compare=False, hash=False)
    sm_count: int = 4

    @contextlib.contextmanager
    def current(self):
        self.log.append(("current", self.index))
        yield

    @property
    def driver_calls(self):
        return self.driver.driver


class FakeModule:
    """cuda_driver.Module: a handle and a function handle per name, counting the loads."""

    loads: list = []

    def __init__(self, device, binary: bytes, names: tuple[str, ...]) -> None:
        self.handle = 0x7000 + len(FakeModule.loads)
        FakeModule.loads.append((device.index, binary, names))
        self.functions = {name: self.handle * 16 + n for n, name in enumerate(names)}

    def allow_shared_memory(self, name: str, nbytes: int) -> None:
        pass

    def resident_blocks(self, name: str, block: int, shared: int) -> int:
        return 2

    def max_threads(self, name: str) -> int:
        return 1024

    def registers(self, name: str) -> int:
        return 32


class FakeGpu:
    """The driver's memory, module and launch calls, recorded in one list of events."""

    def __init__(self, monkeypatch) -> None:
        self.events: list[tuple] = []
        self.next_address = 0x1_0000_0000
        FakeModule.loads = []
        for name in ("alloc", "fill_bytes", "free", "unload_module"):
            monkeypatch.setattr(cuda_driver, name, getattr(self, name))
        monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: self.launch)
        monkeypatch.setattr(cuda_driver, "Module", FakeModule)
        # A test's workspaces and modules of its own.
        monkeypatch.setattr(cuda_resources, "_workspaces", {})
        monkeypatch.setattr(cuda_driver, "_loaded_modules", cuda_driver.weakref.WeakValueDictionary())
        monkeypatch.setattr(cuda_driver, "_retired", deque())

    def alloc(self, nbytes: int, stream: int = 0) -> int:
        address, self.next_address = self.next_address, self.next_address + 2**24
        self.events.append(("alloc", address, nbytes, stream))
        return address

    def fill_bytes(self, pointer: int, byte: int, nbytes: int, stream: int = 0) -> None:
        self.events.append(("fill", pointer, byte, nbytes, stream))

    def free(self, pointer: int, stream: int = 0) -> None:
        self.events.append(("free", pointer, stream))

    def unload_module(self, handle: int) -> None:
        self.events.append(("unload", handle))

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        self.events.append(("launch", function, stream, _workspace_pointer(params)))
        return 0

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]


def _workspace_pointer(params: int) -> int:
    """The partial results' pointer a launch's parameters pass (its third launch scalar)."""
    scalar = ctypes.c_void_p.from_address(params + 3 * 8).value
    return ctypes.c_int64.from_address(scalar).value


@pytest.fixture
def gpu(monkeypatch) -> Iterator[FakeGpu]:
    yield FakeGpu(monkeypatch)
    gc.collect()  # what the test left in reference cycles goes to its own fakes


INPUT = np.ones((3000, 200), np.float32)


@functools.cache
def reduction() -> tuple:
    """A full sum and a column sum: their tasks meet across blocks in the workspace. (Its Kernel
    IR, and the extents its task bounds read.)"""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.sum(x))
        f.add_output(bz.ops.sum(x, axes=[0]))
    bound = bind_inputs(f, [INPUT])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    return kernel, dict(bound.bindings)


def executor(device: FakeDevice) -> CudaExecutor:
    kernel, _ = reduction()
    compiled = CudaCompiledKernel(kernel, CompileParams(block_size=256, arch="sm_90"), restrict=True)
    compiled.binary = b"cubin of the reduction"  # as if compiled
    return CudaExecutor(compiled, device)


# --- workspaces -------------------------------------------------------------------------------------
def test_each_stream_has_a_workspace_of_its_own_that_every_kernel_on_it_shares(gpu) -> None:
    device = FakeDevice(0)
    first, second = executor(device), executor(device)
    on_a, on_b = first.workspace(A), first.workspace(B)
    assert on_a is first.workspace(A) and on_a is not on_b and set(on_a.pointers).isdisjoint(on_b.pointers)
    assert second.workspace(A) is on_a  # launches on one stream run one after another
    allocs, fills = gpu.of("alloc"), gpu.of("fill")
    assert [a[3] for a in allocs] == [A, B]  # each allocated on its own stream, its counters zeroed there
    assert [(f[1], f[2], f[4]) for f in fills] == [(allocs[0][1], 0, A), (allocs[1][1], 0, B)]
    partials, counters = on_a.pointers
    assert counters == allocs[0][1] and partials >= counters + fills[0][3] and partials % 256 == 0


def test_each_planned_launch_takes_the_workspace_of_its_stream(gpu) -> None:
    device, (_, bindings) = FakeDevice(0), reduction()
    ex = executor(device)
    for stream in (A, B):
        planned = ex.plan(bindings, ex.workspace(stream))
        meeting = [p for p in planned if p.task.schedule.kind in ("flat", "grid")]
        assert meeting and all(p.scalars[2:] == ex.workspace(stream).pointers for p in meeting)


def test_a_device_keeps_its_latest_streams_workspaces_and_frees_the_rest_on_their_stream(gpu, monkeypatch) -> None:
    monkeypatch.setattr(cuda_resources, "STREAM_WORKSPACES", 3)
    ex = executor(FakeDevice(0))
    held = ex.workspace(A)  # as a prepared call or a graph would hold it
    for stream in (B, C, 0xD000, 0xE000):
        ex.workspace(stream)
    gc.collect()
    assert list(ex.workspaces.by_stream) == [C, 0xD000, 0xE000]
    assert [f[2] for f in gpu.of("free")] == [B]  # B's went, on B; A's lives while held
    address = held.pointers[1]
    del held
    gc.collect()
    assert gpu.of("free")[-1] == ("free", address, A)


def test_a_kernel_needing_more_room_gets_a_larger_workspace_on_the_stream(gpu) -> None:
    ex = executor(FakeDevice(0))
    small = ex.workspace(A)
    ex.planner.partial_bytes *= 2  # as a kernel with twice the accumulators
    large = ex.workspace(A)
    assert large is not small and large.partial_bytes == 2 * small.partial_bytes and ex.workspace(A) is large


@functools.cache
def inner_outer() -> tuple:
    """Softmax rows and the column sums of the same input: an inner-outer pair, two launches, the
    second folding what the first left in the workspace."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.softmax(x, axis=-1))
        f.add_output(bz.ops.sum(x, axes=[0]))
    bound = bind_inputs(f, [INPUT])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    compiled = CudaCompiledKernel(kernel, CompileParams(block_size=256, arch="sm_90"), restrict=True)
    compiled.binary = b"cubin of the pair"
    return compiled, dict(bound.bindings)


def test_inner_outer_pairs_have_a_region_of_the_workspace_of_their_own(gpu) -> None:
    compiled, bindings = inner_outer()
    pair, reducing = CudaExecutor(compiled, FakeDevice(0)), executor(FakeDevice(0))
    assert pair.pairs and not reducing.pairs
    reducing.workspace(A)  # its grid reductions' room (four columns a thread: more than the pair's)
    workspace = pair.workspace(A, bindings)
    assert reducing.workspace(A) is workspace and workspace.pair_bytes > 0
    assert workspace.partial_bytes >= max(reducing.planner.partial_bytes, pair.planner.partial_bytes)
    partials_end = workspace.pointers[0] + workspace.partial_bytes
    assert workspace.pointers[1] < workspace.pointers[0] < partials_end <= workspace.pair_pointer
    reducing.planner.partial_bytes *= 2  # a larger grid reduction: the pairs' room stays
    assert reducing.workspace(A).pair_bytes == workspace.pair_bytes


def test_threads_launching_inner_outer_pairs_on_one_stream_never_come_between_a_pairs_launches(
        gpu, monkeypatch) -> None:
    compiled, bindings = inner_outer()
    device = FakeDevice(0)
    ex = CudaExecutor(compiled, device)
    plan = CallPlan(block=[0] * 8, allocations=[], input_pointers=[(0, 0, lambda a: a.ptr)], buffer_pointers=[],
                    buffer_pointer=lambda b: 0, scalars=[], seeds=[], copies_back=[], returned=[("input", 0)])
    kind = ArrayKind(lambda a: (), lambda a: a.ptr, lambda a, device_index: a.stream)
    call = CudaPreparedCall(plan, prepared_launches(ex, bindings, A), kind, 0, device, A,
                            functools.partial(prepared_launches, ex, bindings), pairs=ex.pairs)
    assert call.launch_all is None  # one by one, under the workspace's lock
    log = []

    def launch(function, *args) -> int:  # every launch gives the other threads their turn
        log.append((threading.get_ident(), function))
        time.sleep(0.0002)
        return 0

    monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: launch)

    def work(n: int) -> None:
        for _ in range(20):  # a busy prepared call answers None: the host program's launches then
            if n % 2 == 0 or call.run([FakeArray(1, A)]) is None:
                ex.run(np.zeros(64, np.int64), bindings, A)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(log) == 4 * 20 * 2
    pairs = [log[n:n + 2] for n in range(0, len(log), 2)]
    assert all(first[0] == second[0] and first[1] != second[1] for first, second in pairs)


# --- prepared calls -----------------------------------------------------------------------------------
@dataclass
class FakeArray:
    ptr: int
    stream: int


def prepared_call(device: FakeDevice) -> CudaPreparedCall:
    """A prepared call over the reduction's launches, its one input's pointer patched into slot 0
    and its stream read from the input, returning the input."""
    _, bindings = reduction()
    ex = executor(device)
    plan = CallPlan(block=[0] * 8, allocations=[], input_pointers=[(0, 0, lambda a: a.ptr)], buffer_pointers=[],
                    buffer_pointer=lambda b: 0, scalars=[], seeds=[], copies_back=[], returned=[("input", 0)])
    kind = ArrayKind(lambda a: (), lambda a: a.ptr, lambda a, device_index: a.stream)
    call = CudaPreparedCall(plan, prepared_launches(ex, bindings, A), kind, 0, device, A,
                            functools.partial(prepared_launches, ex, bindings))
    call.executor = ex
    return call


def launched(driver: WorkspaceDriver) -> list[tuple[int, set[int]]]:
    """Per run of the reduction's launches, in order: (its stream, the workspace pointers its
    launches passed, 0 for tasks that take none)."""
    runs: list[tuple[int, set[int]]] = []
    launches = len({c[0] for c in driver.calls})  # a run launches each task once
    for n in range(0, len(driver.calls), launches):
        runs.append((driver.calls[n][8], set(driver.workspaces[n:n + launches])))
    return runs


@pytest.mark.parametrize("native", [True, False], ids=["native", "ctypes"])
def test_a_prepared_call_launches_into_the_workspace_of_the_stream_it_runs_on(gpu, monkeypatch, native) -> None:
    device = FakeDevice(0)
    monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: device.driver.launch)
    with config.scope(**({} if native else {"disable": "host_jit"})):
        call = prepared_call(device)
        for stream in (A, B, A, C, B):
            array = FakeArray(0x5000 + stream, stream)
            assert call.run([array]) == [array]
    assert (call.launch_all is not None) == native
    workspace = {s: call.executor.workspace(s).pointers[0] for s in (A, B, C)}
    runs = launched(device.driver)
    assert [stream for stream, _ in runs] == [A, B, A, C, B]
    assert all(pointers - {0} == {workspace[stream]} for stream, pointers in runs)
    if native:
        assert sorted(call.launch_all.streams()) == [A, B, C]


def test_threads_taking_a_prepared_call_first_together_share_one_launcher(gpu, monkeypatch) -> None:
    """Four threads on four streams took a call for the first time at once: each built native
    launchers, a stream was filed in one's tables while another's launched, and that thread was
    answered NEW_STREAM forever (a hang in the GPU suite)."""
    device = FakeDevice(0)
    monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: device.driver.launch)
    built, build = [], cuda_backend.native_launches

    def slow_build(*args, **kwargs):  # every thread inside the build at once, where nothing stops them
        time.sleep(0.2)
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(cuda_backend, "native_launches", slow_build)
    call, start = prepared_call(device), threading.Barrier(4)
    results: list[object] = []

    def work(stream: int) -> None:
        start.wait()
        for _ in range(3):
            array = FakeArray(0x5000 + stream, stream)
            results.append(call.run([array]) == [array])

    threads = [threading.Thread(target=work, args=(0x10000 * n,), daemon=True) for n in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread kept filing its stream"
    assert results == [True] * 12 and len(built) == 1
    assert sorted(call.launch_all.streams()) == [A] + [0x10000 * n for n in range(1, 5)]


def test_a_new_stream_is_filed_in_the_launcher_that_answered_it(gpu, monkeypatch) -> None:
    """Whatever launcher the call holds when a stream first comes (on Python 3.11 the race above could
    not make two; the call's launcher may be another after `release`), the stream is filed where the
    launch that answered NEW_STREAM looks it up; filed anywhere else, that launch retried forever."""
    device = FakeDevice(0)
    monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: device.driver.launch)
    call = prepared_call(device)
    assert call.run([FakeArray(0x5000, A)]) == [FakeArray(0x5000, A)]
    answering = call.launch_all
    call._launch_all = call._build_launch_all()  # another launcher than the generated call's
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(call.run([FakeArray(0x6000, B)])), daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the launch on a new stream kept answering NEW_STREAM"
    assert done == [[FakeArray(0x6000, B)]] and sorted(answering.streams()) == [A, B]


def test_a_prepared_call_keeps_the_launches_of_its_latest_streams(gpu, monkeypatch) -> None:
    monkeypatch.setattr(cuda_resources, "STREAM_WORKSPACES", 100)
    device = FakeDevice(0)
    call = prepared_call(device)
    streams = [0x10000 * n for n in range(1, 40)]
    for stream in streams:
        call.run([FakeArray(1, stream)])
    assert list(call.stream_launches) == streams[-16:] and len(call.launch_all.streams()) == 16
    runs = launched(device.driver)
    assert [s for s, _ in runs] == streams and len({frozenset(p) for _, p in runs}) == len(streams)


# --- graphs -----------------------------------------------------------------------------------------
@pytest.fixture
def capture(gpu, monkeypatch) -> FakeGpu:
    """Stream capture that records nothing: bz.graph() over the fake GPU."""
    for name, fake in {"create_stream": lambda: 0xCA, "destroy_stream": lambda s: None,
                       "begin_capture": lambda s: None, "end_capture": lambda s: 0x6A,
                       "graph_nodes": lambda g: 0, "instantiate_graph": lambda g: 0x6E,
                       "destroy_graph": lambda g: None, "destroy_graph_exec": lambda g: None,
                       "launch_graph": lambda g, s: gpu.events.append(("graph", s))}.items():
        monkeypatch.setattr(cuda_driver, name, fake)
    return gpu


def test_a_graph_takes_the_workspace_of_the_stream_it_replays_on_and_keeps_it(capture) -> None:
    _, bindings = reduction()
    ex = executor(FakeDevice(0))
    block = np.zeros(64, np.int64)
    with bz.graph() as g:
        ex.run(block, bindings, B)
    on_b = ex.workspace(B)
    captured = [e for e in capture.of("launch") if e[3]]
    assert captured and {e[2] for e in captured} == {0xCA} and {e[3] for e in captured} == {on_b.pointers[0]}
    assert capture.of("graph") == [("graph", B)]  # the body's run, on the stream it was called on
    ex.workspaces.by_stream.clear()  # however many streams come after, the graph keeps B's
    address = on_b.pointers[1]
    del on_b
    gc.collect()
    assert not capture.of("free")
    del g
    gc.collect()
    assert capture.of("free") == [("free", address, B)]


# --- modules ----------------------------------------------------------------------------------------
def test_a_module_is_loaded_once_per_device_and_binary_while_anything_holds_it(gpu) -> None:
    zero, one = FakeDevice(0), FakeDevice(1)
    first = cuda_driver.loaded_module(zero, b"cubin of k", ("k_t0",))
    assert cuda_driver.loaded_module(zero, b"cubin of k", ("k_t0",)) is first  # k's kernel made anew
    others = [cuda_driver.loaded_module(one, b"cubin of k", ("k_t0",)),
              cuda_driver.loaded_module(zero, b"cubin of j", ("j_t0",))]
    assert FakeModule.loads == [(0, b"cubin of k", ("k_t0",)), (1, b"cubin of k", ("k_t0",)),
                                (0, b"cubin of j", ("j_t0",))]
    assert cuda_driver.loaded_module_count() == 3 and not gpu.of("unload") and others


def test_a_module_is_unloaded_once_in_its_devices_context_when_its_last_holder_goes(gpu) -> None:
    one = FakeDevice(1)
    held = [cuda_driver.loaded_module(one, b"cubin", ("k_t0",)) for _ in range(2)]
    handle = held[0].handle
    held.pop()
    gc.collect()
    assert not gpu.of("unload")
    one.log.clear()
    held.pop()
    gc.collect()
    assert gpu.of("unload") == [("unload", handle)] and one.log == [("current", 1)]
    assert cuda_driver.loaded_module_count() == 0
    cuda_driver.loaded_module(one, b"cubin", ("k_t0",))  # wanted again: loaded again
    assert len(FakeModule.loads) == 2


def test_the_executors_prepared_calls_and_graphs_launching_a_module_keep_it_loaded(capture) -> None:
    _, bindings = reduction()
    ex = executor(FakeDevice(0))
    call = prepared_call(FakeDevice(0))
    with bz.graph() as g:
        ex.run(np.zeros(64, np.int64), bindings, A)
    del ex
    gc.collect()
    assert not capture.of("unload")  # the graph launches it
    del g
    gc.collect()
    assert not capture.of("unload")  # the prepared call launches it
    del call
    gc.collect()
    assert len(capture.of("unload")) == 1  # both kernels are one binary: one module


def test_an_unload_waits_while_this_thread_captures_a_graph(capture) -> None:
    module = cuda_driver.loaded_module(FakeDevice(0), b"cubin", ("k_t0",))
    handle = module.handle
    with bz.graph():
        del module
        gc.collect()
        assert not capture.of("unload") and cuda_driver.loaded_module_count() == 1
    other = cuda_driver.loaded_module(FakeDevice(0), b"other cubin", ("j_t0",))  # the next safe point
    assert capture.of("unload") == [("unload", handle)] and cuda_driver.loaded_module_count() == 1 and other


def test_nothing_is_unloaded_while_the_interpreter_exits(gpu, monkeypatch) -> None:
    module = cuda_driver.loaded_module(FakeDevice(0), b"cubin", ("k_t0",))
    ex = executor(FakeDevice(0))
    workspace = ex.workspace(A)
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    del module, ex, workspace
    gc.collect()
    assert not gpu.of("unload") and not gpu.of("free")


def test_modules_and_workspaces_held_at_exit_are_left_to_the_driver() -> None:
    """Finalizers do not run at exit: the context's teardown frees everything."""
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, "tests")
        sys.path.insert(0, "tests/runtime")
        import pytest
        from test_cuda_resources import FakeDevice, FakeGpu, executor, A
        from braze.compile import cuda_driver
        gpu = FakeGpu(pytest.MonkeyPatch())
        module = cuda_driver.loaded_module(FakeDevice(0), b"cubin", ("k_t0",))
        ex = executor(FakeDevice(0))
        workspace = ex.workspace(A)
        import atexit
        atexit.register(lambda: print("held at exit:", gpu.of("unload"), gpu.of("free")))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "held at exit: [] []" in result.stdout and "Exception ignored" not in result.stderr
