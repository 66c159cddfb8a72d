"""Regions alike but for their nodes' names share one fusion (braze/frontend/torch/region_key.py): a
model's layers build, lower and compile each region once, and still give eager PyTorch's results."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import fx, nn  # noqa: E402
from torch_zoo import check_step_against_eager  # noqa: E402  (tests/torch_backend, beside this file)

from braze.frontend.torch.carriers import Carrier  # noqa: E402
from braze.frontend.torch.region_key import region_key  # noqa: E402
from braze.record import record  # noqa: E402


def _region(constant: float = 1.0, stride: tuple = (4, 1), names: str = "a") -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder(f"{names}_x")
    x.meta["val"] = torch.empty_strided((4, 4), stride)
    y = graph.call_function(torch.ops.aten.add.Tensor, (x, constant), name=f"{names}_add")
    y.meta["val"] = torch.empty(4, 4)
    graph.output((y,))
    return fx.GraphModule(torch.nn.Module(), graph)


def test_the_key_ignores_names_and_nothing_else() -> None:
    key = region_key(_region(), [])
    assert key == region_key(_region(names="b"), [])
    assert key != region_key(_region(constant=2.0), [])
    assert key != region_key(_region(constant=1), [])  # an int adds as another type than a float
    assert key != region_key(_region(stride=(1, 4)), [])
    assert key != region_key(_region(), [Carrier((4,), torch.int8)])


class _Layers(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(8, 8) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:
            x = torch.tanh(linear(x)) * 0.5 + x
        return x.square().mean()


def _runtimes_built(layers: int) -> int:
    """The fusion runtimes the first forward and backward of `layers` layers build, after checking the
    loss and gradients against eager PyTorch."""
    torch._dynamo.reset()
    torch.manual_seed(layers)
    model, x = _Layers(layers), torch.randn(5, 8)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options={"fallback": "error"})
    with record() as recording:
        loss = compiled(x)
        loss.backward()
    check_step_against_eager(model, reference, x, loss)
    return sum(1 for entry in recording.entries if entry.startswith("runtime "))


def test_alike_layers_share_their_regions_fusions() -> None:
    built_for_three, built_for_six = _runtimes_built(3), _runtimes_built(6)
    assert 0 < built_for_six == built_for_three  # the three more layers' regions are the middle ones again
