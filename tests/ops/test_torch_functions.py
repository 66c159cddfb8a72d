"""torch's functions on traced tensors (`braze/ops/torch_functions.py`): each program is run by eager
torch on float64 tensors and by `@bz.jit` on the same tensors; one fusion computes the whole table, so it
costs one compile. What braze has no op for, and a torch tensor captured from outside, are refused by name."""

from __future__ import annotations

import pytest

import braze as bz

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, function of (x, w, t)): x is (3, 4) float64, w (4,) float64, t (3,) int64 class ids with one -100.
CASES = [
    ("unary", lambda x, w, t: torch.rsqrt(torch.abs(x) + 1) + torch.exp(x) * torch.tanh(x)),
    ("where_scalar", lambda x, w, t: torch.where(x > 0, x, 0.0)),
    ("cat_stack", lambda x, w, t: torch.cat([x, x * 2], dim=-1).sum(0) + torch.stack([x, -x], 1).sum((0, 1)).repeat(2)),
    ("likes", lambda x, w, t: torch.zeros_like(x) + torch.ones_like(x, dtype=torch.float64) * 2
     + torch.full_like(x, 0.5)),
    ("var_std_unbiased", lambda x, w, t: torch.var(x, 1) + torch.std(x, dim=1, keepdim=True).squeeze(1)
     + torch.var(x, 1, unbiased=False)),
    ("max_pair", lambda x, w, t: torch.max(x, 1)[0] + torch.min(x, dim=1).indices + torch.max(x)
     + torch.max(x, -x).sum(1)),
    ("clamp_logsumexp", lambda x, w, t: torch.clamp(x, min=-0.5) + torch.logsumexp(x, -1, keepdim=True)),
    ("activations", lambda x, w, t: F.silu(x) + F.gelu(x, approximate="tanh") + F.gelu(x) + F.relu(x)
     + F.leaky_relu(x, 0.2) + F.softplus(x, beta=2.0) + F.elu(x) + F.hardswish(x) + F.mish(x)),
    ("softmaxes", lambda x, w, t: F.softmax(x, dim=0) + F.log_softmax(x, -1) + torch.softmax(x, 1)),
    ("norms", lambda x, w, t: F.layer_norm(x, (4,), w, None, 1e-5) + F.rms_norm(x, [4], w)
     + F.normalize(x, dim=-1)),
    ("cross_entropy", lambda x, w, t: F.cross_entropy(x, t, label_smoothing=0.1)
     + F.cross_entropy(x, t, reduction="none").sum()),
    ("one_hot_pad_dropout", lambda x, w, t: F.one_hot(t.clamp(min=0), 4) * F.pad(x, (1, 0, 0, 1), value=-1.0)[:3, :4]
     + F.dropout(x, 0.1, training=False)),
    # braze's composed math functions under torch's names, as functions and methods (they were refused)
    ("math_functions", lambda x, w, t: torch.asin(x.clamp(-1, 1)) + torch.log10(x.abs() + 1) + x.hypot(w)
     + x.arcsinh() + torch.atanh(x.clamp(-0.5, 0.5)) + torch.deg2rad(x) + x.cosh()),
    # torch.norm passes dtype= (it raised a TypeError); torch.linalg's norms were refused
    ("vector_norms", lambda x, w, t: torch.norm(x, dim=1) + torch.norm(x, p=1, dim=1) + torch.norm(x)
     + torch.linalg.vector_norm(x, ord=float("inf"), dim=-1) + torch.linalg.norm(x, dim=1) + torch.linalg.norm(x)),
    # torch.special's functions dispatch as special_<name>; F.logsigmoid as log_sigmoid (it was refused)
    ("special_and_logsigmoid", lambda x, w, t: torch.special.expit(x) + torch.special.logsumexp(x, 1, keepdim=True)
     + torch.special.log1p(x.abs()) + F.logsigmoid(x) + torch.pow(2.0, x)),
    ("moment_pairs", lambda x, w, t: sum(torch.var_mean(x, 1)) + sum(torch.std_mean(x, dim=1, correction=0))),
    # torch's cummax and cummin are (values, indices); braze gave the values alone
    ("cumulative_pairs", lambda x, w, t: torch.cummax(x, 1)[0] + torch.cummax(x, 1)[1] + x.cummin(dim=0).indices
     + torch.cummin(x, dim=0).values),
    # torch's empty dim reduces every dimension (braze reduced none, as NumPy's axis=() does)
    ("empty_dims", lambda x, w, t: torch.sum(x, dim=()) + torch.var_mean(x, ())[0] + x.mean(dim=[]) + x.std(dim=())
     + torch.amax(x, dim=[]) + torch.nansum(x, dim=(), keepdim=True)),
]


