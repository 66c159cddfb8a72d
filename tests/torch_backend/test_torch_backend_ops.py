"""The braze backend op by op: generated programs of pointwise ops, reductions and views against eager
PyTorch (values and gradients), each ATen rule family, autocast, symbolic sizes, explain, the
options and their errors (random numbers and dropout: test_torch_backend_random.py)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import braze as bz  # noqa: E402
from braze.frontend.torch import region_builder  # noqa: E402
from braze.frontend.torch.backend import make_backend  # noqa: E402
from braze.frontend.torch.options import Options, parse_options  # noqa: E402

STRICT = {"fallback": "error"}


def _close(actual, expected, what: str = "output", rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Equal within float32 tolerances relative to the largest finite magnitude (NaN where eager has NaN)."""
    finite = expected[torch.isfinite(expected)] if expected.is_floating_point() else expected.new_zeros(0)
    scale = max(finite.abs().max().item(), 1.0) if finite.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


# --- generated programs ----------------------------------------------------------------------------
UNARY = [torch.tanh, torch.sigmoid, torch.relu, torch.abs, torch.neg, torch.sin, torch.erf, F.gelu, F.silu,
         lambda x: torch.exp(x.clamp(-4, 4)), lambda x: torch.sqrt(x.abs() + 0.25), lambda x: torch.log1p(x.abs()),
         lambda x: torch.rsqrt(x * x + 1), lambda x: F.gelu(x, approximate="tanh"), lambda x: x.pow(2)]
BINARY = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum, lambda x, y: x / (y.abs() + 0.5),
          lambda x, y: torch.where(x > y, x, y * 0.5), lambda x, y: x * 0.5 - y + 1.0]
ALONG_LAST = [lambda x: x.sum(-1, keepdim=True), lambda x: x.mean(-1, keepdim=True),
              lambda x: x.amax(-1, keepdim=True), lambda x: x.amin(-1, keepdim=True),
              lambda x: x.var(-1, keepdim=True, correction=0), lambda x: torch.softmax(x, -1),
              lambda x: torch.log_softmax(x, -1),
              lambda x: F.layer_norm(x, x.shape[-1:]), lambda x: x.flip(-1),
              lambda x: torch.cat([x[..., 1:], x[..., :1]], -1), lambda x: x.t().t()]


@st.composite
def programs(draw):
    """A list of steps, each an op applied to earlier values (0: x, 1: y), broadcasting as torch does."""
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        known = 2 + len(steps)
        kind = draw(st.sampled_from(["unary", "binary", "along_last"]))
        table = {"unary": UNARY, "binary": BINARY, "along_last": ALONG_LAST}[kind]
        arity = 2 if kind == "binary" else 1
        steps.append((kind, draw(st.integers(0, len(table) - 1)),
                      [draw(st.integers(0, known - 1)) for _ in range(arity)]))
    return steps


def _program(steps):
    tables = {"unary": UNARY, "binary": BINARY, "along_last": ALONG_LAST}

    def program(x, y):
        values = [x, y]
        for kind, op, operands in steps:
            values.append(tables[kind][op](*[values[i] for i in operands]))
        return values[-1] * 1.5 + values[-2].sum()  # two results reach the output

    return program


@settings(max_examples=12, deadline=None)
@given(steps=programs(), rows=st.sampled_from([1, 3, 5]), cols=st.sampled_from([1, 2, 7]),
       y_shape=st.sampled_from(["row", "column", "full"]), seed=st.integers(0, 2**16))
def test_generated_programs_match_eager_values_and_gradients(steps, rows, cols, y_shape, seed) -> None:
    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(seed)
    shape_of_y = {"row": (cols,), "column": (rows, 1), "full": (rows, cols)}[y_shape]
    x = torch.randn(rows, cols, generator=generator, requires_grad=True)
    y = torch.randn(*shape_of_y, generator=generator, requires_grad=True)
    program = _program(steps)
    compiled = torch.compile(program, backend="braze", options=STRICT)
    out, expected = compiled(x, y), program(x, y)
    _close(out, expected)
    grad_out = torch.randn(expected.shape, generator=generator)
    grads = torch.autograd.grad(out, [x, y], grad_out, allow_unused=True)
    grads_ref = torch.autograd.grad(expected, [x, y], grad_out, allow_unused=True)
    for name, g, g_ref in zip("xy", grads, grads_ref):
        if g_ref is not None:
            _close(g, g_ref, f"gradient of {name}", rtol=1e-4, atol=1e-4)


