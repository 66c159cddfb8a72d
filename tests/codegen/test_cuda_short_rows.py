"""Rows of a constant length shorter than a vector (a norm's statistics kept as [batch, tokens, 1], a
row of 3) get no 16-byte paths in the generated CUDA: they could never take one, and a model's grouped
outputs carried dozens of them for NVRTC to parse and throw away (codegen/cuda_rows.plan_vectors).
Rows as long as a vector keep theirs. Run on the CPU through the generated CUDA (tests/cuda_on_cpu.py)
and the CPU backend, against float64 NumPy, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import engine

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


@pytest.mark.parametrize(("width", "vectors"), [(1, False), (3, False), (8, True)])
def test_rows_shorter_than_a_vector_have_no_vector_path(width, vectors):
    rng = np.random.default_rng(width)
    x = rng.standard_normal((37, width)).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1, width])
        f.add_output(bz.ops.softmax(xt, -1))  # a row task: the lanes of a row loop over it
    body = engine.cuda_source(f, [x]).body
    assert ("float4" in body) == vectors
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    with bz.config.scope(enable="poison_outputs"):
        (cuda,), _ = run_on_cpu(f, [x], sm_count=4, resident=2)
        (cpu,) = f.execute([x])
    for got in (cuda, cpu):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5)
