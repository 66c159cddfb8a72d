"""Variances in one pass and the schedules of group_norm and batch_norm on a GPU (no GPU needed):
the Kernel IR rewrite of braze/codegen/cuda_variance.py, which path of a task reads a row how many
times, 16-byte accesses of flattened and nested rows, the launch each shape gets
(codegen/cuda_launch.py's LaunchPlanner with a made-up GPU), and NVRTC compiling every path."""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

import cuda_on_cpu
import numpy as np
import pytest

import braze as bz
from braze import dtypes as dt
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_launch import LaunchPlanner, task_launches
from braze.codegen.cuda_plan import nest_vector_accesses, perfect_nest, vector_accesses
from braze.codegen.cuda_variance import one_pass_task, one_pass_variance
from braze.compile import nvrtc
from braze.kir import nodes as k
from braze.runtime.fusion_runtime import FusionRuntime

GROUPS = 32


def fusion(build, name: str = "fusion") -> bz.Fusion:
    with bz.Fusion(name=name) as f:
        for out in build(f):
            f.add_output(out)
    return f


def kernel_of(f: bz.Fusion, *inputs: np.ndarray) -> k.Kernel:
    key = engine.signature(f, engine.bind_inputs(f, list(inputs)))
    return engine.plan_kernel(f, key, views_on_host=False, gpu=True)[1]


def group_norm(channels: int, groups: int = GROUPS, dtype=bz.float32):
    def build(f):
        x = f.define_tensor([-1, channels, -1, -1], dtype=dtype)
        w, b = f.define_tensor([-1], dtype=dtype), f.define_tensor([-1], dtype=dtype)
        grouped = bz.ops.reshape(x, [x.shape[0], groups, -1])
        y = bz.ops.reshape(bz.ops.layer_norm(grouped, eps=1e-5), x.shape)
        return [y * w[:, None, None] + b[:, None, None]]
    return build


def batch_norm(count: int, dtype=bz.float32):
    def build(f):
        x = f.define_tensor([-1] * 4, dtype=dtype)
        w, b, running_mean, running_var = (f.define_tensor([-1], dtype=dtype) for _ in range(4))
        mean, var = x.mean((0, 2, 3), keepdim=True), x.var((0, 2, 3), keepdim=True)
        y = (x - mean) * bz.ops.rsqrt(var + 1e-5) * w[:, None, None] + b[:, None, None]
        return [y, 0.9 * running_mean + 0.1 * mean.reshape([-1]),
                0.9 * running_var + var.reshape([-1]) * (0.1 * count / (count - 1))]
    return build


def group_norm_inputs(shape, dtype=np.float32):
    return np.zeros(shape, dtype), np.zeros(shape[1], dtype), np.zeros(shape[1], dtype)


def batch_norm_inputs(shape):
    return (np.zeros(shape, np.float32),) + tuple(np.zeros(shape[1], np.float32) for _ in range(4))


def var_rows(f):
    x = f.define_tensor([-1, -1])
    return [bz.ops.var(x, [1])]


def functions(src) -> list[str]:
    """The text of each `__global__` function of a generated source."""
    return src.body.split('extern "C" __global__')[1:]


def first_task(src) -> str:
    """The text of the first task's functions: its row function and its function for split rows."""
    texts = functions(src)
    return texts[0] + "".join(t for t in texts[1:] if f"{src.functions[0]}_split(" in t)


def loops(task: k.Task) -> list[k.For]:
    return [s for s in task.body if isinstance(s, k.For)]


