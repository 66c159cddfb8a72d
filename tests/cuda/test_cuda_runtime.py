"""The CUDA backend on a GPU: interop, launches, RtcKernel, recompiles and the disk cache.

Every test here needs an NVIDIA GPU (`make gpu-test`); without one they are skipped. The op suite
itself runs on the GPU with BRAZE_OPS_BACKEND=cuda (outputs poisoned before the kernels write).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from layouts import LAYOUTS, layout_fusion

import braze as bz
from braze import config, engine
from braze.compile import cuda_driver
from braze.runtime.backends.cuda import CudaExecutor
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]


def softmax_fusion(dtype=bz.float32) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1], dtype=dtype)
        f.add_output(bz.ops.softmax(x, -1))
    return f


def reference_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("cols", [1, 7, 100, 513, 3000])
def test_softmax_rows_of_any_length_in_one_launch(cols: int) -> None:
    x = np.random.default_rng(cols).standard_normal((37, cols)).astype(np.float32)
    f = softmax_fusion()
    with bz.record() as rec, config.scope(enable="poison_outputs"):
        (y,) = f.execute([x], device="cuda")
    np.testing.assert_allclose(y, reference_softmax(x), rtol=1e-5, atol=1e-6)
    assert len(rec.launches) == 1


def test_torch_in_torch_out_on_the_current_stream() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 300, device="cuda")
    b = torch.randn(300, device="cuda")
    with bz.Fusion() as f:
        tx, tb = f.define_tensor([-1, -1]), f.define_tensor([-1])
        f.add_output(bz.ops.relu(tx * 2.0 + tb))
        f.add_output(bz.ops.sum(tx, axes=[1]))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y, s = f.execute([x, b])
    stream.synchronize()
    assert isinstance(y, torch.Tensor) and y.device.type == "cuda"
    torch.testing.assert_close(y, torch.relu(x * 2 + b))
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-4)


def test_torch_bfloat16_rms_norm() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    with bz.Fusion() as f:
        t = f.define_tensor([-1, -1], dtype=bz.bfloat16)
        f.add_output(bz.ops.rms_norm(t))
    (y,) = f.execute([x])
    xf = x.float()
    expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), expected.float(), rtol=1e-2, atol=1e-2)


def test_torch_in_place_output() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(1000, device="cuda")
    with bz.Fusion() as f:
        t = f.define_tensor([-1])
        f.add_output(t * 3.0, alias=t)
    expected = x * 3
    f.execute([x])
    torch.testing.assert_close(x, expected)


def test_cupy_in_cupy_out() -> None:
    cupy = pytest.importorskip("cupy")
    x = cupy.random.standard_normal((128, 64), dtype=cupy.float32)
    f = softmax_fusion()
    (y,) = f.execute([x])
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), reference_softmax(cupy.asnumpy(x)), rtol=1e-5, atol=1e-6)


def test_device_array_in_device_array_out() -> None:
    host = np.random.default_rng(0).standard_normal((8, 33))
    x = DeviceArray.from_numpy(host)
    with bz.Fusion() as f:
        t = f.define_tensor([-1, -1], dtype=bz.float64)
        f.add_output(bz.ops.exp(t).sum(0))
    (y,) = f.execute([x])
    assert isinstance(y, DeviceArray)
    np.testing.assert_allclose(y.numpy(), np.exp(host).sum(0), rtol=1e-12)


def test_cpu_and_cuda_tensors_do_not_mix() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        a, b = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(a + b)
    with pytest.raises(bz.InputError, match=r"expected every array on one device, got input 1 on cpu, "
                                            r"input 0 on cuda:0"):
        f.execute([torch.ones(3, device="cuda"), torch.ones(3)])


def test_rtc_kernel() -> None:
    source = r'''
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = a * x[i] + y[i];
    }'''
    kernel = bz.RtcKernel(source, "saxpy")
    x, y = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    dx, dy = DeviceArray.from_numpy(x), DeviceArray.from_numpy(y)
    kernel.launch((4,), (256,), [2.0, dx, dy, 1000])
    np.testing.assert_array_equal(dy.numpy(), 2 * x + 1)
    with pytest.raises(bz.InputError, match=r"RtcKernel saxpy: expected 4 arguments, got 3"):
        kernel.launch((4,), (256,), [2.0, dx, dy])


def test_rtc_kernel_compile_error_names_the_kernel() -> None:
    with pytest.raises(bz.CompileError, match=r"(?s)CUDA kernel 'broken' failed to compile .*undefined_thing"):
        bz.RtcKernel('extern "C" __global__ void broken() { undefined_thing(); }', "broken")


def test_an_executor_for_a_larger_block_runs_the_recompile_and_keeps_both(monkeypatch) -> None:
    """Executors asking for blocks of 1024 threads get the kernel recompiled for them (launch bounds
    of 1024, 64 registers a thread), beside the one of 256 that other executors keep running."""
    x = np.random.default_rng(1).standard_normal((16, 2000)).astype(np.float32)
    f = softmax_fusion()
    f.execute([x], device="cuda")
    original = next(iter(engine._cache_of(f).entries.values())).executor.compiled
    monkeypatch.setattr(engine, "CudaExecutor", functools.partial(CudaExecutor, block=1024))
    g = softmax_fusion()
    with config.scope(enable="poison_outputs"):
        (y,) = g.execute([x], device="cuda")
    executor = next(iter(engine._cache_of(g).entries.values())).executor
    assert executor.block == 1024 and executor.compiled is original.for_block(executor.device, 1024)
    assert "__launch_bounds__(1024)" in executor.compiled.source and executor.compiled.params.max_registers == 64
    assert all(executor.module.max_threads(name) >= 1024 for name in executor.module.functions)
    np.testing.assert_allclose(y, reference_softmax(x), rtol=1e-5, atol=1e-6)
    (y,) = f.execute([x], device="cuda")  # the original still runs
    assert original.block_size == 256
    np.testing.assert_allclose(y, reference_softmax(x), rtol=1e-5, atol=1e-6)


def test_a_loop_kernel_for_a_larger_block_runs_the_recompile(monkeypatch) -> None:
    from braze.runtime.backends import cuda_loop_kernels

    @bz.kernel
    def scaled(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1], a: bz.float32):
        for i in range(x.shape[0]):
            y[i] = a * x[i] + 1.0

    monkeypatch.setattr(cuda_loop_kernels, "CudaKernelLauncher",
                        functools.partial(cuda_loop_kernels.CudaKernelLauncher, block=1024))
    x = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    dx, dy = DeviceArray.from_numpy(x), DeviceArray.from_numpy(np.full_like(x, np.nan))
    scaled(dx, dy, 3.0)
    launcher = scaled.last_entry.launcher
    assert launcher.block == 1024 and launcher.compiled.params.block_size == 1024
    # float32 a * x + 1, fused into one rounding or not: within a unit in the last place of the result
    np.testing.assert_allclose(dy.numpy(), 3.0 * x.astype(np.float64) + 1.0, rtol=2e-7, atol=2e-7)


def test_disk_cache_hit_and_corrupt_file(tmp_path) -> None:
    x = np.random.default_rng(2).standard_normal((4, 50)).astype(np.float32)
    with config.scope(cache_dir=tmp_path):
        engine._kernels.clear()
        with bz.record() as cold:
            softmax_fusion().execute([x], device="cuda")
        engine._kernels.clear()
        with bz.record() as warm:
            softmax_fusion().execute([x], device="cuda")
        for path in tmp_path.rglob("*.bin"):
            path.write_bytes(path.read_bytes()[:100])  # truncated: a miss, not a crash
        engine._kernels.clear()
        with bz.record() as damaged:
            (y,) = softmax_fusion().execute([x], device="cuda")
    assert len(cold.compiles) == 1 and warm.compiles == [] and len(damaged.compiles) == 1
    np.testing.assert_allclose(y, reference_softmax(x), rtol=1e-5, atol=1e-6)


def test_full_reductions_over_the_grid_are_deterministic():
    x = np.random.default_rng(3).standard_normal(3_000_001).astype(np.float32)
    with bz.Fusion() as f:
        t = f.define_tensor([-1])
        f.add_output(t.sum())
        f.add_output(bz.ops.max(t))
    with bz.record() as rec:
        first = f.execute([x], device="cuda")
    again = f.execute([x], device="cuda")
    assert rec.launches[0].chunks > 1  # blocks of the grid shared the reduction
    np.testing.assert_allclose(first[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert first[1] == x.max()
    assert [a.tobytes() for a in first] == [a.tobytes() for a in again]


def test_cross_entropy_on_the_gpu():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((5000, 37)).astype(np.float32)
    target = rng.integers(0, 37, 5000)
    with bz.Fusion() as f:
        f.add_output(bz.ops.cross_entropy(f.define_tensor([-1, -1]), f.define_tensor([-1], dtype=bz.int64)))
    (loss,) = f.execute([logits, target], device="cuda")
    x = logits.astype(np.float64)
    log_probs = x - x.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -log_probs[np.arange(5000), target].mean(), rtol=1e-5)


def test_stream_argument_overrides_the_current_stream():
    torch = pytest.importorskip("torch")
    x = torch.randn(4096, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    (y,) = softmax_fusion().execute([x], stream=side)
    side.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1))
    with pytest.raises(bz.InputError, match="stream: expected a torch or CuPy stream"):
        softmax_fusion().execute([x], stream="fast")


def test_device_array_through_dlpack_and_cuda_array_interface():
    torch = pytest.importorskip("torch")
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    array = DeviceArray.from_numpy(host)
    t = torch.from_dlpack(array)
    assert t.device.type == "cuda" and t.data_ptr() == array.ptr
    torch.testing.assert_close(t.cpu(), torch.from_numpy(host))
    t.mul_(2)  # the same memory
    np.testing.assert_array_equal(array.numpy(), host * 2)
    del t
    assert torch.as_tensor(array, device="cuda").data_ptr() == array.ptr


def test_a_failed_launch_names_the_kernel_and_the_error():
    kernel = bz.RtcKernel('extern "C" __global__ void noop() {}', "noop")
    with pytest.raises(bz.CudaError, match=r"CUDA launch of noop \(grid \(1, 1, 1\), block \(4096, 1, 1\)\) failed: "
                                           r"CUDA_ERROR_INVALID_VALUE"):
        kernel.launch((1,), (4096,), [])
    kernel.launch((1,), (32,), [])  # the context is still usable
    cuda_driver.synchronize()


def test_profiled_launches_carry_device_time_and_bandwidth():
    x = np.random.default_rng(5).standard_normal((1024, 1024)).astype(np.float32)
    f = softmax_fusion()
    f.execute([x], device="cuda")
    with bz.record(profile=True) as rec:
        f.execute([x], device="cuda")
    (launch,) = rec.launches
    assert launch.device_ms > 0 and launch.gbps == pytest.approx(2 * x.nbytes / launch.device_ms / 1e6)
    with bz.record() as plain:
        f.execute([x], device="cuda")
    assert plain.launches[0].device_ms is None


@pytest.mark.parametrize("n", [1000, 300_001, (1 << 22) + 3])
def test_pointwise_grids_cover_large_problems_a_few_elements_a_thread(n: int) -> None:
    from braze.codegen.cuda_launch import POINTWISE_ELEMENTS_PER_THREAD

    with bz.Fusion(name="axpy") as f:
        x, y = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(x * 2.5 + y)
    rng = np.random.default_rng(n)
    a, b = (DeviceArray.from_numpy(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    with bz.record() as rec:
        (out,) = f.execute([a, b])
    np.testing.assert_allclose(out.numpy(), a.numpy() * 2.5 + b.numpy(), rtol=1e-6)
    (launch,) = rec.launches
    # Aligned float32 arrays: the task moves vectors of 4 (codegen/cuda_rows.py, write_thread_vectors),
    # POINTWISE_ELEMENTS_PER_THREAD elements a thread as one vector, however many blocks that takes.
    assert POINTWISE_ELEMENTS_PER_THREAD == 4
    vectors = -(-n // 4)
    assert launch.chunks == -(-vectors // 256)  # its grid: a block of 256 threads per 256 vectors


# --- outputs laid out by splits and merges of their allocation domain ------------------------------
@pytest.mark.parametrize("library", ["torch", "device_array"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 7, 4), (3, 0, 2)])
def test_split_and_merge_layouts_on_the_gpu(library: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape))
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    for layout in LAYOUTS:
        f = layout_fusion(layout)
        (want,) = f.execute([a, b], backend="reference")
        with config.scope(enable="poison_outputs"):
            if library == "torch":
                torch = pytest.importorskip("torch")
                for _ in range(2):  # the first call and the prepared one
                    (got,) = f.execute([torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()])
                    if want.size:  # an empty tensor's strides are arbitrary
                        assert tuple(s * 4 for s in got.stride()) == want.strides, layout.__name__
                    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6, err_msg=layout.__name__)
            else:
                (got,) = f.execute([a, b], device="cuda")
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=layout.__name__)
