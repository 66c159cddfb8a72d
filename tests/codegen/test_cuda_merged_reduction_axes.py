"""Reduced axes that end the input's axes, contiguous in every tensor the reduction reads (H and W of
batch_norm's [N, C, H, W]), are one loop over their product (lower/reductions.py), and the output
loop of a task a channel reads them at one index (exprs.decompose_row): the generated CUDA walks two
digits, not three, and divides once an element. Where some read needs their own indices (a
channels-last input, a slice, a tensor broadcast along one of them), the loops stay one an axis.
Each case runs through its generated CUDA on the CPU (tests/cuda_on_cpu.py) and the CPU backend,
against float64 NumPy, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import engine

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

AXES = (0, 2, 3)


def _norm(f: bz.Fusion, x, axes=AXES):
    mean, var = x.mean(axes, keepdim=True), x.var(axes, keepdim=True)
    return (x - mean) * bz.ops.rsqrt(var + 1e-5)


def _norm_reference(x: np.ndarray, axes=AXES) -> np.ndarray:
    x = x.astype(np.float64)
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)


def _check(f: bz.Fusion, arrays: list[np.ndarray], want: list[np.ndarray]) -> str:
    """Runs both backends against `want`; returns the CUDA source."""
    with bz.config.scope(enable="poison_outputs"):
        cpu = f.execute([a.copy() for a in arrays])
        cuda, _ = run_on_cpu(f, arrays, block_size=128)
    for outputs in (cpu, cuda):
        for got, expected in zip(outputs, want):
            np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=1e-4, atol=1e-4)
    return engine.cuda_source(f, arrays).body


def _digits(body: str) -> int:
    """How many digits the first lane nest of the source walks."""
    return body.count("const int bz_n_r") // max(1, body.count("unsigned bz_total_r"))


def test_a_dense_channel_walks_h_and_w_as_one_digit():
    with bz.Fusion() as f:
        x = f.define_tensor([-1] * 4)
        f.add_output(_norm(f, x))
    x = np.random.default_rng(0).standard_normal((3, 4, 5, 7)).astype(np.float32)
    body = _check(f, [x], [_norm_reference(x)])
    assert _digits(body) == 2 and "bz_mul(T0_s2, T0_s3)" in body
    # The output pass takes n and the position along H * W from one division of its index.
    assert body.count("bz_fast_floordiv(") == 1 and body.count("bz_fast_remainder(") == 1


@pytest.mark.parametrize("layout", ["channels_last", "sliced"])
def test_reads_that_need_h_and_w_keep_a_loop_an_axis(layout):
    rng = np.random.default_rng(1)
    if layout == "channels_last":
        x = rng.standard_normal((3, 5, 7, 4)).astype(np.float32).transpose(0, 3, 1, 2)
    else:
        x = rng.standard_normal((3, 4, 5, 9)).astype(np.float32)[..., 1:8]
    with bz.Fusion() as f:
        f.add_output(_norm(f, f.define_tensor([-1] * 4)))
    body = _check(f, [x], [_norm_reference(x)])
    assert _digits(body) == 3


def test_a_tensor_broadcast_along_one_merged_axis_keeps_its_indices():
    rng = np.random.default_rng(2)
    x, scale = rng.standard_normal((2, 3, 5, 6)).astype(np.float32), rng.standard_normal((5, 1)).astype(np.float32)
    with bz.Fusion() as f:
        xt, st = f.define_tensor([-1] * 4), f.define_tensor([-1, 1])
        f.add_output((xt * st).sum(AXES))
        f.add_output(xt.sum(AXES))
    x64 = x.astype(np.float64)
    _check(f, [x, scale], [(x64 * scale).sum(AXES), x64.sum(AXES)])


@pytest.mark.parametrize("shape", [(4, 6, 10), (1, 1, 1), (2, 3, 1)])
def test_sums_maxima_variances_and_a_whole_argmax_over_trailing_axes(shape):
    x = np.random.default_rng(3).integers(-4, 5, shape).astype(np.float32)  # ties: the first one wins
    with bz.Fusion() as f:
        xt = f.define_tensor([-1] * 3)
        f.add_output(xt.sum((1, 2)))
        f.add_output(bz.ops.max(xt, axes=[1, 2]))
        f.add_output(xt.var((1, 2)))
        f.add_output(xt.argmax())
    x64 = x.astype(np.float64)
    _check(f, [x], [x64.sum((1, 2)), x64.max((1, 2)), x64.var((1, 2)), np.asarray(x64.argmax())])
