"""The inner-outer schedule (braze/codegen/cuda_inner_outer.py), no GPU needed: which fusions take
it; the row task it writes, checked on the CPU (rows in order on one thread, the column partial
results in local arrays, then the column task's stores from them) against float64 NumPy, also
over batch and token axes; the CUDA text; NVRTC compiling it for several dtypes and the suite's
own fusions; and the launches the runtime plans for them on a fake H100."""

from __future__ import annotations

import dataclasses
import warnings

import ml_dtypes
import numpy as np
import pytest
from cuda_on_cpu import planned_launches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inner_outer_fusions import FUSIONS, column_sums_first, fusion

import braze as bz
from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import Prepared
from braze.codegen import cuda, cuda_inner_outer
from braze.codegen.cuda_inner_outer import InnerOuter, plan_inner_outer
from braze.compile import nvrtc
from braze.compile.compiled_kernel import CompiledKernel
from braze.kir import nodes as k
from braze.runtime.backends.cpu import KernelExecutor
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import bind_inputs


def lowered_for_gpu(f: bz.Fusion, arrays: list) -> tuple:
    bound = bind_inputs(f, arrays)
    return engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)


# --- which fusions take it ---------------------------------------------------------------------
@pytest.mark.parametrize("name", FUSIONS)
def test_row_and_column_reductions_of_one_space_take_the_inner_outer_schedule(name):
    build, make, _ = FUSIONS[name]
    f = fusion(build)
    src = engine.cuda_source(f, make(np.random.default_rng(0), 6, 8))
    assert [s.kind for s in src.schedules] == ["inner_outer", "column_fold"]


def test_the_suites_norm_backwards_take_it_and_nothing_else_of_the_suite_does():
    taken = []
    for case in CASES:
        p = Prepared(case, "quick")
        kinds = [s.kind for s in engine.cuda_source(p.fusion, p.inputs).schedules]
        if "inner_outer" in kinds:
            taken.append(case.name)
            assert kinds == ["inner_outer", "column_fold"]
    assert taken == ["layer_norm_backward", "rms_norm_backward"]


def _pairs(build, arrays) -> dict[int, InnerOuter]:
    _, kernel, _ = lowered_for_gpu(fusion(build), arrays)
    return plan_inner_outer(cuda.prepared(kernel))


def test_fusions_without_both_reductions_keep_their_schedules():
    x = np.ones((4, 8), np.float32)

    def column_sum_and_pointwise(f):  # no row reduction: nothing to carry the column sum
        t = f.define_tensor([-1, -1])
        return [t * 2.0, bz.ops.sum(t, axes=[0])]

    def column_sum_of_the_normalized_rows(f):  # the column task reads what the row task writes
        t = f.define_tensor([-1, -1])
        y = bz.ops.softmax(t, -1)
        return [y, bz.ops.sum(y * 1.0, axes=[0])]

    def column_variance(f):  # two passes over the rows: no single column loop
        t = f.define_tensor([-1, -1])
        return [bz.ops.softmax(t, -1), bz.ops.var(t, axes=[0])]

    def rows_of_a_transpose(f):  # the rows of one are the columns of the other
        t = f.define_tensor([-1, -1])
        return [bz.ops.softmax(t, -1), bz.ops.sum(bz.ops.permute(t, [1, 0]), axes=[0])]

    for build in (column_sum_and_pointwise, column_variance):
        assert _pairs(build, [x]) == {}
    assert _pairs(rows_of_a_transpose, [np.ones((8, 8), np.float32)]) == {}
    f = fusion(column_sum_of_the_normalized_rows)
    kinds = [s.kind for s in engine.cuda_source(f, [x]).schedules]
    assert "inner_outer" not in kinds


