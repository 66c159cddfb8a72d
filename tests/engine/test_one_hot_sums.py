"""A sum of where(r == t, v(r), 0) over a row reads its one term on the CPU as on the GPU: a
cross-entropy's picked log-probability, and the torch backend's gather of one index a row."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import engine
from braze.kir import kernel_text
from braze.runtime.inputs import bind_inputs


def cross_entropy() -> bz.Fusion:
    with bz.Fusion() as f:
        logits = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        target = f.define_tensor(shape=(-1,), dtype=bz.int64)
        f.add_output(bz.ops.cross_entropy(logits, target, reduction="none"))
    return f


def test_the_picked_class_is_read_not_summed_over_the_row():
    f = cross_entropy()
    logits, target = np.zeros((4, 10), np.float32), np.zeros(4, np.int64)
    kernel = engine.lower_fusion(f, engine.signature(f, bind_inputs(f, [logits, target]))).kernel
    text = kernel_text(kernel)
    assert text.count("for r") == 2 and "T0[p1, int32(T1[p1])]" in text  # the max and the sum; one read


def test_the_cpu_cross_entropy_matches_numpy_with_targets_at_the_ends():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 37)).astype(np.float32)
    target = np.array([0, 36, 5, 36, 0, 17])
    (out,) = cross_entropy().execute([logits, target])
    wide = logits.astype(np.float64)
    shifted = wide - wide.max(1, keepdims=True)
    expected = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(6), target]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