# --- the rule families ---------------------------------------------------------------------------------
def _ints(x):  # integer and bool arithmetic, division in each rounding mode, bit ops and shifts
    i = (x * 10).to(torch.int64)
    j = (x * 3).to(torch.int32) + 7
    return torch.stack([torch.div(i, j, rounding_mode="trunc").float(), torch.div(i, j, rounding_mode="floor").float(),
                        (i % j).float(), (i // j).float(), (i & 6 | 1).float(), (i ^ j).float(),
                        ((i > 0) & (j < 9)).float(), (i.abs() + (~(i > 2)).long()).float(),
                        torch.fmod(i, j).float(), torch.fmod(i, -3).float(), ((i << 3) >> (j % 5)).float(),
                        torch.bitwise_left_shift(1, j % 9).float()])


def _floats(x):  # clamps, powers, rounding, comparisons with scalars, casts both ways
    return torch.stack([x.clamp(-0.5, 0.5), x.clamp(min=0.1), torch.clamp(x, max=x * 0.5), x.pow(3),
                        torch.pow(2.0, x), (x.abs() + 1).pow(0.5),
                        torch.atan2(x, x + 2), torch.round(x * 4), torch.trunc(x * 3), torch.sign(x),
                        torch.remainder(x, 0.75), x.double().float() * (x >= 0), x.half().float(),
                        torch.lerp(x, x * x, 0.3), torch.addcmul(x, x, x, value=0.5), torch.copysign(x + 1, -x),
                        torch.fmod(x * 5, 0.75), torch.fmod(x, x.flip(0) - 0.5), torch.asin(x.clamp(-0.9, 0.9)),
                        torch.acos(x.clamp(-0.9, 0.9)), torch.atan(x * 3), torch.sinh(x), torch.cosh(x),
                        torch.asinh(x * 10), torch.acosh(x.abs() + 1), torch.atanh(x.clamp(-0.9, 0.9)),
                        torch.log10(x.abs() + 0.5), torch.hypot(x, x.flip(1)), torch.deg2rad(x),
                        torch.lgamma(x.abs() + 0.1), torch.special.erfinv(x.clamp(-0.95, 0.95)),
                        torch.fmax(x, torch.where(x > 0.5, float("nan"), x.flip(0))), torch.fmin(x, x.flip(1)),
                        torch.signbit(x * (x > 0)).float()])


def _views(x):  # reshapes, permutes, slices with steps, selects, padding (growing and cropping), expand
    y = x.reshape(2, 3, 4).permute(2, 0, 1)
    a = y[1:, :, ::2].reshape(-1)
    b = y.select(2, 1).flip(0).reshape(-1)
    c = F.pad(x, (1, -2, 0, 1), value=0.5).reshape(-1)
    d = x[:, :1].expand(6, 5).t().reshape(-1)
    e = x.unsqueeze(0).squeeze(0)[1].reshape(-1)
    return torch.cat([a, b, c, d, e])


def _reductions(x):  # every reduction, with dims, without, and keepdim
    return torch.stack([x.sum(), x.mean(), x.prod(), x.amax(), x.var(), x.std(), x.argmax().float(),
                        x.argmin(1).float().sum(), (x > 0).any().float(), (x > -9).all(1).float().sum(),
                        x.sum(0, keepdim=True).sum(), x.var(1, correction=0).sum(), x.max(), x.min(),
                        x.logsumexp(1).sum(), F.normalize(x, dim=1).sum(), torch.linalg.vector_norm(x, 3, dim=0).sum(),
                        F.cosine_similarity(x, x.flip(0), dim=1).sum()])


def _scans(x):  # positions from a mask, a top-p style running probability, products, an explicit dtype
    mask = x > 0
    positions = (mask.cumsum(-1) - 1) * mask
    running = torch.softmax(x, -1).cumsum(-1)
    return (positions.float() + running + (x * 0.5).cumprod(0) + mask.cumsum(0, dtype=torch.float32)
            + torch.logcumsumexp(x * 3, 0))


def _creation(x):  # arange, full, ones and zeros likes, where with scalars
    n = x.shape[0]
    r = torch.arange(n, dtype=torch.float32)[:, None] + torch.arange(1, 2 * x.shape[1] + 1, 2)
    return r * x + torch.full_like(x, 2.0) - torch.ones_like(x) + torch.where(x > 0, 1.0, -x)


def _activations(x):  # the activations and helpers model code calls, decomposed by PyTorch into fused ops
    specials = torch.where(x > 1, float("inf"), torch.where(x < -1, float("nan"), x))
    return torch.stack([F.softplus(x * 30, beta=2, threshold=10), F.elu(x, 0.5), F.leaky_relu(x, 0.2),
                        F.hardswish(x * 4), F.mish(x), F.hardsigmoid(x * 4), F.celu(x), F.selu(x),
                        F.relu6(x * 8), F.softsign(x), F.logsigmoid(x * 20), torch.nan_to_num(specials, posinf=5.0),
                        torch.logaddexp(x, x.flip(0)), torch.addcmul(x, x, x.flip(1), value=2),
                        torch.addcdiv(x, x, x.abs() + 1, value=0.5), torch.sign(specials), torch.sgn(specials)])


@pytest.mark.parametrize("fn, fused", [
    (_ints, {"aten.div.Tensor_mode", "aten.remainder.Tensor", "aten.bitwise_and.Scalar", "aten.bitwise_xor.Tensor",
             "aten.fmod.Tensor", "aten.fmod.Scalar", "aten.__lshift__.Scalar", "aten.__rshift__.Tensor",
             "aten.bitwise_left_shift.Scalar_Tensor"}),
    (_floats, {"aten.clamp.default", "aten.pow.Tensor_Scalar", "aten.pow.Scalar", "aten.atan2.default",
               "aten.copysign.Tensor", "aten.round.default", "aten.sign.default", "aten._to_copy.default",
               "aten.fmod.Scalar", "aten.fmod.Tensor", "aten.asin.default", "aten.atanh.default",
               "aten.hypot.default", "aten.log10.default", "aten.lgamma.default", "aten.erfinv.default",
               "aten.fmax.default", "aten.fmin.default", "aten.signbit.default"}),
    (_views, {"aten.permute.default", "aten.slice.Tensor", "aten.constant_pad_nd.default", "aten.flip.default",
              "aten.cat.default", "aten.expand.default"}),
    (_reductions, {"aten.prod.default", "aten.var.correction", "aten.argmax.default", "aten.any.default",
                   "aten.amax.default", "aten.linalg_vector_norm.default"}),
    (_scans, {"aten.cumsum.default", "aten.cumprod.default", "aten.logcumsumexp.default"}),
    (_creation, {"aten.arange.start_step", "aten.full_like.default", "aten.where.self"}),
    (_activations, {"aten.where.self", "aten.log1p.default", "aten.expm1.default", "aten.isnan.default"}),
], ids=lambda v: v.__name__.strip("_") if callable(v) else "")
def test_each_rule_family_matches_eager_and_runs_in_braze(fn, fused) -> None:
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(fn, backend="braze", options=STRICT)
    _close(compiled(x), fn(x))
    explanation = bz.torch.explain(fn, x, options=STRICT)
    fused_ops = {op for region in explanation.regions for op in region.fused_ops}
    assert fused <= fused_ops, f"left to PyTorch: {sorted(fused - fused_ops)}\n{explanation}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_floor_division_of_floats_follows_pythons_rule(dtype) -> None:
    """torch's float floor division is Python's (1.0 // 0.1 == 9.0, inf // 0.7 is NaN), not floor(a / b)."""
    def divide(x):
        return torch.div(x, 0.1, rounding_mode="floor"), x // 0.7, torch.floor_divide(x, torch.full_like(x, -0.1))

    x = torch.tensor([1.0, 3.0, -1.0, 7.0, 0.3, -0.0, float("inf"), float("nan")], dtype=dtype)
    compiled = torch.compile(divide, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(x), divide(x), strict=True):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


HALF_NUMBER_OPS = {
    "floor_divide": lambda x: x // 0.1, "div_floor": lambda x: torch.div(x, -0.3, rounding_mode="floor"),
    "div_trunc": lambda x: torch.div(x, 0.3, rounding_mode="trunc"), "div": lambda x: x / 0.1,
    "mul": lambda x: x * 0.1, "add": lambda x: x + 0.1, "sub": lambda x: x - 1.7, "rsub": lambda x: 0.3 - x,
    "remainder": lambda x: x % 0.1, "reciprocal_mul": lambda x: 0.1 / x, "fmod": lambda x: torch.fmod(x, 0.3),
}


# Eager's CUDA kernels compute these two from the number in a way braze does not follow yet: on an
# H100 their results differ from braze's (not bit for bit, as asserted here); the CPU's match.
CUDA_NUMBER_OPS_UNMATCHED = {"remainder", "div_trunc"}


@pytest.mark.parametrize("op", HALF_NUMBER_OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_half_tensors_meet_python_numbers_as_in_eager(device, dtype, op, request) -> None:
    """Eager reads the number in float32 for some ops (1.0 // 0.1 is 9, where float16(0.1) gives 10)
    and in the tensor's dtype for others, per device: braze gives eager's values bit for bit."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    if device == "cuda" and op in CUDA_NUMBER_OPS_UNMATCHED:
        request.applymarker(pytest.mark.xfail(strict=True, reason="eager's CUDA kernel rounds differently"))
    fn = HALF_NUMBER_OPS[op]
    spread = torch.randn(400, generator=torch.Generator().manual_seed(5)) * 10
    x = torch.cat([torch.tensor([1.0, 3.0, 0.7, 100.0, -2.5]), spread]).to(device=device, dtype=dtype)
    compiled = torch.compile(fn, backend="braze", options=STRICT)
    torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0, equal_nan=True)



@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_small_integer_powers_of_half_tensors_round_as_eagers_cpu_kernel(dtype) -> None:
    """On the CPU eager multiplies out bfloat16's x ** 3 and x ** -2, rounding each product; braze too."""
    def powers(x):
        return x ** 3, x.pow(-2), x ** 4, x ** 2, x.pow(-1), x.pow(3.0)

    x = (torch.randn(400, generator=torch.Generator().manual_seed(5)) * 3).to(dtype)
    compiled = torch.compile(powers, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(x), powers(x), strict=True):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)

def test_cross_entropy_picks_and_scatters_its_class_in_braze() -> None:
    # nll_loss's decomposition: a gather of each row's target in the forward, a scatter of -1 at it
    # in the backward (a one-hot the size of the logits, written in place of a copy and a scatter).
    def loss(logits, target):
        return F.cross_entropy(logits * 1.5, target, ignore_index=2)

    logits = torch.randn(7, 11, requires_grad=True, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([0, 10, 2, 5, 5, 1, 9])
    explanation = bz.torch.explain(loss, logits, target, options=STRICT)
    fused = {op for r in explanation.regions for op in r.fused_ops}
    assert {"aten.gather.default", "aten.scatter.value"} <= fused, explanation
    compiled = torch.compile(loss, backend="braze", options=STRICT)
    value = compiled(logits, target)
    (g,) = torch.autograd.grad(value, logits)
    (g_ref,) = torch.autograd.grad(loss(logits, target), logits)
    _close(value, loss(logits, target))
    _close(g, g_ref, "gradient")


def test_gather_and_scatter_of_one_index_a_row_along_any_dim() -> None:
    def pick(x, rows, columns):
        return x.gather(0, rows) * 2, x.scatter(0, rows, -3.0), x.gather(1, columns) + 1, x.scatter(1, columns, 7)

    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    rows, columns = torch.tensor([[4, 0, 2, 2]]), torch.tensor([[3], [0], [1], [1], [2]])
    compiled = torch.compile(pick, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(x, rows, columns), pick(x, rows, columns), strict=True):
        _close(actual, expected)
    fused = {op for r in bz.torch.explain(pick, x, rows, columns, options=STRICT).regions for op in r.fused_ops}
    assert {"aten.gather.default", "aten.scatter.value"} <= fused


def test_gathers_of_several_indices_a_row_and_of_a_narrower_index_fuse() -> None:
    """A MoE router's top-k probabilities gathered by index, a permutation of each row, and an index
    narrower than the input (torch reads the input's corner): braze picks each element by a one-hot
    sum, read directly by the code generators."""
    def pick(probs, top, order, corner):
        return (probs.gather(-1, top) / probs.gather(-1, top).sum(-1, keepdim=True), probs.gather(1, order) * 2,
                torch.gather(probs, 0, corner) - 1)

    generator = torch.Generator().manual_seed(4)
    probs = torch.randn(6, 9, generator=generator).softmax(-1)
    top = torch.randint(-9, 9, (6, 2), generator=generator)
    order = torch.argsort(torch.randn(6, 9, generator=generator), -1)
    corner = torch.randint(0, 6, (3, 4), generator=generator)
    compiled = torch.compile(pick, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(probs, top % 9, order, corner), pick(probs, top % 9, order, corner),
                                strict=True):
        _close(actual, expected)
    explanation = bz.torch.explain(pick, probs, top % 9, order, corner, options=STRICT)
    assert all(r.runs_in == "braze" and r.fused_ops.get("aten.gather.default") for r in explanation.regions)
    assert not any("gather" in op for g in explanation.graphs for op, _ in g.torch_ops), explanation


def test_a_value_scattered_at_a_few_indices_a_row_fuses() -> None:
    """Banned tokens set to -inf before sampling, along the last dim and along a middle one."""
    def ban(logits, banned, scores, columns):
        return (logits.scatter(-1, banned, float("-inf")).softmax(-1), scores.scatter(1, columns, 0.5) * 2)

    generator = torch.Generator().manual_seed(5)
    logits, scores = torch.randn(4, 11, generator=generator), torch.randn(2, 5, 3, 4, generator=generator)
    banned = torch.randint(0, 11, (4, 3), generator=generator)
    banned[0] = 7  # the same index twice
    columns = torch.randint(0, 5, (2, 2, 3, 4), generator=generator)
    compiled = torch.compile(ban, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(logits, banned, scores, columns), ban(logits, banned, scores, columns),
                                strict=True):
        _close(actual, expected)
    explanation = bz.torch.explain(ban, logits, banned, scores, columns, options=STRICT)
    assert sum(r.fused_ops.get("aten.scatter.value", 0) for r in explanation.regions) == 2, explanation


def test_sources_scattered_at_a_few_indices_a_row_fuse() -> None:
    """A MoE router's gates: the renormalized top-k probabilities written at their experts' columns of
    zeros; and int and bool sources along a middle dim, from a source larger than the index."""
    def route(probs, experts, counts, where, flags):
        top = probs.gather(-1, experts)
        gates = torch.zeros_like(probs).scatter(-1, experts, top / top.sum(-1, keepdim=True))
        return gates, counts.scatter(1, where, counts[:, :2] * 10), torch.zeros_like(counts, dtype=torch.bool).scatter(
            1, where, flags)

    generator = torch.Generator().manual_seed(6)
    probs = torch.randn(8, 6, generator=generator).softmax(-1)
    experts = torch.stack([torch.randperm(6, generator=generator)[:2] for _ in range(8)])
    counts = torch.randint(-5, 5, (3, 5, 2), generator=generator)
    where = torch.stack([torch.randperm(5, generator=generator)[:2] for _ in range(6)]).view(3, 2, 2).transpose(1, 2)
    flags = torch.rand(3, 4, 2, generator=generator) > 0.5
    compiled = torch.compile(route, backend="braze", options=STRICT)
    for actual, expected in zip(compiled(probs, experts, counts, where, flags),
                                route(probs, experts, counts, where, flags), strict=True):
        _close(actual, expected)
    explanation = bz.torch.explain(route, probs, experts, counts, where, flags, options=STRICT)
    assert sum(r.fused_ops.get("aten.scatter.src", 0) for r in explanation.regions) == 3, explanation


def test_cross_entropy_over_symbolic_sizes_gathers_and_scatters_in_braze() -> None:
    """Under dynamic=True the gather's row positions count to a symbolic number of classes."""
    def loss(logits, target):
        return F.cross_entropy(logits, target, label_smoothing=0.1)

    compiled = torch.compile(loss, backend="braze", options=STRICT, dynamic=True)
    generator = torch.Generator().manual_seed(3)
    for rows, classes in ((6, 5), (9, 13)):
        logits = torch.randn(rows, classes, requires_grad=True, generator=generator)
        target = torch.randint(0, classes, (rows,), generator=generator)
        target[1] = -100
        value, expected = compiled(logits, target), loss(logits, target)
        _close(value, expected)
        _close(torch.autograd.grad(value, logits)[0], torch.autograd.grad(expected, logits)[0], "gradient")


def test_a_slice_backward_scatters_in_braze() -> None:
    def rotate_half(x):
        return torch.cat([-x[..., 3:], x[..., :3]], -1) * x

    x = torch.randn(4, 6, requires_grad=True)
    explanation = bz.torch.explain(rotate_half, x, options=STRICT)
    assert "aten.slice_scatter.default" in {op for r in explanation.regions for op in r.fused_ops}
    compiled = torch.compile(rotate_half, backend="braze", options=STRICT)
    (g,) = torch.autograd.grad(compiled(x).sum(), x)
    (g_ref,) = torch.autograd.grad(rotate_half(x).sum(), x)
    _close(g, g_ref, "gradient")



def test_instance_norm_repeat_and_round_to_decimals_run_in_braze() -> None:
    """PyTorch's instance norm repeats its weight once a sample (aten.repeat); both decompose into
    what braze fuses, as does round(decimals=)."""
    norm = torch.nn.InstanceNorm1d(3, affine=True)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)

    def model(x):
        return torch.round(norm(x) * 3, decimals=1) + x.repeat(1, 2, 1)[:, 1:4]

    x = torch.randn(2, 3, 7, requires_grad=True)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    _close(compiled(x), model(x))
    (g,), (g_ref,) = (torch.autograd.grad(m(x).sum(), x) for m in (compiled, model))
    _close(g, g_ref, "gradient")
    explanation = bz.torch.explain(model, x, options=STRICT)
    in_torch = {op for graph in explanation.graphs for op, reason in graph.torch_ops if "view" not in reason}
    assert not in_torch, explanation

def _diagonals(x):  # x: (2, 3, 5); offsets on, at the edge of and past the matrix, dims in either order
    return (x.diagonal().exp(), torch.diagonal(x, 2, 1, 2) * 3, torch.diagonal(x, -1, 2, 1).sin(),
            torch.diagonal(x, 4, 0, 2) + 1, torch.diagonal(x, 5, -2, -1) + 1)


def test_diagonals_and_their_backwards_run_in_braze() -> None:
    """x.diagonal() (a Hessian's Laplacian, a covariance's diagonal) is every (columns + 1)-th element of
    the matrix flattened, and its backward's diagonal_scatter that slice's inverse: both ran in PyTorch."""
    x = torch.randn(2, 3, 5, requires_grad=True)
    compiled = torch.compile(_diagonals, backend="braze", options=STRICT)
    outs, expected = compiled(x), _diagonals(x)
    for n, (out, ref) in enumerate(zip(outs, expected, strict=True)):
        _close(out, ref, f"output {n}")
    # Each output weighted by its own number, so a gradient written to another's diagonal shows.
    (g,), (g_ref,) = (torch.autograd.grad(sum(y.sum() * (n + 1) for n, y in enumerate(ys)), x)
                      for ys in (outs, expected))
    _close(g, g_ref, "gradient")
    explanation = bz.torch.explain(_diagonals, x, options=STRICT)
    fused = {op for r in explanation.regions for op in r.fused_ops}
    assert {"aten.diagonal.default", "aten.diagonal_scatter.default"} <= fused, explanation


def test_a_diagonal_of_symbolic_extent_stays_in_pytorch_and_says_why() -> None:
    reports = []
    backend = make_backend(parse_options(STRICT), reports)
    compiled = torch.compile(lambda x: x.diagonal().exp(), backend=backend, dynamic=True)
    x = torch.randn(4, 4)
    _close(compiled(x), x.diagonal().exp())
    reasons = {reason for report in reports for (op, reason) in report.torch_ops if op == "aten.diagonal.default"}
    assert reasons == {"braze's rule does not take a diagonal of symbolic extent"}, reports


def test_a_slice_backward_with_symbolic_bounds_runs() -> None:
    """The backward of x[:, :n - 1] over a symbolic n scatters between symbolic bounds: PyTorch's."""
    def drop_last(x):
        return torch.exp(x[:, : x.shape[1] - 1]) * 2

    compiled = torch.compile(drop_last, backend="braze", options=STRICT, dynamic=True)
    for cols in (5, 8):
        x = torch.randn(3, cols, requires_grad=True)
        (g,) = torch.autograd.grad(compiled(x).sum(), x)
        (g_ref,) = torch.autograd.grad(drop_last(x).sum(), x)
        _close(g, g_ref, "gradient")


def test_a_value_and_its_contiguous_copy_leave_a_region_each_with_its_layout() -> None:
    """y keeps its transposed strides and y.contiguous() is row-major, though braze computes them once:
    PyTorch views the copy as a matrix, which needs row-major strides."""
    def both(x, w):
        y = torch.sigmoid(x.transpose(1, 2))
        return y, y.contiguous().view(-1, 4) @ w, y.contiguous().view(-1, 4) * 2

    x, w = torch.randn(2, 4, 6), torch.randn(4, 3)
    compiled = torch.compile(both, backend="braze", options=STRICT)
    for got, want in zip(compiled(x, w), both(x, w)):
        assert got.stride() == want.stride()
        _close(got, want)

# --- autocast, symbolic sizes ----------------------------------------------------------------------------
def test_bf16_autocast_regions_match_eager() -> None:
    def mlp(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.gelu(x @ w).sum(-1)

    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    compiled = torch.compile(mlp, backend="braze", options=STRICT)
    out, expected = compiled(x, w), mlp(x, w)
    assert out.dtype == torch.bfloat16
    _close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)
    grads = torch.autograd.grad(out.float().sum(), [x, w])
    grads_ref = torch.autograd.grad(expected.float().sum(), [x, w])
    for g, g_ref in zip(grads, grads_ref):
        _close(g, g_ref, "gradient", rtol=2e-2, atol=2e-2)


def test_a_size_no_region_input_has_is_carried_in() -> None:
    """The region after the matmul reads a (batch*seq, 8) matrix but views it as (batch, seq, 8)."""
    def project(x, w):
        return torch.tanh((x.reshape(-1, x.shape[-1]) @ w).reshape(x.shape[0], x.shape[1], -1) + 1).sum(1)

    w = torch.randn(4, 8)
    compiled = torch.compile(project, backend="braze", options=STRICT, dynamic=True)
    for batch, seq in ((2, 3), (5, 7)):
        x = torch.randn(batch, seq, 4)
        _close(compiled(x, w), project(x, w))


def test_a_size_braze_cannot_compute_is_carried_in_computed_by_pytorch() -> None:
    """Interpolating by a float scale over symbolic sizes makes sizes TruncToInt(1.5*ToFloat(s0)),
    which braze's extents have no op for: the region that counts the source rows to that size takes it
    as a carrier's dimension. It was an UnsupportedError. The scale's true_divide fuses too."""
    def upsample(x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest") * 2

    compiled = torch.compile(upsample, backend="braze", options=STRICT, dynamic=True)
    for side in (4, 6, 7):
        x = torch.randn(1, 2, side, side + 1)
        torch.testing.assert_close(compiled(x), upsample(x), rtol=0, atol=0)
    torch._dynamo.mark_dynamic(x, 2)
    explanation = bz.torch.explain(upsample, x, options=STRICT)
    assert all(region.runs_in == "braze" for region in explanation.regions)
    in_torch = {op for op, _ in explanation.graphs[0].torch_ops}
    assert any(op.startswith("aten.arange") for r in explanation.regions for op in r.fused_ops)
    assert "aten.true_divide.Tensor" not in in_torch and "aten.index.Tensor" in in_torch


# --- explain and options -------------------------------------------------------------------------------
def test_explain_lists_regions_their_ops_kernels_and_what_stayed_in_pytorch() -> None:
    def block(x, w):
        return torch.softmax(F.gelu(x @ w) * 2, -1)

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    explanation = bz.torch.explain(block, x, w)
    graphs = [g.graph for g in explanation.graphs]
    assert graphs == ["forward", "backward"]
    for region in explanation.regions:
        assert region.runs_in == "braze" and region.kernels, region
    forward = explanation.graphs[0]
    assert {"aten.gelu.default", "aten.exp.default"} <= set(forward.regions[0].fused_ops)
    assert ("aten.mm.default", "a matrix multiply: PyTorch's BLAS runs it") in forward.torch_ops
    text = str(explanation)
    assert "forward graph: 1 braze region(s)" in text and "kernels launched" in text and "aten.mm.default" in text
    assert x.grad is None and w.grad is None, "explain left gradients behind"



def test_explain_names_pooling_sorting_and_strided_views_left_to_pytorch() -> None:
    def pooled(x):
        a, b = x.chunk(2, -1)
        top = torch.topk(torch.tanh(a) * 2, 2, dim=-1).values
        windows = torch.as_strided(x * 2, (2, 3, 3), (24, 1, 1))  # overlapping: no slice of x
        return (F.max_pool1d(torch.relu(b) + 1, 2), F.avg_pool1d(b * 3, 2), top, torch.sort(b * b, -1).values,
                windows.exp())

    explanation = bz.torch.explain(pooled, torch.randn(2, 3, 8))
    reasons = {op.removeprefix("aten.").removesuffix(".default"): why for op, why in explanation.graphs[0].torch_ops}
    assert reasons["max_pool2d_with_indices"] == reasons["avg_pool2d"] == "a pooling window: PyTorch runs it"
    assert reasons["topk"] == reasons["sort"] == "sorting and selection: braze has none"
    assert reasons["as_strided"] == "braze's rule does not take strides that are no slice of its input"


def test_explain_calls_an_embedding_bag_indexing() -> None:
    """nn.EmbeddingBag (DLRM's tables) gathers rows by index, forward and backward: explain said braze
    had no rule for it, as for an op it might take."""
    bag = torch.nn.EmbeddingBag(10, 4, mode="mean")
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2])
    explanation = bz.torch.explain(lambda i, o: bag(i, o).tanh(), indices, offsets)
    reasons = {op: why for graph in explanation.graphs for op, why in graph.torch_ops if "embedding_bag" in op}
    assert set(reasons) == {"aten._embedding_bag.default", "aten._embedding_bag_backward.default"}, explanation
    assert set(reasons.values()) == {"indexing by a tensor (gather/scatter): braze has none"}