def test_a_column_task_written_first_moves_after_the_row_task_carrying_it():
    src = engine.cuda_source(fusion(column_sums_first), [np.ones((4, 8), np.float32)] * 2)
    assert [s.kind for s in src.schedules] == ["inner_outer", "column_fold"]
    assert "_t1_" in src.functions[0] and "_t0_" in src.functions[1]  # the row task first


def test_the_segments_dump_names_the_pair(capsys):
    build, make, _ = FUSIONS["layer_norm_backward"]
    with config.scope(dump="segments"):
        engine.cuda_source(fusion(build), make(np.random.default_rng(0), 4, 8))
    dumped = capsys.readouterr().err
    assert ("io_layer_norm_backward_t0_T17 carries io_layer_norm_backward_t1_T19__io_layer_norm_backward_t2_T20: "
            "inner_outer") in dumped


# --- the carried row task on the CPU -----------------------------------------------------------
def _carrying_task(carried: InnerOuter, columns: int) -> k.Task:
    """The pair as one serial task: the partial results in local arrays of `columns` elements, the
    row task's rows in order, then per column the column task's statements with each accumulator
    read from its array instead of its loop."""
    row, column = carried.task, carried.column
    c = k.Var("bz_column", column.var.dtype)
    setup = []
    for acc in carried.accumulators:
        setup.append(k.Alloc(acc.array, acc.array.dtype, max(columns, 1)))
        start = (k.StoreLocal(acc.array, c, acc.initial),)
        setup.append(k.For(c, k.Const(0, c.dtype), k.Const(columns, c.dtype), start))
    rows = k.For(row.var, row.begin, row.end, row.body)
    partial = {acc.source: k.LoadLocal(acc.array, column.var, acc.array.dtype) for acc in carried.accumulators}
    loop = next(s for s in column.body if isinstance(s, k.For))
    before, after = column.body[: column.body.index(loop)], column.body[column.body.index(loop) + 1:]
    fold = tuple(k.Let(s.var, partial[s.var]) if isinstance(s, k.Let) and s.var in partial else s for s in before)
    folds = k.For(column.var, column.begin, column.end, fold + after)
    return k.Task(row.name, "serial", (*setup, rows, folds))


def run_carried_on_cpu(f: bz.Fusion, arrays: list) -> list[np.ndarray]:
    """The fusion's GPU kernel with each inner-outer pair replaced by `_carrying_task`, on the CPU."""
    plan, kernel, params = lowered_for_gpu(f, arrays)
    kernel = cuda.prepared(kernel)
    carriers = plan_inner_outer(kernel)
    assert carriers
    tasks = list(kernel.tasks)
    for n in sorted(carriers, reverse=True):
        tasks[n: n + 2] = [_carrying_task(carriers[n], arrays[0].shape[-1])]
    compiled = CompiledKernel(dataclasses.replace(kernel, tasks=tuple(tasks))).compile()
    return FusionRuntime(f, KernelExecutor(compiled), plan.writes, params).run(bind_inputs(f, arrays))


def assert_close(actual, expected, rtol=1e-4):
    for a, e in zip(actual, expected):
        a = np.asarray(a, np.float64)
        scale = max(np.abs(e).max(initial=0.0), 1.0)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale)


