"""The GPU path of `@bz.kernel` with the GPU emulated on the CPU (no GPU needed): binding and checking
GPU arguments, the prepared call (its argument block, grids, pointer and scalar patching, overlap
checks), debug checks and bz.record(). The device is fake: "GPU arrays" are DeviceArrays over host
memory, and a launch runs the CPU backend's function of the task on the same argument block (the
CUDA and CPU code read the same layout), after checking its grid.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import weakref
from dataclasses import dataclass

import numpy as np
import pytest
from fake_driver import CU_LAUNCH, FakeDriver
from kernel_cases import all_cases, poison

import braze as bz
from braze import engine
from braze.codegen import cuda_loops
from braze.compile import cuda_driver
from braze.compile.compiled_kernel import CompiledKernel, CompileParams
from braze.compile.cuda_driver import DriverCalls
from braze.frontend import kernel_gpu
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.passes.fuse_tasks import fuse_tasks
from braze.runtime import device_arrays
from braze.runtime.device_arrays import DeviceArray

SMS = 2  # a small fake GPU, so that grids are capped and threads loop


@dataclass(frozen=True)
class FakeDevice:
    index: int
    sm_count: int = SMS
    arch: str = "sm_90"
    name: str = "fake GPU"

    @contextlib.contextmanager
    def current(self):
        yield

    @property
    def driver_calls(self) -> DriverCalls:
        return _NATIVE_CONTEXT.calls_for(0xC0 + self.index)


class FakeFunction(int):
    """A CUfunction handle: an int the fake launch looks up."""


class FakeModule:
    def __init__(self, functions: dict[str, FakeFunction]) -> None:
        self.functions = functions

    def resident_blocks(self, name: str, block: int, shared: int) -> int:
        return 3


# Every fake function made, by handle: kernels keep their compiled entries from test to test.
_TASKS: dict[int, tuple[k.Kernel, k.Task, object]] = {}
_COMPILED: list[CompiledKernel] = []  # their machine code stays loaded while these live


class FakeGpu:
    """Compiles loop kernels for the CPU and launches them there, checking each launch's grid."""

    def __init__(self) -> None:
        self.tasks = _TASKS
        self.launches: list[tuple[str, int, int]] = []  # (task, grid, threads)
        self.capturing: int | None = None  # the stream under capture (bz.graph)
        self.graphs: dict[int, list[tuple]] = {}  # captured launches by graph handle

    def compile(self, kernel, device_index, fuse=True, restrict=False):
        fused, decisions = fuse_tasks(kernel, enabled=fuse)
        cpu = CompiledKernel(fused).compile()
        _COMPILED.append(cpu)
        generated = cuda_loops.generate(fused, restrict=restrict)
        functions = {}
        for task, name, fn in zip(fused.tasks, generated.functions, cpu.functions):
            handle = FakeFunction(1000 + len(self.tasks))
            self.tasks[int(handle)] = (fused, task, fn)
            functions[name] = handle
        compiled = type("FakeCompiled", (), {"kernel": fused, "params": CompileParams(block_size=256),
                                             "block_size": 256, "generated": generated,
                                             "module": lambda self, d: FakeModule(functions),
                                             "for_block": lambda self, device, block: self})
        return compiled(), decisions

    def launch(self, function, gx, gy, gz, bx, by, bz_, shared, stream, params, extra) -> int:
        kernel, task, fn = self.tasks[int(function)]
        block = ctypes.c_void_p.from_address(params).value
        size = ArgLayout.of(kernel.params).size
        if stream is not None and stream == self.capturing:  # a capture copies the parameters, runs nothing
            self.graphs[self.capturing].append((function, gx, gy, gz, bx, by, bz_, shared,
                                                ctypes.string_at(block, 8 * size)))
            return 0
        slots = (ctypes.c_int64 * size).from_address(block)
        begin, end = (_evaluate(e, kernel, slots) for e in (task.begin, task.end))
        if task.kind == "serial":
            assert (gx, bx) == (1, 1)
        else:
            assert bx == 256 and gx == min(-(-(end - begin) // 256), SMS * 3), (gx, begin, end)
        assert (gy, gz, by, bz_, shared) == (1, 1, 1, 1, 0)
        self.launches.append((task.name, gx, bx))
        if end > begin:
            fn(begin, end, block)
        return 0


    # cuda_driver's stream capture and graphs: a graph is the list of launches captured.
    def begin_capture(self, stream: int) -> None:
        assert self.capturing is None
        self.capturing = stream
        self.graphs[stream] = []

    def end_capture(self, stream: int) -> int:
        assert stream == self.capturing
        self.capturing = None
        return stream

    def launch_graph(self, graph: int, stream: int) -> None:
        assert stream != self.capturing
        for function, *grid, parameters in self.graphs[graph]:
            block = ctypes.create_string_buffer(parameters)
            params = (ctypes.c_void_p * 1)(ctypes.addressof(block))
            assert self.launch(function, *grid, stream, ctypes.addressof(params), None) == 0


def _evaluate(e: k.Expr, kernel: k.Kernel, slots) -> int:
    """A task bound, read from the argument block as the device would."""
    layout = ArgLayout.of(kernel.params)
    if isinstance(e, k.Const):
        return int(e.value)
    if isinstance(e, k.ArrayExtent):
        return slots[layout.slots[e.param.name] + 1 + e.axis]
    if isinstance(e, k.ScalarRef):
        return slots[layout.slots[e.param.name]]
    if isinstance(e, k.Cast):
        return _evaluate(e.x, kernel, slots)
    if isinstance(e, k.Unary) and e.op == "neg":  # range(n - 1, 0, -step)
        return -_evaluate(e.x, kernel, slots)
    a, b = _evaluate(e.a, kernel, slots), _evaluate(e.b, kernel, slots)
    return {"add": a + b, "sub": a - b, "mul": a * b, "maximum": max(a, b), "minimum": min(a, b),
            "floordiv": a // b if b else 0, "remainder": a % b if b else 0}[e.op]


# Prepared calls with fixed grids launch from native code, which calls the current test's fake
# through this C pointer. It lives as long as the module: prepared calls outlive a test.
_FAKES: list[FakeGpu] = []
_NATIVE_LAUNCH = CU_LAUNCH(lambda *args: _FAKES[0].launch(*args))
_NATIVE_LAUNCH_ADDRESS = ctypes.cast(_NATIVE_LAUNCH, ctypes.c_void_p).value
_NATIVE_CONTEXT = FakeDriver()  # its context calls; launches go to _NATIVE_LAUNCH
_NATIVE_CONTEXT.address = _NATIVE_LAUNCH_ADDRESS


class HostMemory:
    """cuda_driver's memory calls on host memory."""

    def __init__(self) -> None:
        self.buffers: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int, stream: int = 0) -> int:
        buffer = np.zeros(max(nbytes, 1), np.uint8)
        self.buffers[buffer.ctypes.data] = buffer
        return buffer.ctypes.data


@pytest.fixture
def gpu(monkeypatch):
    fake, memory = FakeGpu(), HostMemory()
    devices = {}
    monkeypatch.setattr(cuda_driver, "device", lambda index=0: devices.setdefault(index, FakeDevice(index)))
    monkeypatch.setattr(cuda_driver, "raw_launch_function", lambda: fake.launch)
    _FAKES[:] = [fake]
    monkeypatch.setattr(cuda_driver, "alloc", memory.alloc)
    monkeypatch.setattr(cuda_driver, "free", lambda pointer, stream=0: None)
    monkeypatch.setattr(cuda_driver, "synchronize", lambda stream=0: None)
    monkeypatch.setattr(cuda_driver, "fill_bytes", lambda p, byte, n, stream=0: ctypes.memset(p, byte, n))
    monkeypatch.setattr(cuda_driver, "copy_to_host", lambda h, p, n, stream=0: ctypes.memmove(h, p, n))
    monkeypatch.setattr(cuda_driver, "copy_to_device", lambda p, h, n, stream=0: ctypes.memmove(p, h, n))
    monkeypatch.setattr(engine, "compile_loop_kernel_cuda", fake.compile)
    streams = iter(range(0xC0DE, 0xD0DE))
    monkeypatch.setattr(cuda_driver, "create_stream", lambda: next(streams))
    monkeypatch.setattr(cuda_driver, "destroy_stream", lambda stream: None)
    monkeypatch.setattr(cuda_driver, "begin_capture", fake.begin_capture)
    monkeypatch.setattr(cuda_driver, "end_capture", fake.end_capture)
    monkeypatch.setattr(cuda_driver, "graph_nodes", lambda graph: len(fake.graphs[graph]))
    monkeypatch.setattr(cuda_driver, "instantiate_graph", lambda graph: graph)
    monkeypatch.setattr(cuda_driver, "destroy_graph", lambda graph: None)
    monkeypatch.setattr(cuda_driver, "destroy_graph_exec", lambda graph: None)
    monkeypatch.setattr(cuda_driver, "launch_graph", fake.launch_graph)
    # bz.record(profile=True) times launches with CUDA events; the fake GPU's take no time.
    monkeypatch.setattr(cuda_driver, "Event", object)
    monkeypatch.setattr(cuda_driver, "record_event", lambda event, stream=0: None)
    monkeypatch.setattr(cuda_driver, "elapsed_ms", lambda start, end: 0.0)
    return fake


def on_gpu(array: np.ndarray, device: int = 0) -> DeviceArray:
    """A DeviceArray over `array`'s host memory (it stays alive with it)."""
    out = DeviceArray.__new__(DeviceArray)
    out.shape, out.dtype, out.strides = array.shape, array.dtype, array.strides
    out.device, out.stream, out.ptr, out.nbytes, out.host = device, 0, array.__array_interface__["data"][0], \
        array.nbytes, array
    return out


def to_gpu(args: list) -> list:
    return [on_gpu(a) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.name)
def test_every_case_matches_the_cpu(gpu, case):
    rng = np.random.default_rng(1)
    cpu_args = case.args(rng)
    gpu_host = [a.copy() if isinstance(a, np.ndarray) else a for a in cpu_args]
    for position in case.outputs:
        poison(cpu_args[position])
        poison(gpu_host[position])
    case.kernel(*cpu_args)
    with bz.record() as rec:
        case.kernel(*to_gpu(gpu_host))
    assert [launch.task for launch in rec.launches] == [t.name for t in case.kernel.last_entry.launcher.kernel.tasks]
    results = [a for a in gpu_host if isinstance(a, np.ndarray)]
    expected = [a for a in cpu_args if isinstance(a, np.ndarray)]
    if case.compare is not None:
        case.compare(gpu_host, cpu_args)
    else:
        for got, want in zip(results, expected):
            np.testing.assert_array_equal(got, want)


def test_the_cached_call_patches_pointers_extents_and_scalars(gpu, monkeypatch):
    @bz.kernel
    def axpy(x: bz.Array[bz.float64, 1], y: bz.Array[bz.float64, 1], a: float):
        for i in range(x.shape[0]):
            y[i] += a * x[i]

    x, y = np.arange(3000.0), np.zeros(3000)
    gx, gy = on_gpu(x), on_gpu(y)
    axpy(gx, gy, 1.0)
    assert len(axpy.calls.prepared) == 1
    bound = []  # the calls the call cache did not take
    bind_and_run = kernel_gpu.bind_and_run
    monkeypatch.setattr(kernel_gpu, "bind_and_run", lambda fn, args: bound.append(args) or bind_and_run(fn, args))
    axpy(gx, gy, 2.0)  # the cached call: only the scalar changes
    other = np.zeros(3000)
    axpy(gx, on_gpu(other), 1.0)  # the same description, another pointer
    assert len(axpy.calls.prepared) == 1 and len(gpu.launches) == 3 and not bound
    np.testing.assert_array_equal(y, 3 * x)
    np.testing.assert_array_equal(other, x)
    short = np.zeros(10)
    axpy(on_gpu(x[:10]), on_gpu(short), 5.0)  # new extents: a second prepared call, no recompile
    assert len(axpy.calls.prepared) == 2 and len(axpy.entries) == 1
    np.testing.assert_array_equal(short, 5 * x[:10])
    assert gpu.launches[-1] == ("axpy_t0", 1, 256) and gpu.launches[0] == ("axpy_t0", SMS * 3, 256)


def test_scalar_bounds_are_read_per_call(gpu):
    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1], lo: int, hi: int):
        for i in range(lo, hi):
            a[i] = i * 2.0

    a = np.zeros(2000, np.float32)
    ga = on_gpu(a)
    fill(ga, 3, 7)
    fill(ga, 1500, 1900)  # cached call: the grid follows the new bounds
    expected = np.zeros(2000, np.float32)
    expected[3:7] = np.arange(3, 7) * 2
    expected[1500:1900] = np.arange(1500, 1900) * 2
    np.testing.assert_array_equal(a, expected)
    assert [g for _, g, _ in gpu.launches] == [1, 2]


