"""Column tasks over a nest of row loops (a [batch, tokens, channels] tensor summed over batch and
tokens: a norm's weight and bias gradients) walk the nest as one flat space of rows, split across
blocks however short the outer loop is. Run on the CPU (tests/cuda_on_cpu.py: g++, a thread per
CUDA thread) against float64 NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def param_grads() -> bz.Fusion:
    with bz.Fusion() as f:
        g = f.define_tensor(shape=(-1, -1, -1), dtype=bz.float32)
        xhat = f.define_tensor(shape=(-1, -1, -1), dtype=bz.float32)
        f.add_output(bz.ops.sum(g * xhat, axes=(0, 1)))
        f.add_output(bz.ops.sum(g, axes=(0, 1)))
    return f


def run(shape, sm_count=8, transposed=False):
    rng = np.random.default_rng(sum(shape))
    g, xhat = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    if transposed:  # tokens outer in memory: the nest's strides are not one row's
        g, xhat = (np.ascontiguousarray(a.transpose(1, 0, 2)).transpose(1, 0, 2) for a in (g, xhat))
    outputs, launches = run_on_cpu(param_grads(), [g, xhat], sm_count=sm_count)
    wide_g, wide_xhat = g.astype(np.float64), xhat.astype(np.float64)
    for actual, wanted in zip(outputs, [(wide_g * wide_xhat).sum((0, 1)), wide_g.sum((0, 1))]):
        np.testing.assert_allclose(actual, wanted, rtol=1e-4, atol=1e-4)
    return launches


def test_few_batches_of_many_tokens_split_across_blocks():
    (launch,) = run((2, 700, 40))
    kind, grid, (columns, splits, *_) = launch[1], launch[2], launch[4]
    # Ten vectors of four columns, in one strip; the 1,400 rows (not the 2 batches) decide the splits.
    assert kind == "columns" and splits > 2 and grid == splits * -(-40 // 4 // columns)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 5), (1, 129, 33), (5, 33, 40), (4, 0, 3)])
def test_odd_and_empty_extents(shape):
    run(shape)


def test_strides_of_a_transposed_nest():
    run((6, 50, 24), transposed=True)