def test_explain_names_pairwise_distances_triangle_indices_and_asserts_left_to_pytorch() -> None:
    """cdist (forward and backward), triu_indices, tril_indices and _assert_async: explain said only that
    braze had no rule for them, as for an op it might take."""
    def f(a, b):
        torch._assert_async((a > -100).all(), "a value below -100")
        upper, lower = torch.triu_indices(3, 3, 1), torch.tril_indices(3, 3)
        return torch.cdist(a, b).exp().sum() + a[upper[0], upper[1]].sum() + a[lower[0], lower[1]].sum()

    explanation = bz.torch.explain(f, torch.randn(5, 3, requires_grad=True), torch.randn(4, 3))
    reasons = {op: why for graph in explanation.graphs for op, why in graph.torch_ops}
    distances = "pairwise distances (cdist, pdist): PyTorch runs them, as it does matrix multiplies"
    assert reasons["aten._cdist_forward.default"] == reasons["aten._cdist_backward.default"] == distances
    triangle = "a triangle's indices (triu_indices, tril_indices): braze has none"
    assert reasons["aten.triu_indices.default"] == reasons["aten.tril_indices.default"] == triangle
    check = "a check of values at run time (an assert): PyTorch runs it, there is nothing to fuse"
    assert reasons["aten._assert_async.msg"] == check, explanation


