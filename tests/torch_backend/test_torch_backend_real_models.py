"""Layers of real models (tests/torch_backend/real_models.py) through `torch.compile(backend="braze")` on CPU
tensors against eager PyTorch, forward and backward, at static and dynamic sizes, under bf16 autocast; and the
numerics where eager PyTorch's CPU kernels round their own way: running sums kept in float64, floats to narrow
integers through int32, and the powers it computes without `pow`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from real_models import (  # noqa: E402  (beside this file)
    BF16,
    STRICT,
    DINOHead,
    GemmaRMSNorm,
    GPTJRotary,
    IntegerMasks,
    LayerScaleDropPath,
    NeoXLayer,
    SqueezeExcite,
    Statistics,
    TrainingLosses,
    VolumeNorms,
    WeightNormed,
    check_against_eager,
    integer_mask_inputs,
    neox_inputs,
    normal,
    training_loss_inputs,
)

import braze as bz  # noqa: E402


def _inputs(make, *seeds: int) -> list[tuple]:
    return [make(torch.Generator().manual_seed(seed)) for seed in seeds]


MODELS = {
    "neox_partial_rotary": (NeoXLayer, lambda: _inputs(neox_inputs, 1)),
    "gemma_rms_norm": (GemmaRMSNorm, lambda: _inputs(normal(2, 3, 16), 1)),
    "gptj_rotary": (GPTJRotary, lambda: _inputs(normal(2, 5, 32), 1)),
    "dino_head": (DINOHead, lambda: _inputs(lambda g: normal(4, 16)(g) + normal(4, 16)(g), 1)),
    "squeeze_excite": (SqueezeExcite, lambda: _inputs(normal(2, 8, 5, 5), 1)),
    "volume_norms": (VolumeNorms, lambda: _inputs(normal(2, 6, 3, 4, 5), 1)),
    "integer_masks": (IntegerMasks, lambda: _inputs(integer_mask_inputs, 1)),
    "training_losses": (TrainingLosses, lambda: _inputs(training_loss_inputs, 1)),
}


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_matches_eager_forward_and_backward(name: str) -> None:
    make_model, make_inputs = MODELS[name]
    check_against_eager(make_model, make_inputs())


def test_weight_norms_backward_matches_eager_and_runs_in_braze() -> None:
    """PyTorch keeps `_weight_norm_interface_backward` whole; braze decomposes it and fuses the pieces."""
    check_against_eager(WeightNormed, _inputs(normal(2, 5, 8), 1))
    torch.manual_seed(0)
    explanation = bz.torch.explain(WeightNormed(), torch.randn(2, 5, 8, requires_grad=True), options=STRICT)
    assert "_weight_norm_interface_backward" not in str(explanation), explanation


def test_activations_and_statistics_match_eager_over_three_batch_sizes() -> None:
    inputs = [normal(batch, 8)(torch.Generator().manual_seed(batch)) for batch in (4, 3, 7)]
    check_against_eager(Statistics, inputs, dynamic=True)


def test_integer_masks_and_losses_match_eager_over_batch_sizes() -> None:
    check_against_eager(IntegerMasks, [integer_mask_inputs(torch.Generator().manual_seed(1), b, t)
                                       for b, t in ((3, 5), (2, 4), (4, 6))], dynamic=True)
    check_against_eager(TrainingLosses, [training_loss_inputs(torch.Generator().manual_seed(b), b) for b in (6, 4)],
                        dynamic=True)


def test_partial_rotary_and_gemma_norm_under_bf16_autocast_match_eager() -> None:
    check_against_eager(NeoXLayer, _inputs(neox_inputs, 1), tolerance=BF16, autocast=True)
    check_against_eager(GemmaRMSNorm, _inputs(normal(2, 3, 16), 1), tolerance=BF16, autocast=True)


def test_drop_path_masks_samples_and_its_gradient_follows_the_mask() -> None:
    """braze draws its own mask (not eager's numbers): each sample is kept, scaled by 1/keep, or dropped,
    the output is what eager computes with that mask, and so are the gradients."""
    torch.manual_seed(0)
    model = LayerScaleDropPath()
    compiled = torch.compile(model, backend="braze", options=STRICT)
    x = torch.randn(64, 3, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    out, mask = compiled(x)
    assert set(mask.unique().tolist()) == {0.0, 2.0}, mask.unique()
    out.sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    expected = x_ref + model.gamma * model.fc(x_ref) * mask
    grads = torch.autograd.grad(expected.sum(), [x_ref, model.gamma])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, grads[0])
    torch.testing.assert_close(model.gamma.grad, grads[1])


# --- numerics of eager's CPU kernels ---------------------------------------------------------------------------
def _scans(x: torch.Tensor) -> tuple:
    return x.cumsum(-1), (1 + x * 1e-3).cumprod(-1), x.logcumsumexp(-1), x.cumsum(0)


def test_float32_running_sums_are_kept_in_float64_as_eagers_cpu_kernels_keep_them() -> None:
    """A float32 running sum over thousands of elements drifts some 20 ulps from the exact one; eager
    PyTorch's CPU kernel keeps it in float64, and where it crosses zero the two differ by far more than
    float32 tolerances. Forward and backward (a reversed cumsum)."""
    x = torch.randn(3, 4001, generator=torch.Generator().manual_seed(0))
    leaves = [x.clone().requires_grad_() for _ in range(2)]
    outs = torch.compile(_scans, backend="braze", options=STRICT)(leaves[0])
    expected = _scans(leaves[1])
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i)) for i, o in enumerate(expected)]
    for n, (a, e) in enumerate(zip(outs, expected, strict=True)):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6, msg=lambda m, n=n: f"scan {n}: {m}")
    sum(((o * w).sum() for o, w in zip(outs, weights)), torch.zeros(())).backward()
    sum(((o * w).sum() for o, w in zip(expected, weights)), torch.zeros(())).backward()
    torch.testing.assert_close(leaves[0].grad, leaves[1].grad, rtol=1e-5, atol=1e-5)


def test_floats_to_int8_and_int16_wrap_through_int32_as_in_eager() -> None:
    """Eager PyTorch's CPU kernels truncate a float to int32 and wrap it to int8 or int16 (300.0 gives 44,
    70000.0 gives 4464); braze's cast saturates (127, 32767)."""

    def narrow(x: torch.Tensor) -> tuple:
        return (x * 1000).to(torch.int8), (x * 1e5).to(torch.int16), x.double().mul(1e4).to(torch.int8)

    x = torch.cat([torch.randn(61, generator=torch.Generator().manual_seed(0)),
                   torch.tensor([0.3, -0.3, 0.7, -70.0, 0.1277, -0.1289])])
    for n, (a, e) in enumerate(zip(torch.compile(narrow, backend="braze", options=STRICT)(x), narrow(x), strict=True)):
        assert torch.equal(a, e), (n, a, e)


