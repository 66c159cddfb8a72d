"""Row loops whose accesses index through a value the loop body defines (a reshape of a slice: the
row's batch and position are the row index divided by the slice's extent, a `Let` the lowering
puts in each loop). The vector path makes its accesses before the body's statements run, so such
an index is hoisted out (passes/hoist.py) or the loop keeps one element a lane
(cuda_plan.vector_accesses); NVRTC compiles it either way, and on the CPU run of the kernel
(tests/cuda_on_cpu.py) the loss is NumPy's. Found on a GPT-2 language model's loss
(`F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())`)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import engine
from braze.codegen.cuda_plan import vector_accesses
from braze.compile import nvrtc
from braze.kir import nodes as k


def shifted_loss(vocab: int) -> bz.Fusion:
    with bz.Fusion(name="shifted_loss") as f:
        x = f.define_tensor([-1, -1, vocab], dtype=bz.bfloat16)
        t = f.define_tensor([-1, -1], dtype=bz.int64)
        logits = bz.ops.cast(bz.ops.reshape(x[:, :-1], [-1, vocab]), bz.float32)
        f.add_output(bz.ops.cross_entropy(logits, bz.ops.reshape(t[:, 1:], [-1])))
    return f


def inputs(batch: int, seq: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(vocab)
    return [rng.standard_normal((batch, seq, vocab)).astype(ml_dtypes.bfloat16),
            rng.integers(0, vocab, (batch, seq))]


def wanted(x: np.ndarray, t: np.ndarray) -> float:
    logits = x[:, :-1].astype(np.float64).reshape(-1, x.shape[-1])
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-log_probs[np.arange(len(logits)), t[:, 1:].ravel()].mean())


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_sliced_rows_move_vectors_and_compile():
    src = engine.cuda_source(shifted_loss(50257), inputs(2, 4, 50257))
    assert not re.search(r"\bcse\d+ = inv\d+;", src.body)  # the row's index reads the hoisted extent itself
    assert "*reinterpret_cast<const bz_bfloat168*>(&T0_[" in src.body
    assert nvrtc.compile_cubin(src.text, "shifted_loss", "sm_90")


def test_an_index_reading_a_loop_local_keeps_one_element_a_lane():
    j, n, x = k.Var("j", bz.int32), k.Var("n", bz.int32), k.ArrayParam("x", bz.float32, 2, (None, 1))
    out = k.ArrayParam("y", bz.float32, 2, (None, 1))
    load = k.Load(x, (n, j))
    loop = k.For(j, k.Const(0, bz.int32), k.Const(64, bz.int32),
                 (k.Let(n, k.Const(3, bz.int32)), k.Store(out, (k.Const(0, bz.int32), j), load)))
    assert vector_accesses(loop) is None


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("batch, seq, vocab", [(2, 5, 96), (3, 4, 1000)])
def test_the_shifted_loss_on_the_cpu(batch, seq, vocab):
    arrays = inputs(batch, seq, vocab)
    with bz.config.scope(enable={"poison_outputs"}):
        (loss,), _ = run_on_cpu(shifted_loss(vocab), arrays, sm_count=2)
    np.testing.assert_allclose(float(loss), wanted(*arrays), rtol=2e-5)