def test_explain_says_why_a_bernoulli_draw_stays_in_pytorch() -> None:
    """braze draws bernoulli masks (test_torch_backend_random.py); one left to PyTorch (a generator of
    the user's) was called a random op braze has no rule for."""
    from braze.frontend.torch.support import _family_reason

    aten = torch.ops.aten
    for op in (aten.bernoulli.p, aten.bernoulli.Tensor, aten.bernoulli_.float, aten.bernoulli.default):
        assert _family_reason(op).startswith("a bernoulli draw from a torch.Generator of the user's"), op


def test_explain_calls_a_size_query_a_size_query() -> None:
    from braze.frontend.torch.support import _family_reason

    for op in (torch.ops.aten.sym_stride.int, torch.ops.aten.sym_storage_offset.default, torch.ops.aten.sym_size.int):
        assert _family_reason(op) == "a size query: PyTorch answers it, there is nothing to compute", op


def test_explain_calls_the_draws_of_gumbel_softmax_and_other_distributions_random_ops() -> None:
    """F.gumbel_softmax draws with aten.exponential: explain said only that braze has no rule for it."""
    from braze.frontend.torch.support import _family_reason

    aten = torch.ops.aten
    for op in (aten.exponential.default, aten.geometric.default, aten.cauchy.default, aten.log_normal.default,
               aten.poisson.default, aten.binomial.default, aten._standard_gamma.default):
        assert _family_reason(op) == "a random op braze has no rule for", op


