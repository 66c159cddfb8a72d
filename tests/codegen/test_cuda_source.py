"""The generated CUDA C++ (no GPU needed): a golden kernel, the lane plan of each scheduler's
shape of task, the row caches, and compiling with NVRTC where it is installed."""

from __future__ import annotations

import re
import textwrap

import ml_dtypes
import numpy as np
import pytest

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_launch import lanes_for
from braze.compile import nvrtc


def source(build, *inputs: np.ndarray) -> cuda.CudaSource:
    with bz.Fusion() as f:
        for out in build(f):
            f.add_output(out)
    return engine.cuda_source(f, list(inputs))


def matrix(*shape, dtype=np.float32) -> np.ndarray:
    return np.ones(shape, dtype)


def test_pointwise_kernel_golden():
    src = source(lambda f: [bz.ops.relu(f.define_tensor([-1]) * f.define_tensor([-1]) + 1.5)], matrix(4), matrix(4))
    assert src.body == textwrap.dedent("""\
        // fusion: 1 task(s), from fusion

        extern "C" __global__ void __launch_bounds__(256)
        fusion_t0_T5(const BzArgs<10> a, const long long lanes,
            const long long cached_row, unsigned char* const bz_partials, unsigned* const bz_finished) {
          const float* __restrict__ const T0_ = (const float*)a.s[0];
          const float* __restrict__ const T1_ = (const float*)a.s[3];
          float* __restrict__ const T5_ = (float*)a.s[6];
          const int T0_s0 = (int)(a.s[9]);
          const int task_begin = 0, task_end = T0_s0;
          const bool bz_aligned = ((reinterpret_cast<unsigned long long>(&T0_[0]) & 15) == 0)
              && ((reinterpret_cast<unsigned long long>(&T1_[0]) & 15) == 0)
              && ((reinterpret_cast<unsigned long long>(&T5_[0]) & 15) == 0);
          const int bz_vectors = bz_aligned ? (task_end - task_begin) / 4 : 0;
          for (int bz_vector = (int)blockIdx.x * blockDim.x + threadIdx.x; bz_vector < bz_vectors;
               bz_vector += (int)gridDim.x * blockDim.x) {
            const int p1_4 = task_begin + 4 * bz_vector;
            const bool active = true;
            const float4 v0_p1 = *reinterpret_cast<const float4*>(&T0_[p1_4]);
            const float4 v1_p1 = *reinterpret_cast<const float4*>(&T1_[p1_4]);
            float4 w0_p1;
            {
              const int p1 = p1_4 + 0;
              w0_p1.x = bz_relu(bz_add(bz_mul(v0_p1.x, v1_p1.x), 0x1.8000000000000p+0f));
            }
            {
              const int p1 = p1_4 + 1;
              w0_p1.y = bz_relu(bz_add(bz_mul(v0_p1.y, v1_p1.y), 0x1.8000000000000p+0f));
            }
            {
              const int p1 = p1_4 + 2;
              w0_p1.z = bz_relu(bz_add(bz_mul(v0_p1.z, v1_p1.z), 0x1.8000000000000p+0f));
            }
            {
              const int p1 = p1_4 + 3;
              w0_p1.w = bz_relu(bz_add(bz_mul(v0_p1.w, v1_p1.w), 0x1.8000000000000p+0f));
            }
            if (active) *reinterpret_cast<float4*>(&T5_[p1_4]) = w0_p1;
          }
          const int bz_rest = task_begin + 4 * bz_vectors;
          for (int bz_row = (int)blockIdx.x * blockDim.x + threadIdx.x; bz_row < task_end - bz_rest;
               bz_row += (int)gridDim.x * blockDim.x) {
            const int row = bz_rest + bz_row;
            const bool active = true;
            const int lane = 0;
            const int p1 = row;
            if (active && lane == 0) T5_[p1] = bz_relu(bz_add(bz_mul(T0_[p1], T1_[p1]), 0x1.8000000000000p+0f));
          }
        }
        """)
    assert src.lane_plans[0].loops == {}


