"""Row loops of any length take the 16-byte vector path, their last elements (fewer than a vector)
one at a time after it: a log_softmax over a shifted, reshaped vocabulary of odd length (a language
model's loss), with the rows in a row cache and without. Run on the CPU (tests/cuda_on_cpu.py: g++,
a thread per CUDA thread) against float64 NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import config, engine
from braze.codegen import cuda_launch

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def shifted_log_softmax(shape) -> bz.Fusion:
    with bz.Fusion() as f:
        logits = f.define_tensor(shape=shape, dtype=bz.bfloat16)
        rows = bz.ops.reshape(bz.ops.cast(logits[:, :-1, :], bz.float32), (-1, shape[-1]))
        f.add_output(bz.ops.log_softmax(rows, -1))
    return f


def reference(logits: np.ndarray) -> np.ndarray:
    rows = logits[:, :-1, :].astype(np.float64).reshape(-1, logits.shape[-1])
    shifted = rows - rows.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("vocab", [1003, 1029, 5001])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 16])  # rows read from memory again, or kept in shared memory
def test_odd_rows_on_the_vector_path(vocab, cache_bytes, monkeypatch):
    monkeypatch.setattr(cuda_launch, "ROW_CACHE_BYTES", cache_bytes)
    shape = (2, 5, vocab)
    logits = np.random.default_rng(vocab).standard_normal(shape).astype(ml_dtypes.bfloat16)
    (out,), launches = run_on_cpu(shifted_log_softmax(shape), [logits])
    np.testing.assert_allclose(out, reference(logits), rtol=1e-5, atol=1e-5)
    assert (launches[0][4][1] > 0) == (cache_bytes > 0)  # the launch kept the rows, or not, as asked


def row_sums() -> bz.Fusion:
    with bz.Fusion() as f:
        f.add_output(bz.ops.sum(f.define_tensor(shape=(-1, 1003), dtype=bz.bfloat16), axes=-1))
    return f


def test_a_row_sum_of_odd_length_runs_its_vectors_then_a_tail():
    rows = np.random.default_rng(3).standard_normal((7, 1003)).astype(ml_dtypes.bfloat16)
    (out,), _ = run_on_cpu(row_sums(), [rows])
    wanted = rows.astype(np.float64).sum(-1)  # rounded to bfloat16: 8 bits
    np.testing.assert_allclose(np.asarray(out, np.float64), wanted, rtol=2**-8, atol=2**-8)
    tail = "((1003) / 8) * 8 + lane"  # after the vectors of rows aligned at their start
    with config.scope(disable={"row_peel"}):  # rows off the alignment otherwise peel a head (test_cuda_row_peel.py)
        assert tail in engine.cuda_source(row_sums(), [rows])
    with config.scope(disable={"vector_tails"}):
        assert tail not in engine.cuda_source(row_sums(), [rows])