def test_explain_says_torch_cond_is_a_higher_order_op_in_pytorch() -> None:
    def branchy(x):
        return torch.cond(x.sum() > 0, lambda t: torch.tanh(t), lambda t: torch.sigmoid(t) * 2, (x,))

    x = torch.randn(4, 8)
    _close(torch.compile(branchy, backend="braze", options=STRICT)(x), branchy(x))
    reasons = {op: why for op, why in bz.torch.explain(branchy, x).graphs[0].torch_ops}
    assert reasons["cond"].startswith("a higher-order op (cond: control flow"), reasons

def test_excluded_ops_and_small_regions_stay_in_pytorch() -> None:
    def f(x):
        return F.gelu(x) + torch.sigmoid(x)

    x = torch.randn(4, 4)
    excluded = bz.torch.explain(f, x, options={"exclude_ops": ["aten.gelu"]})
    assert ("aten.gelu.default", "excluded by options['exclude_ops']") in excluded.graphs[0].torch_ops
    small = bz.torch.explain(f, x, options={"min_region_ops": 5})
    assert small.regions == []
    assert any("min_region_ops" in reason for _, reason in small.graphs[0].torch_ops)


@pytest.mark.parametrize("error, reason", [
    (bz.UnsupportedError("not today"), "UnsupportedError: not today"),
    (TypeError("a defect"), r"an internal error of braze's \(please report it\): TypeError: a defect"),
], ids=["unsupported", "internal"])
def test_a_region_braze_cannot_build_runs_in_pytorch_or_raises(monkeypatch, error, reason) -> None:
    def refuse(self, rules):
        raise error

    monkeypatch.setattr(region_builder.RegionBuilder, "build", refuse)
    x = torch.randn(4, 4)
    torch._dynamo.reset()
    with pytest.warns(RuntimeWarning, match=f"runs in PyTorch; braze cannot build it: {reason}"):
        _close(torch.compile(torch.tanh, backend="braze")(x), torch.tanh(x))
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as failed:
        torch.compile(torch.tanh, backend="braze", options=STRICT)(x)
    assert failed.value.inner_exception is error


