"""Fusions with several reductions (a norm, a softmax of its rows, column sums for the weight
gradients): their CUDA compiles with NVRTC, and the CPU backend matches float64 NumPy."""

from __future__ import annotations

import pytest
from model_fusions import MODEL_FUSIONS, assert_close, build, inputs, reference

import braze as bz
from braze import engine
from braze.compile import nvrtc


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


def test_the_adam_update_is_one_launch_that_keeps_its_new_moments_in_registers() -> None:
    # m, v and p are given by different inputs whose extents the fusion requires equal: read as one
    # extent, their tasks share bounds and merge; p reads the new m and v from registers.
    with bz.Fusion() as f:  # over a flat buffer, as optimizers update parameters
        p, g, m, v = (f.define_tensor([-1]) for _ in range(4))
        m2, v2 = m * 0.9 + g * 0.1, bz.ops.abs(v) * 0.999 + g * g * 0.001
        for out in (m2, v2, p - 0.01 * m2 / (bz.ops.sqrt(v2) + 1e-8)):
            f.add_output(out)
    src = engine.cuda_source(f, [a.reshape(-1) for a in inputs("adam_update", 8, 16)])
    assert len(src.functions) == 1
    kept = list(dict.fromkeys(line.split("=")[0].split()[-1] for line in src.body.splitlines()
                              if line.strip().startswith("float T") and "_stored" in line.split("=")[0]))
    assert len(kept) == 2  # the new m and v (in each element of a vector too); the new p is read by nothing
    new_p = next(line for line in src.body.splitlines() if all(name in line for name in kept))
    for moment in kept:
        array = moment.split("_stored")[0] + "_["
        assert moment in new_p and array not in new_p.split("=", 1)[1]


def test_var_and_mean_of_the_same_rows_are_one_launch() -> None:
    # var and mean share one row task, which also carries the column sum of the same rows (the
    # inner-outer schedule): x is read once; the column task folds the blocks' partial sums.
    src = engine.cuda_source(build("var_and_mean"), inputs("var_and_mean", 8, 16))
    assert [s.kind for s in src.schedules] == ["inner_outer", "column_fold"]
