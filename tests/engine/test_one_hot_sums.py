"""A sum of where(r == t, v(r), 0) over a row reads its one term on the CPU as on the GPU: a
cross-entropy's picked log-probability, and the torch backend's gather of one index a row."""

from __future__ import annotations

import re

import cuda_on_cpu
import numpy as np
import pytest

import braze as bz
from braze import engine
from braze.kir import kernel_text
from braze.runtime.inputs import bind_inputs


def cross_entropy() -> bz.Fusion:
    with bz.Fusion() as f:
        logits = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        target = f.define_tensor(shape=(-1,), dtype=bz.int64)
        f.add_output(bz.ops.cross_entropy(logits, target, reduction="none"))
    return f


def test_the_picked_class_is_read_not_summed_over_the_row():
    f = cross_entropy()
    logits, target = np.zeros((4, 10), np.float32), np.zeros(4, np.int64)
    kernel = engine.lower_fusion(f, engine.signature(f, bind_inputs(f, [logits, target]))).kernel
    text = kernel_text(kernel)
    assert text.count("for r") == 2 and "T0[p1, int32(T1[p1])]" in text  # the max and the sum; one read


def test_take_along_axis_reads_its_value_and_sign_with_no_loop_over_the_row():
    """take_along_axis folds two one-hot sums in one loop (the value, and its sign, which the sum of
    zeros would lose on -0.0): both are read directly, and -0.0 comes back as -0.0."""
    with bz.Fusion() as f:
        x, ids = f.define_tensor(shape=(-1, -1)), f.define_tensor(shape=(-1, 1), dtype=bz.int64)
        f.add_output(bz.ops.take_along_axis(x, ids, 1))
    x, ids = np.array([[1.0, -0.0, 3.0], [4.0, 5.0, -6.0]], np.float32), np.array([[1], [-1]])
    kernel = engine.lower_fusion(f, engine.signature(f, bind_inputs(f, [x, ids]))).kernel
    assert "for r" not in kernel_text(kernel)
    cuda = engine.cuda_source(f, [x, ids]).text  # its row task folds both sums in one loop
    assert not re.search(r"for \(int r\d", cuda[cuda.index("__global__"):])
    (out,) = f.execute([x, ids])
    np.testing.assert_array_equal(out, [[-0.0], [-6.0]])
    assert np.signbit(out[0, 0])


def test_a_gather_of_every_index_a_row_reads_each_element_once():
    """A permutation of each row (k = n picks a row): the one-hot sums nest in the loop over the picks,
    and each is still read directly, or the gather would cost n passes over every row."""
    with bz.Fusion() as f:
        x, ids = f.define_tensor(shape=(-1, -1)), f.define_tensor(shape=(-1, -1), dtype=bz.int64)
        f.add_output(bz.ops.take_along_axis(x, ids, 1))
    rng = np.random.default_rng(1)
    x, ids = rng.standard_normal((3, 40)).astype(np.float32), np.argsort(rng.random((3, 40)), 1)
    kernel = engine.lower_fusion(f, engine.signature(f, bind_inputs(f, [x, ids]))).kernel
    assert "for j" in kernel_text(kernel) and "for r" not in kernel_text(kernel)
    (out,) = f.execute([x, ids])
    np.testing.assert_array_equal(out, np.take_along_axis(x, ids, 1))