@bz.jit
def _every_function(x, w, t):
    return tuple(fn(x, w, t) for _, fn, in CASES)


def test_torch_functions_on_traced_tensors_give_torchs_results():
    generator = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 4, generator=generator, dtype=torch.float64), torch.randn(4, generator=generator,
                                                                                     dtype=torch.float64)
    t = torch.tensor([0, 3, -100])
    for (name, fn), got in zip(CASES, _every_function(x, w, t), strict=True):
        expected = fn(x, w, t)
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize("fn, named", [
    (lambda x: torch.digamma(x), "torch.digamma on a traced tensor: braze has no op"),
    (lambda x: F.interpolate(x[None], scale_factor=2.0, mode="linear"), "mode='linear': braze upsamples by whole"),
    (lambda x: F.interpolate(x[None], scale_factor=1.5), "scale_factor 1.5: braze upsamples by whole factors"),
    (lambda x: F.max_pool1d(x, 2, return_indices=True), "return_indices=True"),
    (lambda x: F.batch_norm(x[None], torch.zeros(3), torch.ones(3), training=True), "torch updates them in place"),
    (lambda x: torch.where(x > 0), "torch.where\\(condition\\) alone"),
    (lambda x: F.one_hot(x.long()), "num_classes=-1"),
    (lambda x: F.dropout(x, 0.1), "training=True"),
], ids=["no_op", "bilinear_like", "fractional_scale", "pool_indices", "batch_norm_running_stats", "where_indices",
        "one_hot_count", "dropout"])
def test_what_braze_has_no_op_for_is_named(fn, named: str) -> None:
    with pytest.raises(bz.UnsupportedError, match=named):
        bz.jit(fn)(torch.ones(3, 4))


def test_cummax_and_cummin_indices_are_torchs_at_ties_and_nan() -> None:
    """The last of equal values takes the index, and a NaN (which then stays the running value) does."""
    x = torch.tensor([[1.0, 3, 3, 2, 3, float("nan"), 5, float("nan"), 1], [0, -1, -1, 4, 4, 4, 2, 9, 9]])
    got = bz.jit(lambda x: (*torch.cummax(x, 1), *torch.cummin(x, dim=1), *x.nan_to_num(0.0).int().cummax(dim=0)))(x)
    expected = (*torch.cummax(x, 1), *torch.cummin(x, dim=1), *x.nan_to_num(0.0).int().cummax(dim=0))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)


def test_traced_extents_in_a_torch_functions_list_of_ints() -> None:
    """`torch.reshape(x, (x.shape[0] * x.shape[1], -1))`: torch parses the list of ints before it
    dispatches, so an extent takes torch's protocol too (it was "must be tuple of ints, but found
    element of type Scalar")."""
    x = torch.arange(24.0, dtype=torch.float64).reshape(2, 3, 4)
    merged = bz.jit(lambda x: torch.reshape(x, (x.shape[0] * x.shape[1], -1)) * 2)(x)
    assert torch.equal(merged, x.reshape(6, 4) * 2)
    flat = bz.jit(lambda x: torch.sum(torch.reshape(x, (x.shape[0], x.shape[1] * x.shape[2])), dim=1))(x)
    assert torch.equal(flat, x.reshape(2, 12).sum(1))