# One element, one column or no rows at all make other signatures (NumPy gives an empty array zero
# strides), whose kernels keep the two tasks: the GPU tests run those shapes.
SHAPES = [(1, 5), (2, 2), (3, 5), (7, 64), (64, 33), (33, 130), (4, 1024)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", FUSIONS)
def test_the_carried_row_task_computes_both_on_the_cpu(name, shape):
    build, make, reference = FUSIONS[name]
    arrays = make(np.random.default_rng(1), *shape)
    actual = run_carried_on_cpu(fusion(build), arrays)
    assert_close(actual, reference(*[a.astype(np.float64) for a in arrays]))


@pytest.mark.parametrize("name", ["layer_norm_backward", "rms_norm_backward"])
def test_bfloat16_rows_carry_their_columns_eight_at_a_time_on_the_cpu(name):
    """Rows of a 2-byte type move eight elements a lane: the partial results go as two float4s."""
    build, make, reference = FUSIONS[name]
    arrays = make(np.random.default_rng(1), 4, 1024, ml_dtypes.bfloat16)
    f = fusion(build, bz.bfloat16)
    assert "float4 bz_col0_0_r5[2];" in engine.cuda_source(f, arrays).body
    actual = run_carried_on_cpu(f, arrays)
    assert_close(actual, reference(*[a.astype(np.float64) for a in arrays]), rtol=2e-2)


def test_the_carried_row_task_reads_a_strided_input_on_the_cpu():
    build, make, reference = FUSIONS["layer_norm_backward"]
    arrays = make(np.random.default_rng(2), 9, 40)
    wide = np.zeros((9, 83), np.float32)
    wide[:, 1:41], wide[:, 42:82] = arrays[0], arrays[1]
    arrays[0], arrays[1] = wide[:, 1:41], wide[:, 42:82]  # rows 83 apart, starting off 16 bytes
    actual = run_carried_on_cpu(fusion(build), arrays)
    assert_close(actual, reference(*[a.astype(np.float64) for a in arrays]))


# Shapes that make other signatures (see SHAPES), for the two norm backwards.
CPU_CASES = [(name, shape) for name in FUSIONS for shape in [(1, 1), (0, 4), (4, 0), (37, 100)]
             if shape == (37, 100) or name in ("layer_norm_backward", "rms_norm_backward")]


@pytest.mark.parametrize("name, shape", CPU_CASES, ids=str)
def test_the_cpu_backend_keeps_its_own_schedule(name, shape):
    build, make, reference = FUSIONS[name]
    arrays = make(np.random.default_rng(4), *shape)
    with warnings.catch_warnings():  # the mean of an empty row, for an empty dx
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = reference(*[a.astype(np.float64) for a in arrays])
    assert_close(fusion(build).execute(arrays), expected)


# --- the CUDA it writes --------------------------------------------------------------------------
def test_the_row_task_adds_each_row_to_its_blocks_partial_columns():
    build, make, _ = FUSIONS["layer_norm_backward"]
    src = engine.cuda_source(fusion(build), make(np.random.default_rng(0), 8, 64))
    row, fold = src.body.split("extern \"C\"")[1:]
    assert "const long long bz_columns_in_memory" in row and "row0 += (int)gridDim.x * rows_per_block" in row
    # Each row's 16-byte loop reads dy and x once, and adds dy * xhat and dy to this row group's
    # partial results as 16-byte vectors, reusing the xhat it computes for the row itself.
    assert "float4 bz_col0_0_r5 = *reinterpret_cast<const float4*>(&bz_col0_0[r5_4]);" in row
    assert "bz_col0_0_r5.x = bz_add(bz_col0_0_r5.x, bz_mul(v0_r5.x, u1_r5.x));" in row
    assert "if (active) *reinterpret_cast<float4*>(&bz_col0_0[r5_4]) = bz_col0_0_r5;" in row
    assert "if (active) bz_col0_1[r5] = bz_add(bz_col0_1[r5], cached0_r5);" in row  # one element a lane
    # Two copies of the rows, one for each place of the partial results, the same for the whole
    # launch: in shared memory, every access to them is a shared-memory one (no generic pointer).
    workspace, shared = row.split("} else {\n    const long long bz_partial_rows")
    assert "if (bz_columns_in_memory) {" in workspace and "bz_column_region" not in workspace
    assert "float* const bz_col0_0_block = (float*)bz_column_region;" in shared and "bz_columns_in_memory" not in shared
    assert "bz_rc0" not in workspace  # columns too many for shared memory: rows too long for registers
    # the starts, each row (the accumulators' combine over the lanes brings its own, commented)
    assert workspace.count("__syncthreads();\n") == shared.count("__syncthreads();\n") == 2
    assert "__launch_bounds__(256, 3)" in src.body.split("extern \"C\"")[1]  # 80 registers: 3 blocks an SM
    # The fold: the blocks' rows of partial results in order, then the groups in a fixed tree; four
    # columns a thread (16-byte loads) where their count allows, else one.
    assert "if (bz_width == 4) {" in fold
    assert "bz_f0 = bz_column_reduce<256>(bz_f0, cols32, BzEach4<BzReduceAdd>());" in fold
    assert fold.count("for (long long b = lane; b < bz_partial_rows; b += lanes32)") == 2
    assert "acc2 = bz_column_reduce<256>(acc2, cols32, BzReduceAdd());" in fold
    assert "if (active && lane == 0) T19_[p1] = " in fold
    assert "T0_[" not in fold and "T1_[" not in fold  # the fold reads only the workspace


def _inner_outer_sources() -> list[cuda.CudaSource]:
    sources = []
    for case in CASES:  # the suite's own
        if case.name in ("layer_norm_backward", "rms_norm_backward"):
            p = Prepared(case, "quick")
            sources.append(engine.cuda_source(p.fusion, p.inputs))
    for build, make, _ in FUSIONS.values():
        sources.append(engine.cuda_source(fusion(build), make(np.random.default_rng(0), 5, 12)))
    for name in ("layer_norm_backward", "rms_norm_backward_4d"):  # indices past int32 (64-bit index arithmetic)
        build, make, _ = FUSIONS[name]
        with bz.Fusion(name=f"io_{name}_int64") as f:
            for out in build(f):
                f.add_output(out)
        units, _, *rest = engine.signature(f, bind_inputs(f, make(np.random.default_rng(0), 5, 12)))
        _, kernel, _ = engine.plan_kernel(f, (units, "int64", *rest), views_on_host=False, gpu=True)
        sources.append(cuda.generate(kernel, restrict=True))
    with config.scope(disable=cuda_inner_outer.FEATURES), bz.Fusion(name="io_features_off") as f:
        build, make, _ = FUSIONS["rms_norm_backward"]  # the code each feature replaces
        for out in build(f, bz.bfloat16):
            f.add_output(out)
        sources.append(engine.cuda_source(f, make(np.random.default_rng(0), 5, 12, ml_dtypes.bfloat16)))
    for dtype, numpy in ((bz.bfloat16, ml_dtypes.bfloat16), (bz.float16, np.float16), (bz.float64, np.float64)):
        for name in ("layer_norm_backward", "rms_norm_backward"):
            build, make, _ = FUSIONS[name]
            arrays = make(np.random.default_rng(0), 5, 12, numpy)
            sources.append(engine.cuda_source(fusion(build, dtype), arrays))
    return sources


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_inner_outer_kernels_compile_with_nvrtc():
    sources = _inner_outer_sources()
    assert all("inner_outer" in [s.kind for s in src.schedules] for src in sources)
    text = cuda.with_prelude("\n".join(s.body for s in sources))
    assert nvrtc.compile_ptx(text, "inner_outer", "sm_90", ("-G",))


# --- the launches the runtime plans (a fake H100: 132 SMs) -----------------------------------------
def _launches(name, shape, dtype=bz.float32, numpy=np.float32, resident=2):
    """The planned launches for inputs of `shape` (their values unread: left unset)."""
    build, make, _ = FUSIONS[name]
    rows, cols = shape
    small = make(np.random.default_rng(0), 2, 3, numpy)
    arrays = [np.empty((rows, cols if a.shape[1] == 3 else 1) if a.ndim == 2 else (cols,), a.dtype) for a in small]
    return planned_launches(fusion(build, dtype), arrays, sm_count=132, resident=resident)


def test_layer_norm_backward_at_the_suites_shape_plans_the_blocks_that_fit_then_the_fold():
    rows, fold = _launches("layer_norm_backward", (8192, 4096), resident=3)
    assert (rows.task.schedule.kind, fold.task.schedule.kind) == ("inner_outer", "column_fold")
    # The whole block on a row; 4096 float32 of dy and x held in registers (128 bytes a thread), then
    # dweight's and dbias's partial results for the block's 4096 columns in shared memory, one row of
    # them a block; as many blocks an SM as fit (3 on this fake GPU).
    assert rows.grid == 3 * 132 and rows.shared == 4096 * 4 * 2 and rows.scalars[:2] == (256, 0)
    assert rows.scalars[3] == 0
    # The fold: four columns a thread, four threads a block (64 bytes of each row of partial results)
    # for 256 blocks, each of its 64 row groups walking 396 / 64 rows.
    assert fold.grid == 4096 // 16 and fold.scalars[:2] == (4, 396) and fold.scalars[3] == 4
    assert fold.scalars[2] == rows.scalars[2]


def test_rms_norm_backward_in_bfloat16_keeps_its_rows_in_registers():
    rows, fold = _launches("rms_norm_backward", (8192, 4096), bz.bfloat16, ml_dtypes.bfloat16, resident=8)
    # Two 16-byte vectors of dy and of x a thread: the row in registers, only the partial results in
    # shared memory; 3 blocks an SM at most.
    assert rows.grid == 3 * 132 and rows.scalars[:2] == (256, 0) and rows.shared == 4096 * 4
    assert fold.scalars[1] == 396 and fold.scalars[3] == 4


@pytest.mark.parametrize("columns, width, cols, grid", [(4096, 4, 4, 256), (1000, 4, 4, 63), (769, 1, 16, 49),
                                                        (100000, 4, 32, 782), (3, 1, 4, 1)])
def test_the_fold_takes_four_columns_a_thread_where_they_divide(columns, width, cols, grid):
    _, fold = _launches("layer_norm_backward", (64, columns))
    assert (fold.scalars[3], fold.scalars[0], fold.grid) == (width, cols, grid)


def test_each_change_to_the_schedule_can_be_turned_off():
    """BRAZE_DISABLE of the four: two blocks an SM, rows of 2-byte elements in registers one vector a
    row cache, the fold one column a thread, 32 columns a block, and one copy of the rows."""
    with config.scope(disable=cuda_inner_outer.FEATURES):
        rows, fold = _launches("rms_norm_backward", (8192, 4096), bz.bfloat16, ml_dtypes.bfloat16, resident=8)
        build, make, _ = FUSIONS["rms_norm_backward"]
        body = engine.cuda_source(fusion(build), make(np.random.default_rng(0), 8, 64)).body
    assert rows.grid == 2 * 132 and rows.scalars[:2] == (256, 4096) and rows.shared == 2 * 4096 * 2 + 4096 * 4
    assert fold.grid == 4096 // 32 and fold.scalars == (32, 264, rows.scalars[2], 0)
    assert "bz_columns_in_memory ? " in body and "__launch_bounds__(256)\n" in body and "bz_width" not in body


def test_too_many_columns_for_shared_memory_put_the_partial_results_in_the_workspace():
    rows, fold = _launches("layer_norm_backward", (64, 20000))
    assert rows.scalars[0] == 256 and rows.scalars[3] == 1 and fold.scalars[1] == rows.grid


def test_short_rows_share_a_block_unless_short_of_shared_memory():
    # rms_norm: 8 rows of 1000 a block, their two row caches and one partial result per column fit
    # in 96 KiB; layer_norm's two partial results per column would not: the whole block on a row.
    (rows, _) = _launches("rms_norm_backward", (1000, 1000))
    assert rows.scalars[:2] == (32, 1000) and rows.shared == 8 * 1000 * 4 * 3
    (rows, _) = _launches("layer_norm_backward", (1000, 1000))
    assert rows.scalars[:2] == (256, 0) and rows.shared == 1000 * 4 * 2


# --- generated fusions: a row reduction and column reductions of random pointwise values -------------
_UNARY = [lambda t: bz.ops.tanh(t), lambda t: bz.ops.abs(t), lambda t: t * 0.5 + 1.0]
_BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b]