def _powers(x: torch.Tensor) -> tuple:
    return x ** -0.5, x.half() ** 0.5, x.bfloat16() ** -0.5, x ** 3, x ** -2, x.bfloat16() ** 3


def test_powers_eager_computes_without_pow_give_its_values() -> None:
    """Eager's CPU kernels take x ** -0.5 as rsqrt (-0.0 gives -inf, -inf gives NaN; pow gives inf and 0),
    for float16 call pow even for x ** 0.5 (-inf gives inf, not sqrt's NaN), and multiply out x ** 3 and
    x ** -2, each product rounded: those three to the bit. (Its rsqrt and sqrt are within an ulp.)"""
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, 3.7, -2.5, 1e13])
    x = torch.cat([specials, torch.randn(40, generator=torch.Generator().manual_seed(0)) * 10])
    actual, expected = torch.compile(_powers, backend="braze", options=STRICT)(x), _powers(x)
    for n, (a, e) in enumerate(zip(actual, expected, strict=True)):
        exact = n >= 3
        torch.testing.assert_close(a, e, rtol=0 if exact else 2 * torch.finfo(e.dtype).eps,
                                   atol=0, equal_nan=True, msg=lambda m, n=n: f"power {n}: {m}")


@pytest.mark.parametrize("divide", [
    lambda i: (i * 2 + 1) // 0, lambda i: (i.to(torch.uint8) * 3) % 256 + 1, lambda i: torch.fmod(i * 2, 0) - 1,
    lambda i: torch.div(i + 1, 0, rounding_mode="floor").abs(),
], ids=["floor_divide", "uint8_remainder_by_256", "fmod", "div_floor"])
def test_an_integer_division_by_a_number_that_is_zero_raises_as_in_eager(divide) -> None:
    """Eager raises ZeroDivisionError; braze's integer division by 0 gives 0. The node stays in PyTorch,
    which raises, and the ops around it still build (fallback='error')."""
    i = torch.arange(-3, 9)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        divide(i)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.compile(divide, backend="braze", options=STRICT)(i)