def test_a_region_that_fails_to_run_falls_back_to_pytorch_for_good(monkeypatch) -> None:
    def f(x):
        return torch.tanh(x) * 2

    compiled = torch.compile(f, backend="braze")
    x = torch.randn(4, 4)
    _close(compiled(x), f(x))

    def broken(self, inputs, **kwargs):
        raise bz.CompileError("the compiler broke")

    monkeypatch.setattr(bz.Fusion, "execute", broken)
    with pytest.warns(RuntimeWarning, match="runs in PyTorch from now on; braze could not run it: CompileError"):
        _close(compiled(x), f(x))
    _close(compiled(x), f(x))


@pytest.mark.parametrize("options, message", [
    ({"fallbak": "torch"}, r"options: unknown option 'fallbak' for the braze backend; expected any of 'fallback'"),
    ({"fallback": "eager"}, r"options\['fallback'\]: expected one of 'torch', 'error', got 'eager'"),
    ({"exclude_ops": "aten.gelu"}, r"options\['exclude_ops'\]: expected a list of ATen op names"),
    ({"min_region_ops": 0}, r"options\['min_region_ops'\]: expected an int >= 1, got 0"),
    ({"random": "numpy"}, r"options\['random'\]: expected one of 'braze', 'torch', got 'numpy'"),
])
def test_bad_options_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(bz.InputError, match=f"^{message}"):
        parse_options(options)


