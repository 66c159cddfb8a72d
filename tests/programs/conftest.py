"""Where the programs' arrays live: every program of this folder takes the `where` fixture and runs
twice, on the CPU backend (NumPy arrays, or torch CPU tensors where the program is about torch) and
on a GPU (torch CUDA tensors, or `bz.DeviceArray` where torch is not installed). The GPU variant is
marked `cuda` (`make gpu-test` runs it) and skipped without a GPU. Outputs are poisoned first (the
programs fill the arrays they write with NaN or -1; new outputs of fusions start so), and GPU results
are copied back to the host, then checked against the same float64 reference.

Run just the GPU variants with

    .venv/bin/python -m pytest -q -m cuda tests/programs
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.runtime import cuda_driver
from braze.runtime.device_arrays import DeviceArray

BFLOAT16 = bz.bfloat16.numpy
HAS_TORCH = importlib.util.find_spec("torch") is not None


@dataclass(frozen=True)
class Place:
    """A backend the programs run on. Calling it moves a host array there (the CPU place returns the
    array itself, so the CPU variant runs exactly the program as written); `host` copies a result
    back as a NumPy array."""

    name: str  # "cpu" or "cuda"

    @property
    def torch_device(self) -> str:
        return self.name

    def __call__(self, array):
        if self.name == "cpu":
            return array
        if not HAS_TORCH:
            return DeviceArray.from_numpy(array)
        torch = self.torch()
        if array.dtype == BFLOAT16:  # torch reads no ml_dtypes array: move its bits
            return torch.from_numpy(array.view(np.int16).copy()).cuda().view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(array)).cuda()

    def host(self, value) -> np.ndarray:
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, DeviceArray):
            return value.numpy()
        torch = self.torch()
        if value.dtype == torch.bfloat16:
            return value.detach().view(torch.int16).cpu().numpy().view(BFLOAT16)
        return value.detach().cpu().numpy()

    def torch(self):
        """torch, or a skip where it is not installed."""
        return pytest.importorskip("torch")

    def views(self) -> None:
        """Skips where the GPU arrays cannot be sliced (DeviceArray has no views: torch is needed)."""
        if self.name == "cuda" and not HAS_TORCH:
            pytest.skip("views of GPU arrays need torch")


CUDA = pytest.param(Place("cuda"), id="cuda", marks=[
    pytest.mark.cuda, pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")])


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), CUDA])
def where(request) -> Place:
    return request.param


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """New outputs of fusions start as NaN or -1, so an element no kernel writes shows (on a GPU the
    allocator hands back what the last user left, which may happen to be right)."""
    with config.scope(enable="poison_outputs"):
        yield