# --- the Kernel IR rewrite ----------------------------------------------------------------------
def test_a_row_variance_becomes_one_pass_of_float64_shifted_sums():
    (task,) = kernel_of(fusion(var_rows), np.zeros((4, 8), np.float32)).tasks
    assert len(loops(task)) == 2
    one_pass = one_pass_task(task)
    (loop,) = loops(one_pass)
    folds = [s for s in loop.body if isinstance(s, k.Assign)]
    # The mean's sum, and the shifted elements' sum and sum of squares in float64.
    assert [f.var.dtype for f in folds] == [dt.float32, dt.float64, dt.float64]
    lets = {s.var.name: s.value for s in one_pass.body if isinstance(s, k.Let)}
    shift = next(v for name, v in lets.items() if name.endswith("_shift"))
    # The row's first element, read only when the row has one.
    assert isinstance(shift, k.Ternary) and shift.op == "where" and isinstance(shift.b, k.Load)
    assert shift.b.indices[1] == k.Const(0, shift.b.indices[1].dtype)
    # The statements reading the first pass's results (the mean) come after the joined loop.
    assert one_pass.body.index(loop) < next(n for n, s in enumerate(one_pass.body)
                                            if isinstance(s, k.Let) and s.var.name.startswith("mean"))


def test_a_mean_read_by_another_output_joins_the_same_pass():
    def build(f):
        x = f.define_tensor([-1, -1])
        return [bz.ops.var(x, [1], correction=1), bz.ops.mean(x, [1])]

    (task,) = kernel_of(fusion(build), np.zeros((4, 8), np.float32)).tasks
    (loop,) = loops(one_pass_task(task))
    # one sum of x (the mean output's is the var's own: passes/simplify.py), d1, d2
    assert len([s for s in loop.body if isinstance(s, k.Assign)]) == 3
    assert len([s for s in one_pass_task(task).body if isinstance(s, k.Store)]) == 2


def test_group_norm_statistics_are_one_pass_through_the_reshape():
    kernel = kernel_of(fusion(group_norm(64)), *group_norm_inputs((2, 64, 5, 7)))
    stats = kernel.tasks[0]
    assert len(loops(stats)) == 2 and len(loops(one_pass_task(stats))) == 1


def _two_loops(second_value) -> tuple[k.Stmt, ...]:
    """s = sum(x[i]); m = s / n; q = sum(second_value(x[j], m)) over one row of x."""
    x = k.ArrayParam("x", dt.float32, 1, (1,))
    i, j = k.Var("i", dt.int32), k.Var("j", dt.int32)
    s, m, q = k.Var("s", dt.float32), k.Var("m", dt.float32), k.Var("q", dt.float32)
    n = k.Const(8, dt.int32)
    zero, count = k.Const(0, dt.int32), k.Const(8.0, dt.float32)
    return (k.Let(s, k.Const(0.0, dt.float32)),
            k.For(i, zero, n, (k.Assign(s, k.Binary("reduce_add", s, k.Load(x, (i,)), dt.float32)),)),
            k.Let(m, k.Binary("truediv", s, count, dt.float32)), k.Let(q, k.Const(0.0, dt.float32)),
            k.For(j, zero, n, (k.Assign(q, k.Binary("reduce_add", q, second_value(k.Load(x, (j,)), m),
                                                    dt.float32)),)))


def _square(e: k.Expr) -> k.Expr:
    return k.Binary("mul", e, e, dt.float32)


@pytest.mark.parametrize("second, rewritten", [
    (lambda x, m: _square(k.Binary("sub", x, m, dt.float32)), True),
    # Squared deviations of any element from any value of the row: sum((g - m)^2) for any m.
    (lambda x, m: _square(k.Binary("sub", k.Unary("exp", x, dt.float32), m, dt.float32)), True),
    (lambda x, m: _square(k.Binary("sub", x, k.Const(1.0, dt.float32), dt.float32)), True),
    (lambda x, m: k.Binary("mul", _square(k.Binary("sub", x, m, dt.float32)), k.Binary("sub", x, m, dt.float32),
                           dt.float32), False),  # cubes
    (lambda x, m: _square(k.Binary("sub", x, k.Cast(k.Var("j", dt.int32), dt.float32), dt.float32)), False),
], ids=["deviations_from_the_mean", "of_another_element", "from_a_constant", "cubes", "from_a_value_along_the_row"])
def test_only_sums_of_squared_deviations_from_a_row_value_are_rewritten(second, rewritten):
    assert (one_pass_variance(_two_loops(second)) is not None) == rewritten


