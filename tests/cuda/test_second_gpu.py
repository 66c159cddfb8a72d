"""`cuda:1` works like `cuda:0`: inputs on the second GPU run there, outputs are made there, the
cached call makes that GPU's context current (checked on every call, not remembered, and the
user's own made current again after), and `device="cuda:1"` copies host arrays to it.

Needs two NVIDIA GPUs (skipped otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import cuda_driver
from braze.errors import InputError
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() < 2, reason="needs two NVIDIA GPUs")]


def softmax_bias() -> bz.Fusion:
    with bz.Fusion(name="softmax_bias") as f:
        x, b = f.define_tensor([-1, -1]), f.define_tensor([-1])
        f.add_output(bz.ops.softmax(x + b, -1))
        f.add_output(bz.ops.sum(x, axes=[0, 1]))
    return f


def reference(x: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = x.astype(np.float64) + b
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), x.sum(dtype=np.float64)


def poison_freed_memory(torch, device: str) -> None:
    """Fills the memory torch's caching allocator holds free with NaN, so that an output a call
    fails to write does not show an earlier result."""
    torch.cuda.synchronize(device)
    free = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if free > 0:
        torch.full((free // 4,), float("nan"), device=device)
    torch.cuda.synchronize(device)


def test_torch_tensors_on_the_second_gpu() -> None:
    torch = pytest.importorskip("torch")
    f = softmax_bias()
    for device in ("cuda:1", "cuda:0", "cuda:1"):  # both GPUs, alternating: each activates its context
        x = torch.randn(40, 300, device=device)
        b = torch.randn(300, device=device)
        for _ in range(3):  # the first through the host program, then cached calls
            soft, total = f.execute([x, b])
            assert soft.device == x.device and total.device == x.device
        expected_soft, expected_total = reference(x.cpu().numpy(), b.cpu().numpy())
        np.testing.assert_allclose(soft.cpu().numpy(), expected_soft, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.cpu().numpy(), expected_total, rtol=1e-4, atol=1e-3)


def test_alternating_devices_keep_one_prepared_call_each() -> None:
    torch = pytest.importorskip("torch")
    f = softmax_bias()
    inputs = {d: [torch.randn(64, 500, device=d), torch.randn(500, device=d)] for d in ("cuda:0", "cuda:1")}
    for _ in range(3):
        for args in inputs.values():
            f.execute(args)
    with bz.record() as recording:
        for _ in range(5):
            for device, args in inputs.items():
                soft, _ = f.execute(args)
                assert soft.device == torch.device(device)
    assert recording.entries == [] and recording.compiles == [], "a device switch prepared the call again"


@pytest.mark.parametrize("cached", [False, True])
def test_the_users_current_device_is_neither_trusted_nor_changed(cached: bool) -> None:
    """torch.cuda.set_device between braze calls: braze launches in its kernels' context whatever is
    current, and leaves the user's device current after, as a torch op on another device does."""
    torch = pytest.importorskip("torch")
    f = softmax_bias()
    x, b = torch.randn(33, 700, device="cuda:0"), torch.randn(700, device="cuda:0")
    expected_soft, expected_total = reference(x.cpu().numpy(), b.cpu().numpy())
    if cached:
        for _ in range(3):
            f.execute([x, b])
    for user_device in (1, 0, 1):
        torch.cuda.set_device(user_device)
        for _ in range(2):
            soft = total = None
            poison_freed_memory(torch, "cuda:0")
            soft, total = f.execute([x, b])
            assert torch.cuda.current_device() == user_device
        np.testing.assert_allclose(soft.cpu().numpy(), expected_soft, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.cpu().numpy(), expected_total, rtol=1e-4, atol=1e-3)
    torch.cuda.set_device(0)


def test_a_loop_kernel_runs_in_its_arrays_context_whatever_is_current() -> None:
    torch = pytest.importorskip("torch")
    from braze.cli.particles import particle_step, particles

    host = particles(1000)
    expected = [a.copy() for a in host]
    particle_step(*expected, np.float32(1e-3))  # the CPU backend
    torch.cuda.set_device(0)
    gpu = [torch.from_numpy(a).to("cuda:1") for a in host]
    for _ in range(2):  # the first call, then the cached one, each after a fresh start
        for target, start in zip(gpu, host):
            target.copy_(torch.from_numpy(start))
        particle_step(*gpu, np.float32(1e-3))
        assert torch.cuda.current_device() == 0
        for got, want in zip(gpu, expected):
            np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)


def test_device_arrays_and_host_copies_on_the_second_gpu() -> None:
    f = softmax_bias()
    x = np.random.default_rng(1).standard_normal((17, 1000)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    expected_soft, _ = reference(x, b)
    soft, _ = f.execute([x, b], device="cuda:1")
    np.testing.assert_allclose(soft, expected_soft, rtol=1e-5, atol=1e-6)
    arrays = [DeviceArray.from_numpy(a, device=1) for a in (x, b)]
    for _ in range(2):
        soft, _ = f.execute(arrays)
        assert soft.device == 1
    np.testing.assert_allclose(soft.numpy(), expected_soft, rtol=1e-5, atol=1e-6)


def test_inputs_on_two_gpus_are_an_input_error() -> None:
    torch = pytest.importorskip("torch")
    f = softmax_bias()
    with pytest.raises(InputError, match="cuda:0.*cuda:1|cuda:1.*cuda:0"):
        f.execute([torch.zeros(2, 3, device="cuda:0"), torch.zeros(3, device="cuda:1")])
