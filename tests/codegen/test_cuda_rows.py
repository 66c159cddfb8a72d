"""The row loops of CUDA tasks (no GPU needed): the width of their vector accesses (16-byte accesses
of eight 2-byte elements), the functions for one warp a row that hold medium rows in registers,
the rule that no copy of a row chosen row by row reaches a block barrier, and NVRTC compiling them."""

from __future__ import annotations

import dataclasses
import re

import cuda_on_cpu
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_launch import lanes_for
from braze.codegen.cuda_plan import WARP
from braze.codegen.cuda_rows import BLOCK_BARRIERS, barriers_in, vector_unroll
from braze.compile import nvrtc

_NUMPY = {bz.float32: np.float32, bz.float64: np.float64, bz.float16: np.float16, bz.bfloat16: ml_dtypes.bfloat16,
          bz.bool_: np.bool_}


def fusion(build, *dtypes) -> bz.Fusion:
    with bz.Fusion(name="rows") as f:
        for out in build(*(f.define_tensor([-1] * ndim, dtype=d) for d, ndim in dtypes)):
            f.add_output(out)
    return f


def inputs(*dtypes, columns: int = 64) -> list[np.ndarray]:
    return [np.ones((3, columns)[2 - ndim:], _NUMPY[d]) for d, ndim in dtypes]


def source(build, *dtypes) -> cuda.CudaSource:
    return engine.cuda_source(fusion(build, *dtypes), inputs(*dtypes))


def kernel_of(build, *dtypes):
    f = fusion(build, *dtypes)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, inputs(*dtypes))),
                                      views_on_host=False, gpu=True)
    return kernel


def writers(build, *dtypes) -> list[tuple[cuda.TaskWriter, ...]]:
    """Per task: its writer, and its warp, narrow warp and split functions' (or None)."""
    return cuda.task_writers(kernel_of(build, *dtypes), restrict=True)


def functions(src: cuda.CudaSource) -> dict[str, str]:
    """Each `__global__` of the source by name, its text."""
    parts = src.body.split('extern "C" __global__ void ')[1:]
    return {part.split("\n", 1)[1].split("(", 1)[0]: part for part in parts}


def softmax(x):
    return [bz.ops.softmax(x, -1)]


def layer_norm(x, w, b):
    return [bz.ops.layer_norm(x, w, b, eps=1e-5)]


def softmax_backward(y, dy):
    return [y * (dy - bz.ops.sum(y * dy, axes=[1], keepdim=True))]


def masked_softmax(x, mask):
    scores = bz.ops.where(mask, bz.ops.cast(x, bz.float32) * 0.125, float("-inf"))
    return [bz.ops.cast(bz.ops.softmax(scores, -1), x.dtype)]


BF16_ROW = (bz.bfloat16, 2)
MASK = (bz.bool_, 2)


# --- 16-byte accesses for 2-byte types ----------------------------------------------------------
@pytest.mark.parametrize("dtype, vector", [(bz.bfloat16, "bz_bfloat168"), (bz.float16, "bz_half8")])
def test_half_rows_move_sixteen_bytes_an_access(dtype, vector):
    src = source(softmax, (dtype, 2))
    body = src.body
    assert f"const {vector} v0_r5 = " in body and "4 * lane" not in body
    # Rows take the vector path where 8 divides their length and every row start is 16-byte aligned.
    assert "((T0_s1) % 8 == 0)" in body and "(cached_row % 8 == 0)" in body
    assert "& 15) == 0)" in body and "& 7) == 0)" not in body
    assert "const int r5_8 = 8 * lane + r5_k * 2048;" in body  # the whole block's register row
    assert "#pragma unroll 2\n" in body  # two 16-byte loads in flight a thread
    assert ".v[7]" in body and ".w" not in body


def test_float32_rows_keep_four_wide_vectors():
    body = source(softmax, (bz.float32, 2)).body
    assert "const float4 v0_r5 = " in body and "r5_8" not in body and "% 8" not in body
    assert "((T0_s1) % 4 == 0)" in body and ".w)" in body and "bz_launder" not in body