def test_deviations_from_a_sum_the_same_loop_folds_are_left_alone():
    # q = sum((x - a)^2) while a = sum(x) grows along the row: a is no value of the row.
    stmts = list(_two_loops(lambda x, m: _square(k.Binary("sub", x, m, dt.float32))))
    a = k.Var("a", dt.float32)
    second = stmts[-1]
    (fold,) = second.body
    load = fold.value.b.a.a  # x[j] in reduce_add(q, (x[j] - m) * (x[j] - m))
    running = k.Assign(a, k.Binary("reduce_add", a, load, dt.float32))
    deviation = k.Assign(fold.var, k.Binary("reduce_add", fold.var, _square(k.Binary("sub", load, a, dt.float32)),
                                            dt.float32))
    stmts[-1] = dataclasses.replace(second, body=(running, deviation))
    stmts.insert(-1, k.Let(a, k.Const(0.0, dt.float32)))
    assert one_pass_variance(tuple(stmts)) is None


# --- which path reads a row how often -------------------------------------------------------------
def _split_path(body: str) -> str:
    return body[body.index("if (lanes == 0) {"):body.index("return;\n", body.index("if (lanes == 0) {"))]


def test_a_row_variance_splits_in_one_pass_and_keeps_two_cached_passes_for_rows_that_fit():
    src = engine.cuda_source(fusion(var_rows), [np.zeros((4, 64), np.float32)])
    (sched,) = src.schedules
    assert sched.kind == "rows" and sched.splittable and sched.split_reads_once
    assert src.row_caches[0] and len(src.lane_plans[0].loops) == 2  # the row path: two passes, cached
    split = _split_path(src.body)
    # One walk over the row, 16 bytes at a time where the row allows, else an element at a time.
    assert split.count("bz_left = bz_trips(bz_f, (unsigned)(bz_hi),") == 2 and split.count("const float4 v0_r") == 1
    assert split.count("(double)") == 5  # four elements of a vector, and one of the element-wise walk


def test_group_norm_takes_one_pass_for_its_statistics_and_a_pointwise_one_to_normalize():
    src = engine.cuda_source(fusion(group_norm(512)), group_norm_inputs((2, 512, 8, 8)))
    stats, normalize = src.schedules
    # The two passes read the row through one hoisted start (passes/hoist.py), so a row cache joins
    # them, as for a plain row variance: split across blocks, the statistics take one pass.
    assert stats.kind == "rows" and stats.splittable and stats.split_reads_once
    assert src.row_caches[0] and len(src.lane_plans[0].loops) == 2
    # The normalization is pointwise: its rows are the innermost axis, x read through the reshape's
    # flat offset 16 bytes at a time.
    assert normalize.kind == "rows" and not normalize.splittable and len(src.lane_plans[1].loops) == 1
    second = functions(src)[1]
    assert "const float4 v0_j" in second and "bz_add(inv" in second


def test_batch_norm_statistics_take_one_pass_on_both_paths_over_16_byte_runs():
    with bz.config.scope(disable="channel_rows"):  # statistics of their own, as over longer channels
        src = engine.cuda_source(fusion(batch_norm(32 * 56 * 56)), batch_norm_inputs((2, 8, 56, 56)))
    stats = src.schedules[0]
    assert stats.kind == "rows" and stats.splittable and not stats.split_reads_once
    assert not src.row_caches[0] and len(src.lane_plans[0].loops) == 1
    first = first_task(src)
    # Both paths walk the nest 4 elements a thread at a time where the innermost extent allows and
    # every run of it starts aligned: the first element and one step of each outer index. H and W,
    # contiguous in the dense input, are one loop over H * W: no step of H is tested or walked.
    assert first.count("% 4 == 0)") == 2 and first.count("const float4 v0_r") == 2
    assert first.count("bz_add(0, 1) * T0_st0") == 2 and "bz_add(0, 1) * T0_st2" not in first
    assert "bz_mul(T0_s2, T0_s3)" in first


