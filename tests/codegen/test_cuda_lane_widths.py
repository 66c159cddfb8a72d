"""Lanes a short row gets, sized by the vectors of its loops (codegen/cuda_launch.py, lanes_for's
`per_lane`; codegen/cuda.py, CudaSource.lane_widths): RoPE's rows of 128 bfloat16 split at the
cat's edge into two loops of 64 take 8 lanes of one 16-byte vector each, not 16 of which half idle
in each loop. The generated CUDA is checked on the CPU (tests/cuda_on_cpu.py) against NumPy in
float64 at the lanes it is planned for, and compiled with NVRTC at the suite's shape."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cuda_on_cpu import available, planned_launches, run_on_cpu
from engine import test_split_fusions as split_fusions  # RoPE's fusion and inputs
from engine.test_split_fusions import rope_fusion

import braze as bz
from braze import engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.codegen import cuda
from braze.codegen.cuda_launch import balanced_lanes, lanes_for
from braze.compile import nvrtc


def rope_inputs(shape, dtype, seed: int = 0) -> list[np.ndarray]:
    return split_fusions.rope_inputs(shape, dtype, np.random.default_rng(seed))


def rope_reference(*inputs: np.ndarray) -> np.ndarray:
    return split_fusions.rope(*(a.astype(np.float64) for a in inputs))


@pytest.mark.parametrize("row, per_lane, lanes", [
    (64, 8, 8), (128, 8, 16), (16, 8, 2), (17, 8, 4), (8, 8, 1), (1, 8, 1), (256, 8, 32), (1000, 8, 32),
    (64, 4, 16), (1024, 8, 256),
])
def test_lanes_cover_a_row_with_one_vector_each(row, per_lane, lanes):
    assert lanes_for(row, 256, 0, per_lane) == lanes


@pytest.mark.parametrize("dtype, width", [(bz.bfloat16, 8), (bz.float32, 4)], ids=str)
def test_the_source_names_the_widest_vector_of_each_task(dtype, width):
    src = engine.cuda_source(rope_fusion(128, dtype), rope_inputs((2, 3, 4, 128), dtype))
    assert src.lane_widths == (width,)


def test_a_task_without_vectorized_loops_has_no_lane_width():
    with bz.Fusion() as f:  # a strided gather along the row: no 16-byte path
        x = f.define_tensor((-1, -1), dtype=bz.float32)
        f.add_output(bz.ops.sum(x[:, ::2], axes=[1]))
    src = engine.cuda_source(f, [np.ones((3, 40), np.float32)])
    assert src.lane_widths == (0,)


@pytest.mark.parametrize("dtype, lanes", [(bz.bfloat16, 8), (bz.float32, 16)], ids=str)
def test_rope_rows_of_128_keep_every_lane_busy_in_both_halves(dtype, lanes):
    """Halves of 64: eight 8-wide vectors (bfloat16) or sixteen 4-wide ones (float32), a lane each."""
    (launch,) = planned_launches(rope_fusion(128, dtype), rope_inputs((2, 16, 4, 128), dtype))
    assert launch.task.schedule.kind == "rows" and launch.scalars[0] == lanes


needs_gxx = pytest.mark.skipif(not available(), reason="needs g++")


@needs_gxx
@pytest.mark.parametrize("dtype", [bz.bfloat16, bz.float32], ids=str)
@pytest.mark.parametrize("shape, lanes", [
    ((2, 3, 5, 128), {bz.bfloat16: 8, bz.float32: 16}),  # 30 rows: the last block part empty
    ((1, 3, 2, 34), {bz.bfloat16: 4, bz.float32: 8}),  # halves of 17: the element path
    ((3, 1, 1, 2), {bz.bfloat16: 1, bz.float32: 1}),
    ((2, 5, 3, 16), {bz.bfloat16: 1, bz.float32: 2}),  # halves of one 8-wide vector
], ids=str)
def test_generated_rope_matches_numpy_at_its_lanes_on_the_cpu(dtype, shape, lanes):
    inputs = rope_inputs(shape, dtype, sum(shape))
    (got,), launches = run_on_cpu(rope_fusion(shape[3], dtype), inputs)
    assert [scalars[0] for *_, scalars in launches] == [lanes[dtype]]
    tolerance = 1e-5 if dtype == bz.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(got, np.float64), rope_reference(*inputs), rtol=tolerance, atol=tolerance)


@needs_gxx
def test_a_block_of_rows_at_eight_lanes_on_the_cpu_with_more_rows_than_the_gpu_holds():
    """256 threads of 8 lanes: 32 rows a block, each thread walking 4 rows (16 elements a row, two
    fast divisors set up first: LaunchPlanner._rows_a_thread), so a block for every 128 rows of 1000
    (the last one in part) where the GPU holds 6 at once (2 SMs, 3 blocks each): rows whose lanes
    combine nothing."""
    shape = (5, 8, 25, 128)
    inputs = rope_inputs(shape, bz.bfloat16, 3)
    (got,), launches = run_on_cpu(rope_fusion(128, bz.bfloat16), inputs)
    assert [(grid, scalars[0]) for _, _, grid, _, scalars in launches] == [(8, 8)]
    np.testing.assert_allclose(np.asarray(got, np.float64), rope_reference(*inputs), rtol=2e-2, atol=2e-2)


def test_the_suites_rope_gets_eight_lanes_a_row_and_16_byte_halves():
    case = next(c for c in CASES if c.name == "rope")
    fusion = build_fusion(case, case.shape("gpu"))
    inputs = rope_inputs((1, 16, 2, case.shape("gpu")[3]), bz.bfloat16)  # the suite's row: lanes depend on it alone
    (launch,) = planned_launches(fusion, inputs)
    assert launch.scalars[0] == 8
    body = engine.cuda_source(fusion, inputs).body
    halves = re.findall(r"for \(int (\w+) = (?:64 \+ )?8 \* lane; \1 < (\d+); \1 \+= 8 \* lanes32\)", body)
    assert [end for _, end in halves] == ["64", "128"]  # each of the 8 lanes one vector of each half


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_suites_rope_compiles_with_nvrtc_to_16_byte_accesses():
    src = engine.cuda_source(rope_fusion(128, bz.bfloat16), rope_inputs((1, 16, 2, 128), bz.bfloat16))
    ptx = nvrtc.compile_ptx(cuda.with_prelude(src.body), "rope", "sm_90").rstrip(b"\0").decode()
    assert "ld.global.nc.v4.u32" in ptx and "st.global.v4.u32" in ptx


# --- long rows that combine nothing: lanes that leave little of the last step idle ---------------
def row_scale() -> bz.Fusion:
    """A pointwise task over rows (a per-row scale broadcast along them), not one flat range."""
    with bz.Fusion(name="row_scale") as f:
        x, w = f.define_tensor([-1, -1]), f.define_tensor([-1, 1])
        f.add_output(x * w + 1.0)
    return f


@pytest.mark.parametrize("length, lanes", [(3136, 64), (4096, 256), (1100, 32), (1024, 256)])
def test_long_pointwise_rows_take_balanced_lanes(length, lanes):
    assert balanced_lanes(length, 4, 256) == lanes
    (launch,) = planned_launches(row_scale(), [np.zeros((6, length), np.float32), np.zeros((6, 1), np.float32)],
                                 sm_count=2)
    assert launch.scalars[0] == lanes


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("length", [1100, 3136])
def test_balanced_lanes_on_the_cpu(length):
    rng = np.random.default_rng(length)
    x, w = rng.standard_normal((5, length)).astype(np.float32), rng.standard_normal((5, 1)).astype(np.float32)
    with bz.config.scope(enable={"poison_outputs"}):
        (y,), launches = run_on_cpu(row_scale(), [x, w], sm_count=2)
    np.testing.assert_allclose(y, x.astype(np.float64) * w + 1.0, rtol=1e-6, atol=1e-6)
    assert [arguments[0] for *_, arguments in launches] == [balanced_lanes(length, 4, 256)]
