"""Fusions with several reductions (a norm, a softmax of its rows, column sums for the weight
gradients): their CUDA compiles with NVRTC, and the CPU backend matches float64 NumPy."""

from __future__ import annotations

import pytest
from model_fusions import MODEL_FUSIONS, assert_close, build, inputs, reference

import braze as bz
from braze import engine
from braze.runtime import nvrtc


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=str)
@pytest.mark.parametrize("name", MODEL_FUSIONS)
def test_cuda_of_several_reductions_compiles(name: str, dtype: bz.DType) -> None:
    """Each row value a later loop recomputes from memory reads every row input it needs as one
    16-byte load under a name of its own (`x + residual` reads two)."""
    arrays = [a.astype(dtype.numpy) for a in inputs(name, 8, 16)]
    src = engine.cuda_source(build(name, dtype), arrays)
    assert nvrtc.compile_ptx(src.text, name, "sm_90", ("-G",))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (8, 16), (37, 100), (64, 1024)])
@pytest.mark.parametrize("name", MODEL_FUSIONS)
def test_several_reductions_on_the_cpu(name: str, shape: tuple[int, int]) -> None:
    arrays = inputs(name, *shape)
    assert_close(build(name).execute(arrays, backend="llvm"), reference(name, arrays))