def test_later_loops_over_a_register_row_of_half_types_widen_it_again():
    # bz_launder: the packed row stays live between the loops, not each element widened to float32.
    body = source(softmax, BF16_ROW).body
    assert body.count("bz_launder<1>(bz_rc0[r7_k]);") == 3  # the block's, the warp's and the narrow warp's
    # The last loop of the block's function reads the exponentials the sum's loop kept
    # (cuda_row_values), not the row; the warp's holds 64 elements a lane, too many to keep them; the
    # narrow warp's 32 keeps them again.
    block, warp = body.split("_warp(")
    warp, narrow = warp.split("_warp4(")
    assert "bz_launder<2>" not in block and "float rcp2 = bz_rv0[j3_k * 8 + 0];" in block
    assert "bz_launder<2>(bz_rc0[j3_k]);" in warp and "bz_rv0" not in warp
    assert "float rcp2 = bz_rv0[j3_k * 8 + 0];" in narrow
    assert "(bz_rc0[r5_k])" not in body  # the first loop reads what it just loaded
    # beside float32 rows (a float32 task's mask), the code float32 tasks had
    assert "bz_launder" not in source(masked_softmax, (bz.float32, 2), MASK).body


def test_a_bool_mask_moves_eight_at_a_time_beside_bfloat16():
    body = source(masked_softmax, BF16_ROW, MASK).body
    assert "bz_bool8 bz_rc0[" in body and "bz_bfloat168 bz_rc1[" in body and "bz_bool4" not in body
    # the mask's 8 bytes aligned to 8, the scores' 16 to 16
    assert re.search(r"T1_\[[^]]*\]\) & 7\) == 0\)", body) and re.search(r"T0_\[[^]]*\]\) & 15\) == 0\)", body)


def test_loops_sharing_a_row_cache_share_the_narrower_width():
    # bfloat16 rows with float32 weights: the loops of the row cache all move four at a time.
    body = source(layer_norm, BF16_ROW, (bz.float32, 1), (bz.float32, 1)).body
    assert "bz_bfloat164" in body and "float4" in body and "bz_bfloat168" not in body


def test_unroll_keeps_about_32_bytes_of_loads_in_flight():
    ((writer, _, _, _),) = writers(softmax, BF16_ROW)
    assert [(v.width, vector_unroll(v)) for v in writer.vectors.values()] == [(8, 2)] * 3
    ((writer, _, _, _),) = writers(softmax, (bz.float32, 2))
    assert [(v.width, vector_unroll(v)) for v in writer.vectors.values()] == [(4, 2)] * 3


ROW_DTYPES = [bz.float32, bz.float64, bz.float16, bz.bfloat16]


@st.composite
def row_programs(draw):
    """A normalization-like row task over an input of one dtype, with a vector of another, writing
    a third: (build, input dtypes)."""
    x, w, out = (draw(st.sampled_from(ROW_DTYPES), label=name) for name in ("x", "weight", "out"))
    kind = draw(st.sampled_from(["softmax", "scaled", "centered", "masked"]), label="kind")

    def build(xs, ws, *mask):
        y = {"softmax": lambda: bz.ops.softmax(xs, -1),
             "scaled": lambda: xs * bz.ops.rsqrt(bz.ops.mean(xs * xs, axes=[1], keepdim=True) + 1e-6) * ws,
             "centered": lambda: (xs - bz.ops.mean(xs, axes=[1], keepdim=True)) + ws,
             "masked": lambda: bz.ops.softmax(bz.ops.where(mask[0], xs, float("-inf")), -1)}[kind]()
        return [bz.ops.cast(y, out)]

    return build, [(x, 2), (w, 1)] + ([MASK] if kind == "masked" else [])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_programs())
def test_vector_width_is_eight_exactly_where_every_access_is_two_bytes_or_less(program):
    build, dtypes = program
    for writer, warp, narrow, _ in writers(build, *dtypes):
        for each in filter(None, (writer, warp, narrow)):
            cache_loops = set(each.cache_loops())
            shared = {v.width for i, v in each.vectors.items() if i in cache_loops}
            assert len(shared) <= 1  # a lane reads back only the cache elements it wrote
            for loop_id, vector in each.vectors.items():
                group = [each.vectors[i] for i in (cache_loops if loop_id in cache_loops else {loop_id})]
                narrow = all(a.param.dtype.itemsize <= 2 for v in group for a in (*v.loads, *v.stores))
                assert vector.width == (8 if narrow else 4)
            text = each.write()
            assert ("8 * lane" in text) == any(v.width == 8 for v in each.vectors.values())
            assert ("4 * lane" in text) == any(v.width == 4 for v in each.vectors.values())


