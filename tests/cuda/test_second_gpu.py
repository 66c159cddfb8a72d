"""`cuda:1` works like `cuda:0`: inputs on the second GPU run there, outputs are made there, the
cached call activates that GPU's context, and `device="cuda:1"` copies host arrays to it.

Needs two NVIDIA GPUs (skipped otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.errors import InputError
from braze.runtime import cuda_driver
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
