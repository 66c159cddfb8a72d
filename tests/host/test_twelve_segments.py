"""A fusion of 12 segments (pointwise work ending in a full reduction that the next segment
reads, alternating) runs through the host JIT and through the interpreter alike."""

from __future__ import annotations

import numpy as np
from segments import alternating, reference

import braze as bz
from braze import config


def test_twelve_segments_native_and_interpreted_agree() -> None:
    x = np.random.default_rng(12).standard_normal((33, 70)).astype(np.float32)
    results = {}
    for disable in ("", "host_jit"):
        with config.scope(disable=disable), bz.record() as rec:
            f = alternating()  # a fusion of its own: its runtime is built under this configuration
            results[disable] = f.execute([x])[0]
        assert len(rec.launches) == 12
    np.testing.assert_array_equal(results[""], results["host_jit"])
    np.testing.assert_allclose(results[""], reference(x), rtol=1e-4, atol=1e-4)