def test_nests_of_2_byte_elements_walk_eight_at_a_time():
    bf16 = __import__("ml_dtypes").bfloat16
    inputs = [a.astype(bf16) for a in batch_norm_inputs((2, 8, 56, 56))]
    with bz.config.scope(disable="channel_rows"):  # statistics of their own, as over longer channels
        first = first_task(engine.cuda_source(fusion(batch_norm(2 * 56 * 56, bz.bfloat16)), inputs))
    # The split path and the lanes' walk: eight elements (16 bytes) a thread where the innermost
    # extent is a multiple of 8 and the runs start 16-byte aligned, else one at a time.
    assert first.count("% 8 == 0)") == 2 and first.count("const bz_bfloat168 v0_r") == 2
    assert first.count("& 15) == 0)") >= 2 and first.count("8 * blockDim.x") >= 1 and "8 * lanes32" in first


@pytest.mark.parametrize("build, shape, kind", [
    (lambda f: [bz.ops.var(f.define_tensor([-1, -1]), [0])], (3, 5), "columns"),
    (lambda f: [bz.ops.var(f.define_tensor([-1, -1]))], (3, 5), "flat"),
    (lambda f: [bz.ops.var(f.define_tensor([-1]), correction=1)], (5,), "flat"),
], ids=["columns", "full", "full_1d"])
def test_variances_over_columns_and_the_whole_tensor_split_across_blocks(build, shape, kind):
    # Two passes could not split: the blocks would have to meet twice. One pass can.
    (sched,) = engine.cuda_source(fusion(build), [np.zeros(shape, np.float32)]).schedules
    assert sched.kind == kind and sched.splittable == (kind == "columns")
    assert [acc.dtype for acc, _ in sched.accumulators] == [dt.float32, dt.float64, dt.float64]


# --- 16-byte accesses ------------------------------------------------------------------------------
def _loop_over(index) -> k.For:
    x, y = k.ArrayParam("x", dt.float32, 1, (1,)), k.ArrayParam("y", dt.float32, 1, (1,))
    j = k.Var("j", dt.int32)
    return k.For(j, k.Const(0, dt.int32), k.Const(64, dt.int32), (k.Store(y, (j,), k.Load(x, (index(j),))),))


@pytest.mark.parametrize("index, vectorized", [
    (lambda j: j, True),
    (lambda j: k.Binary("add", k.Var("row_start", dt.int32), j, dt.int32), True),
    (lambda j: k.Binary("add", j, k.Var("row_start", dt.int32), dt.int32), True),
    (lambda j: k.Binary("add", j, j, dt.int32), False),
    (lambda j: k.Binary("mul", j, k.Const(2, dt.int32), dt.int32), False),
], ids=["j", "start_plus_j", "j_plus_start", "j_plus_j", "two_j"])
def test_a_row_read_at_an_offset_along_the_loop_moves_16_bytes_at_a_time(index, vectorized):
    assert (vector_accesses(_loop_over(index)) is not None) == vectorized


def test_a_nest_takes_16_byte_runs_only_with_affine_indices():
    x = k.ArrayParam("x", dt.float32, 2, (None, 1))
    a, b = k.Var("a", dt.int32), k.Var("b", dt.int32)
    zero, n = k.Const(0, dt.int32), k.Const(8, dt.int32)
    acc = k.Var("acc", dt.float32)

    def nest(row):
        fold = k.Assign(acc, k.Binary("reduce_add", acc, k.Load(x, (row, b)), dt.float32))
        return perfect_nest(k.For(a, zero, n, (k.For(b, zero, n, (fold,)),)))

    assert nest_vector_accesses(nest(k.Binary("add", k.Binary("mul", a, k.Const(3, dt.int32), dt.int32),
                                                   k.Var("c", dt.int32), dt.int32))) is not None
    assert nest_vector_accesses(nest(k.Binary("floordiv", a, k.Const(3, dt.int32), dt.int32))) is None


