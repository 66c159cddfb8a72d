"""Cumulative ops on a GPU (lower/scans.py: one thread walks each row): every scan over inner and
outer axes of contiguous, transposed and sliced inputs, long rows (4096: a float32 running sum's
error grows with them), empty and size-1 axes, and a scan between a pointwise producer and consumer
(`(mask.cumsum(-1) - 1) * mask`). Torch CUDA tensors in, outputs poisoned first, against NumPy in
float64.

    pytest -m cuda tests/cuda/test_scans_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

REFERENCE = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
             "cummin": np.minimum.accumulate}
TORCH = {bz.float32: torch.float32, bz.float16: torch.float16, bz.bfloat16: torch.bfloat16,
         bz.float64: torch.float64, bz.int32: torch.int32}
RTOL = {bz.float32: 1e-5, bz.float64: 1e-12, bz.float16: 2e-3, bz.bfloat16: 1e-2, bz.int32: 0}


def run_scan(name: str, x, axis: int) -> np.ndarray:
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(-1,) * x.dim(), dtype=bz.dtypes.as_dtype(x.dtype))
        f.add_output(getattr(bz.ops, name)(t, axis))
    with config.scope(enable="poison_outputs"):
        (out,) = f.execute([x])
    torch.cuda.synchronize()
    return out.cpu().float().numpy() if out.dtype == torch.bfloat16 else out.cpu().numpy()


def values(name: str, shape, dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if name == "cumprod":  # products of long rows stay finite
        x = 1 + (torch.rand(shape, generator=g) - 0.5) * 0.01
    else:
        x = torch.randn(shape, generator=g) * 3
    return x.to(TORCH[dtype]).cuda()


def check(name: str, x, axis: int) -> None:
    got = run_scan(name, x, axis)
    x64 = x.cpu().double().numpy()
    want = REFERENCE[name](x64, axis=axis)
    dtype = bz.dtypes.as_dtype(x.dtype)
    scale = np.cumsum(np.abs(x64), axis=axis) if name == "cumsum" else np.abs(want)
    allowed = RTOL[dtype] * (scale + 1e-30) * (4 if dtype.is_floating else 0)
    assert np.all(np.abs(got.astype(np.float64) - want) <= allowed), f"{name} {tuple(x.shape)} axis {axis}"


@pytest.mark.parametrize("dtype", list(TORCH), ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(REFERENCE))
def test_scans_over_inner_and_outer_axes(name, dtype):
    for shape in [(37, 4096), (4096, 3), (5, 7, 9), (1, 1), (0, 5), (5, 0)]:
        x = values(name, shape, dtype)
        for axis in range(-len(shape), len(shape)):
            check(name, x, axis)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_scans_of_transposed_and_sliced_inputs(name):
    base = values(name, (64, 130), bz.float32, seed=1)
    for x in (base.t(), base[::3, 1::2]):
        for axis in (0, 1):
            check(name, x, axis)


def test_positions_from_a_mask_between_a_producer_and_a_consumer():
    mask = (torch.rand((8, 1000), generator=torch.Generator().manual_seed(2)) > 0.3).cuda()
    x = values("cumsum", (8, 1000), bz.float32, seed=3)
    with bz.Fusion() as f:
        m, t = f.define_tensor((-1, -1), dtype=bz.bool_), f.define_tensor((-1, -1), dtype=bz.float32)
        f.add_output((m.cumsum(-1) - 1) * m)
        f.add_output(bz.ops.cumsum(t * 2 + 1, 0).sum(1))
    with config.scope(enable="poison_outputs"):
        positions, sums = f.execute([mask, x])
    m64, x64 = mask.cpu().numpy(), x.cpu().double().numpy()
    np.testing.assert_array_equal(positions.cpu().numpy(), (np.cumsum(m64, -1) - 1) * m64)
    np.testing.assert_allclose(sums.cpu().numpy(), np.cumsum(x64 * 2 + 1, 0).sum(1), rtol=1e-4)