def _symbolic_numbers(x: torch.Tensor, n: int, past: int) -> tuple:
    positions = torch.arange(past, past + x.shape[1])  # a key/value cache's position ids
    return (x * n + n, torch.full_like(x, n), x.clamp(min=n, max=n + 3), torch.where(x > 0, n, x),
            positions * n, torch.arange(past, past + 2 * x.shape[1], 2) + x.shape[0], x.sum(-1) + past)


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_symbolic_int_arguments_read_as_numbers_take_any_sign(dynamic) -> None:
    """Python ints Dynamo makes symbolic (on a second call with another value, or with dynamic=True) that
    ops read as numbers: braze carried each into its region as the extent of a zero-stride tensor, which
    a negative number cannot be ('negative dimensions are not allowed'). They are scalars of the fusion."""
    compiled = torch.compile(_symbolic_numbers, backend="braze", options=STRICT, dynamic=dynamic)
    for n, past, shape in ((2, 5, (2, 3)), (3, 7, (2, 3)), (-4, -2, (3, 4)), (-1, 100, (4, 2))):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(n))
        for k, (a, e) in enumerate(zip(compiled(x, n, past), _symbolic_numbers(x, n, past), strict=True)):
            assert a.dtype == e.dtype, (n, past, k)
            torch.testing.assert_close(a, e, msg=lambda m, k=k, n=n: f"n={n}, output {k}: {m}")


SLICES = {
    "head": lambda x, n: x[:, :n] * 2,
    "tail": lambda x, n: x[:, n:].sum(-1),
    "padded_tail": lambda x, n: F.pad(x, (0, 1))[:, n:] + 1,
    "select_and_roll": lambda x, n: x[:, n] + x[:, -2:-1].sum() + x.roll(n, 1).sum(-1),
}


@pytest.mark.parametrize("name", SLICES)
def test_symbolic_slice_bounds_of_either_sign_match_eager_forward_and_backward(name) -> None:
    """`x[:, :n]` with a symbolic n: a negative n counts from the end. braze carried n into the region
    after the slice (its sizes are `s0 + n`) as a tensor's extent, which a negative number cannot be
    ('negative dimensions are not allowed'), and read a negative start as one from the start (wrong
    values); now its negation is carried where the guards say n < 0, and a slice by a bound that may be
    negative stays in PyTorch."""
    sliced = SLICES[name]
    compiled = torch.compile(sliced, backend="braze", options=STRICT, dynamic=True)
    for n, shape in ((2, (2, 5)), (-1, (3, 6)), (-3, (2, 5))):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(abs(n)))
        leaves = [x.clone().requires_grad_() for _ in range(2)]
        actual, expected = compiled(leaves[0], n), sliced(leaves[1], n)
        torch.testing.assert_close(actual, expected, msg=lambda m, n=n: f"n={n}: {m}")
        actual.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(leaves[0].grad, leaves[1].grad, msg=lambda m, n=n: f"n={n}, gradient: {m}")