def test_the_cpu_cross_entropy_matches_numpy_with_targets_at_the_ends():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 37)).astype(np.float32)
    target = np.array([0, 36, 5, 36, 0, 17])
    (out,) = cross_entropy().execute([logits, target])
    wide = logits.astype(np.float64)
    shifted = wide - wide.max(1, keepdims=True)
    expected = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(6), target]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def shifted_loss(batch: int, tokens: int, vocab: int) -> bz.Fusion:
    """A language model's loss as a torch graph gives it: logits[:, :-1] against tokens[:, 1:], the
    ignored targets (-100) masked, the picked log-probability a one-hot sum over the row."""
    with bz.Fusion() as f:
        mm = f.define_tensor((batch * tokens, vocab), dtype=bz.float32)
        tok = f.define_tensor((batch, tokens), dtype=bz.int64)
        rows = batch * (tokens - 1)
        x = bz.ops.reshape(bz.ops.reshape(mm, (batch, tokens, vocab))[:, :-1], (rows, vocab))
        t = bz.ops.reshape(tok[:, 1:], (rows,))
        d = x - bz.ops.max(x, 1, keepdim=True)
        log_p = d - bz.ops.log(bz.ops.sum(bz.ops.exp(d), 1, keepdim=True))
        valid = t != -100
        hit = bz.ops.arange(vocab, dtype=bz.int64)[None, :] == bz.ops.where(valid, t, 0)[:, None]
        picked = bz.ops.sum(bz.ops.where(hit, log_p, 0.0), 1)
        loss = bz.ops.where(valid, -picked, 0.0)
        f.add_output(bz.ops.sum(loss, 0) / bz.ops.cast(bz.ops.sum(valid, 0), bz.float32))
    return f


def test_a_shifted_targets_picked_class_is_read_not_summed_over_the_row():
    """The target's position comes from the row's through Lets inside the one-hot loop (the sliced
    tokens): those move before the one read."""
    rng = np.random.default_rng(1)
    batch, tokens, vocab = 3, 7, 41
    logits = rng.standard_normal((batch * tokens, vocab)).astype(np.float32)
    tok = rng.integers(0, vocab, (batch, tokens))
    tok[1, 3] = tok[2, 6] = -100
    f = shifted_loss(batch, tokens, vocab)
    kernel = engine.lower_fusion(f, engine.signature(f, bind_inputs(f, [logits, tok]))).kernel
    text = kernel_text(kernel)
    # Loops over the rows (twice: the loss, the count of valid targets), the max and the sum of
    # exponentials; no comparison with each class is left.
    assert text.count("for r") == 4 and " eq(" not in text and "(eq(" not in text
    (got,) = f.execute([logits, tok])
    x = logits.reshape(batch, tokens, vocab)[:, :-1].reshape(-1, vocab).astype(np.float64)
    t = tok[:, 1:].reshape(-1)
    log_p = x - x.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    valid = t != -100
    expected = -log_p[np.arange(len(t))[valid], t[valid]].sum() / valid.sum()
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="needs g++")
def test_the_gpu_loss_takes_vectors_over_rows_of_an_odd_vocabulary_then_a_tail():
    """The loss's rows ("grid_rows") take the 16-byte path over whole vectors, then single elements,
    where the vocabulary (41) is no multiple of the vector but the rows are aligned (a padded
    stride, as the torch backend's padded matmul gives: no head to peel off, codegen/cuda_peel.py);
    run on the CPU against NumPy."""
    rng = np.random.default_rng(2)
    batch, tokens, vocab = 2, 9, 41
    logits = np.zeros((batch * tokens, 44), np.float32)[:, :vocab]
    logits[:] = rng.standard_normal(logits.shape)
    tok = rng.integers(0, vocab, (batch, tokens))
    f = shifted_loss(batch, tokens, vocab)
    tail = r"for \(int \w+ = (bz_head_\w+) \+ \(\(41\) - \1\) / 4 \* 4 \+ lane;"
    assert re.search(tail, engine.cuda_source(f, [logits, tok]).body)
    with bz.config.scope(enable="poison_outputs"):
        (got,), _ = cuda_on_cpu.run_on_cpu(f, [logits, tok])
    x = logits.reshape(batch, tokens, vocab)[:, :-1].reshape(-1, vocab).astype(np.float64)
    t = tok[:, 1:].reshape(-1)
    log_p = x - x.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(got), -log_p[np.arange(len(t)), t].mean(), rtol=1e-5)
