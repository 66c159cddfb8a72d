"""batch_norm and group_norm on a GPU, their normalization's rows spanning H * W (schedule/rows.py): at
H * W that 4 does not divide (the rows' scalar loop), with x one element into its buffer (dense but
not 16-byte aligned: the scalar copy of the row loop), transposed (no merge, the tiles), with extents
of 1, and at the suite's shapes (the 4-wide loop). float32 and bfloat16; torch CUDA tensors in,
outputs poisoned first, against NumPy in float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import braze as bz
from braze import config
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import reference
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

# (numpy dtype, torch dtype, rtol, atol). bfloat16's statistics are rounded to bfloat16 before they
# normalize (as the suite's math does in the input type), so its outputs are off by up to ~0.08.
_DTYPES = {"float32": (np.float32, torch.float32, 1e-4, 1e-4),
           "bfloat16": (ml_dtypes.bfloat16, torch.bfloat16, 3e-2, 0.1)}
ODD = [(3, 64, 5, 7), (2, 64, 1, 1), (2, 64, 1, 9), (5, 64, 3, 1), (2, 64, 17, 31)]
# bfloat16 where each statistic has 35 samples or more (with two, rounding dominates the result).
SHAPES_AND_DTYPES = [(s, "float32") for s in ODD] + [(s, "bfloat16") for s in ((3, 64, 5, 7), (2, 64, 17, 31))]
SUITE = {"batch_norm": (32, 256, 56, 56), "group_norm": (16, 512, 64, 64)}


def on_gpu(a: np.ndarray, dtype, layout: str):
    """`a` on the GPU as `dtype`: contiguous, one element into a buffer (every row start misaligned for
    16-byte vectors), or a transposed view of its last two axes."""
    t = torch.from_numpy(np.asarray(a, np.float32)).to("cuda", dtype)
    if layout == "offset":
        buffer = torch.empty(t.numel() + 1, dtype=dtype, device="cuda")
        buffer[1:] = t.reshape(-1)
        return buffer[1:].view(t.shape)
    if layout == "transposed" and t.ndim == 4:
        return t.transpose(2, 3).contiguous().transpose(2, 3)
    return t


def check(name: str, shape, dtype_name: str, layout: str) -> None:
    numpy_dtype, torch_dtype, rtol, atol = _DTYPES[dtype_name]
    case = next(c for c in CASES if c.name == name)
    with bz.Fusion(name=case.name) as f:
        case.build(f, shape, bz.dtypes.as_dtype(dtype_name))
    arrays = case.inputs(np.random.default_rng(0), shape, numpy_dtype)
    want = reference(case, arrays, None)
    with config.scope(enable="poison_outputs"):
        got = f.execute([on_gpu(a, torch_dtype, layout) for a in arrays])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.float().cpu().numpy().astype(np.float64), w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["batch_norm", "group_norm"])
@pytest.mark.parametrize("shape, dtype_name", SHAPES_AND_DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
def test_odd_shapes_and_layouts(name, shape, dtype_name, layout):
    check(name, shape, dtype_name, layout)


@pytest.mark.parametrize("name", SUITE)
def test_suite_shapes(name):
    check(name, SUITE[name], "float32", "contiguous")
