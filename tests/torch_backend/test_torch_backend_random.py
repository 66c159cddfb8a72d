"""Random numbers through the braze backend (braze/frontend/torch/rng.py): dropout masks are braze's
Philox stream keyed by a seed from torch's generator, drawn inside the regions, drawn again in the
backward instead of saved, and a model repeats itself from the same `torch.manual_seed`."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
import torch_zoo  # noqa: E402  (tests/torch_backend, beside this file)
from torch import nn  # noqa: E402

import braze as bz  # noqa: E402
from braze.frontend.torch.rng import draw_seed, philox_random  # noqa: E402
from braze.ops import philox  # noqa: E402

STRICT = {"fallback": "error"}


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


def _seed_after(torch_seed: int) -> int:
    """The seed braze's random ops of a graph's first run take after `torch.manual_seed(torch_seed)`."""
    torch.manual_seed(torch_seed)
    return int(draw_seed()) % 2**64


def _kept(shape: tuple, p: float, seed: int, offset: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Dropout's mask as the backend draws it: element j kept where the uniform of Philox (seed, offset),
    in the activation's dtype, exceeds p (in that dtype too, as torch compares)."""
    uniform = philox_random(torch.tensor(seed - 2**64 if seed >= 2**63 else seed), offset, list(shape), dtype,
                            torch.device("cpu"), False)
    return uniform > p


def _dropout(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x * 2, 0.3, training=True) * 3


# --- the stream, forward and backward -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dynamic", [False, True])
def test_dropout_keeps_what_the_philox_stream_of_torchs_seed_says_and_backward_replays_it(
        dynamic: bool, dtype: torch.dtype) -> None:
    compiled = torch.compile(_dropout, backend="braze", options=STRICT, dynamic=dynamic)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    for shape in [(64, 32), (5, 7, 3)]:
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        grad_out = torch.randn(shape, dtype=dtype)
        torch.manual_seed(11)
        (grad,) = torch.autograd.grad(y := compiled(x), x, grad_out)
        kept = _kept(shape, 0.3, _seed_after(11), 0, dtype)
        assert 0.6 < kept.float().mean().item() < 0.8
        scale = 1 / 0.7
        assert torch.equal(y != 0, kept & (x != 0)), "the kept elements"
        _close(y.float(), x.detach().float() * 2 * kept * scale * 3, "output", **tolerance)
        assert torch.equal(grad != 0, kept & (grad_out != 0)), "the forward's mask, drawn again in the backward"
        _close(grad.float(), grad_out.float() * 2 * kept * scale * 3, "gradient", **tolerance)


def test_rand_of_symbolic_sizes_is_drawn_again_in_the_backward() -> None:
    def masked(x):
        return x * (torch.rand(x.shape[0], x.shape[1]) > 0.5)

    compiled = torch.compile(masked, backend="braze", options=STRICT, dynamic=True)
    for rows in (3, 6):
        x = torch.randn(rows, 4, requires_grad=True)
        torch.manual_seed(2)
        (grad,) = torch.autograd.grad(compiled(x).sum(), x)
        assert torch.equal(grad, _kept((rows, 4), 0.5, _seed_after(2), 0).float())


def test_each_run_draws_new_numbers_and_the_same_torch_seed_repeats_them() -> None:
    compiled = torch.compile(_dropout, backend="braze", options=STRICT)
    x = torch.randn(32, 32)
    torch.manual_seed(3)
    first, second = compiled(x), compiled(x)
    assert not torch.equal(first != 0, second != 0)
    torch.manual_seed(3)
    assert torch.equal(compiled(x), first) and torch.equal(compiled(x), second)
    bz.manual_seed(3)  # braze's own generator plays no part
    assert not torch.equal(compiled(x), first)


def test_several_random_ops_of_one_graph_draw_independent_streams_and_randn_is_normal() -> None:
    def noisy(x):
        return F.dropout(x, 0.5, training=True) + F.dropout(x, 0.5, training=True) * 10 + torch.randn_like(x) * 100

    x = torch.ones(16, 64)
    torch.manual_seed(4)
    out = torch.compile(noisy, backend="braze", options=STRICT)(x)
    seed = _seed_after(4)
    normal = torch.from_numpy(philox.normal((16, 64), np.float32, seed, 2))
    _close(out, _kept((16, 64), 0.5, seed, 0) * 2 + _kept((16, 64), 0.5, seed, 1) * 20 + normal * 100, "output")
    assert not torch.equal(_kept((16, 64), 0.5, seed, 0), _kept((16, 64), 0.5, seed, 1))


