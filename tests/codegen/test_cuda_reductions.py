"""The CUDA schedules of reductions beyond one row a block (no GPU needed): which schedule each
kind of reduction takes (cuda_plan.TaskSchedule), what the generated text does with blocks and the
workspace, and NVRTC compiling every schedule's kernels for several shapes and dtypes."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.compile import nvrtc

_NUMPY = {bz.float32: np.float32, bz.float64: np.float64, bz.float16: np.float16, bz.bfloat16: ml_dtypes.bfloat16,
          bz.int32: np.int32, bz.bool_: np.bool_}


def source(build, *inputs: np.ndarray, name: str = "fusion") -> cuda.CudaSource:
    with bz.Fusion(name=name) as f:
        for out in build(f):
            f.add_output(out)
    return engine.cuda_source(f, list(inputs))


def kinds(src: cuda.CudaSource) -> list[str]:
    return [s.kind for s in src.schedules]


def tensor(f: bz.Fusion, ndim: int, dtype=bz.float32):
    return f.define_tensor([-1] * ndim, dtype=dtype)


def var_and_mean(f: bz.Fusion) -> list:
    x = tensor(f, 2)
    return [bz.ops.var(x, axes=[0]), bz.ops.mean(x, axes=[0])]


# (name, fusion builder over one input of `ndim` dims, ndim, the schedule of each task)
CASES = [
    ("column_sum", lambda f, d: [bz.ops.sum(tensor(f, 2, d), axes=[0])], 2, ["columns"]),
    ("column_max", lambda f, d: [bz.ops.max(tensor(f, 2, d), axes=[0])], 2, ["columns"]),
    ("middle_sum", lambda f, d: [bz.ops.sum(tensor(f, 3, d), axes=[1])], 3, ["columns"]),
    ("outer_two_sum", lambda f, d: [bz.ops.sum(tensor(f, 3, d), axes=[0, 1])], 3, ["columns"]),
    ("full_sum", lambda f, d: [bz.ops.sum(tensor(f, 2, d))], 2, ["flat"]),
    ("full_sum_3d", lambda f, d: [bz.ops.sum(tensor(f, 3, d))], 3, ["flat"]),
    ("full_sum_1d", lambda f, d: [bz.ops.sum(tensor(f, 1, d))], 1, ["flat"]),
    ("full_max", lambda f, d: [bz.ops.max(tensor(f, 2, d))], 2, ["flat"]),
    ("full_mean", lambda f, d: [bz.ops.mean(tensor(f, 2, d))], 2, ["flat"]),
    ("row_sum", lambda f, d: [bz.ops.sum(tensor(f, 2, d), axes=[1])], 2, ["rows"]),
    ("channel_sum", lambda f, d: [bz.ops.sum(tensor(f, 4, d), axes=[0, 2, 3])], 4, ["rows"]),
    ("channel_var", lambda f, d: [bz.ops.var(tensor(f, 4, d), axes=[0, 2, 3])], 4, ["rows"]),
    ("row_var", lambda f, d: [bz.ops.var(tensor(f, 2, d), axes=[1])], 2, ["rows"]),
    ("column_var", lambda f, d: [bz.ops.var(tensor(f, 2, d), axes=[0])], 2, ["columns"]),
    ("full_var", lambda f, d: [bz.ops.var(tensor(f, 3, d), correction=1)], 3, ["flat"]),
    ("row_argmax", lambda f, d: [bz.ops.argmax(tensor(f, 2, d), 1)], 2, ["rows"]),
    ("column_argmin", lambda f, d: [bz.ops.argmin(tensor(f, 2, d), 0)], 2, ["rows"]),
]
FLOATS = [bz.float32, bz.float64, bz.float16, bz.bfloat16]


def _inputs(ndim: int, dtype) -> np.ndarray:
    return np.ones((3,) * ndim, _NUMPY[dtype])


@pytest.mark.parametrize("name, build, ndim, expected", CASES, ids=[c[0] for c in CASES])
def test_each_reduction_takes_its_schedule(name, build, ndim, expected):
    src = source(lambda f: build(f, bz.float32), _inputs(ndim, bz.float32))
    assert kinds(src) == expected


def test_column_sum_owns_a_strip_of_columns_and_splits_its_rows():
    src = source(lambda f: [bz.ops.sum(tensor(f, 2), axes=[0])], _inputs(2, bz.float32))
    (schedule,) = src.schedules
    assert schedule.splittable and len(schedule.accumulators) == 1
    body = src.body
    # Neighbouring threads on neighbouring columns; row groups combine in a tree, then the splits
    # meet in the workspace, read back in split order by the last block of the strip.
    assert "const int row = task_begin + strip * cols32 + (threadIdx.x & (cols32 - 1));" in body
    assert "bz_column_reduce<256>(acc2, cols32, BzReduceAdd())" in body
    assert "bz_last_of(bz_finished + strip, cached_row)" in body
    assert "for (int b = p1 - task_begin; b < cached_row * columns; b += 8 * (columns))" in body
    assert "atomicAdd" not in body


@pytest.mark.parametrize("axes, ndim", [([1], 2), ([0, 2, 3], 4), ([0, 2], 3)])
def test_a_row_of_one_loop_nest_may_be_split_across_blocks(axes, ndim):
    # Few long rows (a sum over axis 1 of [4, 16M]) or a row over axes apart (batch_norm's
    # statistics per channel): the launch may give each row several blocks walking its nest flat.
    src = source(lambda f: [bz.ops.sum(tensor(f, ndim), axes=axes)], _inputs(ndim, bz.float32))
    (schedule,) = src.schedules
    assert schedule.kind == "rows" and schedule.splittable and len(schedule.accumulators) == 1
    assert "if (lanes == 0) {" in src.body and "bz_last_of(bz_finished + row_local, cached_row)" in src.body


def test_a_channel_variance_walks_its_nest_flat_over_the_lanes_in_one_pass():
    # var over (0, 2, 3): one pass of shifted sums (cuda_variance) over a nest of three loops. The
    # lanes share the nest as one flat range (the innermost loop on neighbouring lanes), not only its
    # outer loop over the batch, which leaves most lanes idle for a small batch.
    src = source(lambda f: [bz.ops.var(tensor(f, 4), axes=[0, 2, 3])], _inputs(4, bz.float32))
    assert src.lane_plans[0].coalesces and len(src.lane_plans[0].loops) == 1
    body = src.body[src.body.index("const int lanes32"):]  # the row path (the split path comes first)
    assert body.count("= bz_trips(bz_f_r") == 2  # four elements at a time, or one
    walk = body[body.rindex("= bz_trips(bz_f_"):]
    walk = walk[:walk.index("bz_lane_")]  # up to the lanes' combine
    assert "/" not in walk and "%" not in walk  # digits carried, no division per element


def test_the_launch_sizes_lanes_by_a_flat_nests_trip_count():
    from braze.codegen.cuda_plan import plan_lanes, plan_schedule, schedule_bounds
    from braze.kir.printer import expr as expr_text

    with bz.Fusion() as f:
        f.add_output(bz.ops.var(tensor(f, 4), axes=[0, 2, 3]))
    key = engine.signature(f, engine.bind_inputs(f, [_inputs(4, bz.float32)]))
    _, kernel, _ = engine.plan_kernel(f, key, views_on_host=False, gpu=True)
    (task,) = kernel.tasks
    _, _, *extents = schedule_bounds(task, plan_schedule(task, plan_lanes(task)).kind)
    # Each of the two passes: batch * height * width, not the batch alone.
    assert len(extents) == 2 and all(expr_text(e).count("mul(") == 2 for e in extents), [expr_text(e) for e in extents]


def test_layer_norm_backward_sums_its_weight_gradient_by_columns():
    # dweight = sum over rows of dy * xhat reads mean and rstd per row (the same for every column):
    # those reads do not make the rows the coalescing axis; dy and x are read along the columns.
    def build(f):
        dy, x = tensor(f, 2), tensor(f, 2)
        mean, rstd = f.define_tensor([-1, 1]), f.define_tensor([-1, 1])
        return [bz.ops.sum(dy * ((x - mean) * rstd), axes=[0]), bz.ops.sum(dy, axes=[0])]

    grid = np.ones((4, 8), np.float32)
    src = source(build, grid, grid, np.ones((4, 1), np.float32), np.ones((4, 1), np.float32))
    # Both column sums in one task, and one pass: a loop with two accumulators, split across blocks.
    assert kinds(src) == ["columns"] and src.schedules[0].splittable and len(src.schedules[0].accumulators) == 2


@pytest.mark.parametrize("op, largest", [(bz.ops.argmax, "true"), (bz.ops.argmin, "false")])
def test_argmax_rows_spread_over_lanes_and_combine_value_index_pairs(op, largest):
    src = source(lambda f: [op(tensor(f, 2), 1)], _inputs(2, bz.float32))
    assert src.lane_plans[0].loops and src.lane_plans[0].coalesces
    assert f"bz_pair_lane_reduce(best2, at3, lanes32, BzArgCombine<{largest}>());" in src.body
    assert "+= lanes32) {" in src.body


def test_softmax_rows_are_not_split():
    src = source(lambda f: [bz.ops.softmax(tensor(f, 2), -1)], _inputs(2, bz.float32))
    assert not src.schedules[0].splittable and "lanes == 0" not in src.body


def test_var_mean_over_axis_0_takes_columns_split_over_rows_in_one_pass():
    # One pass of shifted sums (cuda_variance): the splits meet once. The mean output's task joins
    # the var's (the same columns), its sum the var's own sum of x (passes/simplify.py reuses it).
    src = source(lambda f: var_and_mean(f), _inputs(2, bz.float32))
    assert kinds(src) == ["columns"] and src.schedules[0].splittable and len(src.schedules[0].accumulators) == 3
    # One pass on each path: the vector path (vectors, or its columns an element at a time) and one
    # column a thread.
    assert src.body.count("+= lanes32) {") == 3
    assert "bz_column_reduce" in src.body and "bz_last_of" in src.body


def test_full_sum_walks_the_nest_as_one_flat_range_without_division_per_element():
    src = source(lambda f: [bz.ops.sum(tensor(f, 3))], _inputs(3, bz.float32))
    # Its steps counted before the loop (bz_trips), so the unrolled copies' loads issue together.
    header = "bz_left = bz_trips(bz_f, (unsigned)(bz_hi), blockDim.x); bz_left > 0; --bz_left, bz_f += blockDim.x) {"
    loop = src.body[src.body.index(header) + len(header):src.body.index("bz_lane_reduce")]
    assert "/" not in loop and "%" not in loop
    assert "bz_last_of(bz_finished, gridDim.x)" in src.body


def test_cross_entropy_mean_runs_its_rows_over_lanes_and_meets_across_blocks():
    def build(f):
        return [bz.ops.cross_entropy(tensor(f, 2), f.define_tensor([-1], dtype=bz.int64))]

    src = source(build, np.ones((4, 64), np.float32), np.zeros(4, np.int64))
    assert kinds(src) == ["grid_rows"] and src.lane_plans[0].coalesces
    body = src.body
    assert "row0 += (int)gridDim.x * rows_per_block" in body
    assert "bz_pair_lane_reduce(acc5, acc7, lanes32, BzOnlineCombine())" in body
    assert re.search(r"if \(active\) acc1 = ", body)  # a clamped row past the end adds nothing
    assert "acc1 = lane == 0 ? acc1 : 0x0.0p+0f;" in body


def _ce(reduction):
    return lambda f: [bz.ops.cross_entropy(tensor(f, 2), f.define_tensor([-1], dtype=bz.int64), reduction=reduction)]


_LOGITS, _TARGET = np.ones((4, 64), np.float32), np.zeros(4, np.int64)
ONE_PASS = [("ce_none", _ce("none"), (_LOGITS, _TARGET)), ("ce_mean", _ce("mean"), (_LOGITS, _TARGET)),
            ("log_softmax", lambda f: [bz.ops.log_softmax(tensor(f, 2), -1)], (_LOGITS,)),
            ("log_softmax_bf16", lambda f: [bz.ops.log_softmax(tensor(f, 2, bz.bfloat16), -1)],
             (_LOGITS.astype(ml_dtypes.bfloat16),))]


@pytest.mark.parametrize("name, build, inputs", ONE_PASS, ids=[c[0] for c in ONE_PASS])
def test_the_row_maximum_and_sum_of_exponentials_take_one_pass(name, build, inputs):
    body = source(build, *inputs).body
    # One loop reads the row for both (the max loop and the sum loop were two), then the lanes
    # combine (max, sum) pairs; no loop is left that sums exp(x - max) alone.
    assert body.count("bz_online_add(") >= 5 and "BzOnlineCombine()" in body  # 4 vector lanes + scalar
    assert "BzReduceMax" not in body and "expf" not in body


def test_softmax_keeps_two_passes_to_reuse_its_exponentials():
    src = source(lambda f: [bz.ops.softmax(tensor(f, 2), -1)], np.ones((4, 64), np.float32))
    assert "bz_online" not in src.body and "BzReduceMax" in src.body


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_cross_entropy_reads_the_picked_class_without_a_pass_over_the_row(reduction):
    body = source(_ce(reduction), _LOGITS, _TARGET).body
    # Two loops were left of three: the online max and sum, and the picked class's where-sum. The
    # online loop's vector path (where the rows take one) starts with a head and ends in a tail of
    # single elements (codegen/cuda_peel.py).
    tails = len(re.findall(r"for \(int \w+ = (bz_head_\w+) \+ \(\(\w+\) - \1\) / \d \* \d \+ lane;", body))
    heads = len(re.findall(r"for \(int (\w+) = 0 \+ lane; \1 < bz_head_\1;", body))
    assert tails == heads and body.count("#pragma unroll 4") == 1 + tails + heads
    assert "T0_[p1 * T0_st0 + ((int)(T1_[p1]))]" in body or "T0_[r2 * T0_st0 + ((int)(T1_[r2]))]" in body
    assert "(T1_[p1] >= ((long long)(0)))" in body or "(T1_[r2] >= ((long long)(0)))" in body


def test_batched_cross_entropy_takes_its_rows_from_both_outer_loops():
    def build(f):
        return [bz.ops.cross_entropy(tensor(f, 3), f.define_tensor([-1, -1], dtype=bz.int64))]

    src = source(build, np.ones((2, 3, 64), np.float32), np.zeros((2, 3), np.int64))
    (schedule,) = src.schedules
    assert schedule.kind == "grid_rows" and schedule.row_levels == 2
    # Rows are the batch and token loops flattened: their indices come from the row, once per row.
    assert "task_end = bz_n0 * bz_n1;" in src.body and "bz_row /= bz_n1;" in src.body
    assert "BzOnlineCombine()" in src.body


def test_a_load_under_a_condition_stays_out_of_the_16_byte_loop():
    # x is read only in rows where b > 0 (`where` evaluates one side), beside a load every iteration
    # makes (b's): the 16-byte path would read every row of x.
    def build(f):
        x, b = tensor(f, 2), tensor(f, 1)
        return [bz.ops.sum(bz.ops.where(b.reshape((-1, 1)) > 0.0, x, 0.0), axes=[1])]

    src = source(build, np.ones((4, 64), np.float32), np.ones(4, np.float32))
    assert src.lane_plans[0].coalesces and "float4" not in src.body


def _grid_sources() -> list[cuda.CudaSource]:
    sources = []
    for name, build, ndim, _ in CASES:
        for dtype in FLOATS:
            sources.append(source(lambda f, b=build, d=dtype: b(f, d), _inputs(ndim, dtype),
                                  name=f"{name}_{dtype.name}"))
    sources.append(source(lambda f: [bz.ops.sum(tensor(f, 2, bz.int32), axes=[0])], _inputs(2, bz.int32),
                          name="column_sum_int32"))
    sources.append(source(lambda f: [bz.ops.any(tensor(f, 2, bz.bool_), axes=[0])], _inputs(2, bz.bool_),
                          name="column_any"))
    sources.append(source(lambda f: [bz.ops.any(tensor(f, 2, bz.bool_))], _inputs(2, bz.bool_), name="full_any"))
    sources.append(source(lambda f: var_and_mean(f), _inputs(2, bz.float32),
                          name="var_mean_0"))
    for dtype in (bz.float32, bz.bfloat16):
        for reduction in ("mean", "sum", "none"):
            sources.append(source(
                lambda f, d=dtype, r=reduction: [bz.ops.cross_entropy(tensor(f, 2, d),
                                                                      f.define_tensor([-1], dtype=bz.int64), r)],
                np.ones((4, 64), _NUMPY[dtype]), np.zeros(4, np.int64), name=f"ce_{reduction}_{dtype.name}"))
    sources.append(source(lambda f: [bz.ops.cross_entropy(tensor(f, 3), f.define_tensor([-1, -1], dtype=bz.int64))],
                          np.ones((2, 3, 8), np.float32), np.zeros((2, 3), np.int64), name="ce_batched"))
    return sources


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_every_schedule_compiles_with_nvrtc():
    sources = _grid_sources()
    assert {"columns", "flat", "grid_rows"} <= {k for s in sources for k in kinds(s)}
    # The column tasks' vector paths among them (codegen/cuda_column_vectors.py), of every float dtype.
    loaded = {vector for s in sources if "columns" in kinds(s)
              for vector in re.findall(r"reinterpret_cast<const (\w+)\*>", s.body)}
    assert {"float4", "bz_double4", "bz_half8", "bz_bfloat168"} <= loaded
    text = cuda.with_prelude("\n".join(s.body for s in sources))
    assert nvrtc.compile_ptx(text, "grid_schedules", "sm_90", ("-G",))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_a_column_sum_compiles_optimized_for_a_smaller_block():
    from braze.compile.compiled_kernel import CompileParams
    from braze.compile.cuda_kernel import CudaCompiledKernel

    with bz.Fusion(name="narrow") as f:
        f.add_output(bz.ops.sum(tensor(f, 2), axes=[0]))
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [_inputs(2, bz.float32)])),
                                      views_on_host=False)
    compiled = CudaCompiledKernel(kernel, CompileParams(block_size=128, max_registers=64, arch="sm_90"))
    assert "bz_column_reduce<128>" in compiled.source
    assert nvrtc.compile_cubin(compiled.source, "narrow", "sm_90")[:4] == b"\x7fELF"


def test_a_masked_softmax_caches_and_vectorizes_the_scores_under_its_where():
    # where(mask, x * scale, -inf): the scores' index follows from the row and column alone, so
    # the load is in bounds whichever branch runs; it may be read 16 bytes at a time and kept.
    def build(f):
        x, mask = tensor(f, 3, bz.bfloat16), f.define_tensor([1, -1, -1], dtype=bz.bool_)
        return [bz.ops.softmax(bz.ops.where(mask, bz.ops.cast(x, bz.float32) * 0.125, float("-inf")), -1)]

    src = source(build, np.ones((2, 8, 8), ml_dtypes.bfloat16), np.ones((1, 8, 8), bool))
    assert src.register_rows[0] > 0
    assert "bz_bool4" in src.body and "bz_bfloat164" in src.body


def test_a_reshape_of_a_dense_input_reads_it_by_flat_index():
    # group_norm: x [N, C, H, W] reshaped to [N, G, C/G * H * W]; a dense input's element sits at
    # its flat index, so the statistics' loops divide nothing per element.
    def build(f):
        x = f.define_tensor([-1, 64, -1, -1])
        return [bz.ops.mean(bz.ops.reshape(x, [x.shape[0], 8, -1]), axes=[2])]

    dense = source(build, np.ones((2, 64, 5, 7), np.float32))
    loop = dense.body[dense.body.index("+= lanes32) {"):]
    loop = loop[:loop.index("}")]
    assert "floordiv" not in loop and "remainder" not in loop
    strided = source(build, np.ones((2, 64, 5, 14), np.float32)[..., ::2])  # not dense: divides, by the
    loop = strided.body[strided.body.index("+= lanes32) {"):]  # extents' divisors (codegen/cuda_invariants.py)
    assert re.search(r"bz_fast_floordiv\(\w+, bz_div\d\)", loop[:loop.index("}")])


def test_batch_norm_statistics_take_two_flat_passes_in_one_task():
    # mean and var over (0, 2, 3), two outputs: one task; the mean's nest and the var's own mean
    # nest merge level by level into one nest (still walked flat by the lanes), then the
    # deviations' pass.
    src = source(lambda f: [bz.ops.mean(x := tensor(f, 4), axes=[0, 2, 3]), bz.ops.var(x, axes=[0, 2, 3])],
                 _inputs(4, bz.float32))
    assert kinds(src) == ["rows"]
    assert src.body.count("= bz_trips(bz_f_") == 2 and not re.search(r"for \(int \w+ = 0 \+ lane;", src.body)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_a_rows_accumulators_combine_over_the_block_between_one_pair_of_barriers():
    # var_mean over long rows: the sum, and the shifted sums d1, d2 of the split path, once each;
    # one bz_lane_reduce each would cost two barriers apiece.
    def build(f):
        x = tensor(f, 2)
        return [bz.ops.var(x, axes=[1]), bz.ops.mean(x, axes=[1])]

    joint = source(build, np.ones((4, 4096), np.float32), name="joint")
    assert "bz_lane_slots<3>()" in joint.body and "bz_lane_put(acc5_d2, (int)blockDim.x" in joint.body
    assert nvrtc.compile_ptx(cuda.with_prelude(joint.body), "joint", "sm_90", ())
    with bz.config.scope(disable={"joint_lane_reduce"}):
        apart = source(build, np.ones((4, 4096), np.float32), name="apart")
    assert "bz_lane_slots" not in apart.body and "acc5_d2 = bz_lane_reduce(" in apart.body


def test_a_scan_over_the_rows_a_softmax_reads_stays_a_task_of_its_own():
    # A scan's task has one loop (codegen/cuda_scan.py); merged with the softmax's, neither would keep
    # its lanes.
    def build(f):
        x = tensor(f, 2)
        return [bz.ops.softmax(x, 1), bz.ops.cumsum(x, 1)]

    src = source(build, np.ones((8, 1024), np.float32), name="mix")
    softmax, scan = src.body.split('extern "C"')[1:3]
    assert kinds(src) == ["rows", "rows"] and "bz_lane_reduce(" in softmax and "bz_lane_scan" not in softmax
    assert "bz_lane_scan(" in scan and "bz_lane_reduce(" not in scan
