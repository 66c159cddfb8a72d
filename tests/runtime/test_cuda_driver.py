"""The CUDA driver layer without a GPU: a missing or too old driver is a clear braze error, never
a crash, and code that only asks how many GPUs there are gets 0."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import cuda_driver
from braze.errors import UnsupportedError


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(cuda_driver, "_LIBRARY", "libbraze-no-such-driver.so.1")
    cuda_driver.driver.cache_clear()
    cuda_driver.device.cache_clear()
    yield
    cuda_driver.driver.cache_clear()
    cuda_driver.device.cache_clear()


def test_a_missing_driver_is_named(no_driver) -> None:
    with pytest.raises(UnsupportedError, match=r"NVIDIA driver \(libbraze-no-such-driver.so.1\) was not found"):
        cuda_driver.driver()
    assert cuda_driver.device_count() == 0


def test_running_on_cuda_without_a_driver_says_so(no_driver) -> None:
    with bz.Fusion() as f:
        f.add_output(f.define_tensor([-1]) * 2.0)
    with pytest.raises(UnsupportedError, match="NVIDIA driver"):
        f.execute([np.ones(4, np.float32)], device="cuda")


def test_a_driver_older_than_cuda_12_is_named() -> None:
    class OldDriver:  # a libcuda without cuGetProcAddress_v2
        pass

    with pytest.raises(UnsupportedError, match="older than CUDA 12"):
        cuda_driver.Driver(OldDriver())