# --- rows of one warp held in registers ---------------------------------------------------------
def test_masked_softmax_rows_of_1024_bfloat16_have_a_warp_function():
    src = source(masked_softmax, BF16_ROW, MASK)
    assert src.warp_register_rows == (1024,) and src.register_rows == (2048,)
    (name,) = src.warp_functions
    # then the narrow warp function: half the room, for rows of up to 512 (cuda.narrow_warp)
    assert src.narrow_warp_functions == ("rows_t0_T14_warp2",) and src.narrow_warp_register_rows == (512,)
    assert name == "rows_t0_T14_warp" and src.functions[-2:] == (name, "rows_t0_T14_warp2")
    warp = functions(src)[name]
    assert "const int lanes32 = 32, lane = threadIdx.x & 31;" in warp
    # a lane holds 4 vectors of 8: the row's elements lane * 8 + k * 256
    assert "bz_bool8 bz_rc0[4];" in warp and "bz_bfloat168 bz_rc1[4];" in warp
    assert "const int r5_8 = 8 * lane + r5_k * 256;" in warp and "if (((T0_s1) <= 1024) &&" in warp
    assert warp.count("bz_warp_reduce(") == 4 and not barriers_in([warp])
    # rows the registers do not take (misaligned, a length 8 does not divide): plain loops, no vectors
    assert "for (int r5_8" not in warp and "for (int r5 = 0 + lane; r5 < T0_s1; r5 += lanes32)" in warp
    block = functions(src)["rows_t0_T14"]
    assert "if ((lanes32 == 256) && ((T0_s1) <= 2048)" in block and "bz_warp_reduce" not in block


@pytest.mark.parametrize("build, dtypes, warp_row", [
    (softmax, [(bz.float32, 2)], 1024),  # 8 float4 a lane
    (softmax, [BF16_ROW], 2048),  # 8 vectors of 8 bfloat16 a lane
    (softmax, [(bz.float64, 2)], 512),
    (masked_softmax, [BF16_ROW, MASK], 1024),  # 24 bytes a vector: 4, a power of two
    (layer_norm, [BF16_ROW, BF16_ROW[:1] + (1,), BF16_ROW[:1] + (1,)], 2048),
    # two float32 arrays: 256 bytes a lane (cuda_plan.WIDE_WARP_ROW_BYTES), so rows of 1024 take a warp
    (softmax_backward, [(bz.float32, 2), (bz.float32, 2)], 1024),
    (softmax_backward, [BF16_ROW, BF16_ROW], 1024),  # two bfloat16 arrays: 4 bytes an element, 128 a lane
])
def test_warp_rows_hold_128_bytes_a_lane(build, dtypes, warp_row):
    src = source(build, *dtypes)
    assert src.warp_register_rows == (warp_row,) and src.warp_functions[0].endswith("_warp")


def test_rows_a_narrow_warp_function_holds_run_it_with_the_same_bits():
    """Rows of 768 bfloat16 (GPT-2's layer_norm) take the narrow warp function, holding 1024 where the
    warp function holds 2048; through their CUDA on the CPU the output is the same bits either way."""
    x = (np.random.default_rng(3).standard_normal((40, 768)) * 3).astype(ml_dtypes.bfloat16)
    w, b = (np.random.default_rng(n).standard_normal(768).astype(ml_dtypes.bfloat16) for n in (4, 5))
    runs = {}
    for knobs in ({}, {"disable": "narrow_warps"}):
        with bz.config.scope(**knobs, enable="poison_outputs"):
            f = fusion(layer_norm, BF16_ROW, (bz.bfloat16, 1), (bz.bfloat16, 1))
            outputs, launches = cuda_on_cpu.run_on_cpu(f, [x, w, b], sm_count=2, resident=2)
        runs[bool(knobs)] = outputs[0].view(np.uint16), [launch[0] for launch in launches]
    assert runs[False][1] == ["rows_t0_T17_warp4"] and runs[True][1] == ["rows_t0_T17_warp"]
    np.testing.assert_array_equal(runs[False][0], runs[True][0])


