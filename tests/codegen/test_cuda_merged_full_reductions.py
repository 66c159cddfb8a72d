"""Full reductions of one fusion over the same elements (a sum, a sum of squares, a maximum, a dot
product and an argmax of the same tensors) run on a GPU as one task, one launch reading the tensors
once (engine._merged_full_reductions); a reduction that reads another's result, or walks other
extents, keeps its own. Each case runs its generated CUDA on the CPU (tests/cuda_on_cpu.py) and the
CPU backend, against float64 NumPy, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def _run(f: bz.Fusion, arrays: list[np.ndarray], want: list[float]) -> list[str]:
    """Both backends against `want`; the names of the GPU launches."""
    with bz.config.scope(enable="poison_outputs"):
        cpu = f.execute([a.copy() for a in arrays])
        cuda, launches = run_on_cpu(f, arrays, sm_count=4, resident=2)
    for outputs in (cpu, cuda):
        for got, expected in zip(outputs, want, strict=True):
            np.testing.assert_allclose(float(np.asarray(got)), expected, rtol=1e-5, atol=1e-3)
    return [launch[0] for launch in launches]


@pytest.mark.parametrize("shape", [(100003,), (37, 1001), (4, 5, 999)])
def test_statistics_of_the_same_tensors_take_one_launch(shape):
    rng = np.random.default_rng(len(shape))
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    axes = list(range(len(shape)))
    with bz.Fusion() as f:
        xt, yt = f.define_tensor([-1] * len(shape)), f.define_tensor([-1] * len(shape))
        f.add_output(xt.sum())
        f.add_output((xt * xt).sum())
        f.add_output(bz.ops.max(xt, axes))
        f.add_output((xt * yt).sum())
        f.add_output(bz.ops.min(yt, axes))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    launches = _run(f, [x, y], [x64.sum(), (x64 * x64).sum(), x64.max(), (x64 * y64).sum(), y64.min()])
    assert len(launches) == 1


def test_an_argmax_joins_the_sums_of_its_tensor():
    x = np.random.default_rng(3).standard_normal(50257).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1])
        f.add_output(bz.ops.argmax(xt, 0))
        f.add_output(xt.sum())
        f.add_output(bz.ops.max(xt, [0]))
    x64 = x.astype(np.float64)
    assert len(_run(f, [x], [float(np.argmax(x)), x64.sum(), x64.max()])) == 1


def test_a_reduction_of_another_reductions_result_keeps_its_own_launch():
    x = np.random.default_rng(4).standard_normal(30011).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1])
        total = xt.sum()
        f.add_output(total)
        f.add_output(((xt - total / 30011.0) ** 2).sum())
    x64 = x.astype(np.float64)
    launches = _run(f, [x], [x64.sum(), ((x64 - x64.sum() / 30011.0) ** 2).sum()])
    assert len(launches) == 2


def test_reductions_over_other_extents_keep_their_own_launches():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(4099).astype(np.float32), rng.standard_normal(8191).astype(np.float32)
    with bz.Fusion() as f:
        xt, yt = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(xt.sum())
        f.add_output(yt.sum())
    launches = _run(f, [x, y], [x.astype(np.float64).sum(), y.astype(np.float64).sum()])
    assert len(launches) == 2