# --- launches -------------------------------------------------------------------------------------
class Planner:
    """A fusion's executor that plans its launches (codegen/cuda_launch.py's LaunchPlanner) for a
    made-up GPU of `sm_count` SMs, each holding `resident` blocks of every task; a run records its
    launches instead of making them."""

    def __init__(self, kernel: k.Kernel, sm_count: int, resident: int) -> None:
        self.kernel = kernel
        tasks = task_launches(kernel, cuda.generate(kernel, restrict=True), defaultdict(lambda: None))
        self.planner = LaunchPlanner(tasks, cuda.DEFAULT_BLOCK_SIZE, sm_count, lambda name, block, shared: resident)
        self.launches = []

    def run(self, block, scalars, arguments=()) -> None:
        self.launches += [(p.grid, p.scalars[:2]) for p in self.planner.plan(scalars)]


def launches(f: bz.Fusion, inputs, sm_count: int = 132, resident: int = 8) -> list[tuple[int, tuple]]:
    """(grid, (lanes, cached_row)) of each launch of `f` on `inputs`; for a split row path, lanes is
    0 and cached_row the blocks a row."""
    f.freeze("planning")
    bound = engine.bind_inputs(f, list(inputs))
    plan, kernel, params = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    planner = Planner(kernel, sm_count, resident)
    FusionRuntime(f, planner, plan.writes, params).run(bound)
    return planner.launches


@pytest.mark.parametrize("batch, resident, stats", [
    (16, 8, (1024, (0, 2))),  # 512 rows fill half the GPU: two blocks a row
    (16, 5, (512, (0, 1))),  # they fill more: a block a row, the row too long to keep: one pass
    (32, 8, (1024, (0, 1))),
    (1, 8, (512, (0, 16))),  # 32 rows: many blocks a row, 16 elements a thread at least
])
def test_group_norm_statistics_launch_one_pass_over_blocks(batch, resident, stats):
    got = launches(fusion(group_norm(512)), group_norm_inputs((batch, 512, 64, 64)), resident=resident)
    assert got[0] == stats
    grid, (lanes, _) = got[1]  # the normalization: rows of 64 x 64 (trailing axes merged) on 256 lanes
    assert lanes == 256


def test_batch_norm_statistics_launch_two_blocks_a_channel():
    shape = (32, 256, 56, 56)
    got = launches(fusion(batch_norm(32 * 56 * 56)), batch_norm_inputs(shape), resident=4)
    assert got[0] == (512, (0, 2))  # a wave of the 528 blocks 132 SMs hold
    # the normalization's rows of 56 x 56 (trailing axes merged: 784 vectors) on 64 lanes, 4 rows a
    # block (codegen/cuda_launch.py, balanced_lanes), a block for each 4 of the 8192 rows; a block a
    # row without the knob
    assert got[1] == (2048, (64, 0))
    with bz.config.scope(disable="balanced_lanes"):
        assert launches(fusion(batch_norm(32 * 56 * 56)), batch_norm_inputs(shape), resident=4)[1] == (8192, (256, 0))


@pytest.mark.parametrize("shape, expected", [
    ((8192, 4096), (8192, (256, 0))),  # rows kept in registers: two passes, one read
    ((8192, 10000), (8192, (256, 10000))),  # rows kept in shared memory
    ((1024, 30000), (1024, (0, 1))),  # rows too long to keep: one pass, a block a row
    ((3, 200003), (144, (0, 48))),  # few rows: one pass over many blocks a row
])
def test_row_variances_take_the_path_that_reads_each_row_once(shape, expected):
    assert launches(fusion(var_rows), [np.zeros(shape, np.float32)]) == [expected]


