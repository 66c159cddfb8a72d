"""Edge values on the GPU, torch tensors in and out, outputs poisoned before the kernels write:
the sign of a negated zero, extents used as values, and reductions over empty extents.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


def run(build, *tensors):
    with bz.Fusion() as f:
        outs = build(*[f.define_tensor([-1] * t.ndim, dtype=bz.dtypes.as_dtype(t.dtype)) for t in tensors])
        for out in outs if isinstance(outs, list) else [outs]:
            f.add_output(out)
    with config.scope(enable="poison_outputs"):
        return f.execute(list(tensors))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_negated_zero_is_negative_zero(dtype) -> None:
    x = torch.tensor([0.0, -0.0, 1.5, -2.0], dtype=dtype, device="cuda")
    (y,) = run(lambda t: -t, x)
    assert torch.equal(torch.signbit(y), torch.signbit(-x)) and torch.equal(y, -x)


def test_extents_as_values() -> None:
    x = torch.randn(37, 100, device="cuda")
    mean, scaled = run(lambda t: [t.sum(1) / t.shape[1], t * bz.ops.reciprocal(t.shape[0])], x)
    torch.testing.assert_close(mean, x.double().mean(1).float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scaled, x / 37)


@pytest.mark.parametrize("shape", [(0, 16), (16, 0), (0, 0)], ids=str)
def test_softmax_over_an_empty_axis_is_empty(shape) -> None:
    x = torch.zeros(shape, device="cuda")
    first, second, sums = run(lambda t: [bz.ops.softmax(t, 0), bz.ops.softmax(t, 1), t.sum(0)], x)
    assert first.shape == shape and second.shape == shape
    torch.testing.assert_close(sums, torch.zeros(shape[1], device="cuda"))


def test_a_max_of_nothing_that_an_output_reads_is_an_input_error() -> None:
    with pytest.raises(bz.InputError, match=r"^max: T0 has an empty dimension among the reduced axes \(0,\)"):
        run(lambda t: t.max(0), torch.zeros(0, 5, device="cuda"))


def test_empty_sums_are_the_identity() -> None:
    x = torch.zeros(0, 3, device="cuda")
    total, product, anything, everything = run(lambda t: [t.sum(0), t.prod(0), t.any(0), t.all(0)], x)
    np.testing.assert_array_equal(total.cpu().numpy(), np.zeros(3))
    np.testing.assert_array_equal(product.cpu().numpy(), np.ones(3))
    assert not anything.any() and everything.all()