def test_softmax_spreads_rows_over_lanes_and_caches_the_row():
    src = source(lambda f: [bz.ops.softmax(f.define_tensor([-1, -1]), -1)], matrix(4, 8))
    (plan,), (caches,) = src.lane_plans, src.row_caches
    assert plan.coalesces and sorted(c for accs in plan.loops.values() for _, c in accs) == [
        "reduce_add", "reduce_maximum"]
    # Twice each: the copy for rows held in registers and the general one.
    assert src.body.count("bz_lane_reduce(") == 4 and "BzReduceMax()" in src.body
    assert len(caches) == 1 and caches[0].position == 0  # x, read by all three loops, from DRAM once
    # The sum's loop replaces each x by exp(x - max); the last loop reads it instead of a second exp.
    (cache,) = caches
    assert cache.update.op == "exp" and [cache.role(i) for i in cache.loops] == ["load", "update", "value"]
    last_loop = src.body[src.body.rindex("for (int j"):]
    assert "expf" not in last_loop.split("cached_row ?")[1].split(":")[0]


def test_long_rows_of_softmax_are_held_in_registers():
    src = source(lambda f: [bz.ops.softmax(f.define_tensor([-1, -1]), -1)], matrix(4, 8))
    assert src.register_rows == (8192,)  # 8 float4 a thread of a 256-thread block
    body = src.body.split(f"{src.warp_functions[0]}(")[0]  # the task's function for a row a block
    test = "if ((lanes32 == 256) && ((T0_s1) <= 8192) && ((T0_s1) % 4 == 0)"
    assert body.count(test) == 1 and "float4 bz_rc0[8];" in body
    assert "row0 +=" not in body  # one block per group of rows: no grid-stride loop
    registers, general = body.split(test)[1].split("\n    } else {\n", 1)
    assert "row_cache0" not in registers and "bz_rc0" not in general
    # The first loop issues all its loads (fully unrolled, constant offsets) before using any.
    preload, use = registers.split("bz_rc0[r5_k] = *reinterpret_cast<const float4*>(&T0_[i2 * T0_st0 + r5_4]);", 1)
    assert "const int r5_4 = 4 * lane + r5_k * 1024;" in preload and "bz_maximum" not in preload
    assert "const float4 v0_r5 = bz_rc0[r5_k];" in use
    # exp(x - max) replaces x in its register; the last loop reads it back.
    assert "bz_rc0[r7_k] = u0_r7;" in registers and "e0_j3 = bz_rc0[j3_k];" in registers


def test_half_rows_in_registers_are_shorter():
    # 16-byte vectors of eight bfloat16, 32 bytes a thread: fewer registers a thread, more blocks resident.
    src = source(lambda f: [bz.ops.softmax(f.define_tensor([-1, -1], dtype=bz.bfloat16), -1)],
                 matrix(4, 8, dtype=ml_dtypes.bfloat16))
    assert src.register_rows == (4096,) and "bz_bfloat168 bz_rc0[2];" in src.body


def test_outer_reduction_keeps_one_thread_per_output_column():
    # sum over axis 0 of a row-major matrix: threads of a warp read neighbouring columns.
    src = source(lambda f: [bz.ops.sum(f.define_tensor([-1, -1]), axes=[0])], matrix(6, 5))
    assert not src.lane_plans[0].coalesces and src.schedules[0].kind == "columns"


def test_loads_under_a_condition_are_not_cached():
    # cat reads each input only inside its own range: hoisting the read out of its branch would
    # read out of bounds.
    src = source(lambda f: [bz.ops.cat([(a := f.define_tensor([-1, -1])), f.define_tensor([-1, -1])], -1).sum(1) +
                            bz.ops.cat([a, a], -1)[:, 0]], matrix(2, 3), matrix(2, 2))
    assert all(not caches for caches in src.row_caches)


