"""batch_norm as a training step writes it, through its generated CUDA run on the CPU
(tests/cuda_on_cpu.py) and the CPU backend, against float64 NumPy with the outputs poisoned: the
forward with running statistics on channels-last data, and the backward's dx, dweight and dbias
(AOTAutograd's sums over (0, 2, 3) of dy and dy * xhat). Channel rows of 1024 elements take rows
sharing a block (an odd channel count leaves a block's last row idle); rows past
schedule.CHANNEL_ROW_LIMIT keep their statistics apart. Also a loop kernel whose two fold loops have
statements between them and assign one variable both (passes/fuse_tasks.py may join such loops only
where the later loop's assignments still come last)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from loop_cuda_on_cpu import run_on_cpu as run_loop_kernel_on_cpu

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

EPS, MOMENTUM = 1e-5, 0.1
AXES = (0, 2, 3)
CHANNEL = (slice(None), None, None)  # a channel's value broadcast over H and W


def _both_backends(f: bz.Fusion, arrays: list[np.ndarray], gpu: dict) -> list[list[np.ndarray]]:
    """The outputs of the CPU backend and of the CUDA run on the CPU, each as float64."""
    with bz.config.scope(enable="poison_outputs"):
        cpu = f.execute([a.copy() for a in arrays])
        cuda, _ = run_on_cpu(f, arrays, **gpu)
    return [[np.asarray(out).astype(np.float64) for out in outs] for outs in (cpu, cuda)]


def _forward(dtype, n: int) -> bz.Fusion:
    """BatchNorm2d's training forward over `n` samples a channel: y (laid out channels last), the
    running mean and the running (unbiased) variance."""
    with bz.Fusion() as f:
        x = f.define_tensor([-1] * 4, dtype)
        w, b, running_mean, running_var = (f.define_tensor([-1]) for _ in range(4))
        xf = bz.ops.cast(x, bz.float32)
        mean, var = xf.mean(AXES, keepdim=True), xf.var(AXES, keepdim=True)
        y = (xf - mean) * bz.ops.rsqrt(var + EPS) * w[CHANNEL] + b[CHANNEL]
        f.add_output(bz.ops.cast(y, dtype), stride_order=[2, 0, 1, 3])
        f.add_output((1 - MOMENTUM) * running_mean + MOMENTUM * mean.reshape([-1]))
        f.add_output((1 - MOMENTUM) * running_var + var.reshape([-1]) * (MOMENTUM * n / (n - 1)))
    return f


@pytest.mark.parametrize("dtype, tolerance", [(bz.float32, 1e-4), (bz.bfloat16, 3e-2)])
def test_batch_norm_forward_of_channels_last_data_with_running_statistics(dtype, tolerance):
    shape = (4, 5, 16, 16)  # rows of 1024 elements, five channels
    n = shape[0] * shape[2] * shape[3]
    rng = np.random.default_rng(0)
    numpy_dtype = ml_dtypes.bfloat16 if dtype == bz.bfloat16 else np.float32
    channels_last = (rng.standard_normal((4, 16, 16, 5)) * 2 + 1).astype(numpy_dtype)
    x = channels_last.transpose(0, 3, 1, 2)
    w, b, running_mean, running_var = (rng.standard_normal(5).astype(np.float32) for _ in range(4))
    x64 = x.astype(np.float64)
    mean, var = x64.mean(AXES), x64.var(AXES)
    want = [(x64 - mean[:, None, None]) / np.sqrt(var[:, None, None] + EPS) * w[CHANNEL] + b[CHANNEL],
            (1 - MOMENTUM) * running_mean + MOMENTUM * mean,
            (1 - MOMENTUM) * running_var + MOMENTUM * var * n / (n - 1)]
    for got in _both_backends(_forward(dtype, n), [x, w, b, running_mean, running_var], {"block_size": 128}):
        for g, expected in zip(got, want):
            np.testing.assert_allclose(g, expected, rtol=tolerance, atol=tolerance)


def _backward(n: int) -> bz.Fusion:
    """BatchNorm2d's backward from the saved mean and 1 / std: dx, dweight, dbias."""
    with bz.Fusion() as f:
        dy, x = f.define_tensor([-1] * 4), f.define_tensor([-1] * 4)
        mean, invstd, w = (f.define_tensor([-1]) for _ in range(3))
        xhat = (x - mean[CHANNEL]) * invstd[CHANNEL]
        dbias, dweight = dy.sum(AXES), (dy * xhat).sum(AXES)
        f.add_output((dy - dbias[CHANNEL] / n - xhat * dweight[CHANNEL] / n) * (invstd * w)[CHANNEL])
        f.add_output(dweight)
        f.add_output(dbias)
    return f


@pytest.mark.parametrize("shape, block_size", [((2, 3, 28, 28), 256), ((1, 3, 8193, 1), 512)],
                         ids=["rows_of_1568", "rows_past_the_limit"])
def test_batch_norm_backward_matches_float64(shape, block_size):
    n = shape[0] * shape[2] * shape[3]
    rng = np.random.default_rng(1)
    dy = rng.standard_normal(shape).astype(np.float32)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    mean = x.astype(np.float64).mean(AXES).astype(np.float32)
    invstd = (1 / np.sqrt(x.astype(np.float64).var(AXES) + EPS)).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    dy64 = dy.astype(np.float64)
    xhat = (x - mean[CHANNEL].astype(np.float64)) * invstd[CHANNEL]
    dbias, dweight = dy64.sum(AXES), (dy64 * xhat).sum(AXES)
    want = [(dy64 - dbias[CHANNEL] / n - xhat * dweight[CHANNEL] / n) * (invstd.astype(np.float64) * w)[CHANNEL],
            dweight, dbias]
    for got in _both_backends(_backward(n), [dy, x, mean, invstd, w], {"block_size": block_size, "sm_count": 3}):
        for g, expected in zip(got, want):
            np.testing.assert_allclose(g, expected, rtol=5e-4, atol=5e-4)


@bz.kernel
def _centred_sums(x: bz.Array[bz.float32, 2], sums: bz.Array[bz.float32, 1], last: bz.Array[bz.int32, 1]):
    for i in range(x.shape[0]):
        total = 0.0
        found = -1
        for j in range(x.shape[1]):
            total += x[i, j]
            if x[i, j] > 0.0:
                found = j
        sums[i] = total  # stays after the joined loop: the second loop reads no `sums`
        shift = x[i, 0] * 0.5  # moves before it: the second loop reads it
        centred = 0.0
        for j in range(x.shape[1]):
            centred += x[i, j] - shift
            if x[i, j] > 1.0:
                found = j + 100  # the later loop's assignment wins over the first's, whatever j
        sums[i] = sums[i] + centred * 1000.0
        last[i] = found


def test_a_loop_kernels_fold_loops_joined_past_statements_keep_their_order():
    x = np.array([[2.0, 0.5, -1.0, 0.25], [0.5, -1.0, 0.75, -2.0], [-1.0, -2.0, -3.0, -0.5]], np.float32)
    x64 = x.astype(np.float64)
    centred = (x64 - x64[:, :1] * 0.5).sum(1)
    want_sums = x64.sum(1) + centred * 1000.0
    want_last = np.array([100, 2, -1], np.int32)
    for run in (lambda *a: _centred_sums(*a), lambda *a: run_loop_kernel_on_cpu(_centred_sums, *a)):
        sums, last = np.full(3, np.nan, np.float32), np.full(3, -7, np.int32)
        run(x, sums, last)
        np.testing.assert_allclose(sums, want_sums, rtol=1e-5)
        np.testing.assert_array_equal(last, want_last)
