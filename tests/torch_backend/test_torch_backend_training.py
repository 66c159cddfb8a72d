"""Training through the braze backend on CPU tensors: `torch.autocast` to bf16 (forward and backward
of zoo blocks, a whole training step) and optimizers whose in-place updates of parameters and state
run in braze regions, against eager PyTorch."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
import torch_zoo  # noqa: E402  (tests/torch_backend, beside this file)

import braze as bz  # noqa: E402

STRICT = {"fallback": "error"}
# bf16 keeps 8 bits: a value and its gradient agree with eager's to a few units in the last place.
BF16 = {"rtol": 3e-2, "atol": 3e-2}


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    scale = max(expected.float().abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


# --- autocast ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_block_under_bf16_autocast_matches_eager_forward_and_backward(name: str) -> None:
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.ZOO[name]()
    reference = copy.deepcopy(model)
    inputs = make_inputs(2, 6, torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="braze", options=STRICT)
    with torch.autocast("cpu", dtype=torch.bfloat16), bz.record() as rec:
        out, expected = compiled(*inputs), reference(*inputs)
    assert out.dtype == expected.dtype
    assert rec.launches, "the regions did not run in braze"
    _close(out, expected, "output", **BF16)
    out.float().square().mean().backward()
    expected.float().square().mean().backward()
    for (param, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        assert p.grad.dtype == p_ref.grad.dtype == torch.float32
        _close(p.grad, p_ref.grad, f"gradient of {param}", **BF16)


def test_a_training_step_under_bf16_autocast_with_adamw_follows_eagers_loss_curve() -> None:
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.gpt2()
    reference = copy.deepcopy(model)
    (x,) = make_inputs(2, 8, torch.Generator().manual_seed(1))
    target = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))

    def train_step(net, optimizer):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(net(x).float(), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    optimizer, optimizer_ref = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, reference))
    compiled_step = torch.compile(train_step, backend="braze", options=STRICT)
    with bz.record() as rec:
        losses = [compiled_step(model, optimizer).item() for _ in range(4)]
    assert rec.launches, "the regions did not run in braze"
    losses_ref = [train_step(reference, optimizer_ref).item() for _ in range(4)]
    torch.testing.assert_close(losses, losses_ref, rtol=2e-2, atol=1e-3)
    assert losses[-1] < losses[0]


# --- optimizers: in-place updates ----------------------------------------------------------------------------
OPTIMIZERS = {
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("name, dtype", [*((name, torch.float32) for name in OPTIMIZERS),
                                         ("adamw_foreach", torch.bfloat16), ("sgd_nesterov", torch.bfloat16)],
                         ids=str)
def test_a_compiled_optimizer_step_updates_parameters_and_state_in_place(name: str, dtype: torch.dtype) -> None:
    """`torch.compile(optimizer.step)`: AOTAutograd functionalizes the in-place updates, braze computes
    them, and the results are copied back into the very tensors the optimizer holds."""
    torch.manual_seed(0)
    model = torch_zoo.MLP().to(dtype)
    reference = copy.deepcopy(model)
    optimizer, optimizer_ref = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](reference.parameters())
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 16, generator=generator).to(dtype), torch.randn(16, 4, generator=generator)
    storage = [p.data_ptr() for p in model.parameters()]
    compiled_step = torch.compile(optimizer.step, backend="braze", options=STRICT)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else BF16
    with bz.record() as rec:
        for step in range(3):
            for net, opt in ((model, optimizer), (reference, optimizer_ref)):
                opt.zero_grad()
                F.mse_loss(net(x).float(), y).backward()
            state = [t.data_ptr() for s in optimizer.state.values() for t in s.values() if t.dim()]
            compiled_step()
            optimizer_ref.step()
            assert [p.data_ptr() for p in model.parameters()] == storage, "a parameter was replaced, not updated"
            if step:
                assert [t.data_ptr() for s in optimizer.state.values() for t in s.values() if t.dim()] == state
            for (param, p), p_ref in zip(model.named_parameters(), reference.parameters()):
                _close(p, p_ref, f"{param} after step {step}", **tolerance)
    for s, s_ref in zip(optimizer.state.values(), optimizer_ref.state.values()):
        for key in s:
            _close(s[key].float(), s_ref[key].float(), f"optimizer state {key}", **tolerance)
    assert rec.launches, "the updates did not run in braze"


def test_foreach_ops_of_an_ema_and_a_clipped_step_fuse_in_braze() -> None:
    """`torch._foreach_*` ops (an EMA with `_foreach_lerp_`, clip_grad_norm_'s per-tensor norms, a multi-tensor
    update, what foreach optimizers call) become the op on each tensor of the list, and braze fuses them.
    PyTorch has no decomposition of them: they all ran in PyTorch."""
    def ema_and_clipped_step(ema, params, grads, lr):
        torch._foreach_lerp_(ema, params, 0.01)
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(1.0 / (total + 1e-6), max=1.0))
        torch._foreach_addcdiv_(params, grads, torch._foreach_add(torch._foreach_abs(grads), 1.0), [-lr, -2 * lr])
        torch._foreach_add_(params, grads, alpha=-lr)
        return total

    generator = torch.Generator().manual_seed(0)
    state = [[torch.randn(shape, generator=generator) for shape in ((3, 4), (5,))] for _ in range(3)]
    copies = [[[t.clone() for t in tensors] for tensors in state] for _ in range(2)]
    explanation = bz.torch.explain(ema_and_clipped_step, *copies[0], 0.1, options=STRICT)
    assert not [op for op, _ in explanation.graphs[0].torch_ops if "_foreach" in op], str(explanation)
    compiled = torch.compile(ema_and_clipped_step, backend="braze", options=STRICT)
    for lr in (0.1, 0.05):
        _close(compiled(*state, lr), ema_and_clipped_step(*copies[1], lr), "total norm", rtol=1e-5, atol=1e-6)
    for tensors, expected in zip(state, copies[1]):
        for t, t_ref in zip(tensors, expected):
            _close(t, t_ref, "updated tensor", rtol=1e-5, atol=1e-6)