# --- NVRTC ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("dtype", [bz.float32, bz.float64, bz.bfloat16, bz.float16], ids=str)
def test_group_norm_and_batch_norm_compile_for_every_float_type(dtype):
    array = dtype.numpy if dtype is not bz.bfloat16 else __import__("ml_dtypes").bfloat16
    sources = [engine.cuda_source(fusion(group_norm(64, 8, dtype), "gn"),
                                  [a.astype(array) for a in group_norm_inputs((2, 64, 5, 8))]),
               engine.cuda_source(fusion(batch_norm(2 * 5 * 8, dtype), "bn"),
                                  [a.astype(array) for a in batch_norm_inputs((2, 6, 5, 8))])]
    text = cuda.with_prelude("\n".join(s.body for s in sources))
    assert nvrtc.compile_cubin(text, f"norms_{dtype.name}", "sm_90")[:4] == b"\x7fELF"


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_row_path_declares_what_the_split_path_declared_again():
    # A row variance and a row maximum of a boolean comparison, read through a row index the task
    # declares between its loops (found by the generated fusions): the split path declares that
    # index in its own scope, and the row path's vector condition, before its loops, must compute it.
    with bz.Fusion() as f:
        t0 = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        t1 = bz.ops.gt(t0, t0)
        variance = bz.ops.var(t1, axes=[1], correction=1)
        f.add_output(bz.ops.transpose(bz.ops.max(t1, axes=[1], keepdim=True), 1, 0))
        f.add_output(variance)
    body = engine.cuda_source(f, [np.zeros((3, 257), np.float32)]).body
    nvrtc.compile_ptx(cuda.with_prelude(body), "split_and_rows", "sm_90", ())


# --- a task a channel ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, tasks", [
    ((2, 8, 5, 7), 1),  # 70 elements a channel: statistics, output and running statistics in one task
    ((32, 8, 7, 7), 1),  # ResNet-50's last stage, 1568 a channel
    ((2, 8, 64, 72), 3),  # 9216 a channel (> schedule.CHANNEL_ROW_LIMIT): statistics of their own
])
def test_batch_norm_takes_a_task_a_channel_where_the_channel_is_short(shape, tasks):
    n = shape[0] * shape[2] * shape[3]
    f = fusion(batch_norm(n))
    src = engine.cuda_source(f, batch_norm_inputs(shape))
    assert len(src.schedules) == tasks
    if tasks == 1:
        # The output's statistics and the running statistics' are one pass and one set of sums:
        # a float32 sum and the variance's two float64 shifted sums (cuda_variance), combined once.
        (text,) = functions(src)
        assert len(re.findall(r"bz_lane_put\(", text)) == 3
        assert "unsigned bz_f_" in text  # the walk's digits divide in 32 bits (int32 indices)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="needs a C++ compiler")
@pytest.mark.parametrize("shape, lanes", [((2, 8, 5, 7), None), ((3, 5, 1, 1), None), ((1, 4, 9, 3), None),
                                          ((4, 3, 8, 8), None), ((8, 5, 14, 14), 128), ((4, 3, 16, 16), 64)])
def test_a_task_a_channel_matches_the_reference_on_a_fake_gpu(shape, lanes):
    """Its CUDA run on the CPU, lanes and all, outputs poisoned first; 8 x 8 maps take 16-byte vectors.
    Channels of 1568 and 1024 elements take 128 and 64 lanes, rows sharing a block of 256 (5 channels:
    the last block's second row idle), each combining over its own warps."""
    rng = np.random.default_rng(7)
    n = shape[0] * shape[2] * shape[3]
    x = rng.standard_normal(shape).astype(np.float32) * 3 + 5
    w, b, rm, rv = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(4))
    f = fusion(batch_norm(n))
    with bz.config.scope(enable="poison_outputs"):
        got, launched = cuda_on_cpu.run_on_cpu(f, [x, w, b, rm, rv], sm_count=2, resident=2)
    (launch,) = launched
    assert lanes is None or launch[-1][0] == lanes, launch
    mean, var = x.astype(np.float64).mean((0, 2, 3)), x.astype(np.float64).var((0, 2, 3))
    y = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * w[:, None, None] + b[:, None, None]
    want = [y, 0.9 * rm + 0.1 * mean, 0.9 * rv + var * (0.1 * n / max(n - 1, 1))]
    for g, wnt in zip(got, want):
        np.testing.assert_allclose(g, wnt, rtol=2e-5, atol=2e-5)
