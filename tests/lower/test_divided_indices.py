"""A reduction indexed through a floor division of the element index (group statistics through a
reshape) is computed once, in a task of its own, not once per element: generated group norms against
float64 NumPy, and the task count that shows the statistics were cut out."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


def group_norm(groups: int) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1))
        grouped = bz.ops.reshape(x, [x.shape[0], groups, -1])
        f.add_output(bz.ops.reshape(bz.ops.layer_norm(grouped, eps=1e-5), x.shape))
    return f


def reference(x: np.ndarray, groups: int) -> np.ndarray:
    g = x.astype(np.float64).reshape(x.shape[0], groups, -1)
    centred = g - g.mean(-1, keepdims=True)
    return (centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)).reshape(x.shape)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.sampled_from([1, 2, 4]), st.integers(1, 3), st.integers(1, 9), st.integers(0, 2**31))
def test_group_statistics_through_a_reshape(batch, groups, per_group, width, seed):
    x = np.random.default_rng(seed).standard_normal((batch, groups * per_group, width)).astype(np.float32)
    f = group_norm(groups)
    with bz.record() as rec:
        (got,) = f.execute([x])
    np.testing.assert_allclose(got, reference(x, groups), rtol=1e-4, atol=1e-4)
    # The element's group is (its flat index) // (group size): the statistics get tasks of their own.
    assert len({launch.task for launch in rec.launches}) > 1, rec.launches
