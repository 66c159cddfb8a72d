"""Programs from models and data pipelines written with NumPy's picking and masking idioms under
`@bz.jit`: a token-level NLL with `np.take_along_axis` and a padding mask given as `where=`, beam search
scores gathered for a few candidates a row, torch's `x.gather(-1, labels)` for a PPO ratio, sRGB to
CIELAB with `np.cbrt`, micro-batches of uneven size from `np.array_split`, and rounding and running
sums written as `x.round(2)` and `x.cumsum()`.

Each runs on the CPU backend, through its generated CUDA run on the CPU (tests/cuda_on_cpu.py) and on a
GPU, and is checked against NumPy in float64."""

from __future__ import annotations

import numpy as np
import pytest
from programs.conftest import CUDA, Place
from programs.test_model_programs import assert_close
from programs.test_model_programs4 import FAKE_GPU, call, f64, normal

import braze as bz

RNG = np.random.default_rng(55)


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), FAKE_GPU, CUDA])
def where(request) -> Place:
    return request.param


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def test_token_nll_with_take_along_axis_and_a_padding_mask(where):
    @bz.jit
    def token_loss(logits, labels, lengths):
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        picked = np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
        real = np.arange(labels.shape[1]) < lengths[:, None]
        per_sequence = -np.mean(picked, axis=1, where=real)
        right = np.sum(logits.argmax(-1) == labels, axis=1, where=real)
        return per_sequence, right, -np.sum(picked, where=real) / np.sum(real)

    for batch, steps, vocab in ((2, 5, 11), (3, 9, 300)):
        logits, labels = normal(batch, steps, vocab) * 2, RNG.integers(0, vocab, (batch, steps))
        labels[0, 1] = logits[0, 1].argmax()
        lengths = RNG.integers(1, steps + 1, batch)
        logp = log_softmax(f64(logits)[0])
        picked = np.take_along_axis(logp, labels[..., None], -1)[..., 0]
        real = np.arange(steps) < lengths[:, None]
        assert_close(call(where, token_loss, logits, labels, lengths),
                     [-(picked * real).sum(1) / real.sum(1), ((logits.argmax(-1) == labels) & real).sum(1),
                      -(picked * real).sum() / real.sum()], tol=2e-5)


def test_beam_scores_gathered_for_a_few_candidates(where):
    @bz.jit
    def beam_step(scores, logits, candidates, finished):
        logp = logits - logits.max(-1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
        total = scores[:, None] + np.take_along_axis(logp, candidates, axis=1)
        best = np.max(total, axis=1, where=~finished[:, None], initial=-1e9)
        return total, best, np.take_along_axis(total, np.argmax(total, axis=1)[:, None], axis=1)

    beams, vocab = 6, 257
    scores, logits = normal(beams), normal(beams, vocab) * 3
    candidates = RNG.integers(-vocab, vocab, (beams, 4))
    finished = np.array([False, True, False, False, True, False])
    logp = log_softmax(f64(logits)[0])
    total = f64(scores)[0][:, None] + np.take_along_axis(logp, candidates, 1)
    best = np.where(finished, -1e9, total.max(1))
    assert_close(call(where, beam_step, scores, logits, candidates, finished),
                 [total, best, total.max(1, keepdims=True)], tol=2e-5)


def test_ppo_ratio_from_torch_style_gathers(where):
    @bz.jit
    def ppo_ratio(logits, old_logp, actions, advantages):
        logp = bz.ops.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        ratio = np.exp(logp - old_logp)
        clipped = np.clip(ratio, 0.8, 1.2)
        return -np.minimum(ratio * advantages, clipped * advantages).mean(), logp

    logits, actions = normal(16, 7), RNG.integers(0, 7, 16)
    old_logp, advantages = normal(16) * 0.1 - 2, normal(16)
    logp = np.take_along_axis(log_softmax(f64(logits)[0]), actions[:, None], 1)[:, 0]
    ratio = np.exp(logp - f64(old_logp)[0])
    adv = f64(advantages)[0]
    loss = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv).mean()
    assert_close(call(where, ppo_ratio, logits, old_logp, actions, advantages), [loss, logp], tol=2e-5)


def test_srgb_to_cielab_with_cube_roots(where):
    @bz.jit
    def lab(rgb):
        linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        r, g, b = linear[..., 0], linear[..., 1], linear[..., 2]
        xyz = np.stack([(0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
                        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883], axis=-1)
        f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
        return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)

    rgb = RNG.random((5, 7, 3)).astype(np.float32)
    rgb[0, 0] = [0.0, 0.0, 0.0]
    rgb[0, 1] = [1.0, 1.0, 1.0]
    x = f64(rgb)[0]
    linear = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    r, g, b = np.moveaxis(linear, -1, 0)
    xyz = np.stack([(0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
                    (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883], -1)
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    expected = np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)
    assert_close(call(where, lab, rgb), expected, tol=1e-4)


def test_uneven_micro_batches_rounding_and_running_sums(where):
    @bz.jit
    def micro_batches(x, weights):
        pieces = np.array_split(x * weights, 3, axis=0)
        means = np.stack([p.mean(0) for p in pieces])
        return means, means.round(3), x.ravel().cumsum(), np.atleast_2d(weights[0]), divmod(x, 0.25)[1]

    for rows in (7, 9):
        x, weights = normal(rows, 5), RNG.random((rows, 1)).astype(np.float32)
        x64, w64 = f64(x, weights)
        means = np.stack([p.mean(0) for p in np.array_split(x64 * w64, 3)])
        rounded = np.round(np.stack([p.mean(0) for p in np.array_split(x * weights, 3)]).astype(np.float64), 3)
        assert_close(call(where, micro_batches, x, weights),
                     [means, rounded, x64.ravel().cumsum(), np.atleast_2d(w64[0]), np.mod(x64, 0.25)], tol=1e-4)
