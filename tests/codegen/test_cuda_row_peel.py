"""Row loops over rows that start off a 16-byte boundary (odd row lengths: GPT-2's vocabulary of 50257,
ViT's 197) take the vector path after a head of single elements (braze/codegen/cuda_peel.py): softmax,
log_softmax, a cross-entropy (max, sum of exp, a gather), layer_norm and a row sum at odd widths and
on views offset by 1 to 3 elements, run on the CPU (tests/cuda_on_cpu.py: g++, a thread per CUDA
thread) against float64 NumPy; the text of the peeled loops; NVRTC compiling it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import config, engine
from braze.codegen import cuda_launch
from braze.compile import nvrtc

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def log_softmax64(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def layer_norm64(x: np.ndarray) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


# name -> (the fusion's outputs of rows x and targets t, the float64 reference of x and t)
OPS = {
    "softmax": (lambda x, t: bz.ops.softmax(x, -1), lambda x, t: np.exp(log_softmax64(x))),
    "log_softmax": (lambda x, t: bz.ops.log_softmax(x, -1), lambda x, t: log_softmax64(x)),
    "cross_entropy": (lambda x, t: bz.ops.cross_entropy(x, t, reduction="none"),
                      lambda x, t: -np.take_along_axis(log_softmax64(x), t[:, None], -1)[:, 0]),
    "layer_norm": (lambda x, t: bz.ops.layer_norm(x), lambda x, t: layer_norm64(x)),
    "row_sum": (lambda x, t: bz.ops.sum(x, axes=-1), lambda x, t: x.sum(-1)),
}


def fusion(name: str) -> bz.Fusion:
    with bz.Fusion(name=f"peel_{name}") as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        t = f.define_tensor(shape=(-1,), dtype=bz.int64)
        f.add_output(OPS[name][0](x, t))
    return f


def inputs(rows: int, width: int, offset: int = 0) -> list[np.ndarray]:
    """Rows of `width` float32 `offset` elements past a 16-byte boundary (a view into a longer array),
    and a target class per row."""
    rng = np.random.default_rng(width + offset)
    memory = np.empty(rows * width + 4, np.float32)
    assert memory.ctypes.data % 16 == 0  # NumPy's allocations: the offset alone sets the misalignment
    x = memory[offset:offset + rows * width].reshape(rows, width)
    x[...] = rng.standard_normal((rows, width))
    return [x, rng.integers(0, width, rows)]


def check(name: str, arrays: list[np.ndarray]) -> None:
    (out,), _ = run_on_cpu(fusion(name), arrays)
    x, t = arrays[0].astype(np.float64), arrays[1]
    wanted = OPS[name][1](x, t)
    # softmax's values are small (the tail of a row of 50257 near 1e-8): only relative errors show
    # elements missed; a float32 sum's rounding grows with its length.
    atol = {"softmax": 0, "row_sum": 2e-5 * np.sqrt(x.shape[-1])}.get(name, 2e-5)
    np.testing.assert_allclose(out, wanted, rtol=2e-5, atol=atol)


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("width", [37, 50257])
def test_odd_rows_take_the_vectors_after_a_head(name, width, monkeypatch):
    # Rows read from memory (as 50257 floats are, too long for shared memory): the loops sharing a
    # row cache peel only then. Row r of `width` starts (width * r) % 4 elements off the boundary.
    monkeypatch.setattr(cuda_launch, "ROW_CACHE_BYTES", 0)
    check(name, inputs(5 if width < 50257 else 4, width))


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize(("offset", "width"), [(1, 1001), (2, 36), (3, 37)])
def test_rows_of_a_view_off_the_boundary(name, offset, width, monkeypatch):
    """A view's rows start `offset` elements further off the boundary than the output's: a row sum
    peels its rows; a loop writing the output too peels none (its accesses disagree: the harness
    fails a misaligned vector access)."""
    monkeypatch.setattr(cuda_launch, "ROW_CACHE_BYTES", 0)
    check(name, inputs(3, width, offset))


def test_a_mean_loss_over_odd_rows():
    """cross_entropy's mean, as a language model's loss: its rows meet across blocks ("grid_rows")."""
    with bz.Fusion(name="peel_loss") as f:
        x, t = f.define_tensor(shape=(-1, -1), dtype=bz.float32), f.define_tensor(shape=(-1,), dtype=bz.int64)
        f.add_output(bz.ops.cross_entropy(x, t))
    x, t = inputs(6, 1001)
    (out,), launches = run_on_cpu(f, [x, t])
    assert launches[0][1] == "grid_rows" and "bz_head_" in engine.cuda_source(f, [x, t]).body
    wanted = -np.take_along_axis(log_softmax64(x.astype(np.float64)), t[:, None], -1).mean()
    np.testing.assert_allclose(out, wanted, rtol=2e-5)


def test_the_peeled_loops_text():
    arrays = inputs(2, 50257)
    text = engine.cuda_source(fusion("log_softmax"), arrays).body
    heads = re.findall(r"const int (bz_head_\w+) = bz_minimum\(\(int\)\(\(\(0ULL - reinterpret_cast<unsigned long "
                       r"long>\(&T0_\[\w+ \* T0_st0 \+ 0\]\)\) & 15\) / 4\), \(int\)\(T0_s1\)\);", text)
    assert len(heads) == 2  # the row's max and sum, then its output
    for head in heads:
        var = head.removeprefix("bz_head_")
        assert f"for (int {var} = 0 + lane; {var} < {head}; {var} += lanes32)" in text
        assert f"for (int {var}_4 = {head} + 4 * lane; {var}_4 < (T0_s1) - 3; {var}_4 += 4 * lanes32)" in text
        assert f"for (int {var} = {head} + ((T0_s1) - {head}) / 4 * 4 + lane; {var} < T0_s1;" in text
    assert "(cached_row == 0) && ((reinterpret_cast<unsigned long long>(&T0_[" in text
    output = rf"&(T[1-9]\d*)_\[\w+ \* \1_st0 \+ {heads[1]}\]\) & 15\) == 0\)"
    assert re.search(output, text)  # the output aligned after the same head as the input
    with config.scope(disable={"row_peel"}):
        assert "bz_head_" not in engine.cuda_source(fusion("log_softmax"), arrays).body


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_peeled_loops_compile_with_nvrtc():
    for name in ("log_softmax", "cross_entropy"):
        src = engine.cuda_source(fusion(name), inputs(2, 37))
        assert "bz_head_" in src.body
        assert nvrtc.compile_ptx(src.text, f"peel_{name}", "sm_90")