def test_arguments_that_start_to_overlap_get_the_unfused_kernel(gpu):
    @bz.kernel
    def shift(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(b.shape[0]):
            b[i] = a[i] + 1.0
        for i in range(b.shape[0]):
            a[i] = b[i] * 2.0

    base = np.zeros(11, np.float32)
    a, b = np.zeros(10, np.float32), np.zeros(10, np.float32)
    with bz.record() as rec:
        shift(on_gpu(a), on_gpu(b))
    assert len(rec.launches) == 1
    with bz.record() as rec:
        shift(on_gpu(base[1:]), on_gpu(base[:10]))  # the same description, now sharing memory
    assert len(rec.launches) == 2
    reference = np.zeros(11, np.float32)
    shift(reference[1:], reference[:10])
    np.testing.assert_array_equal(base, reference)
    # Apart and together in turn: the two kernels' calls of the description are paired
    # (runtime/loop_calls.py, LoopCall), as on the host, and no call binds again.
    apart = on_gpu(np.zeros(10, np.float32))
    with bz.record() as rec:
        for _ in range(3):
            shift(on_gpu(a), apart)
            shift(on_gpu(base[1:]), on_gpu(base[:10]))
    assert rec.entries == [] and len(rec.launches) == 9  # the fused kernel one launch a call, the unfused two


def test_host_and_gpu_arrays_do_not_mix_and_devices_must_agree(gpu):
    @bz.kernel
    def copy(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            b[i] = a[i]

    a = np.zeros(4, np.float32)
    with pytest.raises(bz.InputError, match=r"argument 'a': expected a GPU array \(argument 'b' is one\), "
                                            r"got a host array \(ndarray\)"):
        copy(a, on_gpu(a.copy()))
    with pytest.raises(bz.InputError, match=r"argument 'b': expected an array on cuda:0 .*got one on cuda:1"):
        copy(on_gpu(a), on_gpu(a.copy(), device=1))
    with pytest.raises(bz.InputError, match="argument 'b': expected float32, got float64"):
        copy(on_gpu(a), on_gpu(np.zeros(4)))
    with pytest.raises(bz.InputError, match="argument 'b': expected 1 dimension"):
        copy(on_gpu(a), on_gpu(np.zeros((4, 1), np.float32)))


class InterfaceArray:
    """A GPU array known only by its `__cuda_array_interface__`, over a host array's memory."""

    def __init__(self, array: np.ndarray, readonly: bool) -> None:
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "strides": None,
                                         "data": (array.ctypes.data, readonly), "version": 3}


def test_a_read_only_gpu_array_is_not_written(gpu, monkeypatch):
    monkeypatch.setattr(device_arrays.cuda, "device_of_pointer", lambda pointer: 0)

    @bz.kernel
    def copy(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            b[i] = a[i]

    a, b = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    for _ in range(2):  # the first call, then the same arguments again
        with pytest.raises(bz.InputError, match="argument 'b': the kernel writes it, but the array is read-only"):
            copy(InterfaceArray(a, readonly=False), InterfaceArray(b, readonly=True))
        assert not b.any()
    copy(InterfaceArray(a, readonly=True), InterfaceArray(b, readonly=False))  # read-only where only read
    np.testing.assert_array_equal(b, a)


def test_a_gpu_array_off_whole_elements_is_refused(monkeypatch):
    """A GPU kernel reads an element at an address aligned to its size (a misaligned one faults and
    ends the CUDA context) and steps by whole elements: a pointer or strides off that are refused by
    name, in a loop kernel and a fusion alike (a fusion read them unchecked)."""
    monkeypatch.setattr(device_arrays.cuda, "device_of_pointer", lambda pointer: 0)

    @bz.kernel
    def double(a: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            a[i] *= 2.0

    with bz.Fusion() as f:
        x = f.define_tensor((-1,), bz.float32, name="x")
        f.add_output(x * 2.0)
    memory = np.zeros(64, np.uint8)
    misaligned, odd_strides = InterfaceArray(memory[1:33].view(np.float32), True), InterfaceArray(memory[:32], True)
    misaligned.__cuda_array_interface__["data"] = (memory.ctypes.data + 1, False)
    odd_strides.__cuda_array_interface__.update(typestr="<f4", shape=(4,), strides=(6,))
    for value, got in [(misaligned, r"got pointer 0x[0-9a-f]*[13579bdf] and strides \(4,\)"),
                       (odd_strides, r"got pointer 0x[0-9a-f]+ and strides \(6,\)")]:
        expected = r"expected a pointer and strides in whole 4-byte elements, " + got
        with pytest.raises(bz.InputError, match=r"argument 'a': " + expected):
            double(value)
        with pytest.raises(bz.InputError, match=r"input 0 \('x'\): " + expected):
            f.execute([value])
    assert not memory.any()


def test_scalars_are_checked_on_the_cached_call_too(gpu):
    @bz.kernel
    def add(a: bz.Array[bz.int32, 1], s: bz.int32):
        for i in range(a.shape[0]):
            a[i] += s

    a = np.zeros(4, np.int32)
    ga = on_gpu(a)
    add(ga, 1)
    with pytest.raises(bz.InputError, match="argument 's': 4294967296 does not fit in int32"):
        add(ga, 2**32)
    with pytest.raises(bz.InputError, match="argument 's': expected an int32 scalar, got float"):
        add(ga, 1.5)
    assert a.tolist() == [1] * 4


def test_debug_checks_raise_after_the_launch(gpu):
    @bz.kernel(debug=True)
    def shift(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(b.shape[0]):
            b[i] = a[i + 1]

    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(bz.KernelAssertionError, match=r"index out of bounds: axis 0 of 'a'"):
        shift(on_gpu(a), on_gpu(b))
    shift(on_gpu(a), on_gpu(np.zeros(3, np.float32)))  # in bounds: the status word was reset


def test_six_loops_are_one_launch(gpu):
    from braze.cli.particles import particle_step, particle_step_unfused, particles

    arrays = to_gpu(particles(1000))
    with bz.record() as fused:
        particle_step(*arrays, np.float32(1e-3))
    with bz.record() as unfused:
        particle_step_unfused(*arrays, np.float32(1e-3))
    assert (len(fused.launches), len(unfused.launches)) == (1, 6)


def test_device_views_of_fake_arrays_need_no_driver(monkeypatch):
    view = device_arrays.as_device_view(on_gpu(np.zeros((2, 3), np.float32)), "x")
    assert view.shape == (2, 3) and view.strides == (12, 4)


def test_the_gpu_particle_benchmark_runs(gpu):
    from braze.cli.particles import TWELVE_LOOPS
    from braze.cli.particles_gpu import run_particle_step_gpu

    row = run_particle_step_gpu(1000, steps=3, seconds=0.01, with_torch=False)
    assert (row.launches_fused, row.launches_unfused, row.max_error) == (1, 6, 0.0)
    row = run_particle_step_gpu(1000, steps=3, seconds=0.01, case=TWELVE_LOOPS)
    assert (row.launches_fused, row.launches_unfused, row.max_error) == (1, 12, 0.0)


def _prepared_for(fn, *args):
    """The prepared call filed for calls like `args` (other tests in this process may have filed
    others for the same kernel)."""
    prepared = fn.calls.filed(args)
    assert prepared is not None
    return prepared


def test_fixed_grids_launch_from_one_native_function(gpu):
    from braze.cli.particles import particle_step_unfused, particles

    host = particles(1000)
    expected = [a.copy() for a in host]
    arrays = to_gpu(host)
    particle_step_unfused(*arrays, np.float32(1e-3))  # binds and prepares
    prepared = _prepared_for(particle_step_unfused, *arrays, np.float32(1e-3))
    assert prepared.launch_all is not None and prepared.launch_all.count == 6
    before = len(gpu.launches)
    particle_step_unfused(*arrays, np.float32(1e-3))  # the cached call: six launches, one native call
    assert [name for name, _, _ in gpu.launches[before:]] == [t.name for t in prepared.executor.kernel.tasks]
    for _ in range(2):  # the same two steps on the host, through the CPU backend
        particle_step_unfused(*expected, np.float32(1e-3))
    for got, want in zip(host, expected):
        np.testing.assert_array_equal(got, want)


def test_scalar_bounds_and_debug_checks_launch_from_python(gpu):
    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1], hi: int):
        for i in range(hi):
            a[i] = 1.0

    @bz.kernel(debug=True)
    def copy(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            b[i] = a[i]

    a, b = on_gpu(np.zeros(8, np.float32)), on_gpu(np.zeros(8, np.float32))
    fill(a, 5)
    copy(a, b)
    assert _prepared_for(fill, a, 5).launch_all is None  # the grid follows `hi`, a scalar
    assert _prepared_for(copy, a, b).launch_all is None  # the status word is read after each task


def test_a_failed_native_launch_names_the_task(gpu, monkeypatch):
    @bz.kernel(fuse_tasks=False)
    def two(a: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            a[i] += 1.0
        for i in range(a.shape[0]):
            a[i] *= 2.0

    a = on_gpu(np.zeros(8, np.float32))
    two(a)
    launch = gpu.launch
    monkeypatch.setattr(gpu, "launch", lambda function, *rest: 701 if len(gpu.launches) >= 3 else
                        launch(function, *rest))

    def named_error(code, name, grid, block):  # the driver's text for the code needs a real driver
        raise bz.CudaError(f"launch of {name} failed with {code}")

    monkeypatch.setattr(cuda_driver, "raise_launch_error", named_error)
    with pytest.raises(bz.CudaError, match=r"launch of two_t1\w* failed with 701"):
        two(a)


@bz.kernel(fuse_tasks=False)
def graph_step(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], dt: bz.float32):
    for i in range(x.shape[0]):
        v[i] -= 9.81 * dt
    for i in range(x.shape[0]):
        x[i] += v[i] * dt
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            x[i] = -x[i]
            v[i] = -v[i]


def test_a_graph_captures_the_launches_and_replays_them_as_one(gpu):
    rng = np.random.default_rng(3)
    x, v = rng.uniform(0, 1, 3000).astype(np.float32), rng.uniform(-1, 1, 3000).astype(np.float32)
    x2, v2 = x.copy(), v.copy()
    gx, gv = on_gpu(x), on_gpu(v)
    graph_step(gx, gv, np.float32(1e-2))  # a prepared call with a native launch exists
    with bz.graph() as g:
        graph_step(gx, gv, np.float32(1e-2))
        graph_step(gx, gv, np.float32(1e-2))
        assert gpu.launches[3:] == []  # captured, not run: the graph runs once when the body ends
    assert g.gpu_nodes == 6 and len(gpu.launches) == 9
    for _ in range(10):
        g.replay()
    for _ in range(23):
        graph_step(on_gpu(x2), on_gpu(v2), np.float32(1e-2))
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(v, v2)


def test_a_graph_holds_one_stream_and_no_debug_checks(gpu):
    x, v = on_gpu(np.zeros(8, np.float32)), on_gpu(np.zeros(8, np.float32))
    elsewhere = on_gpu(np.zeros(8, np.float32))
    elsewhere.stream = 7
    with pytest.raises(bz.UnsupportedError, match="a graph replays on one stream"), bz.graph():
        graph_step(x, v, np.float32(1.0))
        graph_step(elsewhere, v, np.float32(1.0))  # the first array decides the stream
    assert gpu.capturing is None  # the failed body closed its capture
    debug = bz.kernel(graph_step.fn, debug=True)
    with pytest.raises(bz.UnsupportedError, match="debug checks"), bz.graph():
        debug(x, v, np.float32(1.0))
    with pytest.raises(bz.UnsupportedError, match="profile outside the graph"), bz.record(profile=True), bz.graph():
        graph_step(x, v, np.float32(1.0))


def test_a_graph_keeps_the_compiled_kernel_it_launches(gpu):
    """A captured graph launches the kernel's functions: its module must stay loaded (with the
    compiled kernel that holds it) after the kernel object itself is gone."""

    @bz.kernel
    def double(x: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            x[i] *= 2.0

    data = np.ones(300, np.float32)
    with bz.graph() as g:
        double(on_gpu(data))
    compiled = weakref.ref(double.last_entry.launcher.compiled)
    del double
    gc.collect()
    assert compiled() is not None
    g.replay()
    np.testing.assert_array_equal(data, 4.0)
    del g
    gc.collect()
    assert compiled() is None
