"""torch's losses, distances, activations and elementwise functions that braze composes from its ops
(`braze/ops/losses.py`, `braze/ops/torch_math.py`), as functions, `F.` functions and methods, against eager
torch in float64 (tight: the formulas) and bfloat16 (the half types' float32 compute and rounding): values
and dtypes, at 0, -0, the infinities and NaN. One fusion computes the whole table per dtype, so each dtype
costs one compile (about 3 s on the CPU); float32 takes float64's path at another precision."""

from __future__ import annotations

import pytest

import braze as bz

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, function of (e, x, y, p, q, w)): e (2, 8) holds the edge values and random ones, x and y (3, 8)
# are random, p and q (3, 8) probabilities with 0 and 1 among them, w (8,) positive weights.
CASES = [
    ("mse_l1", lambda e, x, y, p, q, w: (F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"),
                                         F.mse_loss(x, y, reduction="none"))),
    ("smooth_l1_huber", lambda e, x, y, p, q, w: (F.smooth_l1_loss(x, y), F.smooth_l1_loss(x, y, beta=0.5),
                                                  F.smooth_l1_loss(x, y, beta=0.0, reduction="sum"),
                                                  F.huber_loss(x, y, delta=0.7, reduction="none"))),
    ("bce_logits", lambda e, x, y, p, q, w: (F.binary_cross_entropy_with_logits(x * 30, q),
                                             F.binary_cross_entropy_with_logits(x, q, weight=w, pos_weight=w * 2,
                                                                                reduction="none"))),
    ("bce", lambda e, x, y, p, q, w: (F.binary_cross_entropy(p, q), F.binary_cross_entropy(p, q, w, reduction="sum"))),
    ("kl_div", lambda e, x, y, p, q, w: (F.kl_div(F.log_softmax(x, 1), q, reduction="batchmean"),
                                         F.kl_div(x, y, reduction="none", log_target=True),
                                         F.kl_div(x, q, reduction="sum"))),
    ("distances", lambda e, x, y, p, q, w: (F.cosine_similarity(x, y), torch.cosine_similarity(x, y, dim=0),
                                            F.pairwise_distance(x, y), F.pairwise_distance(x, y, p=1.0, keepdim=True),
                                            # broadcast to one shape first, dim one of its: a row's norm over dim 0
                                            # counts its 3 copies, and w's 0 is the shape's 1 (each once refused,
                                            # or wrong)
                                            F.cosine_similarity(x, y[:1], dim=0), F.cosine_similarity(x, w))),
    ("activations", lambda e, x, y, p, q, w: (F.glu(x), F.glu(x[:2], 0), F.hardtanh(e),
                                              F.softmin(x, 1), F.tanhshrink(x), F.softshrink(e), F.hardshrink(e, 1.0),
                                              torch.hardshrink(e), F.threshold(e, 0.1, 2.0), F.prelu(x, w),
                                              F.prelu(e, w[:1]), F.relu6(e), F.logsigmoid(e), F.hardsigmoid(e),
                                              F.celu(e), F.selu(e), F.elu(e))),
    ("logit_xlogy", lambda e, x, y, p, q, w: (torch.logit(e), torch.logit(p, eps=1e-3), p.logit(),
                                              torch.xlogy(p, q), torch.xlogy(e, p[:2]), e.xlogy(2.0),
                                              torch.xlogy(0.0, e))),
    # torch's sign(nan) is 0 (NumPy's and bz.ops.sign's NaN)
    ("sinc_sign", lambda e, x, y, p, q, w: (torch.sinc(e), torch.signbit(e), e.sgn(), torch.sign(e), e.sign(),
                                            torch.frac(e), e.fix(),
                                            torch.trunc(e), torch.heaviside(e, y[:2]), torch.copysign(x, e[:1]))),
    ("isclose", lambda e, x, y, p, q, w: (torch.isclose(e, e.flip(0)), torch.isclose(x, x + 1e-6),
                                          e.isclose(e, equal_nan=True), torch.isclose(x, y, rtol=0.5, atol=0.5))),
    ("reductions", lambda e, x, y, p, q, w: (torch.count_nonzero(e, 1), torch.count_nonzero(p), torch.nansum(e),
                                             e.nansum(1, keepdim=True), torch.nanmean(e, 1), torch.nanmean(x),
                                             *torch.aminmax(x, dim=1), *torch.aminmax(x),
                                             torch.cumsum(x, 1, dtype=torch.float64), torch.diff(x, dim=1))),
    ("powers_extremes", lambda e, x, y, p, q, w: (torch.float_power(p, 2), torch.float_power(2, x),
                                                  torch.float_power(x, y.round()),
                                                  torch.logaddexp2(e, e.flip(1)), torch.logaddexp2(x, y),
                                                  torch.fmax(e, e.flip(1)), torch.fmin(e, x[:2]), e.fmin(e.flip(1)),
                                                  torch.rsub(x, y), torch.rsub(x, y, alpha=2))),
    ("views_products", lambda e, x, y, p, q, w: (torch.fliplr(x), torch.flipud(x), x.fliplr(),
                                                 torch.broadcast_to(w, (3, 8)), x[:1].broadcast_to((2, -1, 8)),
                                                 torch.outer(w, x[0]), w.outer(w), torch.ger(w, w))),
    ("clamp_lerp", lambda e, x, y, p, q, w: (torch.clamp(x, min=y, max=y + 1), torch.clamp(x, max=w),
                                             torch.lerp(x, y, 0.3), torch.lerp(x, y, p),
                                             torch.addcmul(x, y, p, value=0.5), torch.addcdiv(x, y, p + 1, value=2),
                                             torch.nan_to_num(e), e.nan_to_num(nan=1.0, posinf=2.0))),
]


