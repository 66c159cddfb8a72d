"""Kernels compiled ahead of their first call on a GPU (braze/compile/compiled_kernel.py): a fusion planned
for a stand-in that owns no memory, a model's regions compiled on worker threads when its graphs are;
results against float64 with braze's outputs poisoned first, and each kernel compiled once.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import copy
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

import braze as bz  # noqa: E402
from braze import engine  # noqa: E402
from braze.compile import cuda_kernel  # noqa: E402
from braze.frontend.torch import backend as braze_backend  # noqa: E402  (by function: braze may run uninstalled)
from braze.record import record  # noqa: E402
from braze.runtime.device_arrays import DeviceView  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torch_backend"))
import torch_zoo  # noqa: E402

_COMPILE = cuda_kernel.CudaCompiledKernel._compile


@pytest.fixture
def compiling_threads(monkeypatch) -> list[str]:
    """The name of the thread of each CUDA compile (or disk-cache load) from now on."""
    threads: list[str] = []
    monkeypatch.setattr(cuda_kernel.CudaCompiledKernel, "_compile",
                        lambda self: (threads.append(threading.current_thread().name), _COMPILE(self))[1])
    engine.forget_compiled_kernels()
    with config.scope(enable="poison_outputs"):
        yield threads


def _fusion() -> tuple[bz.Fusion, float]:
    scale = float(uuid.uuid4().int % 1000) / 7 + 1  # a kernel no other test compiled
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        f.add_output(bz.ops.sum(bz.ops.exp(x) * scale, axes=[1]))
    return f, scale


def _stand_in(x: torch.Tensor) -> DeviceView:
    strides = tuple(s * x.element_size() for s in x.stride())
    return DeviceView(0, tuple(x.shape), strides, np.dtype(np.float32), x.device.index or 0, "torch")


def test_a_fusion_compiled_ahead_for_a_stand_in_runs_its_first_call(compiling_threads) -> None:
    f, scale = _fusion()
    x = torch.randn(300, 70, device="cuda")
    engine.compile_ahead(f, [_stand_in(x)])
    with record() as first:
        (out,) = f.execute([x])
    expected = (np.exp(x.double().cpu().numpy()) * scale).sum(axis=1)
    np.testing.assert_allclose(out.double().cpu().numpy(), expected, rtol=1e-5)
    assert first.segments == []  # planned ahead
    assert len(compiling_threads) == 1 and compiling_threads[0].startswith("braze-compile")


def test_threads_racing_a_compile_ahead_compile_once(compiling_threads) -> None:
    f, scale = _fusion()
    x = torch.randn(64, 33, device="cuda")
    results, start = [None] * 8, threading.Barrier(9)

    def call(n: int) -> None:
        start.wait()
        results[n] = f.execute([x])[0]
        torch.cuda.synchronize()

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    engine.compile_ahead(f, [_stand_in(x)])
    start.wait()
    for thread in threads:
        thread.join()
    assert len(compiling_threads) == 1
    expected = (np.exp(x.double().cpu().numpy()) * scale).sum(axis=1)
    for out in results:
        np.testing.assert_allclose(out.double().cpu().numpy(), expected, rtol=1e-5)


def test_a_models_regions_compile_on_workers_and_match_float64(compiling_threads) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.ZOO["gpt2"]()
    reference = copy.deepcopy(model).double()
    model = model.cuda()
    inputs = make_inputs(2, 16, torch.Generator().manual_seed(0))
    compiled = torch.compile(model, backend=braze_backend, options={"fallback": "error"})
    loss = compiled(*(t.cuda() for t in inputs)).float().square().mean()
    loss.backward()
    expected = reference(*(t.double() if t.is_floating_point() else t for t in inputs)).square().mean()
    expected.backward()
    torch.testing.assert_close(loss.double().cpu(), expected, rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.double().cpu(), q.grad, rtol=1e-3, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert compiling_threads and all(name.startswith("braze-compile") for name in compiling_threads)
    torch._dynamo.reset()
