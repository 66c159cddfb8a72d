"""The CUDA of batch_norm's and group_norm's normalization at the suite's GPU definitions (no GPU
needed): one row loop over H * W a task index (rows of (n, c)), read and written 4 wide at the row
position with no division per element; NVRTC compiles it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.codegen.cuda import with_prelude
from braze.compile import nvrtc

# The normalization task of each case and the extents of its rows: (n, c) over the task, H * W the row.
TASKS = {"batch_norm": ("batch_norm_t2_", "bz_mul(T0_s0, T0_s1)"),
         "group_norm": ("group_norm_t2_", "bz_mul(T0_s0, 512)")}


def suite_source(name: str):
    """The CUDA of the case as the suite defines it at its GPU shape, for small inputs of one signature
    (extents are symbolic but for group_norm's channels; the index type is int32 at both sizes)."""
    case = next(c for c in CASES if c.name == name)
    shape = case.shape("gpu")
    arrays = case.inputs(np.random.default_rng(0), (2, shape[1], 5, 7), np.float32)
    # batch_norm's channels of 2 x 5 x 7 would take a task each (schedule.CHANNEL_ROW_LIMIT): its
    # statistics and then a pointwise normalization, as over longer channels, are what is read here.
    with config.scope(disable="channel_rows"):
        return engine.cuda_source(build_fusion(case, shape), arrays)


def function(source, prefix: str) -> str:
    parts = source.body.split('extern "C" __global__ void ')[1:]
    (found,) = [part for part in parts if part.split("\n", 1)[1].lstrip().startswith(prefix)]
    return found


@pytest.mark.parametrize("name", TASKS)
def test_normalization_rows_span_h_and_w(name):
    prefix, rows = TASKS[name]
    text = function(suite_source(name), prefix)
    assert f"task_end = {rows};" in text
    # The vector loop over whole vectors, its last elements one at a time after it (vector tails),
    # after a head up to the vectors' alignment (codegen/cuda_peel.py).
    vector_loops = re.findall(r"for \(int (j\w*) = bz_head_j\w+ \+ 4 \* lane; \1 < \(bz_mul\(T0_s2, T0_s3\)\) - 3;",
                              text)
    assert len(vector_loops) == 1, text
    (j,) = vector_loops
    assert re.search(rf"float4 \w+ = \*reinterpret_cast<const float4\*>\(&T0_\[[^\]]*\b{j}\b[^\]]*\]\)", text), text
    assert re.search(rf"\*reinterpret_cast<float4\*>\(&T\d+_\[[^\]]*\b{j}\b[^\]]*\]\) = ", text), text
    # No element index decomposed from the row position: H and W are read through it.
    assert not re.search(r"bz_(floordiv|remainder)\(j", text), text
    scalar_loops = re.findall(r"for \(int (j\w*) = 0 \+ lane; \1 < bz_mul\(T0_s2, T0_s3\);", text)
    assert len(scalar_loops) == 1, text  # the copy for rows that are not 16-byte aligned


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_normalization_rows_compile_with_nvrtc():
    bodies = [suite_source(name).body for name in TASKS]
    nvrtc.compile_ptx(with_prelude("\n".join(bodies)), "merged_rows", "sm_90")


def _column_sums(build) -> list[str]:
    """The task names of the CUDA kernel of column sums `build(f, x, y)` of x [8, 16, 32] and y [128, 32]."""
    import braze as bz

    with bz.Fusion(name="walks") as f:
        x, y = f.define_tensor([8, 16, 32]), f.define_tensor([128, 32])  # static, as a model region's
        for out in build(x, y):
            f.add_output(out)
    arrays = [np.ones((8, 16, 32), np.float32), np.ones((128, 32), np.float32)]
    return re.findall(r"\n(walks_\w+)\(", engine.cuda_source(f, arrays).body)


def test_column_sums_walking_the_rows_alike_merge_and_others_do_not():
    # Over the same [8, 16] rows: one task, one loop, split across blocks.
    same = _column_sums(lambda x, y: [x.sum([0, 1]), (x * x).sum([0, 1])])
    assert len(same) == 1 and "__" in same[0]
    # A layer norm's weight gradient over [8, 16] and a bias gradient over 128 rows: two walks, which
    # one task could not split across blocks; they stay two launches.
    apart = _column_sums(lambda x, y: [x.sum([0, 1]), y.sum(0)])
    assert len(apart) == 2 and not any("__" in name for name in apart)
