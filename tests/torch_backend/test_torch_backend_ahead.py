"""A graph's regions compile ahead of its first run, on worker threads (braze/frontend/torch/ahead.py):
planned once, from the graph's example values, and still giving eager PyTorch's results."""

from __future__ import annotations

import copy
import threading

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch_zoo import check_step_against_eager  # noqa: E402  (tests/torch_backend, beside this file)

from braze import config, engine  # noqa: E402
from braze.compile import compiled_kernel  # noqa: E402
from braze.record import record  # noqa: E402

_COMPILE = compiled_kernel.CompiledKernel._compile


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.linear = nn.LayerNorm(8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.linear(self.norm(x))) * 0.5 + x
        return (h.exp() * x.sin()).mean()


def _first_step(monkeypatch, disable: frozenset[str]) -> tuple[list[str], list[str]]:
    """(the threads that compiled kernels, the fusions planned) in a first forward and backward,
    after checking the loss and gradients against eager PyTorch."""
    threads, real = [], _COMPILE
    monkeypatch.setattr(compiled_kernel.CompiledKernel, "_compile",
                        lambda self: (threads.append(threading.current_thread().name), real(self))[1])
    torch._dynamo.reset()
    engine.forget_compiled_kernels()  # each step compiles (or loads from disk) its kernels anew
    torch.manual_seed(0)
    model, x = _Block(), torch.randn(5, 8)
    reference = copy.deepcopy(model)
    with config.scope(disable=config.current.disable | disable), record() as recording:
        loss = torch.compile(model, backend="braze", options={"fallback": "error"})(x)
        loss.backward()
    check_step_against_eager(model, reference, x, loss)
    return threads, [name for writes in recording.segments for name in writes]


def test_regions_compile_on_workers_and_plan_once(monkeypatch) -> None:
    ahead_threads, ahead_plans = _first_step(monkeypatch, frozenset())
    call_threads, call_plans = _first_step(monkeypatch, frozenset({"compile_ahead"}))
    assert ahead_threads and all(name.startswith("braze-compile") for name in ahead_threads)
    assert call_threads and not any(name.startswith("braze-compile") for name in call_threads)
    assert len(ahead_plans) == len(call_plans)  # the first calls took the plans made ahead