def test_a_bad_option_fails_the_compile_with_a_braze_input_error() -> None:
    compiled = torch.compile(torch.tanh, backend="braze", options={"max_autotune": True})
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown option 'max_autotune'") as failed:
        compiled(torch.randn(3))
    assert isinstance(failed.value.inner_exception, bz.InputError)
    with pytest.raises(bz.InputError, match="^mode: the braze backend has no modes"):
        parse_options(None, mode="max-autotune")
    assert parse_options({"exclude_ops": ["aten.gelu"]}) == Options(exclude_ops=frozenset({"aten.gelu"}))


def test_the_backend_is_an_entry_point_and_import_braze_does_not_import_torch() -> None:
    assert [e.value for e in entry_points(group="torch_dynamo_backends") if e.name == "braze"] == [
        "braze.frontend.torch:backend"]
    subprocess.run([sys.executable, "-c", "import sys, braze; assert 'torch' not in sys.modules"], check=True)
    assert bz.torch.explain is bz.frontend.torch.explain


def test_stride_orders_follow_torchs_layouts() -> None:
    x = torch.empty(2, 3, 4)
    assert region_builder.stride_order(x) is None
    assert region_builder.stride_order(x.permute(0, 2, 1).contiguous().permute(0, 2, 1)) == (2, 0, 1)
    assert region_builder.stride_order(torch.empty(2, 1, 4)) is None
    assert region_builder.stride_order(torch.empty(8, 3, 5, 5).to(memory_format=torch.channels_last)) == (3, 0, 2, 1)