def test_tasks_without_register_rows_have_no_warp_function():
    """A row sum has no warp function; its rows may split across blocks, a function of its own."""
    src = source(lambda x: [bz.ops.sum(x, axes=[1])], (bz.float32, 2))
    assert src.warp_functions == ("",) and src.warp_register_rows == (0,)
    assert src.split_functions == (f"{src.functions[0]}_split",) and len(src.functions) == 2


@pytest.mark.parametrize("row, warp_row, lanes", [
    (1, 1024, 1), (40, 1024, 16), (200, 1024, 32), (1000, 0, 32),
    (1024, 1024, WARP), (1024, 0, 256), (2048, 2048, WARP), (2049, 2048, 256), (4096, 2048, 256), (8192, 1024, 256),
])
def test_lanes_take_a_warp_for_rows_its_registers_hold(row, warp_row, lanes):
    assert lanes_for(row, 256, warp_row) == lanes


def test_a_block_of_a_warp_never_takes_the_warp_rows():
    assert lanes_for(1024, 32, 2048) == 32
    kernel = kernel_of(softmax, (bz.float32, 2))
    assert cuda.generate(kernel).warp_functions[0]  # at the default block of 256
    assert cuda.generate(kernel, block_size=32).warp_functions == ("",)


# --- no copy chosen row by row reaches a block barrier ------------------------------------------
def _prelude_functions() -> dict[str, str]:
    """Each function the prelude defines (BZ_D), its text."""
    found, lines = {}, cuda.PRELUDE.splitlines()
    for n, line in enumerate(lines):
        head = re.search(r"BZ_D [^(]*?\b(\w+)\s*\(", line)
        if head is None or line.startswith(" "):
            continue
        depth, text = 0, []
        for body in lines[n:]:
            text.append(body)
            depth += body.count("{") - body.count("}")
            if depth <= 0 and "{" in "".join(text):
                break
        found.setdefault(head.group(1), "")
        found[head.group(1)] += "\n".join(text)
    return found


def test_block_barriers_name_every_prelude_function_that_reaches_syncthreads():
    defined = _prelude_functions()
    reaching = {"__syncthreads"}
    while True:
        more = {name for name, text in defined.items() if barriers_in_names(text, reaching)} - reaching
        if not more:
            break
        reaching |= more
    assert reaching <= set(BLOCK_BARRIERS)
    assert set(BLOCK_BARRIERS) - {"__syncthreads"} <= set(defined)  # the list names no helper that is gone
    assert {"bz_warp_reduce", "bz_pair_shuffle_reduce"} <= set(defined) - reaching


def barriers_in_names(text: str, names: set[str]) -> bool:
    body = text.split("{", 1)[1] if "{" in text else ""
    return any(re.search(rf"\b{name}\s*[<(]", body) for name in names)


def test_a_row_by_row_copy_calling_a_barrier_is_refused():
    ((writer, _, _, _),) = writers(softmax, (bz.float32, 2))
    synced = ["acc = bz_lane_reduce(acc, lanes32, BzReduceAdd());"]
    writer.check_barriers(synced, uniform=True)  # one row a block: every thread takes the same copy
    writer.check_barriers(["acc = bz_warp_reduce(acc, BzReduceAdd());"], uniform=False)
    with pytest.raises(AssertionError, match="bz_lane_reduce"):
        writer.check_barriers(synced, uniform=False)


def test_a_warp_function_with_a_barrier_is_not_written(monkeypatch):
    def block_reduce(self, accumulators):
        for acc, _ in accumulators:
            self.line(f"{acc.name} = bz_lane_reduce({acc.name}, lanes32, BzReduceAdd());")

    monkeypatch.setattr(cuda.TaskWriter, "lane_reduce", block_reduce)
    with pytest.raises(AssertionError, match="_t0_T7: a copy of its rows chosen row by row calls bz_lane_reduce"):
        source(softmax, (bz.float32, 2))