def test_a_random_op_left_to_pytorch_draws_the_numbers_braze_draws() -> None:
    """`philox_random` in PyTorch (a region that falls back, an excluded op) is braze's stream too."""
    x = torch.randn(8, 24)
    torch.manual_seed(5)
    in_braze = torch.compile(_dropout, backend="braze", options=STRICT)(x)
    torch._dynamo.reset()
    torch.manual_seed(5)
    in_torch = torch.compile(_dropout, backend="braze", options={"exclude_ops": ["philox_random"]})(x)
    torch.testing.assert_close(in_torch, in_braze, rtol=0, atol=0)
    seed = torch.tensor(_seed_after(5) - 2**64 if _seed_after(5) >= 2**63 else _seed_after(5))
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        expected = philox.uniform((3, 4), {torch.bfloat16: philox._SUPPORTED_DTYPES["bfloat16"], torch.float16:
                                           np.float16, torch.float64: np.float64}[dtype], int(seed) % 2**64, 2)
        drawn = philox_random(seed, 2, [3, 4], dtype, torch.device("cpu"), False)
        assert drawn.dtype == dtype
        np.testing.assert_array_equal(drawn.float().numpy(), expected.astype(np.float32))


def test_dropout_in_an_inference_graph_is_keyed_too() -> None:
    x = torch.randn(16, 16)
    with torch.no_grad():
        torch.manual_seed(9)
        out = torch.compile(_dropout, backend="braze", options=STRICT)(x)
    _close(out, x * 2 * _kept((16, 16), 0.3, _seed_after(9), 0) / 0.7 * 3, "output")


@pytest.mark.parametrize("random", ["braze", "torch"])
def test_the_random_option_says_who_draws_dropout_masks(random: str) -> None:
    explanation = bz.torch.explain(_dropout, torch.randn(8, 8), options={"random": random})
    fused = {op for r in explanation.regions for op in r.fused_ops}
    in_torch = {op: reason for g in explanation.graphs for op, reason in g.torch_ops}
    assert ("philox_random" in fused) == (random == "braze")
    if random == "torch":
        assert in_torch["aten.rand_like.default"] == "a random op: options['random'] is 'torch'"
    else:
        assert in_torch["draw_seed"] == "draws the seed of braze's random numbers from torch's generator"


# --- what the forward saves for the backward -----------------------------------------------------------
def _saved_by_forward(fn, *inputs) -> list[torch.Tensor]:
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs).sum().backward()
    return saved


@pytest.mark.parametrize("random, autocast, mask_saved", [("braze", False, False), ("braze", True, False),
                                                          ("torch", False, True)])
def test_the_forward_saves_the_seed_and_not_the_mask(random: str, autocast: bool, mask_saved: bool) -> None:
    """A GPT-2 block with dropout (in bf16 under autocast): braze's forward saves a 0-d seed; with
    PyTorch's generator the boolean masks (one per dropout, each the activation's size) are saved,
    as in eager PyTorch."""
    torch.manual_seed(0)
    block = torch_zoo.GPT2Block(torch_zoo.Config(dropout=0.2))
    x = torch.randn(2, 5, 32, requires_grad=True)
    compiled = torch.compile(block, backend="braze", options={**STRICT, "random": random})
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        saved = _saved_by_forward(compiled, x)
    masks = [t for t in saved if t.dtype in (torch.bool, torch.uint8) and t.numel() >= x.numel()]
    assert bool(masks) == mask_saved, [(t.dtype, tuple(t.shape)) for t in saved]
    seeds = [t for t in saved if t.dtype == torch.int64 and t.dim() == 0 and t.device.type == "cpu"]
    assert len(seeds) == (0 if mask_saved else 1)


