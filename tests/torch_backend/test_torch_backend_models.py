"""The model zoo through `torch.compile(backend="braze")` on CPU tensors (braze's LLVM backend),
against eager PyTorch: outputs, the gradient of the input and of every parameter, running statistics,
and the loss curve of a training loop with Adam. Every region must run in braze (fallback="error").
The same models on CUDA tensors: tests/cuda/test_torch_backend_gpu.py."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch_zoo  # noqa: E402  (tests/torch_backend, beside this file)
from torch._dynamo.utils import counters  # noqa: E402

import braze as bz  # noqa: E402

STRICT = {"fallback": "error"}
# float32 kernels that sum in another order than PyTorch's: relative to the largest magnitude.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, rtol=TOLERANCE["rtol"], atol=TOLERANCE["atol"] * scale,
                               msg=lambda m: f"{what}: {m}")


def _models(name: str) -> tuple:
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.ZOO[name]()
    return model, copy.deepcopy(model), make_inputs


def _check_step(model, reference, compiled, inputs: tuple) -> None:
    """One forward and backward of the compiled model and of eager PyTorch, compared."""
    leaf = inputs[0].detach().requires_grad_()
    inputs = (leaf, *inputs[1:])
    out, expected = compiled(*inputs), reference(*inputs)
    _close(out, expected, "output")
    grad_out = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2)).to(expected.device)
    wrt, wrt_ref = [leaf, *model.parameters()], [leaf, *reference.parameters()]
    grads = torch.autograd.grad(out, wrt, grad_out)
    grads_ref = torch.autograd.grad(expected, wrt_ref, grad_out)
    names = ["input", *(n for n, _ in model.named_parameters())]
    for name, g, g_ref in zip(names, grads, grads_ref):
        _close(g, g_ref, f"gradient of {name}")


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "mlp"])
def test_a_model_matches_eager_forward_and_backward(name: str) -> None:
    model, reference, make_inputs = _models(name)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    _check_step(model, reference, compiled, make_inputs(2, 5, torch.Generator().manual_seed(1)))


def test_a_resnet_block_trains_and_evaluates_with_batch_norm() -> None:
    model, reference, make_inputs = _models("resnet_block")
    compiled = torch.compile(model, backend="braze", options=STRICT)
    generator = torch.Generator().manual_seed(1)
    for _ in range(2):  # batch statistics, and running statistics updated in place, twice
        _check_step(model, reference, compiled, make_inputs(2, 6, generator))
    for bn, bn_ref in ((model.bn1, reference.bn1), (model.bn2, reference.bn2)):
        _close(bn.running_mean, bn_ref.running_mean, "running mean")
        _close(bn.running_var, bn_ref.running_var, "running variance")
        assert bn.num_batches_tracked.item() == bn_ref.num_batches_tracked.item() == 2
    model.eval(), reference.eval()
    x = make_inputs(3, 6, generator)[0]
    with torch.no_grad():
        _close(compiled(x), reference(x), "output in eval mode")


def test_an_mlp_trained_with_adam_follows_eager_pytorchs_loss_curve() -> None:
    model, reference, _ = _models("mlp")
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(16, 16, generator=generator), torch.randn(16, 4, generator=generator)

    def train_step(net, optimizer):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()  # Adam's in-place updates, functionalized by AOTAutograd
        return loss

    optimizer, optimizer_ref = (torch.optim.Adam(m.parameters(), lr=1e-2) for m in (model, reference))
    compiled_step = torch.compile(train_step, backend="braze", options=STRICT)
    losses = [compiled_step(model, optimizer).item() for _ in range(10)]
    losses_ref = [train_step(reference, optimizer_ref).item() for _ in range(10)]
    torch.testing.assert_close(losses, losses_ref, rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0] / 2
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p, p_ref, f"parameter {name} after 10 steps")


def test_new_batch_sizes_and_sequence_lengths_reuse_the_graphs_and_kernels() -> None:
    """The first shape compiles static graphs, the second symbolic ones; after that, neither Dynamo
    nor braze compiles anything (the sequence lengths avoid the head size: Dynamo would take them
    for one size)."""
    model, reference, make_inputs = _models("llama")
    compiled = torch.compile(model, backend="braze", options=STRICT)
    generator = torch.Generator().manual_seed(1)
    for batch, seq in ((2, 5), (3, 7)):
        _check_step(model, reference, compiled, make_inputs(batch, seq, generator))
    graphs = counters["stats"]["unique_graphs"]
    with bz.record() as rec:
        for batch, seq in ((4, 9), (5, 11)):
            _check_step(model, reference, compiled, make_inputs(batch, seq, generator))
    assert counters["stats"]["unique_graphs"] == graphs
    assert rec.segments == [] and rec.compiles == [], "braze compiled a fusion again for a new size"
    assert rec.launches, "the regions did not run in braze"


def test_a_model_runs_in_inference_mode() -> None:
    model, reference, make_inputs = _models("gpt2")
    compiled = torch.compile(model, backend="braze", options=STRICT)
    (x,) = make_inputs(2, 5, torch.Generator().manual_seed(1))
    with torch.no_grad(), bz.record() as rec:
        _close(compiled(x), reference(x), "output")
    assert rec.launches