# --- NVRTC -------------------------------------------------------------------------------------------
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")


def _ptx_functions(src: cuda.CudaSource) -> dict[str, str]:
    ptx = nvrtc.compile_ptx(src.text, "rows", "sm_90").rstrip(b"\0").decode()
    return {part.split("(")[0].strip(): part for part in ptx.split(".entry ")[1:]}


@needs_nvrtc
def test_bfloat16_rows_compile_to_16_byte_loads_and_stores():
    ptx = _ptx_functions(source(softmax, BF16_ROW))
    assert set(ptx) == {"rows_t0_T9", "rows_t0_T9_warp", "rows_t0_T9_warp4"}
    for text in ptx.values():  # (rows too long for shared memory read with L2 hints: bz_load_keep)
        assert re.search(r"ld\.global\.(nc\.)?v4\.u32", text) and "st.global.v4.u32" in text
    assert "ld.global.L2::cache_hint.v4.u32" in ptx["rows_t0_T9"] and "st.global.cs.v4.u32" in ptx["rows_t0_T9"]
    assert "bar.sync" in ptx["rows_t0_T9"] and "bar.sync" not in ptx["rows_t0_T9_warp"] + ptx["rows_t0_T9_warp4"]


@needs_nvrtc
def test_masked_softmax_and_norms_compile_with_warp_functions():
    bodies = []
    for dtype in (bz.bfloat16, bz.float16, bz.float32):
        row, vector = (dtype, 2), (dtype, 1)
        for src in (source(masked_softmax, row, MASK), source(layer_norm, row, vector, vector),
                    source(lambda x, w: [bz.ops.rms_norm(x, w, eps=1e-6)], row, vector)):
            assert all(src.warp_functions)
            body = src.body
            for name in src.functions:  # apart, in one translation unit
                body = re.sub(rf"\b{name}\b", f"{name}_{len(bodies)}", body)
            bodies.append(body)
    nvrtc.compile_ptx(cuda.with_prelude("\n".join(bodies)), "rows", "sm_90", ("-G",))


# --- the launch ----------------------------------------------------------------------------------
def test_one_warp_a_row_launches_the_warp_function():
    from braze.codegen.cuda_launch import LaunchPlanner, TaskLaunch
    from braze.codegen.cuda_plan import TaskSchedule

    task = TaskLaunch("t", "block_function", None, True, True, (4,), (0,), TaskSchedule(), register_row=8192,
                      warp_function="warp_function", warp_name="t_warp", warp_register_row=512,
                      narrow_warp_function="narrow_function", narrow_warp_name="t_warp4", narrow_warp_register_row=256)
    planner = LaunchPlanner([task], 256, sm_count=1, resident_blocks=lambda name, block, shared: 1)

    def plan(lanes: int, row: int):  # 67 rows; 4096 bytes of shared memory if the caches were used
        return planner._plan_register_task(task, 0, 67, lanes, row, 4096)

    held = plan(WARP, 512)  # rows the warp holds: 8 rows a block; misaligned ones use shared memory
    assert (held.function, held.function_name, held.grid, held.shared, held.scalars) == (
        "warp_function", "t_warp", 9, 4096, (WARP, 512, 0, 0))
    narrow = plan(WARP, 200)  # rows the narrow warp function holds: that one
    assert (narrow.function, narrow.function_name, narrow.scalars) == ("narrow_function", "t_warp4", (WARP, 200, 0, 0))
    longer = plan(WARP, 800)  # longer than a warp holds: the block function's general copy
    assert (longer.function, longer.function_name, longer.shared, longer.scalars[:2]) == (
        "block_function", "t", 4096, (WARP, 800))
    block = plan(256, 8192)  # rows of one block held in registers: no shared memory
    assert (block.function, block.function_name, block.grid, block.shared) == ("block_function", "t", 67, 0)
    few = plan(16, 40)
    assert (few.function, few.shared, few.scalars[:2]) == ("block_function", 4096, (16, 40))


