"""Column tasks with many accumulators split over their rows on the GPU (codegen/cuda_grid.folds_together:
the strip's last block folds every accumulator in one loop over the splits): torch tensors in, outputs
poisoned before the kernels write them, against NumPy in float64, and the same bits on a second run.

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


@pytest.mark.parametrize(("dtype", "columns", "count"), [
    (bz.float32, 64, 20), (bz.float32, 63, 20), (bz.bfloat16, 64, 10), (bz.float32, 768, 50)])
def test_many_column_sums_over_split_rows_match_float64_and_repeat(dtype, columns, count):
    x = np.random.default_rng(columns).standard_normal((32768, columns)).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1, -1], dtype=dtype)
        for k in range(count):
            f.add_output((xt * float(k + 1) + float(k)).sum([0]))
    torch_dtype = torch.float32 if dtype == bz.float32 else torch.bfloat16
    on_gpu = torch.from_numpy(x).to("cuda", torch_dtype)
    runs = []
    for _ in range(2):
        with config.scope(enable="poison_outputs"):
            outputs = f.execute([on_gpu])
        torch.cuda.synchronize()
        runs.append([o.float().cpu().numpy() for o in outputs])
    x64 = on_gpu.double().cpu().numpy()
    tolerance = 1e-4 if dtype == bz.float32 else 1e-2
    for k, got in enumerate(runs[0]):
        np.testing.assert_allclose(got, (x64 * (k + 1) + k).sum(0), rtol=tolerance, atol=tolerance * 200)
    for first, second in zip(*runs):
        assert first.tobytes() == second.tobytes()


@pytest.mark.parametrize("count", [3, 17])
def test_full_reductions_of_one_tensor_in_one_launch_match_float64_and_repeat(count):
    # One task (engine._merged_full_reductions); with 17 accumulators the last block folds them together.
    x = np.random.default_rng(count).standard_normal(1 << 22).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1])
        for k in range(count):
            f.add_output(bz.ops.max(xt, [0]) if k == 1 else (xt * float(k + 1)).sum())
    on_gpu = torch.from_numpy(x).cuda()
    runs = []
    for _ in range(2):
        with config.scope(enable="poison_outputs"):
            outputs = f.execute([on_gpu])
        torch.cuda.synchronize()
        runs.append([float(o.cpu()) for o in outputs])
    x64 = x.astype(np.float64)
    for k, got in enumerate(runs[0]):
        np.testing.assert_allclose(got, x64.max() if k == 1 else (x64 * (k + 1)).sum(), rtol=1e-5, atol=1e-1)
    assert runs[0] == runs[1]
