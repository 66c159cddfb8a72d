"""Column reductions whose threads own 16 bytes of neighbouring columns (braze/codegen/cuda_column_vectors.py)
on a GPU: sums, means, maxima and variances over axis 0 in float32, bfloat16, float16 and float64, column
counts the width divides or not, views from column 1 (every vector load misaligned: the same threads load
elements), the suite's column_sum and param_grads at their model shapes (rows split across blocks), each
bit-identical from run to run and to the misaligned copy of the same values, and against
`BRAZE_DISABLE=column_vectors`. Torch CUDA tensors in, outputs poisoned before the kernel writes, results
against NumPy in float64.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16, bz.float16: torch.float16, bz.float64: torch.float64}
TOLERANCE = {bz.float32: 2e-5, bz.bfloat16: 3e-2, bz.float16: 4e-3, bz.float64: 1e-12}


def column_ops(dtype: bz.DType) -> bz.Fusion:
    with bz.Fusion(name=f"column_vectors_{dtype.name}") as f:
        x = f.define_tensor([-1, -1], dtype=dtype)
        for out in (bz.ops.sum(x, axes=[0]), bz.ops.mean(x, axes=[0]), bz.ops.max(x, axes=[0]),
                    bz.ops.var(x, axes=[0])):
            f.add_output(out)
    return f


def columns_from(dtype: bz.DType, shape: tuple[int, int], first: int) -> torch.Tensor:
    """[rows, columns] values on the GPU, starting at column `first` of a wider array."""
    g = torch.Generator().manual_seed(shape[0] * 131 + shape[1])
    full = torch.randn(shape[0], shape[1] + first, generator=g, dtype=torch.float64).to(TORCH[dtype])
    return full.to("cuda")[:, first:]


def run(f: bz.Fusion, tensors: list) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        outs = f.execute(tensors)
    torch.cuda.synchronize()
    return [o.double().cpu().numpy() for o in outs]


@pytest.mark.parametrize("shape", [(1, 8), (37, 40), (4096, 768), (1000, 769), (3, 5)])
@pytest.mark.parametrize("dtype", list(TORCH), ids=str)
def test_column_reductions_match_numpy_aligned_or_not(dtype, shape):
    f, tol = column_ops(dtype), TOLERANCE[dtype]
    aligned, shifted = columns_from(dtype, shape, 0), columns_from(dtype, shape, 1)
    shifted.copy_(aligned)  # the same values, a column off the boundary
    got = run(f, [aligned])
    x = aligned.double().cpu().numpy()
    for actual, wanted in zip(got, [x.sum(0), x.mean(0), x.max(0), x.var(0)]):
        scale = max(1.0, float(np.abs(wanted).max(initial=0.0)))
        np.testing.assert_allclose(actual, wanted, rtol=tol, atol=tol * scale)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, run(f, [aligned])))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, run(f, [shifted])))


@pytest.mark.parametrize("name", ["column_sum", "param_grads"])
def test_the_suites_column_reductions_at_their_model_shapes(name):
    case = next(c for c in CASES if c.name == name)
    shape = case.shape("models")
    arrays = case.inputs(np.random.default_rng(0), shape, np.float32)
    tensors = [torch.from_numpy(a).to("cuda") for a in arrays]
    f = build_fusion(case, shape)
    got = run(f, tensors)
    for actual, wanted in zip(got, case.math(np, *[a.astype(np.float64) for a in arrays])):
        np.testing.assert_allclose(actual, wanted, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(wanted).max()))
    assert all(np.array_equal(a, b) for a, b in zip(got, run(f, tensors)))
    with config.scope(disable="column_vectors"):
        one_a_thread = run(build_fusion(case, shape), tensors)
    for a, b in zip(got, one_a_thread):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(b).max()))