def test_rows_whose_lanes_combine_share_a_block_where_each_lane_still_walks_a_dozen_elements():
    """A row of 1568 elements (batch_norm's channel of 32 x 7 x 7) on 128 lanes, two rows a block of
    256, each combining over its own warps (their results: tests/codegen/test_cuda_variance.py); a
    row of 4096 on the whole block; one kept in registers always the whole block."""
    from braze.codegen.cuda_launch import LaunchPlanner, TaskLaunch
    from braze.codegen.cuda_plan import TaskSchedule

    task = TaskLaunch("t", "block_function", None, True, True, (4,), (0,), TaskSchedule(), lane_combines=True)
    planner = LaunchPlanner([task], 256, sm_count=1, resident_blocks=lambda name, block, shared: 1)
    assert [planner._lanes(task, 67, n) for n in (100, 1024, 1568, 3072, 4096)] == [32, 64, 128, 256, 256]
    with bz.config.scope(disable="shared_blocks"):
        assert planner._lanes(task, 67, 1568) == 256
    in_registers = dataclasses.replace(task, register_row=4096)
    assert planner._lanes(in_registers, 67, 1568) == 256


def test_a_softmax_whose_row_is_the_whole_output_spans_no_blocks():
    """A softmax over every element of a one-element output (`softmax(x, 0).reshape([1])`): its task is
    one loop, which the planner once spread over blocks (a full reduction, or a split row). Blocks meet
    in the workspace one accumulator at a time, which an online sum and its maximum cannot: code
    generation failed (KeyError 'online_softmax_add'). The pair now combines over one row's lanes."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(bz.ops.reshape(bz.ops.softmax(x, axis=0), [1]))
    x = np.array([0.75], np.float32)
    source = engine.cuda_source(f, [x])
    assert "bz_online_" in source.body
    if nvrtc.available():
        nvrtc.compile_ptx(cuda.with_prelude(source.body), "softmax_one_row", "sm_90")
    if cuda_on_cpu.available():
        (got,), _ = cuda_on_cpu.run_on_cpu(f, [x])
        np.testing.assert_array_equal(got, [1.0])


@pytest.mark.parametrize("row", [4096, 2056, 2050])
def test_a_narrow_block_keeps_bfloat16_rows_in_registers_and_normalizes_them(row):
    """A kernel compiled for blocks of 128 threads (cuda_plan.NARROW_BLOCK) keeps 64 bytes of a
    bfloat16 row a thread: 4 vectors of 8, so rows up to 4096 stay in registers. Rows the vectors do
    not divide (2050) take the general path. Both match float64 layer_norm within bfloat16 rounding."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.layer_norm(f.define_tensor((-1, -1), dtype=bz.bfloat16)))
    x = np.random.default_rng(row).standard_normal((3, row)).astype(ml_dtypes.bfloat16)
    executor, _, _ = cuda_on_cpu.cuda_executor(f, [x], block_size=128)
    assert "bz_bfloat168 bz_rc0[4];" in executor.compiled.generated.body
    if not cuda_on_cpu.available():
        pytest.skip("no C++ compiler for the CUDA-on-CPU harness")
    (got,), launches = cuda_on_cpu.run_on_cpu(f, [x], block_size=128)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="needs a C++ compiler")
@pytest.mark.parametrize("shape", [(40, 1024), (9, 1000), (3, 1021)])
def test_softmax_backward_rows_of_1024_on_a_warp_match_the_reference_on_a_fake_gpu(shape):
    """y and dy held in a warp's registers (256 bytes a lane), run on the CPU, outputs poisoned first;
    rows of 1021 are misaligned from the second on: the warp's plain loops."""
    rng = np.random.default_rng(3)
    y, dy = rng.random(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    with bz.config.scope(enable="poison_outputs"):
        (got,), launched = cuda_on_cpu.run_on_cpu(fusion(softmax_backward, (bz.float32, 2), (bz.float32, 2)),
                                                  [y, dy], sm_count=2, resident=2)
    assert [name.endswith("_warp") for name, *_ in launched] == [True]
    want = y.astype(np.float64) * (dy - (y.astype(np.float64) * dy).sum(1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
