"""Signed zeros in `@bz.kernel` on a GPU, as plain Python and NumPy give them: unary minus of a zero
flips its sign (`-0.0`), `0.0 - x` does not, and a product with a negative zero keeps the sign
rule. Outputs start poisoned; the result is compared byte for byte with NumPy.

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_signed_zeros_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import cuda_driver
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]


@bz.kernel
def signed_zeros(a: bz.Array[None, 1], neg: bz.Array[None, 1], sub: bz.Array[None, 1], scaled: bz.Array[None, 1]):
    for i in range(a.shape[0]):  # any float dtype: compiled once for each
        neg[i] = -a[i]
        sub[i] = 0.0 - a[i]
        scaled[i] = -(a[i] * 0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zeros_are_pythons(dtype):
    a = np.array([0.0, -0.0, 1.5, -2.0, 0.0], dtype)
    expected = [-a, np.asarray(0.0, dtype) - a, -(a * np.asarray(0.0, dtype))]
    outputs = [DeviceArray.from_numpy(np.full(a.shape, np.nan, dtype)) for _ in expected]
    signed_zeros(DeviceArray.from_numpy(a), *outputs)
    for name, got, want in zip(["-a", "0.0 - a", "-(a * 0.0)"], outputs, expected):
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8), err_msg=name)