def test_a_row_cache_is_sized_by_the_loop_that_fills_it():
    # keepdim var: the reductions run over axis 2 (3 long), the store loop over a size-1 axis.
    src = source(lambda f: [bz.ops.var(f.define_tensor([-1, -1, -1]), axes=2, keepdim=True)], matrix(4, 5, 3))
    (caches,) = src.row_caches
    assert [c.position for c in caches] == [0]


def test_a_full_reduction_spans_the_grid():
    total = source(lambda f: [bz.ops.sum(f.define_tensor([-1, -1]))], matrix(3, 4))
    assert total.grid_reductions == (1,) and "bz_last_of(bz_finished, gridDim.x)" in total.body
    assert total.schedules[0].kind == "flat"
    # A variance too: one pass of shifted sums (codegen/cuda_variance.py), so the grid meets once.
    spread = source(lambda f: [bz.ops.var(f.define_tensor([-1]))], matrix(5))
    assert spread.grid_reductions == (3,) and spread.schedules[0].kind == "flat"


@pytest.mark.parametrize("row, lanes", [(1, 1), (4, 1), (5, 2), (100, 32), (1023, 32), (1024, 256), (10**6, 256)])
def test_lanes_for_row_lengths(row, lanes):
    assert lanes_for(row, 256) == lanes


def test_half_headers_only_where_needed():
    plain = source(lambda f: [f.define_tensor([-1]) * 2.0], matrix(3))
    half = source(lambda f: [f.define_tensor([-1], dtype=bz.float16) * 2.0], matrix(3, dtype=np.float16))
    assert "#include <cuda_fp16.h>" not in plain.text and "#include <cuda_fp16.h>" in half.text


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_compile_error_names_the_kernel_and_keeps_the_source(tmp_path):
    with bz.config.scope(cache_dir=tmp_path), pytest.raises(bz.CompileError) as caught:
        nvrtc.compile_cubin('extern "C" __global__ void k() { nope(); }', "my_kernel", "sm_90")
    message = str(caught.value)
    assert "CUDA kernel 'my_kernel' failed to compile for sm_90" in message and '"nope" is undefined' in message
    assert (tmp_path / "failed" / "my_kernel.cu").read_text().startswith('extern "C"')


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_softmax_compiles_to_a_cubin():
    src = source(lambda f: [bz.ops.softmax(f.define_tensor([-1, -1], dtype=bz.bfloat16), -1)],
                 matrix(4, 8, dtype=bz.bfloat16.numpy))
    assert nvrtc.compile_cubin(src.text, "softmax", "sm_90")[:4] == b"\x7fELF"


def test_kernels_are_named_after_their_fusion():
    with bz.Fusion(name="my_softmax") as f:
        f.add_output(bz.ops.softmax(f.define_tensor([-1, -1]), -1))
    src = engine.cuda_source(f, [matrix(2, 3)])
    # the second for one warp a row, the third for rows that take half its room (cuda.narrow_warp)
    assert src.functions == ("my_softmax_t0_T7", "my_softmax_t0_T7_warp", "my_softmax_t0_T7_warp4")
    assert "void __launch_bounds__(256)\nmy_softmax_t0_T7(" in src.body
    with pytest.raises(bz.FusionDefinitionError, match=r"name: expected an identifier .*got 'two words'"):
        bz.Fusion(name="two words")


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_cuda_to_file_writes_each_kernel_under_its_name(tmp_path):
    from braze.compile.compiled_kernel import CompileParams
    from braze.compile.cuda_kernel import CudaCompiledKernel

    _, kernel, _ = engine.plan_kernel(_named_softmax(), (((False, True),), "int32", (True,)), views_on_host=False)
    with bz.config.scope(cache_dir=tmp_path, dump="cuda_to_file"):
        compiled = CudaCompiledKernel(kernel, CompileParams(block_size=128, max_registers=64, arch="sm_90")).compile()
    assert (tmp_path / "dump" / "dumped_t0_T7.cu").read_text() == compiled.source
    assert "__launch_bounds__(128)" in compiled.source and compiled.options() == ("--maxrregcount=64",)