# --- bernoulli masks -------------------------------------------------------------------------------------
def _uniform(shape: tuple, seed: int, offset: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Philox (seed, offset) as the backend draws it, for a seed of `_seed_after`."""
    return philox_random(torch.tensor(seed - 2**64 if seed >= 2**63 else seed), offset, list(shape), dtype,
                         torch.device("cpu"), False)


def _drop_path(x: torch.Tensor, keep: float = 0.75) -> torch.Tensor:
    """timm's drop path: one in-place bernoulli draw per sample, a mask broadcast over the rest."""
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask / keep


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_drop_paths_bernoulli_mask_is_braze_philox_below_p_in_forward_and_backward(dtype: torch.dtype) -> None:
    compiled = torch.compile(_drop_path, backend="braze", options=STRICT)
    x = torch.randn(2048, 3, 2, dtype=dtype, requires_grad=True)
    grad_out = torch.randn(2048, 3, 2, dtype=dtype)
    torch.manual_seed(12)
    (grad,) = torch.autograd.grad(y := compiled(x), x, grad_out)
    kept = (_uniform((2048, 1, 1), _seed_after(12), 0) < 0.75).to(dtype)
    assert 0.72 < kept.float().mean().item() < 0.78, "the share of samples kept"
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    _close(y.float(), (x.detach() * kept / 0.75).float(), "output", **tolerance)
    _close(grad.float(), (grad_out * kept / 0.75).float(), "gradient: the forward's mask drawn again", **tolerance)
    saved = _saved_by_forward(compiled, x)
    assert [t.dtype for t in saved if t.numel() > 1] == [], "the forward saves the seed, not the mask"


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bernoulli_mask_of_a_full_probability_is_drawn_again_in_the_backward_not_saved(dynamic: bool) -> None:
    def masked(x):
        return x * torch.bernoulli(torch.full_like(x, 0.25))

    compiled = torch.compile(masked, backend="braze", options=STRICT, dynamic=dynamic)
    for rows in (3, 6):
        x, grad_out = torch.randn(rows, 5, requires_grad=True), torch.randn(rows, 5)
        torch.manual_seed(14)
        (grad,) = torch.autograd.grad(y := compiled(x), x, grad_out)
        kept = (_uniform((rows, 5), _seed_after(14), 0) < 0.25).float()
        assert torch.equal(y, x.detach() * kept) and torch.equal(grad, grad_out * kept)
        saved = _saved_by_forward(compiled, x)
        assert [t.dtype for t in saved if t.numel() > 1] == [], "the forward saves the seed, not the mask"


def test_bernoulli_of_a_probability_tensor_is_braze_philox_below_it() -> None:
    """`torch.bernoulli(p)` (core ATen's decomposition) and `x.bernoulli_(p)` (aten.bernoulli.Tensor,
    `p` broadcast to `x`) draw the braze stream, in the graph's order; explain shows them fused."""
    def masks(x, p):
        return torch.bernoulli(torch.full_like(x, 0.25)) + x.clone().bernoulli_(p) * 10

    x, p = torch.zeros(64, 32, dtype=torch.float64), torch.linspace(0, 1, 32, dtype=torch.float64)
    torch.manual_seed(13)
    out = torch.compile(masks, backend="braze", options=STRICT)(x, p)
    seed = _seed_after(13)
    first, second = _uniform((64, 32), seed, 0), _uniform((64, 32), seed, 1, torch.float64)
    assert torch.equal(out, (first < 0.25).double() + (second < p).double() * 10)
    assert 0.2 < (out % 10).mean().item() < 0.3 and 0.4 < (out // 10).mean().item() < 0.6
    explanation = bz.torch.explain(masks, x, p)
    in_torch = [op for graph in explanation.graphs for op, _ in graph.torch_ops]
    assert sum(r.fused_ops["philox_random"] for r in explanation.regions) == 2, explanation
    assert not [op for op in in_torch if "bernoulli" in op], explanation


def test_the_empty_tensor_a_bernoulli_mask_was_drawn_into_is_not_allocated() -> None:
    with torch.no_grad():
        explanation = bz.torch.explain(_drop_path, torch.randn(8, 3))
    in_torch = [op for graph in explanation.graphs for op, _ in graph.torch_ops]
    assert in_torch == ["draw_seed"], explanation


# --- models ----------------------------------------------------------------------------------------------
class PhiloxDropout(nn.Module):
    """Eager dropout with the masks the backend draws: call k of a forward keeps the elements whose
    uniform of Philox (seed, k) exceeds p."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p, self.seed, self.calls = p, 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = _kept(tuple(x.shape), self.p, self.seed, self.calls)
        self.calls += 1
        return kept * x * (1.0 / (1.0 - self.p))


def test_a_gpt2_blocks_gradients_match_eager_with_the_same_masks() -> None:
    torch.manual_seed(0)
    model = torch_zoo.GPT2Block(torch_zoo.Config(dropout=0.25))
    reference = copy.deepcopy(model)
    reference.drop = PhiloxDropout(0.25)
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    grad_out = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(model, backend="braze", options=STRICT)
    torch.manual_seed(21)
    out = compiled(x)
    reference.drop.seed = _seed_after(21)
    expected = reference(x)
    _close(out, expected, "output", rtol=1e-4, atol=1e-5)
    params, params_ref = [x, *model.parameters()], [x, *reference.parameters()]
    grads = torch.autograd.grad(out, params, grad_out)
    grads_ref = torch.autograd.grad(expected, params_ref, grad_out)
    for (name, _), g, g_ref in zip([("input", x), *model.named_parameters()], grads, grads_ref):
        _close(g, g_ref, f"gradient of {name}", rtol=1e-4, atol=1e-5)


def _train(step, model: nn.Module, torch_seed: int, steps: int = 2) -> tuple[list[float], list[torch.Tensor]]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(torch_seed)
    losses = [step(model, optimizer).item() for _ in range(steps)]
    return losses, [p.detach().clone() for p in model.parameters()]


def test_a_model_with_dropout_trained_from_the_same_torch_seed_repeats_itself_exactly() -> None:
    torch.manual_seed(0)
    initial = torch_zoo.BertLayer(torch_zoo.Config(dropout=0.1))
    x, mask = torch_zoo.bert()[1](2, 8, torch.Generator().manual_seed(1))

    def step(model, optimizer):
        optimizer.zero_grad()
        loss = model(x, mask).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    compiled_step = torch.compile(step, backend="braze", options=STRICT)
    first = _train(compiled_step, copy.deepcopy(initial), torch_seed=7)
    again = _train(compiled_step, copy.deepcopy(initial), torch_seed=7)
    other = _train(compiled_step, copy.deepcopy(initial), torch_seed=8)
    assert first[0] == again[0], "the loss curve"
    for p, p_again in zip(first[1], again[1]):
        assert torch.equal(p, p_again), "a parameter after training"
    assert first[0] != other[0], "another torch seed drops other elements"
    eager = _train(step, copy.deepcopy(initial), torch_seed=7)  # other masks, the same distribution
    torch.testing.assert_close(first[0], eager[0], rtol=0.1, atol=0.05)


@pytest.mark.parametrize("partition, log_probs_saved", [("min_cut", False), ("default", True)])
def test_a_language_models_loss_saves_its_logits_not_their_log_probabilities(partition, log_probs_saved):
    """The min-cut partition (Options.partition) recomputes a loss's softmax in the backward from
    the logits and each row's statistics, as Inductor does; the default one saves the float32
    log-probabilities of every token, the logits' size over again."""
    logits = torch.randn(6, 7, 50, dtype=torch.bfloat16, requires_grad=True)
    tokens = torch.randint(0, 50, (6, 7))

    def loss(x):
        return torch.nn.functional.cross_entropy(x[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())

    compiled = torch.compile(loss, backend="braze", options={**STRICT, "partition": partition})
    saved = _saved_by_forward(compiled, logits)
    wide = [t for t in saved if t.dtype == torch.float32 and t.numel() >= 6 * 6 * 50]
    assert bool(wide) == log_probs_saved, [(t.dtype, tuple(t.shape)) for t in saved]
    expected = torch.autograd.grad(loss(logits), logits)[0]
    actual = torch.autograd.grad(compiled(logits), logits)[0]
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=1e-3)
