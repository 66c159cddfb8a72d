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
from braze.compile import cuda_driver
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

    def host(self, value):
        """A result as a NumPy array, copied from the GPU (each result, for a tuple or list of them)."""
        if isinstance(value, (tuple, list)):
            return [self.host(v) for v in value]
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

    @property
    def negative_strides(self) -> bool:
        """Whether views may step backwards (NumPy's may; torch's may not)."""
        return self.name == "cpu"

    def view(self, array: np.ndarray, make):
        """`make(array)` taken here: on a GPU, a view of the array's copy (made by torch; skips where
        torch is not installed, as DeviceArray has no views), so the program meets the strides."""
        if self.name == "cpu":
            return make(array)
        self.torch()
        return make(self(array))

    def permuted(self, array: np.ndarray, axes: tuple[int, ...]):
        return self.view(array, lambda a: a.transpose(axes) if isinstance(a, np.ndarray) else a.permute(axes))

    def broadcast_to(self, array: np.ndarray, shape: tuple[int, ...]):
        """An expanded view (stride 0 along the broadcast axes)."""
        return self.view(array, lambda a: np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else a.expand(shape))


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


@pytest.fixture
def torch():
    """torch, with dynamo's compiled code dropped before and after (or a skip where torch is not installed)."""
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    yield torch
    torch._dynamo.reset()