def _named_softmax() -> bz.Fusion:
    with bz.Fusion(name="dumped") as f:
        f.add_output(bz.ops.softmax(f.define_tensor([-1, -1]), -1))
    return f


def test_layer_norm_computes_row_invariants_once_per_row():
    def layer_norm(f):
        x, w, b = f.define_tensor([-1, -1]), f.define_tensor([-1]), f.define_tensor([-1])
        return [bz.ops.layer_norm(x, w, b, eps=1e-5)]

    src = source(layer_norm, matrix(4, 64), matrix(64), matrix(64))
    last_loops = [loop_at(src.body, m.start()) for m in re.finditer(r"for \(int j3\w*", src.body)]
    # registers, vectors cached and not, a head, vectors and a tail (rows not cached, off the alignment),
    # plain; a warp's registers, plain; the narrow warp's the same
    assert len(last_loops) == 11
    # mean and rsqrt(var + eps) are computed before the loops that write the row, not per element.
    assert not any("sqrtf" in loop or "bz_truediv" in loop for loop in last_loops)


def loop_at(body: str, start: int) -> str:
    """The text of the loop whose header starts at `start`, to its closing brace."""
    depth = 0
    for at in range(body.index("{", start), len(body)):
        depth += {"{": 1, "}": -1}.get(body[at], 0)
        if depth == 0:
            return body[start:at + 1]
    raise AssertionError("unbalanced braces")


def test_softmax_divides_by_the_row_sum_once_and_tests_the_cache_once_per_row():
    src = source(lambda f: [bz.ops.softmax(f.define_tensor([-1, -1]), -1)], matrix(4, 64))
    assert "bz_truediv(0x1.0000000000000p+0f, bz_mul(acc" in src.body  # the reciprocal of the (scaled) row sum
    start = src.body.rindex("if (cached_row) {")
    cached_copy = src.body[start:src.body.index("} else {", start)]
    # In the copy of the last 16-byte loop for cached rows: exp(x - max) from the cache, times 1 / sum.
    assert "expf" not in cached_copy and "cached_row" not in cached_copy[len("if (cached_row) {"):]
    assert "bz_mul(" in cached_copy


def test_maximum_of_float32_is_branch_free_on_sm80():
    from braze.codegen.cuda import PRELUDE

    assert "max.NaN.f32" in PRELUDE and "min.NaN.f32" in PRELUDE


@pytest.mark.parametrize("dtype", [bz.float32, bz.float64, bz.bfloat16, bz.int32], ids=str)
def test_negation_of_floats_flips_the_sign(dtype):
    """-x, not 0 - x: negating 0.0 gives -0.0 as in NumPy. Integers keep the wrapping bz_neg."""
    src = source(lambda f: [-f.define_tensor([-1], dtype=dtype)], matrix(4, dtype=dtype.numpy))
    store = next(line for line in src.body.splitlines() if "T1_[p1] =" in line)
    assert ("bz_neg(T0_[p1])" in store) == (dtype == bz.int32)
    assert ("(-T0_[p1])" in store or "(-bz_bf16_bits_to_float(" in store) == dtype.is_floating
    if nvrtc.available():
        assert nvrtc.compile_ptx(src.text, "neg", "sm_90", ("-G",))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("test", ["isnan", "isinf", "isfinite"])
def test_a_float64_classification_is_a_bool_operand(test):
    """CUDA's isnan(double) is an int: clamp's template once failed to deduce one type from it."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float64)
        f.add_output(bz.ops.clamp(getattr(bz.ops, test)(x), False, True))
    source = engine.cuda_source(f, [np.zeros(3)])
    nvrtc.compile_ptx(cuda.with_prelude(source.body), "classify", "sm_90", ("-G",))
