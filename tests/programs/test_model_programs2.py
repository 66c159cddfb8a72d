"""More programs from real models, as users outside the team write them: losses (BCE with logits and a
positive weight, Huber and smooth L1, cosine embedding, ignore-index cross entropy, Gaussian NLL,
triplet margin, InfoNCE), backward passes written from primitives (softmax, log_softmax, GELU, SiLU,
dropout), attention masks (sliding windows, ALiBi slopes from the head index, padding by lengths,
logit soft-capping), optimizers (SGD with Nesterov momentum, AdamW on bfloat16 weights with float32
state, a cosine schedule, clipping that skips non-finite gradients), normalizations over rows of
1, 3, 1000 and 65537 in bfloat16 and float16, int8 and 4-bit quantization, positional encodings
built from `arange`, mixture-of-experts routing (top-1 and top-2 by argmax), Welford statistics
merges, and a top-p mask applied to unsorted logits. Each is checked against NumPy in float64 (or
eager torch for `torch.compile(backend="braze")`) on the CPU and on a GPU (the `where` fixture of
tests/programs/conftest.py); new outputs start as NaN or -1."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from programs.test_model_programs import (
    assert_close,
    assert_matches_eager,
    compiled,
    erf,
    layer_norm_backward,
    log_softmax,
    softmax,
)

import braze as bz

ops = bz.ops
RNG = np.random.default_rng(6)


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def f64(*arrays: np.ndarray):
    return [a.astype(np.float64) for a in arrays]


# --- losses ---------------------------------------------------------------------------------------
def test_bce_with_logits_and_a_positive_weight(where):
    @bz.jit
    def bce(logits, target, pos_weight):
        log_weight = 1 + (pos_weight - 1) * target
        loss = (1 - target) * logits + log_weight * (ops.log1p(ops.exp(-logits.abs())) + ops.relu(-logits))
        return loss.mean(), loss.sum(0)

    x, t, pw = normal(13, 5) * 4, (RNG.random((13, 5)) > 0.6).astype(np.float32), RNG.random(5).astype(np.float32) + 1
    x64, t64 = f64(x, t)
    sig = 1 / (1 + np.exp(-x64))
    loss = -(pw * t64 * np.log(sig) + (1 - t64) * np.log(1 - sig))
    assert_close(where.host(bce(where(x), where(t), where(pw))), [loss.mean(), loss.sum(0)])


def test_huber_and_smooth_l1(where):
    @bz.jit
    def losses(pred, target, delta):
        diff = (pred - target).abs()
        huber = ops.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta))
        smooth_l1 = ops.where(diff < delta, 0.5 * diff**2 / delta, diff - 0.5 * delta)
        return huber.mean(), smooth_l1.sum(-1), huber

    p, t = normal(4, 1000), normal(4, 1000)
    d = np.abs(p.astype(np.float64) - t)
    huber = np.where(d < 0.7, 0.5 * d * d, 0.7 * (d - 0.35))
    assert_close(where.host(losses(where(p), where(t), 0.7)),
                 [huber.mean(), np.where(d < 0.7, 0.5 * d**2 / 0.7, d - 0.35).sum(-1), huber])


def test_cosine_embedding_and_triplet_margin_losses(where):
    @bz.jit
    def losses(a, b, c, y, margin):
        cos = (a * b).sum(-1) / ((a * a).sum(-1) * (b * b).sum(-1) + 1e-12).sqrt()
        embedding = ops.where(y > 0, 1 - cos, (cos - margin).clamp(min=0))
        d_pos = ((a - b + 1e-6) ** 2).sum(-1).sqrt()
        d_neg = ((a - c + 1e-6) ** 2).sum(-1).sqrt()
        return embedding.mean(), ops.relu(d_pos - d_neg + margin).mean()

    a, b, c = normal(9, 16), normal(9, 16), normal(9, 16)
    y = np.where(RNG.random(9) > 0.5, 1, -1).astype(np.int64)
    a64, b64, c64 = f64(a, b, c)
    cos = (a64 * b64).sum(-1) / np.sqrt((a64**2).sum(-1) * (b64**2).sum(-1))
    emb = np.where(y > 0, 1 - cos, np.maximum(cos - 0.2, 0))
    dp, dn = np.linalg.norm(a64 - b64 + 1e-6, axis=-1), np.linalg.norm(a64 - c64 + 1e-6, axis=-1)
    assert_close(where.host(losses(*map(where, (a, b, c, y)), 0.2)), [emb.mean(), np.maximum(dp - dn + 0.2, 0).mean()])


@pytest.mark.parametrize("tokens, vocab", [(12, 7), (3, 1000)])
def test_cross_entropy_with_ignore_index_and_accuracy(tokens, vocab, where):
    @bz.jit
    def loss_and_accuracy(logits, labels):
        valid = labels != -100
        safe = ops.where(valid, labels, 0)
        picked = (logits.log_softmax(-1) * ops.one_hot(safe, logits.shape[-1])).sum(-1)
        count = valid.sum().clamp(min=1)
        loss = -(picked * valid).sum() / count
        correct = ((logits.argmax(-1) == labels) & valid).sum()
        return loss, correct.float() / count

    x = normal(tokens, vocab)
    labels = RNG.integers(0, vocab, tokens)
    labels[::3] = -100
    valid = labels != -100
    lp = log_softmax(x.astype(np.float64))
    loss = -lp[np.arange(tokens)[valid], labels[valid]].sum() / valid.sum()
    accuracy = ((x.argmax(-1) == labels) & valid).sum() / valid.sum()
    assert_close(where.host(loss_and_accuracy(where(x), where(labels))), [loss, accuracy])


def test_kl_div_with_zero_probabilities_and_gaussian_nll(where):
    @bz.jit
    def losses(logq, p, mu, var, target):
        kl = ops.where(p > 0, p * (p.log() - logq), 0.0).sum() / p.shape[0]
        var = var.clamp(min=1e-6)
        nll = 0.5 * (var.log() + (target - mu) ** 2 / var)
        return kl, nll.mean()

    logq = log_softmax(normal(5, 8).astype(np.float64))
    p = softmax(normal(5, 8).astype(np.float64))
    p[:, ::3] = 0
    p /= p.sum(-1, keepdims=True)
    mu, var, target = normal(40), np.abs(normal(40)), normal(40)
    var[0] = 0
    kl = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1)) - logq), 0).sum() / 5
    v = np.maximum(var.astype(np.float64), 1e-6)
    nll = 0.5 * (np.log(v) + (target - mu.astype(np.float64)) ** 2 / v)
    got = losses(where(logq.astype(np.float32)), where(p.astype(np.float32)), where(mu), where(var), where(target))
    assert_close(where.host(got), [kl, nll.mean()], tol=2e-4)


def test_info_nce_over_a_similarity_matrix(where):
    @bz.jit
    def info_nce(za, zb, temperature):
        za = za / za.norm(dim=-1, keepdim=True)
        zb = zb / zb.norm(dim=-1, keepdim=True)
        logits = (za[:, None, :] * zb[None, :, :]).sum(-1) / temperature
        n = logits.shape[0]
        diagonal = ops.arange(n)[:, None] == ops.arange(n)[None, :]
        rows = -(logits.log_softmax(-1) * diagonal).sum(-1)
        cols = -(logits.log_softmax(0) * diagonal).sum(0)
        return (rows.mean() + cols.mean()) / 2

    za, zb = f64(normal(6, 8), normal(6, 8))
    za, zb = za / np.linalg.norm(za, axis=-1, keepdims=True), zb / np.linalg.norm(zb, axis=-1, keepdims=True)
    logits = za @ zb.T / 0.1
    expected = -(np.diag(log_softmax(logits, -1)).mean() + np.diag(log_softmax(logits, 0)).mean()) / 2
    got = info_nce(where(za.astype(np.float32)), where(zb.astype(np.float32)), 0.1)
    assert_close(where.host(got), expected, tol=2e-4)


# --- backward passes from primitives ---------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 1000])
def test_softmax_and_log_softmax_backward(n, where):
    @bz.jit
    def backwards(x, g):
        y = x.softmax(-1)
        dsoftmax = y * (g - (g * y).sum(-1, keepdim=True))
        dlog_softmax = g - y * g.sum(-1, keepdim=True)
        return dsoftmax, dlog_softmax

    x, g = normal(5, n), normal(5, n)
    y = softmax(x.astype(np.float64))
    assert_close(where.host(backwards(where(x), where(g))),
                 [y * (g - (g * y).sum(-1, keepdims=True)), g - y * g.sum(-1, keepdims=True)])


def test_gelu_and_silu_backward(where):
    @bz.jit
    def backwards(x, g):
        cdf = 0.5 * (1 + ops.erf(x * (2**-0.5)))
        pdf = ops.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        t = inner.tanh()
        dtanh = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
        s = x.sigmoid()
        return g * (cdf + x * pdf), g * dtanh, g * s * (1 + x * (1 - s))

    x, g = f64(normal(7, 33) * 2, normal(7, 33))
    cdf, pdf = 0.5 * (1 + erf(x / math.sqrt(2))), np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))
    dtanh = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
    s = 1 / (1 + np.exp(-x))
    got = backwards(where(x.astype(np.float32)), where(g.astype(np.float32)))
    assert_close(where.host(got), [g * (cdf + x * pdf), g * dtanh, g * s * (1 + x * (1 - s))])


def test_dropout_forward_and_backward_share_a_mask(where):
    @bz.jit
    def dropout(x, g, keep, p):
        scale = 1 / (1 - p)
        return ops.where(keep, x * scale, 0.0), g * keep.float() * scale

    x, g, keep = normal(6, 50), normal(6, 50), RNG.random((6, 50)) > 0.25
    assert_close(where.host(dropout(where(x), where(g), where(keep), 0.25)),
                 [np.where(keep, x / 0.75, 0), g * keep / 0.75])


def test_dropout_from_braze_random_numbers(where):
    @bz.jit
    def dropout(x, p):
        keep = ops.rand(x.shape, seed=11) >= p
        return ops.where(keep, x / (1 - p), 0.0), keep

    x = np.abs(normal(64, 64)) + 1
    out, keep = where.host(dropout(where(x), 0.3))
    assert keep.dtype == np.bool_ and abs(keep.mean() - 0.7) < 0.03
    assert_close(out, np.where(keep, x / 0.7, 0))


# --- attention masks --------------------------------------------------------------------------------
@pytest.mark.parametrize("t, window", [(9, 3), (1, 4), (40, 1)])
def test_sliding_window_causal_softmax(t, window, where):
    @bz.jit
    def windowed(scores, window):
        q = ops.arange(scores.shape[-2])[:, None]
        k = ops.arange(scores.shape[-1])[None, :]
        allowed = (k <= q) & (q - k < window)
        return scores.masked_fill(~allowed, bz.finfo(scores.dtype).min).softmax(-1)

    s = normal(2, t, t)
    q, k = np.arange(t)[:, None], np.arange(t)[None, :]
    allowed = (k <= q) & (q - k < window)
    assert_close(where.host(windowed(where(s), window)), softmax(np.where(allowed, s.astype(np.float64), -np.inf)))


def test_alibi_slopes_from_the_head_index(where):
    @bz.jit
    def alibi(scores):
        heads, t = scores.shape[1], scores.shape[-1]
        slopes = ops.exp2(-8.0 * (ops.arange(heads) + 1).float() / heads)
        pos = ops.arange(t)
        bias = (pos[None, :] - pos[:, None]).float()
        causal = pos[None, :] <= pos[:, None]
        return (scores + slopes[:, None, None] * bias).masked_fill(~causal, -1e9).softmax(-1)

    s = normal(2, 8, 7, 7)
    slopes = 2.0 ** (-8.0 * np.arange(1, 9) / 8)
    bias = np.arange(7)[None, :] - np.arange(7)[:, None]
    expected = softmax(np.where(bias <= 0, s + slopes[:, None, None] * bias, -1e9))
    assert_close(where.host(alibi(where(s))), expected)


def test_padding_from_lengths_and_masked_mean_pooling(where):
    @bz.jit
    def pooled(hidden, lengths):
        mask = ops.arange(hidden.shape[1])[None, :] < lengths[:, None]
        summed = hidden.new_zeros(hidden.shape[0], hidden.shape[2]) + (hidden * mask[..., None]).sum(1)
        return summed / mask.sum(1, keepdim=True).clamp(min=1), hidden.masked_fill(~mask[..., None], -1e4).amax(1)

    h, lengths = normal(4, 9, 6), np.array([9, 1, 4, 0])
    mask = np.arange(9)[None, :] < lengths[:, None]
    mean = (h * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
    assert_close(where.host(pooled(where(h), where(lengths))), [mean, np.where(mask[..., None], h, -1e4).max(1)])


def test_logit_soft_capping_and_repetition_penalty(where):
    @bz.jit
    def sample_logits(logits, seen, cap, penalty):
        capped = cap * (logits / cap).tanh()
        penalized = ops.where(seen, ops.where(capped > 0, capped / penalty, capped * penalty), capped)
        return penalized.log_softmax(-1)

    x, seen = normal(3, 100) * 40, RNG.random((3, 100)) > 0.8
    capped = 30 * np.tanh(x.astype(np.float64) / 30)
    penalized = np.where(seen, np.where(capped > 0, capped / 1.3, capped * 1.3), capped)
    assert_close(where.host(sample_logits(where(x), where(seen), 30.0, 1.3)), log_softmax(penalized))


# --- optimizers -------------------------------------------------------------------------------------
def test_sgd_with_nesterov_momentum_and_weight_decay(where):
    @bz.jit
    def sgd(p, g, buf, lr, momentum, weight_decay):
        g = g + weight_decay * p
        buf = momentum * buf + g
        return p - lr * (g + momentum * buf), buf

    p, g, buf = normal(7, 31), normal(7, 31), normal(7, 31)
    g2 = g + 1e-4 * p.astype(np.float64)
    buf2 = 0.9 * buf + g2
    assert_close(where.host(sgd(where(p), where(g), where(buf), 0.1, 0.9, 1e-4)), [p - 0.1 * (g2 + 0.9 * buf2), buf2])


def test_adamw_on_bfloat16_weights_with_float32_state_and_cosine_schedule(where):
    @bz.jit
    def step(p, g, m, v, step, total, max_lr):
        lr = 1e-5 + 0.5 * (max_lr - 1e-5) * (1 + ops.cos(math.pi * step / total))
        g32 = g.float()
        m = 0.9 * m + 0.1 * g32
        v = 0.95 * v + 0.05 * g32 * g32
        update = m / (1 - 0.9**step) / ((v / (1 - 0.95**step)).sqrt() + 1e-8)
        p32 = p.float() * (1 - lr * 0.1) - lr * update
        return p32.to(p.dtype), m, v

    p, g = normal(1031).astype(ml_dtypes.bfloat16), normal(1031).astype(ml_dtypes.bfloat16)
    m, v = normal(1031), np.abs(normal(1031))
    lr = 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + math.cos(math.pi * 7 / 20))
    p64, g64 = f64(p, g)
    m2, v2 = 0.9 * m + 0.1 * g64, 0.95 * v + 0.05 * g64**2
    expected = p64 * (1 - lr * 0.1) - lr * m2 / (1 - 0.9**7) / (np.sqrt(v2 / (1 - 0.95**7)) + 1e-8)
    got = where.host(step(where(p), where(g), where(m), where(v), 7, 20, 1e-3))
    assert got[0].dtype == ml_dtypes.bfloat16 and got[1].dtype == np.float32
    assert_close(got, [expected, m2, v2], tol=1e-2)
    assert_close(got[1:], [m2, v2])


def test_global_norm_clipping_skips_non_finite_gradients(where):
    @bz.jit
    def clip(g1, g2, max_norm):
        total = (g1.pow(2).sum() + g2.pow(2).sum()).sqrt()
        finite = ops.isfinite(total)
        scale = ops.where(finite, (max_norm / (total + 1e-6)).clamp(max=1.0), 0.0)
        return g1 * scale, g2 * scale, total, finite

    g1, g2 = normal(5, 7), normal(300)
    total = math.sqrt((g1.astype(np.float64) ** 2).sum() + (g2.astype(np.float64) ** 2).sum())
    scale = min(0.5 / (total + 1e-6), 1)
    assert_close(where.host(clip(where(g1), where(g2), 0.5)), [g1 * scale, g2 * scale, total, True])
    g2[3] = np.inf
    got = where.host(clip(where(g1), where(g2), 0.5))
    assert not got[3] and np.isinf(got[2]) and not got[0].any()


# --- normalizations at odd shapes -------------------------------------------------------------------
@pytest.mark.parametrize("n, dtype", [(1, np.float16), (3, ml_dtypes.bfloat16), (1000, np.float16),
                                      (65537, ml_dtypes.bfloat16)])
def test_half_precision_norms_over_odd_rows(n, dtype, where):
    @bz.jit
    def norms(x, w):
        x32 = x.float()
        mu = x32.mean(-1, keepdim=True)
        layer = ((x32 - mu) * ((x32 - mu).square().mean(-1, keepdim=True) + 1e-5).rsqrt() * w.float()).to(x.dtype)
        rms = x32 * (x32.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
        return layer, rms.to(x.dtype), x.softmax(-1)

    rows = 2 if n == 65537 else 3
    x, w = normal(rows, n).astype(dtype), normal(n).astype(dtype)
    x64, w64 = f64(x, w)
    layer = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w64
    rms = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6)
    got = where.host(norms(where(x), where(w)))
    assert [o.dtype for o in got] == [dtype] * 3
    tol = 3e-2 if dtype == ml_dtypes.bfloat16 else 4e-3
    assert_close(got, [layer, rms, softmax(x64)], tol=tol)


@pytest.mark.parametrize("rows, n", [(1, 65537), (1000, 3), (65537, 1)])
def test_layer_norm_backward_over_odd_shapes(rows, n, where):
    x, g, w = normal(rows, n), normal(rows, n), normal(n)
    x64, g64 = f64(x, g)
    mu = x64.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat, gw = (x64 - mu) * rstd, g64 * w
    dx = rstd / n * (n * gw - gw.sum(-1, keepdims=True) - xhat * (gw * xhat).sum(-1, keepdims=True))
    assert_close(where.host(layer_norm_backward(where(x), where(g), where(w))), [dx, (g64 * xhat).sum(0), g64.sum(0)],
                 tol=2e-3)


def test_running_statistics_merged_welford_style(where):
    @bz.jit
    def merge(x, count, mean, m2):
        n = x.shape[0]
        batch_mean = x.mean(0)
        batch_m2 = ((x - batch_mean) ** 2).sum(0)
        total = count + n
        delta = batch_mean - mean
        return total, mean + delta * n / total, m2 + batch_m2 + delta * delta * count * n / total

    x = normal(37, 6).astype(np.float64) * 3 + 1
    prior = normal(50, 6).astype(np.float64)
    count, mean, m2 = np.float64(50), prior.mean(0), ((prior - prior.mean(0)) ** 2).sum(0)
    both = np.concatenate([prior, x])
    got = where.host(merge(where(x.astype(np.float32)), count, where(mean), where(m2)))
    assert_close(got, [87.0, both.mean(0), ((both - both.mean(0)) ** 2).sum(0)], tol=1e-3)


# --- quantization -----------------------------------------------------------------------------------
def test_per_row_absmax_int8_quantize_and_dequantize(where):
    @bz.jit
    def quantize(x):
        scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
        q = (x / scale).round().clamp(-127, 127).to(bz.int8)
        return q, scale, q.float() * scale

    x = normal(5, 64) * 3
    x[1] = 0
    x64 = x.astype(np.float64)
    scale = np.maximum(np.abs(x64).max(-1, keepdims=True), 1e-8) / 127
    q = np.clip(np.round(x64 / scale), -127, 127)
    got = where.host(quantize(where(x)))
    assert got[0].dtype == np.int8
    assert np.abs(got[0].astype(np.int64) - q).max() <= 1 and (got[0][1] == 0).all()
    assert_close(got[1:], [scale, q * scale], tol=scale.max() * 1.01)


def test_group_wise_asymmetric_4bit_quantization(where):
    @bz.jit(static_argnames="group")
    def quantize(w, group):
        g = w.reshape(-1, group)
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        scale = ((hi - lo) / 15).clamp(min=1e-6)
        zero = (-lo / scale).round()
        q = ((g / scale).round() + zero).clamp(0, 15).to(bz.int32)
        return q.to(bz.int8), ((q.float() - zero) * scale).reshape(w.shape)

    w = normal(6, 64)
    g = w.reshape(-1, 32).astype(np.float64)
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    scale = np.maximum((hi - lo) / 15, 1e-6)
    zero = np.round(-lo / scale)
    q = np.clip(np.round(g / scale) + zero, 0, 15)
    q_got, deq = where.host(quantize(where(w), group=32))
    assert q_got.dtype == np.int8 and q_got.min() >= 0 and q_got.max() <= 15
    assert np.abs(q_got - q).max() <= 1
    assert_close(deq, w, tol=scale.max() * 0.51 + 1e-6)


# --- positional encodings ---------------------------------------------------------------------------
def test_sinusoidal_positional_encoding_added_to_embeddings(where):
    @bz.jit
    def embed(x):
        t, d = x.shape[-2], x.shape[-1]
        position = ops.arange(t).float()[:, None]
        inv_freq = ops.exp(ops.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        angle = position * inv_freq[None, :]
        pe = ops.stack([angle.sin(), angle.cos()], -1).reshape(t, d)
        return x * d**0.5 + pe  # math.sqrt(d) would need d as a Python number: it is an extent

    x = normal(2, 11, 16)
    angle = np.arange(11)[:, None] * np.exp(np.arange(0, 16, 2) * (-math.log(10000.0) / 16))[None, :]
    pe = np.stack([np.sin(angle), np.cos(angle)], -1).reshape(11, 16)
    assert_close(where.host(embed(where(x))), x * 4 + pe)


def test_interleaved_rope_with_angles_from_position_ids(where):
    @bz.jit
    def rope(x, position_ids, base):
        d = x.shape[-1]
        inv_freq = 1.0 / base ** (ops.arange(0, d, 2).float() / d)
        angle = position_ids[..., None].float() * inv_freq
        cos, sin = angle.cos()[:, None], angle.sin()[:, None]
        pairs = x.float().unflatten(-1, (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        return ops.stack([even * cos - odd * sin, odd * cos + even * sin], -1).flatten(-2).to(x.dtype)

    x = normal(2, 3, 5, 8).astype(np.float16)
    pos = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    angle = pos[..., None] / 500.0 ** (np.arange(0, 8, 2) / 8)
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
    even, odd = f64(x[..., 0::2], x[..., 1::2])
    expected = np.stack([even * cos - odd * sin, odd * cos + even * sin], -1).reshape(x.shape)
    got = where.host(rope(where(x), where(pos), 500.0))
    assert got.dtype == np.float16
    assert_close(got, expected, tol=3e-3)


# --- mixture of experts -------------------------------------------------------------------------------
def test_top2_router_by_argmax_twice(where):
    @bz.jit
    def top2(logits):
        experts = logits.shape[-1]
        probs = logits.softmax(-1)
        first = probs.argmax(-1)
        first_mask = ops.one_hot(first, experts).bool()
        second = probs.masked_fill(first_mask, -1.0).argmax(-1)
        p1 = (probs * first_mask).sum(-1)
        p2 = (probs * ops.one_hot(second, experts)).sum(-1)
        return first, second, p1 / (p1 + p2), (ops.one_hot(first, experts) + ops.one_hot(second, experts)).sum(0)

    x = normal(23, 8)
    probs = softmax(x.astype(np.float64))
    order = np.argsort(-probs, -1)
    first, second = order[:, 0], order[:, 1]
    p1, p2 = probs[np.arange(23), first], probs[np.arange(23), second]
    counts = np.bincount(first, minlength=8) + np.bincount(second, minlength=8)
    got = where.host(top2(where(x)))
    assert got[0].dtype == np.int64
    assert_close(got, [first, second, p1 / (p1 + p2), counts])


# --- sampling -----------------------------------------------------------------------------------------
def test_top_p_threshold_applied_to_unsorted_logits(where):
    @bz.jit
    def top_p(logits, sorted_logits, p):
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs
        kept = before < p
        threshold = sorted_logits.masked_fill(~kept, float("inf")).amin(-1, keepdim=True)
        return logits.masked_fill(logits < threshold, float("-inf")).softmax(-1)

    x = normal(4, 30) * 2
    s = -np.sort(-x, -1)
    probs = softmax(s.astype(np.float64))
    kept = probs.cumsum(-1) - probs < 0.8
    threshold = np.where(kept, s, np.inf).min(-1, keepdims=True)
    expected = softmax(np.where(x < threshold, -np.inf, x.astype(np.float64)))
    assert_close(where.host(top_p(where(x), where(s), 0.8)), expected)


# --- torch.compile ----------------------------------------------------------------------------------
def test_torch_losses_with_reductions_train(torch, where):
    functional = torch.nn.functional

    def losses(x, y, target, labels):
        return (functional.smooth_l1_loss(x, y, beta=0.5)
                + functional.binary_cross_entropy_with_logits(x, target, pos_weight=x.new_full((7,), 2.0))
                + functional.cross_entropy(x, labels, ignore_index=-100, label_smoothing=0.05)
                + functional.cosine_embedding_loss(x, y, torch.where(labels % 2 == 0, 1, -1), margin=0.1))

    torch.manual_seed(0)
    x, y = torch.randn(6, 7), torch.randn(6, 7)
    target, labels = (torch.rand(6, 7) > 0.5).float(), torch.tensor([0, 3, -100, 6, 1, -100])
    inputs = [t.to(where.torch_device) for t in (x, y, target, labels)]
    assert_matches_eager(torch, losses, *inputs, grad=True)


def test_torch_bfloat16_norm_module_in_eval_with_dropout(torch, where):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(1000), torch.nn.Dropout(0.1), torch.nn.GELU(approximate="tanh"),
                                torch.nn.RMSNorm(1000) if hasattr(torch.nn, "RMSNorm") else torch.nn.Identity())
    model = model.to(where.torch_device).eval()
    x = torch.randn(3, 1000, device=where.torch_device)
    xb, model = x.to(torch.bfloat16), model.to(torch.bfloat16)
    torch.testing.assert_close(compiled(torch, model)(xb), model(xb), atol=3e-2, rtol=3e-2)


def test_torch_optimizer_steps_in_place(torch, where):
    def adamw_lion_nesterov(p, g, m, v, q, buf, step):
        norm = g.norm()
        g = g * (1.0 / (norm + 1e-6)).clamp(max=1.0)
        m.mul_(0.9).add_(g, alpha=0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.mul_(1 - 1e-3 * 0.01).addcdiv_(m / (1 - 0.9**step), (v / (1 - 0.999**step)).sqrt().add_(1e-8), value=-1e-3)
        q.add_(torch.sign(0.9 * buf + 0.1 * g), alpha=-1e-4)
        buf.mul_(0.9).add_(g)
        return p.sum() + q.sum()

    torch.manual_seed(0)
    tensors = [torch.randn(257).to(where.torch_device) for _ in range(6)]
    tensors[3] = tensors[3].abs()
    ours, eager = [t.clone() for t in tensors], [t.clone() for t in tensors]
    step = compiled(torch, adamw_lion_nesterov)
    for k in (1, 2):
        torch.testing.assert_close(step(*ours, k), adamw_lion_nesterov(*eager, k))
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b)


def test_torch_attention_masks_and_positions(torch, where):
    def attention(q, k, v, lengths, slopes):
        t = q.shape[-2]
        pos = torch.arange(t, device=q.device)
        causal = pos[None, :] <= pos[:, None]
        window = (pos[:, None] - pos[None, :]) < 4
        padding = pos[None, :] < lengths[:, None]
        mask = causal & window & padding[:, None, None, :]
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        scores = scores + slopes[:, None, None] * (pos[None, :] - pos[:, None])
        return scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1) @ v

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8) for _ in range(3))
    lengths, slopes = torch.tensor([9, 5]), 2.0 ** (-8.0 * torch.arange(1, 5) / 4)
    inputs = [t.to(where.torch_device) for t in (q, k, v, lengths, slopes)]
    assert_matches_eager(torch, attention, *inputs, grad=True)


def test_torch_quantize_and_router(torch, where):
    def quantize_route(x, router):
        scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
        q = torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)
        probs = torch.softmax(x @ router, -1)
        top1 = probs.argmax(-1)
        onehot = torch.nn.functional.one_hot(top1, router.shape[-1]).float()
        return q, q.float() * scale, probs.gather(-1, top1[:, None]), onehot.mean(0)

    torch.manual_seed(0)
    x, router = torch.randn(10, 16).to(where.torch_device), torch.randn(16, 4).to(where.torch_device)
    for got, expected in zip(compiled(torch, quantize_route)(x, router), quantize_route(x, router)):
        torch.testing.assert_close(got, expected)