@st.composite
def pointwise(draw, leaves, depth=2):
    """A random pointwise value of `leaves` (bounded: no exponentials of unbounded values)."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    if draw(st.booleans()):
        return draw(st.sampled_from(_UNARY))(draw(pointwise(leaves, depth - 1)))
    return draw(st.sampled_from(_BINARY))(draw(pointwise(leaves, depth - 1)), draw(pointwise(leaves, depth - 1)))


_ROWS = {"softmax": lambda e: bz.ops.softmax(e, -1), "centered": lambda e: e - bz.ops.mean(e, axes=[-1], keepdim=True),
         "row_sum": lambda e: bz.ops.sum(e, axes=[-1]), "rms": lambda e: e * bz.ops.rsqrt(
             bz.ops.mean(e * e, axes=[-1], keepdim=True) + 1e-3)}
_COLUMNS = {"sum": lambda e: bz.ops.sum(e, axes=[0]), "max": lambda e: bz.ops.max(e, axes=[0]),
            "min": lambda e: bz.ops.min(e, axes=[0]), "mean": lambda e: bz.ops.mean(e, axes=[0])}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_row_and_column_reductions_carry_and_compute_both(data):
    rows, cols = data.draw(st.integers(2, 24)), data.draw(st.integers(2, 40))
    row_op = data.draw(st.sampled_from(sorted(_ROWS)))
    column_ops = data.draw(st.lists(st.sampled_from(sorted(_COLUMNS)), min_size=1, max_size=2))
    columns_first = data.draw(st.booleans())
    with bz.Fusion(name=f"io_generated_{data.draw(st.integers(0, 10**9))}") as f:
        x, y, w = f.define_tensor([-1, -1]), f.define_tensor([-1, -1]), f.define_tensor([-1])
        leaves = [x, y, x * w]
        both = x * y  # ties the extents of x and y: one [rows, columns] space
        row = _ROWS[row_op](data.draw(pointwise(leaves)) + both)
        columns = [_COLUMNS[op](data.draw(pointwise(leaves)) + both) for op in column_ops]
        for out in (columns + [row] if columns_first else [row] + columns):
            f.add_output(out)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2)]
    arrays.append(rng.standard_normal(cols).astype(np.float32))
    expected = f.execute(arrays, backend="reference")
    assert_close(run_carried_on_cpu(f, arrays), [np.asarray(e, np.float64) for e in expected], rtol=1e-4)


def test_kernels_written_with_a_feature_off_are_kept_apart():
    kernel = k.Kernel("io_key", (), ())
    keys = {engine.cuda_code_key(kernel, "sm_90")}
    for name in cuda_inner_outer.FEATURES:
        with config.scope(disable=name):
            keys.add(engine.cuda_code_key(kernel, "sm_90"))
    assert len(keys) == 1 + len(cuda_inner_outer.FEATURES)


def test_rows_the_vector_width_does_not_divide_take_no_vector_tail_in_an_inner_outer_task():
    # Each row group's partial columns start at a multiple of the row's length: for rows of 7 the
    # second group's are not 16-byte aligned, so the row loop keeps whole vectors or none (a GPU
    # raised a misaligned address on a max over rows carrying the column sum of x * y).
    with bz.Fusion(name="carried") as f:
        x, y = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        f.add_output(bz.ops.sum(x * y, [0]))
        f.add_output(bz.ops.max(x, [-1]))
    body = engine.cuda_source(f, [np.ones((9, 7), np.float32)] * 2).body
    carrier = next(part for part in body.split('extern "C"') if "bz_columns_in_memory" in part)
    assert "float4" in carrier and "} else if (" not in carrier