def test_size_one_dimensions_of_outputs_have_eagers_strides_and_a_loop_feeding_them_back_compiles_once() -> None:
    """A denoising loop at batch 1 feeds each step's output back in. Its size-1 dimensions had
    stride 0 in braze's outputs ((0, 1) where eager gives (6, 1)), and Dynamo, whose guards compare
    strides, compiled the graph again on the second step."""
    def step(x, y):
        return (x * 2 + y).sin(), x.sum(0, keepdim=True), x[:, :1] * 3

    compiled = torch.compile(step, backend="braze", options=STRICT)
    for shape in ((1, 6), (3, 6), (1, 1)):
        x, y = torch.randn(shape), torch.randn(shape[1])
        assert [o.stride() for o in compiled(x, y)] == [o.stride() for o in step(x, y)], shape
    torch._dynamo.reset()
    x, y = torch.randn(1, 6), torch.randn(6)
    graphs = counters["stats"]["unique_graphs"]
    for _ in range(3):
        x = compiled(x, y)[0]
    assert counters["stats"]["unique_graphs"] == graphs + 1

# --- unsigned integers -------------------------------------------------------------------------------
def test_uint8_images_fuse_in_braze():
    """uint8 images and masks: widening, clamping and narrowing back, masks and shifts, sums into int64,
    division by a constant and conversion to float, all in braze (no fallback) and equal to eager."""
    def normalize(x, mask):
        brightened = (x.to(torch.int16) * 3 + 7).clamp(0, 255).to(torch.uint8)
        return brightened, (x & mask) >> 2, x.sum(-1), x // 3, x.float() / 255

    compiled = torch.compile(normalize, backend="braze", options=STRICT)
    x = torch.randint(0, 256, (16, 33), dtype=torch.uint8)
    mask = torch.full((33,), 0xF0, dtype=torch.uint8)
    for got, want in zip(compiled(x, mask), normalize(x, mask)):
        assert got.dtype == want.dtype
        _close(got, want)


def test_floats_to_uint8_wrap_through_int64_as_in_eager():
    """PyTorch takes a float to uint8 through int64 (as NumPy does): -1.5 gives 255 and 300.0 gives 44. braze's
    own cast saturates (0 and 255), and a region gave that, for a cast and for a copy into a uint8 buffer."""
    def quantize(x, buffer):
        buffer.copy_(x * 2)
        return (x * 255).to(torch.uint8), x.byte()

    compiled = torch.compile(quantize, backend="braze", options=STRICT)
    x = torch.tensor([-300.7, -129.5, -1.5, -0.7, 0.0, 0.6, 1.5, 127.9, 128.5, 255.9, 256.2, 300.0, 70000.0])
    buffer, buffer_eager = (torch.zeros(x.shape, dtype=torch.uint8) for _ in range(2))
    for got, want in zip([*compiled(x, buffer), buffer], [*quantize(x, buffer_eager), buffer_eager]):
        assert got.dtype == want.dtype == torch.uint8
        assert got.tolist() == want.tolist()


def test_python_ints_out_of_an_integer_dtypes_range_wrap_as_in_eager():
    """Eager PyTorch converts a Python int operand to the integer tensor's dtype modulo 2^n: uint8 + -1
    adds 255, int32 + 2**31 adds -2**31, int32 == 2**32 compares with 0. braze's ops refuse such an int,
    so the region fell back to PyTorch (under fallback='error', a FusionDefinitionError). A uint8 fill takes
    a negative int down to -255 (`torch.where(mask, image, -1)` fills 255)."""
    def wrapping(u8, i32):
        return (u8 + (-1), u8 * 300, 300 - u8, u8 // 300, i32 + 2**31, (i32 == 2**32) | (i32 < 2**40),
                i32 % (2**32 + 3), i32 - 2**33 + 5, torch.where(u8 > 100, u8, -1), torch.full_like(u8, -255))

    compiled = torch.compile(wrapping, backend="braze", options=STRICT)
    u8, i32 = torch.arange(0, 256, 51, dtype=torch.uint8), torch.arange(-3, 3, dtype=torch.int32)
    for n, (got, want) in enumerate(zip(compiled(u8, i32), wrapping(u8, i32), strict=True)):
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), (n, got, want)


def test_add_and_sub_of_a_number_with_an_alpha_run_in_braze():
    """`x.add_(0.5, alpha=4)` multiplied two numbers with braze's mul, which takes a tensor: the region fell
    back to PyTorch. An integer product wraps as eager's kernel wraps it."""
    def scaled(f, i32):
        return (f.add(0.5, alpha=4), torch.sub(f, 1.5, alpha=-2.5), torch.add(i32, 2**30 + 1, alpha=6),
                i32.sub(2, alpha=3))

    compiled = torch.compile(scaled, backend="braze", options=STRICT)
    f, i32 = torch.linspace(-1, 1, 6), torch.arange(-3, 3, dtype=torch.int32)
    for n, (got, want) in enumerate(zip(compiled(f, i32), scaled(f, i32), strict=True)):
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), (n, got, want)