def _flat(results):
    return [r for group in results for r in (group if isinstance(group, tuple) else (group,))]


@bz.jit
def _every_case(e, x, y, p, q, w):
    return tuple(value for _, fn in CASES for value in fn(e, x, y, p, q, w))


def _inputs(dtype):
    generator = torch.Generator().manual_seed(5)
    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)
    edges = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 0.5], dtype=torch.float64)
    e = torch.stack([edges, rand(8)])
    x, y = rand(3, 8), rand(3, 8)
    p = torch.rand(3, 8, generator=generator, dtype=torch.float64)
    p[0, :2] = torch.tensor([0.0, 1.0])
    q = torch.rand(3, 8, generator=generator, dtype=torch.float64)
    q[0, :3] = torch.tensor([0.0, 1.0, 1.0])
    w = torch.rand(8, generator=generator, dtype=torch.float64) + 0.5
    return [t.to(dtype) for t in (e, x, y, p, q, w)]


TOLERANCES = {torch.float64: 1e-9, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=str)
def test_torch_compositions_give_torchs_values_and_dtypes(dtype) -> None:
    args = _inputs(dtype)
    got = iter(_every_case(*args))
    tolerance = TOLERANCES[dtype]
    for name, fn in CASES:
        for i, expected in enumerate(fn(*args)):
            actual = next(got)
            where = f"{name}[{i}] in {dtype}"
            assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
            torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance, equal_nan=True, msg=where)
    assert next(got, None) is None


@pytest.mark.parametrize("fn, named", [
    (lambda x: F.mse_loss(x, x, reduction="avg"), "reduction: expected one of 'none', 'sum', 'mean'"),
    (lambda x: F.l1_loss(x, x, size_average=True), "size_average= and reduce="),
    (lambda x: F.glu(x[:, :3]), "expected an even extent to halve"),
    (lambda x: torch.fliplr(x[0]), "fliplr: expected a tensor of at least 2 dimensions"),
    (lambda x: torch.outer(x, x[0]), "outer: input: expected a vector"),
    (lambda x: x.logit(eps="small"), "logit: eps: expected a number"),
], ids=["reduction", "size_average", "glu_odd", "fliplr_vector", "outer_matrix", "logit_eps"])
def test_bad_arguments_are_named(fn, named: str) -> None:
    with pytest.raises((bz.FusionDefinitionError, bz.UnsupportedError, bz.InputError), match=named):
        bz.jit(fn)(torch.ones(3, 4))
