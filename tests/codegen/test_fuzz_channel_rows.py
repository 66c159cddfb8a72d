"""Random normalizations over several axes (batch_norm's N, H and W; a 3-D tensor's axes 0 and 2; a
norm over the last two or three axes) through their generated CUDA run on the
CPU (tests/cuda_on_cpu.py), against float64 NumPy: channels short enough to take a task each
(schedule.CHANNEL_ROW_LIMIT), among them rows of 1024 elements or more whose lanes share a block of
128, 256 or 512 threads (cuda_launch.shared_block_lanes: 32 to 256 lanes, each row combining over its
own warps), and longer ones whose statistics split across blocks. Statistics: mean and variance, the
mean of squares, a maximum; outputs the normalized tensor and, at random, the statistics themselves.
A few examples a run (BRAZE_FUZZ_SCALE, tests/fuzz_scale.py, draws more)."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

EPS = 1e-5
# (rank, reduced axes) of the statistics: the kept axes are the "channels"
LAYOUTS = [(4, (0, 2, 3)), (4, (0, 2)), (3, (0, 2)), (4, (0, 3)), (3, (0, 1)), (3, (1, 2)), (4, (1, 2, 3))]


def statistics(kind: str):
    """(braze builder, NumPy reference) of the normalized output over `axes`."""
    if kind == "norm":
        return (lambda x, axes: (x - x.mean(axes, keepdim=True)) * bz.ops.rsqrt(x.var(axes, keepdim=True) + EPS),
                lambda x, axes: (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + EPS))
    if kind == "rms":
        return (lambda x, axes: x * bz.ops.rsqrt((x * x).mean(axes, keepdim=True) + EPS),
                lambda x, axes: x / np.sqrt((x * x).mean(axes, keepdims=True) + EPS))
    return (lambda x, axes: x - bz.ops.max(x, axes=list(axes), keepdim=True),
            lambda x, axes: x - x.max(axes, keepdims=True))


@settings(max_examples=examples(3), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_channel_normalizations_on_a_fake_gpu(data):
    rank, axes = data.draw(st.sampled_from(LAYOUTS))
    # extents whose product over the reduced axes lands around 1024-3000 (rows sharing blocks), under
    # 128 (a warp or less), or past the limit (statistics apart)
    size = data.draw(st.sampled_from(["short", "shared", "long"]))
    bounds = {"short": (1, 5), "shared": (10, 15) if len(axes) == 3 else (32, 56),
              "long": (21, 24) if len(axes) == 3 else (91, 100)}[size]  # long: past 8192 elements
    shape = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    for a in axes:
        shape[a] = data.draw(st.integers(*bounds))
    kind = data.draw(st.sampled_from(["norm", "rms", "max"]))
    build, reference = statistics(kind)
    with_stats = kind == "norm" and data.draw(st.booleans())
    with bz.Fusion() as f:
        x = f.define_tensor([-1] * rank)
        f.add_output(build(x, axes))
        if with_stats:
            f.add_output(x.mean(axes, keepdim=False))
    gpu = {"sm_count": data.draw(st.integers(1, 4)), "resident": data.draw(st.integers(1, 3)),
           "block_size": data.draw(st.sampled_from([128, 256, 512]))}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x64 = rng.standard_normal(shape) * 2 + rng.uniform(-3, 3)
    x = x64.astype(np.float32)
    with bz.config.scope(enable="poison_outputs"):
        got, launched = run_on_cpu(f, [x], **gpu)
    event(f"{size}, {len(launched)} launch(es), lanes {sorted({s[0] for *_, s in launched})}")
    want = [reference(x.astype(np.float64), axes)] + ([x.astype(np.float64).mean(axes)] if with_stats else [])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{kind} over {axes} of {shape}, {gpu}")
