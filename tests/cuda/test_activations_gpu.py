"""The composites of braze/ops/activations.py on the GPU: logsumexp over rows from empty to past a
block (its max reads the row padded with one -inf, or, under BRAZE_DISABLE=logsumexp_pad, the row
as it is), and the activations over a tensor large enough for the vector paths; torch CUDA tensors
in, outputs poisoned before the kernels write them, against NumPy in float64.

    pytest -m cuda tests/cuda/test_activations_gpu.py
    BRAZE_OPS_BACKEND=cuda pytest tests/ops/test_activations.py   # every op test of them on the GPU
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver
from braze.ops.activations import SELU_ALPHA, SELU_SCALE

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16}
TOLERANCE = {bz.float32: 1e-5, bz.bfloat16: 1e-2}


def _on_the_gpu(f: bz.Fusion, x: torch.Tensor) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        outs = f.execute([x.cuda()])
    return [o.float().cpu().numpy().astype(np.float64) for o in outs]


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("length", [0, 1, 7, 1000, 1024, 4096])
@pytest.mark.parametrize("dtype", [bz.bfloat16, bz.float32], ids=lambda d: d.name)
def test_logsumexp_rows_match_numpy(dtype, length, padded):
    if length == 0 and not padded:
        pytest.skip("the max of an empty row has no value without the pad (an InputError)")
    x = torch.randn((37, length), generator=torch.Generator().manual_seed(length)) * 30
    x[3] = float("-inf")  # a row masked whole gives -inf, not NaN
    x = x.to(TORCH[dtype])
    with config.scope(disable=() if padded else ("logsumexp_pad",)), bz.Fusion() as f:
        f.add_output(bz.ops.logsumexp(f.define_tensor((-1, -1), dtype=dtype), -1))
    assert any(e.op == "pad" for e in f.exprs) == padded
    (got,) = _on_the_gpu(f, x)
    x64 = x.float().numpy().astype(np.float64)
    with np.errstate(divide="ignore"):
        expected = np.log(np.exp(x64).sum(-1))
    np.testing.assert_allclose(got, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype] * 30)


def _elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


ACTIVATIONS = {
    "softplus": (lambda x: bz.ops.softplus(x, beta=2, threshold=5),
                 lambda x: np.where(2 * x > 5, x, np.logaddexp(0, 2 * x) / 2)),
    "logsigmoid": (bz.ops.logsigmoid, lambda x: -np.logaddexp(0, -x)),
    "mish": (bz.ops.mish, lambda x: x * np.tanh(np.logaddexp(0, x))),
    "hardswish": (bz.ops.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "selu": (bz.ops.selu, lambda x: SELU_SCALE * _elu(x, SELU_ALPHA)),
    "leaky_relu": (lambda x: bz.ops.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "logaddexp": (lambda x: bz.ops.logaddexp(x, x.flip(0)), lambda x: np.logaddexp(x, x[::-1])),
    "nan_to_num": (lambda x: bz.ops.nan_to_num(bz.ops.log(x), neginf=-7.0),  # log of a negative: NaN
                   lambda x: np.nan_to_num(np.log(x), nan=0.0, neginf=-7.0)),
}


@pytest.mark.parametrize("dtype", [bz.bfloat16, bz.float32], ids=lambda d: d.name)
def test_activations_match_numpy(dtype):
    x = (torch.randn((1031, 257), generator=torch.Generator().manual_seed(1)) * 8).to(TORCH[dtype])
    with bz.Fusion() as f:
        t = f.define_tensor((-1, -1), dtype=dtype)
        for build, _ in ACTIVATIONS.values():
            f.add_output(build(t))
    x64 = x.float().numpy().astype(np.float64)
    for (name, (_, reference)), got in zip(ACTIVATIONS.items(), _on_the_gpu(f, x), strict=True):
        with np.errstate(invalid="ignore", divide="ignore"):
            expected = reference(x64)
        np.testing.assert_allclose(got, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], err_msg=name)
