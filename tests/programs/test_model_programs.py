"""Programs from real models (attention, RoPE, norms and their backwards, activations, losses,
routers, optimizer steps, conv-net norms and pooling), written as a PyTorch or JAX user writes them
from the user guide: through `@bz.jit` with torch-style methods, `bz.Fusion`, and
`torch.compile(backend="braze")`. Each is checked against NumPy in float64 (or eager torch) at odd
sizes (1, 7, 1031), with empty extents where the model can meet them, and non-contiguous inputs, on
the CPU and on a GPU (the `where` fixture of tests/programs/conftest.py places the inputs, and the
torch.compile programs' models and inputs); new outputs start as NaN or -1."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import braze as bz

ops = bz.ops
RNG = np.random.default_rng(0)
ODD = (1, 7, 1031)


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def normalized(x: np.ndarray, axes=-1) -> np.ndarray:
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)


def erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


def assert_close(got, expected, tol: float = 1e-4) -> None:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        assert g.shape == e.shape, f"output {i}: shape {g.shape}, expected {e.shape}"
        np.testing.assert_allclose(np.asarray(g, np.float64), e.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=f"output {i}")


# --- attention ------------------------------------------------------------------------------------
@bz.jit
def causal_softmax(scores, temperature):
    i = ops.arange(scores.shape[-1])
    return ops.where(i[:, None] >= i[None, :], scores / temperature, float("-inf")).softmax(-1)


@pytest.mark.parametrize("t", ODD[:2] + (33,))
def test_causal_softmax_from_iota_compares(t, where):
    s = normal(2, 3, t, t)
    expected = softmax(np.where(np.tril(np.ones((t, t), bool)), s / 0.7, -np.inf).astype(np.float64))
    assert_close(where.host(causal_softmax(where(s), 0.7)), expected)


def test_causal_mask_from_tril_and_masked_fill(where):
    @bz.jit
    def masked(scores):
        keep = ops.ones(scores.shape[-2:], bz.bool_).tril()
        return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)

    s = normal(2, 5, 5)
    expected = softmax(np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf).astype(np.float64))
    assert_close(where.host(masked(where(s))), expected)


def test_additive_padding_mask_and_scale_from_the_head_size(where):
    @bz.jit
    def padded(scores, q, attention_mask):
        additive = (1.0 - attention_mask[:, None, None, :].float()) * -1e9
        return (scores * q.shape[-1] ** -0.5 + additive).softmax(-1)

    s, q = normal(3, 2, 9, 9), normal(3, 2, 9, 16)
    mask = (RNG.random((3, 9)) > 0.3).astype(np.int64)
    mask[:, 0] = 1
    assert_close(where.host(padded(where(s), where(q), where(mask))),
                 softmax(s.astype(np.float64) / 4 + (1 - mask[:, None, None, :]) * -1e9))


def test_alibi_bias_under_a_causal_mask(where):
    @bz.jit
    def alibi(scores, slopes):
        pos = ops.arange(scores.shape[-1]).float()
        distance = pos[None, :] - pos[:, None]
        biased = scores + slopes[:, None, None] * distance
        return ops.softmax(ops.where(distance <= 0, biased, -float("inf")), axis=-1)

    s = normal(2, 4, 11, 11)
    slopes = (2.0 ** (-8.0 * np.arange(1, 5) / 4)).astype(np.float32)
    distance = np.arange(11)[None, :] - np.arange(11)[:, None]
    expected = softmax(np.where(distance <= 0, s + slopes[:, None, None] * distance, -np.inf).astype(np.float64))
    assert_close(where.host(alibi(where(s), where(slopes))), expected)


def test_bfloat16_scores_with_float32_softmax(where):
    s = normal(4, 7).astype(ml_dtypes.bfloat16)
    out = where.host(bz.jit(lambda x: x.float().softmax(-1).to(bz.bfloat16))(where(s)))
    assert out.dtype == ml_dtypes.bfloat16
    assert_close(out, softmax(s.astype(np.float64)), tol=1e-2)


def test_grouped_query_attention_repeats_key_heads(where):
    @bz.jit
    def repeat_kv(k):
        b, h, t, d = k.shape
        return k[:, :, None].expand(b, h, 3, t, d).reshape(b, h * 3, t, d), k.repeat_interleave(3, dim=1)

    k = normal(2, 2, 5, 4)
    assert_close(where.host(repeat_kv(where(k))), [np.repeat(k, 3, axis=1)] * 2)


# --- RoPE -----------------------------------------------------------------------------------------
def rotate_half_reference(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


def test_rope_rotate_half(where):
    @bz.jit
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + ops.cat([-x[..., half:], x[..., :half]], axis=-1) * sin

    for b, h, t, d in [(2, 3, 5, 8), (1, 1, 1, 2)]:
        x, angle = normal(b, h, t, d), normal(t, d // 2)
        cos, sin = np.tile(np.cos(angle), 2), np.tile(np.sin(angle), 2)
        assert_close(where.host(rope(where(x), where(cos), where(sin))), rotate_half_reference(x, cos, sin))


def test_rope_rotate_half_from_chunks(where):
    @bz.jit
    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + ops.cat([-x2, x1], -1) * sin

    x, angle = normal(2, 6, 16), normal(6, 8)
    cos, sin = np.tile(np.cos(angle), 2), np.tile(np.sin(angle), 2)
    assert_close(where.host(rope(where(x), where(cos), where(sin))), rotate_half_reference(x, cos, sin))


def interleaved_reference(x, cos, sin):
    even, odd = x[..., 0::2], x[..., 1::2]
    return np.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(x.shape)


def test_rope_interleaved_by_strided_slices(where):
    @bz.jit
    def rope(x, cos, sin):
        even, odd = x[..., 0::2], x[..., 1::2]
        return ops.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).flatten(-2)

    x, angle = normal(2, 5, 12), normal(5, 6)
    cos, sin = np.cos(angle), np.sin(angle)
    assert_close(where.host(rope(where(x), where(cos), where(sin))), interleaved_reference(x, cos, sin))


def test_rope_interleaved_by_pairs(where):
    @bz.jit
    def rope(x, cos, sin):
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        return ops.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(x.shape)

    x, angle = normal(3, 4, 10), normal(4, 5)
    cos, sin = np.cos(angle), np.sin(angle)
    assert_close(where.host(rope(where(x), where(cos), where(sin))), interleaved_reference(x, cos, sin))


# --- norms and their backwards ----------------------------------------------------------------------
@bz.jit
def rms_norms(x, w):
    x32 = x.float()
    y = x32 * (x32.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()
    return y, (y * w).to(x.dtype), ops.rms_norm(x, w)


@pytest.mark.parametrize("n", ODD)
def test_rms_norm_with_and_without_weight(n, where):
    x, w = normal(3, n), normal(n)
    y = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    assert_close(where.host(rms_norms(where(x), where(w))), [y, y * w, y * w])


@bz.jit
def layer_norms(x, w, b):
    mu = x.mean(-1, keepdim=True)
    y = (x - mu) / (x.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt()
    return y, y * w + b, ops.layer_norm(x, w, b)


@pytest.mark.parametrize("n", ODD)
def test_layer_norm_with_and_without_affine(n, where):
    x, w, b = normal(4, n), normal(n), normal(n)
    y = normalized(x.astype(np.float64))
    assert_close(where.host(layer_norms(where(x), where(w), where(b))), [y, y * w + b, y * w + b])


@bz.jit
def layer_norm_backward(x, g, w):
    n = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    rstd = ((x - mu) ** 2).mean(-1, keepdim=True).add(1e-5).rsqrt()
    xhat = (x - mu) * rstd
    gw = g * w
    dx = rstd / n * (n * gw - gw.sum(-1, keepdim=True) - xhat * (gw * xhat).sum(-1, keepdim=True))
    return dx, (g * xhat).sum(0), g.sum(0)


def test_layer_norm_backward_from_primitives(where):
    x, g, w = normal(6, 13), normal(6, 13), normal(13)
    xhat = normalized(x.astype(np.float64))
    rstd = 1 / np.sqrt(x.astype(np.float64).var(-1, keepdims=True) + 1e-5)
    gw = g * w
    dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    assert_close(where.host(layer_norm_backward(where(x), where(g), where(w))), [dx, (g * xhat).sum(0), g.sum(0)])


def test_rms_norm_backward_from_primitives(where):
    @bz.jit
    def backward(x, g, w):
        rstd = (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()
        xhat = x * rstd
        gw = g * w
        return rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True)), (g * xhat).sum(dim=0)

    x, g, w = normal(5, 7), normal(5, 7), normal(7)
    rstd = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    xhat, gw = x * rstd, g * w
    assert_close(where.host(backward(where(x), where(g), where(w))),
                 [rstd * (gw - xhat * (gw * xhat).mean(-1, keepdims=True)), (g * xhat).sum(0)])


def test_norms_over_empty_rows_and_no_rows(where):
    norms = bz.jit(lambda x: (x.softmax(-1), x.log_softmax(-1), ops.layer_norm(x), ops.rms_norm(x)))
    for shape in [(0, 7), (3, 0)]:
        assert [o.shape for o in where.host(norms(where(normal(*shape))))] == [shape] * 4


# --- activations and blocks -------------------------------------------------------------------------
def test_gelu_erf_and_tanh_written_out_and_as_ops(where):
    @bz.jit
    def gelus(x):
        exact = 0.5 * x * (1 + ops.erf(x / math.sqrt(2)))
        tanh = 0.5 * x * (1 + ops.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        return exact, tanh, ops.gelu(x), ops.gelu(x, approximate="tanh")

    x = normal(7, 1031).astype(np.float64)
    exact = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert_close(where.host(gelus(where(x.astype(np.float32)))), [exact, tanh, exact, tanh])


def test_swiglu_and_geglu(where):
    @bz.jit
    def gated(h):
        gate, up = h.chunk(2, dim=-1)
        return ops.silu(gate) * up, gate * gate.sigmoid() * up, ops.gelu(gate) * up

    h = normal(3, 5, 22).astype(np.float64)
    g, u = h[..., :11], h[..., 11:]
    silu = g / (1 + np.exp(-g))
    assert_close(where.host(gated(where(h.astype(np.float32)))),
                 [silu * u, silu * u, 0.5 * g * (1 + erf(g / math.sqrt(2))) * u])


def test_residual_block_then_norm(where):
    @bz.jit
    def block(x, h, b, w):
        y = x + ops.relu(h + b)
        return y, ops.layer_norm(y, w, None)

    x, h, b, w = normal(4, 17), normal(4, 17), normal(17), normal(17)
    y = x + np.maximum(h + b, 0).astype(np.float64)
    assert_close(where.host(block(where(x), where(h), where(b), where(w))), [y, normalized(y) * w])


# --- losses ---------------------------------------------------------------------------------------
@bz.jit
def label_smoothed_cross_entropy(logits, target, smoothing):
    classes = logits.shape[-1]
    onehot = (ops.arange(classes)[None, :] == target[:, None]).float()
    return -((onehot * (1 - smoothing) + smoothing / classes) * logits.log_softmax(-1)).sum(-1).mean()


@pytest.mark.parametrize("rows, classes", [(5, 7), (1, 1031)])
def test_label_smoothed_cross_entropy(rows, classes, where):
    x, target = normal(rows, classes).astype(np.float64), RNG.integers(0, classes, rows)
    q = np.full((rows, classes), 0.1 / classes)
    q[np.arange(rows), target] += 0.9
    assert_close(where.host(label_smoothed_cross_entropy(where(x.astype(np.float32)), where(target), 0.1)),
                 -(q * log_softmax(x)).sum(-1).mean())


def test_cross_entropy_op(where):
    x, target = normal(6, 11).astype(np.float64), RNG.integers(0, 11, 6)
    expected = (np.log(np.exp(x).sum(-1)) - x[np.arange(6), target]).mean()
    assert_close(where.host(bz.jit(ops.cross_entropy)(where(x.astype(np.float32)), where(target))), expected)


def test_focal_loss(where):
    @bz.jit
    def focal(logits, target, gamma, alpha):
        p = logits.sigmoid()
        ce = ops.maximum(logits, 0) - logits * target + ops.log1p(ops.exp(-logits.abs()))
        pt = p * target + (1 - p) * (1 - target)
        weight = alpha * target + (1 - alpha) * (1 - target)
        return (weight * (1 - pt) ** gamma * ce).mean()

    x, t = normal(9, 5).astype(np.float64), (RNG.random((9, 5)) > 0.5).astype(np.float32)
    p = 1 / (1 + np.exp(-x))
    ce = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
    pt = p * t + (1 - p) * (1 - t)
    assert_close(where.host(focal(where(x.astype(np.float32)), where(t), 2.0, 0.25)),
                 ((0.25 * t + 0.75 * (1 - t)) * (1 - pt) ** 2 * ce).mean())


def test_kl_divergence_of_log_probabilities(where):
    kl = bz.jit(lambda logp, logq: (logq.exp() * (logq - logp)).sum(-1).mean())
    a, b = log_softmax(normal(4, 9).astype(np.float64)), log_softmax(normal(4, 9).astype(np.float64))
    assert_close(where.host(kl(where(a.astype(np.float32)), where(b.astype(np.float32)))),
                 (np.exp(b) * (b - a)).sum(-1).mean())


@bz.jit
def logsumexps(x):
    top = x.max(-1, keepdim=True)
    return (x - top).exp().sum(-1).log() + top.squeeze(-1), x.logsumexp(-1)


@bz.jit(static_argnames="experts")
def router_losses(logits, ids, experts):
    """A mixture-of-experts router as torch code writes it: float32 probabilities from half logits,
    the load-balancing loss over one-hot choices, and the z-loss."""
    probs = logits.softmax(-1, dtype=bz.float32)
    chosen = ops.one_hot(ids, experts)
    balance = (probs.mean(0) * chosen.float().mean(0)).sum() * experts
    z_loss = ops.logsumexp(logits.float(), -1).square().mean()
    return probs, balance, z_loss


@pytest.mark.parametrize("tokens, experts", [(7, 4), (1, 1), (1031, 3)])
def test_moe_router_losses(tokens, experts):
    logits = normal(tokens, experts, dtype=ml_dtypes.bfloat16)
    ids = RNG.integers(0, experts, tokens)
    x = logits.astype(np.float64)
    probs = softmax(x)
    chosen = (ids[:, None] == np.arange(experts)).astype(np.float64)
    balance = (probs.mean(0) * chosen.mean(0)).sum() * experts
    z_loss = (np.log(np.exp(x).sum(-1)) ** 2).mean()
    assert_close(router_losses(logits, ids, experts), [probs, balance, z_loss])


@pytest.mark.parametrize("shape", [(3, 7), (1, 1), (2, 1031), (0, 5)])
def test_logsumexp_written_out_and_as_a_method(shape, where):
    x = normal(*shape).astype(np.float64) * 10
    top = x.max(-1, keepdims=True, initial=-np.inf)
    expected = np.log(np.exp(x - top).sum(-1)) + top[..., 0]
    assert_close(where.host(logsumexps(where(x.astype(np.float32)))), [expected, expected])


# --- sampling and routing ---------------------------------------------------------------------------
def test_top_p_filter_over_sorted_logits(where):
    @bz.jit
    def top_p(sorted_logits, temperature, p):
        probs = (sorted_logits / temperature).softmax(-1)
        cumulative = probs.cumsum(-1)
        kept = probs.masked_fill((cumulative - probs) > p, 0.0)
        return kept / kept.sum(-1, keepdim=True), cumulative

    x = -np.sort(-normal(3, 50), -1)
    probs = softmax(x.astype(np.float64) / 0.8)
    kept = np.where(probs.cumsum(-1) - probs > 0.9, 0, probs)
    assert_close(where.host(top_p(where(x), 0.8, 0.9)), [kept / kept.sum(-1, keepdims=True), probs.cumsum(-1)])


def test_moe_router_top1_with_capacity(where):
    @bz.jit
    def route(logits, capacity):
        probs = logits.softmax(-1)
        gate, expert = probs.max(dim=-1)
        onehot = (expert[:, None] == ops.arange(logits.shape[-1])[None, :]).long()
        position = onehot.cumsum(0) * onehot
        return gate, expert, (position <= capacity) & (onehot > 0), onehot.sum(0)

    x = normal(13, 4)
    probs = softmax(x.astype(np.float64))
    expert = probs.argmax(-1)
    onehot = (expert[:, None] == np.arange(4)).astype(np.int64)
    keep = (onehot.cumsum(0) * onehot <= 3) & (onehot > 0)
    assert_close(where.host(route(where(x), 3)), [probs.max(-1), expert, keep, onehot.sum(0)])


@bz.jit
def position_ids(mask):
    return (mask.cumsum(-1) - 1) * mask, (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


@pytest.mark.parametrize("shape", [(2, 9), (1, 1), (3, 0)])
def test_position_ids_from_an_attention_mask(shape, where):
    mask = (RNG.random(shape) > 0.3).astype(np.int64)
    pos = mask.cumsum(-1) - 1
    assert_close(where.host(position_ids(where(mask))), [pos * mask, np.where(mask == 0, 1, pos)])


# --- optimizer steps ----------------------------------------------------------------------------------
def test_adamw_step_with_bias_correction(where):
    @bz.jit
    def adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        update = (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps)
        return p * (1 - lr * weight_decay) - lr * update, m, v

    p, g, m, v = normal(1031), normal(1031), normal(1031), np.abs(normal(1031))
    m2 = 0.9 * m + 0.1 * g.astype(np.float64)
    v2 = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
    expected = p * (1 - 1e-5) - 1e-3 * (m2 / (1 - 0.9**3)) / (np.sqrt(v2 / (1 - 0.999**3)) + 1e-8)
    got = adamw(*map(where, (p, g, m, v)), 1e-3, 0.9, 0.999, 1e-8, 0.01, 3)
    assert_close(where.host(got), [expected, m2, v2])


def test_adam_moments_in_place_through_aliases(where):
    with bz.Fusion() as f:
        p, g, m, v = (f.define_tensor((-1,), name=n) for n in "pgmv")
        lr = f.define_scalar(dtype=bz.float32, name="lr")
        m2, v2 = m * 0.9 + g * 0.1, v * 0.999 + g * g * 0.001
        f.add_output(m2, alias=m, hidden=True)
        f.add_output(v2, alias=v, hidden=True)
        f.add_output(p - lr * m2 / (v2.sqrt() + 1e-8), alias=p, hidden=True)
    p, g, m, v = normal(1031), normal(1031), normal(1031), np.abs(normal(1031))
    m2 = m.astype(np.float64) * 0.9 + g * 0.1
    v2 = v.astype(np.float64) * 0.999 + g.astype(np.float64) ** 2 * 0.001
    expected_p = p.astype(np.float64) - 1e-3 * m2 / (np.sqrt(v2) + 1e-8)
    p, g, m, v = map(where, (p, g, m, v))
    assert f.execute([p, g, m, v, 1e-3]) == []
    assert_close(where.host([p, m, v]), [expected_p, m2, v2])


def test_lion_step(where):
    @bz.jit
    def lion(p, g, m, lr, beta1, beta2, weight_decay):
        update = (beta1 * m + (1 - beta1) * g).sign()
        return p - lr * (update + weight_decay * p), beta2 * m + (1 - beta2) * g

    p, g, m = normal(7, 9), normal(7, 9), normal(7, 9)
    update = np.sign(0.9 * m + 0.1 * g.astype(np.float64))
    assert_close(where.host(lion(where(p), where(g), where(m), 1e-4, 0.9, 0.99, 0.1)),
                 [p - 1e-4 * (update + 0.1 * p), 0.99 * m + 0.01 * g])


def test_gradient_clipping_by_global_norm_and_ema(where):
    @bz.jit
    def clip_then_average(g1, g2, ema, max_norm, decay):
        total = ops.sqrt(g1.square().sum() + g2.norm() ** 2)
        scale = ops.minimum(max_norm / (total + 1e-6), 1.0)
        return g1 * scale, g2 * scale, ema.lerp(g2 * scale, 1 - decay)

    g1, g2, ema = normal(7, 11), normal(1031), normal(1031)
    total = np.sqrt((g1.astype(np.float64) ** 2).sum() + (g2.astype(np.float64) ** 2).sum())
    scale = min(1.0 / (total + 1e-6), 1.0)
    assert_close(where.host(clip_then_average(where(g1), where(g2), where(ema), 1.0, 0.99)),
                 [g1 * scale, g2 * scale, ema + 0.01 * (g2 * scale - ema)])


# --- similarity -----------------------------------------------------------------------------------
def test_cosine_similarity_and_l2_normalize(where):
    @bz.jit
    def similarity(a, b):
        cosine = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp(min=1e-8)
        return cosine, a / (a * a).sum(-1, keepdim=True).sqrt().clamp(min=1e-12)

    a, b = normal(6, 10).astype(np.float64), normal(6, 10).astype(np.float64)
    norm_a, norm_b = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    assert_close(where.host(similarity(where(a.astype(np.float32)), where(b.astype(np.float32)))),
                 [(a * b).sum(-1) / (norm_a * norm_b), a / norm_a[:, None]])


# --- conv-net norms and pooling -------------------------------------------------------------------
def test_group_norm_nchw_and_nhwc(where):
    @bz.jit(static_argnames="groups")
    def group_norms(x, w, b, groups):
        n, c, h, width = x.shape
        grouped = x.reshape(n, groups, -1)
        mu, var = grouped.mean(-1, keepdim=True), grouped.var(-1, keepdim=True)
        nchw = ((grouped - mu) / (var + 1e-5).sqrt()).reshape(x.shape) * w[None, :, None, None] + b[:, None, None]
        nhwc = x.permute(0, 2, 3, 1).reshape(n, h * width, groups, c // groups)
        mu = nhwc.mean(axis=(1, 3), keepdim=True)
        var = ((nhwc - mu) ** 2).mean(axis=(1, 3), keepdim=True)
        return nchw, ((nhwc - mu) * (var + 1e-5).rsqrt()).reshape(n, h, width, c)

    x, w, b = normal(2, 6, 3, 5), normal(6), normal(6)
    y = normalized(x.reshape(2, 3, -1).astype(np.float64)).reshape(x.shape)
    assert_close(where.host(group_norms(where(x), where(w), where(b), groups=3)),
                 [y * w[:, None, None] + b[:, None, None], y.transpose(0, 2, 3, 1)])


def test_instance_and_batch_norm_with_running_statistics(where):
    @bz.jit
    def norms(x, running_mean, running_var, momentum):
        instance = (x - x.mean((2, 3), keepdim=True)) / (x.var((2, 3), keepdim=True) + 1e-5).sqrt()
        mean, var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=False)
        batch = (x - mean[:, None, None]) / (var[:, None, None] + 1e-5).sqrt()
        unbiased = x.var(dim=(0, 2, 3), unbiased=True)
        return instance, batch, (1 - momentum) * running_mean + momentum * mean, \
            (1 - momentum) * running_var + momentum * unbiased

    x, rm, rv = normal(3, 4, 5, 6).astype(np.float64), normal(4), np.abs(normal(4))
    mean = x.mean((0, 2, 3))
    expected = [normalized(x, (2, 3)), normalized(x, (0, 2, 3)), 0.9 * rm + 0.1 * mean,
                0.9 * rv + 0.1 * x.var((0, 2, 3), ddof=1)]
    assert_close(where.host(norms(where(x.astype(np.float32)), where(rm), where(rv), 0.1)), expected)


def test_batch_norm_nhwc_over_a_transposed_input(where):
    bn = bz.jit(lambda x, w, b: (x - x.mean((0, 1, 2))) * (x.var((0, 1, 2)) + 1e-5).rsqrt() * w + b)
    nchw, w, b = normal(2, 5, 3, 4), normal(5), normal(5)
    x = where.permuted(nchw, (0, 2, 3, 1))  # NCHW memory, NHWC view
    expected = normalized(nchw.transpose(0, 2, 3, 1).astype(np.float64), (0, 1, 2)) * w + b
    assert_close(where.host(bn(x, where(w), where(b))), expected)


def test_pooling_by_reshape(where):
    @bz.jit
    def pools(x):
        n, c, h, w = x.shape
        windows = x.reshape(n, c, h // 2, 2, w // 2, 2)
        return windows.mean((3, 5)), windows.amax((3, 5)), x.mean((-2, -1))

    x = normal(2, 3, 6, 4).astype(np.float64)
    windows = x.reshape(2, 3, 3, 2, 2, 2)
    assert_close(where.host(pools(where(x.astype(np.float32)))),
                 [windows.mean((3, 5)), windows.max((3, 5)), x.mean((-2, -1))])


# --- dtypes and layouts -----------------------------------------------------------------------------
def test_float16_inputs_with_float32_math(where):
    @bz.jit
    def rms(x, w):
        x32 = x.float()
        return (x32 * (x32 * x32).mean(-1, keepdim=True).add(1e-6).rsqrt() * w.float()).half()

    x, w = normal(3, 40).astype(np.float16), normal(40).astype(np.float16)
    x64 = x.astype(np.float64)
    out = where.host(rms(where(x), where(w)))
    assert out.dtype == np.float16
    assert_close(out, x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * w, tol=2e-3)


def test_bfloat16_layer_norm_and_cumsum(where):
    @bz.jit
    def parts(x, w):
        return ops.layer_norm(x, w, None), x.cumsum(-1), (x * w).sum(-1)

    x, w = normal(4, 37).astype(ml_dtypes.bfloat16), normal(37).astype(ml_dtypes.bfloat16)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    out = where.host(parts(where(x), where(w)))
    assert [o.dtype for o in out[:2]] == [ml_dtypes.bfloat16] * 2
    assert_close(out, [normalized(x64) * w64, x64.cumsum(-1), (x64 * w64).sum(-1)], tol=5e-2)


def test_integer_and_bool_inputs(where):
    @bz.jit
    def ints(tokens, vocab, q, scale, mask):
        valid = (tokens >= 0) & (tokens < vocab)
        return ops.where(valid, tokens, 0), valid.sum(-1), tokens // 3, tokens % 3, (q.float() * scale).sum(-1), \
            mask.cumsum(-1)

    tokens = RNG.integers(-5, 20, (4, 9)).astype(np.int32)
    q, scale, mask = RNG.integers(-128, 127, (4, 9)).astype(np.int8), normal(4, 1), RNG.random((4, 9)) > 0.5
    valid = (tokens >= 0) & (tokens < 16)
    out = where.host(ints(where(tokens), 16, where(q), where(scale), where(mask)))
    assert out[-1].dtype == np.int64
    assert_close(out, [np.where(valid, tokens, 0), valid.sum(-1), tokens // 3, tokens % 3,
                       (q * scale.astype(np.float64)).sum(-1), mask.cumsum(-1)])


def test_broadcasting_over_leading_batch_dimensions(where):
    x, bias, scale = normal(2, 3, 4, 5), normal(5), normal(3, 1, 5)
    got = bz.jit(lambda x, b, s: x * s + b)(where(x), where(bias), where(scale))
    assert_close(where.host(got), x * scale + bias)


def test_non_contiguous_inputs(where):
    softmax_and_sum = bz.jit(lambda x, y: ((x + y).softmax(-1), (x * y).sum(0), x.max(-1)))
    base = normal(9, 1031)
    views = [lambda b: b.T[::3].T, lambda b: b[:, 1:8]]
    if where.negative_strides:
        views.insert(0, lambda b: b[::-1, ::-2])
    for view in views:
        x = where.view(base, view)
        y = where.broadcast_to(normal(1, x.shape[1]), tuple(x.shape))  # an expanded view: stride 0
        x64, y64 = where.host(x).astype(np.float64), where.host(y)
        assert_close(where.host(softmax_and_sum(x, y)), [softmax(x64 + y64), (x64 * y64).sum(0), x64.max(-1)])


def test_fusion_of_masked_scores_with_a_scalar_temperature(where):
    with bz.Fusion() as f:
        s = f.define_tensor((-1, -1, -1, -1), bz.float32, name="scores")
        keep = f.define_tensor((-1, 1, 1, -1), bz.bool_, name="keep")
        temperature = f.define_scalar(dtype=bz.float32, name="temperature")
        z = ops.where(keep, s / temperature, -1e4)
        f.add_output(ops.softmax(z, -1))
        f.add_output(ops.max(z, axes=[-1]))
    s, keep = normal(2, 2, 5, 5), RNG.random((2, 1, 1, 5)) > 0.3
    z = np.where(keep, s.astype(np.float64) / 2.0, -1e4)
    assert_close(where.host(f.execute([where(s), where(keep), 2.0])), [softmax(z), z.max(-1)])
    empty = where.host(f.execute([where(normal(0, 2, 5, 5)), where(keep[:0]), 2.0]))
    assert [e.shape for e in empty] == [(0, 2, 5, 5), (0, 2, 5)]


# --- torch.compile ----------------------------------------------------------------------------------
def compiled(torch, fn):
    from braze.frontend.torch import backend  # what backend="braze" names once braze is installed

    return torch.compile(fn, backend=backend)


def assert_matches_eager(torch, fn, *inputs, tol: float = 1e-4, grad: bool = False) -> None:
    """With `grad`, the gradients of the floating inputs too (integer ones, labels say, have none)."""
    ours = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    eager = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    got, expected = compiled(torch, fn)(*ours), fn(*eager)
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)
    if grad:
        got.sum().backward()
        expected.sum().backward()
        for a, b in zip(ours, eager):
            if a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad, atol=tol, rtol=tol)


def test_torch_rms_norm_swiglu_block_trains(torch, where):
    torch.manual_seed(0)
    w, up, down = torch.randn(16), torch.randn(64, 16) / 4, torch.randn(16, 32) / 4
    w, up, down = (t.to(where.torch_device) for t in (w, up, down))

    def block(x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        gate, value = (h @ up.T).chunk(2, -1)
        return x + (torch.nn.functional.silu(gate) * value) @ down.T

    assert_matches_eager(torch, block, torch.randn(2, 7, 16).to(where.torch_device), grad=True)


def test_torch_interleaved_rope_trains(torch, where):
    def rope(x, cos, sin):
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)

    torch.manual_seed(0)
    inputs = (torch.randn(2, 5, 4, 8), torch.randn(5, 1, 4), torch.randn(5, 1, 4))
    assert_matches_eager(torch, rope, *(t.to(where.torch_device) for t in inputs), grad=True)


def test_torch_losses_and_activations_train(torch, where):
    functional = torch.nn.functional

    def losses(x, y):
        return (functional.softplus(x) + functional.logsigmoid(x) + functional.mish(x) + functional.normalize(x, dim=-1)
                + functional.cosine_similarity(x, y, dim=-1)[:, None] + torch.logsumexp(x, -1, keepdim=True)
                + functional.binary_cross_entropy_with_logits(x, y.sigmoid())
                + functional.kl_div(x.log_softmax(-1), y.log_softmax(-1), log_target=True, reduction="batchmean")
                + functional.cross_entropy(x, y.argmax(-1), label_smoothing=0.1))

    torch.manual_seed(0)
    x, y = (torch.randn(5, 7).to(where.torch_device) for _ in range(2))
    assert_matches_eager(torch, losses, x, y, grad=True)


def test_torch_masked_attention_under_bfloat16_autocast_and_new_lengths(torch, where):
    def attention(q, k, v, pad):
        with torch.autocast(where.torch_device, dtype=torch.bfloat16):
            s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
            s = s + (1.0 - pad[:, None, None, :].to(s.dtype)) * torch.finfo(s.dtype).min
            return torch.softmax(s.float(), -1).to(q.dtype) @ v

    torch.manual_seed(0)
    run = compiled(torch, attention)
    for t in (6, 9, 1):
        q, k, v = (torch.randn(2, 2, t, 8).to(where.torch_device) for _ in range(3))
        pad = torch.ones(2, t)
        pad[1, t // 2 + 1:] = 0
        pad = pad.to(where.torch_device)
        torch.testing.assert_close(run(q, k, v, pad), attention(q, k, v, pad), atol=3e-2, rtol=3e-2)


def test_torch_position_ids_and_moe_router(torch, where):
    def route(logits, mask):
        probs = logits.softmax(-1)
        onehot = torch.nn.functional.one_hot(probs.argmax(-1), logits.shape[-1])
        keep = ((onehot.cumsum(0) * onehot <= 2) & (onehot > 0)).any(-1)
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
        return probs.max(-1).values * keep, positions

    logits, mask = torch.randn(11, 4), (torch.rand(3, 10) > 0.3).long()
    logits, mask = logits.to(where.torch_device), mask.to(where.torch_device)
    for got, expected in zip(compiled(torch, route)(logits, mask), route(logits, mask)):
        torch.testing.assert_close(got, expected)
