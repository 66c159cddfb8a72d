"""The CUDA C++ of loop kernels (`@bz.kernel`), no GPU needed: a golden kernel, names C++ cannot take,
locals C++ scopes would lose, and NVRTC compiling every kernel of the shared cases, the task-fusion
decision kernels and random fuzzer programs (where NVRTC is installed)."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from kernel_cases import all_cases

import braze as bz
from braze.codegen import cuda_loops
from braze.codegen.cuda_names import Names, is_reserved
from braze.compile import nvrtc
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaLoopKernel
from braze.errors import UnsupportedError
from braze.frontend.kernel_lang import ArrayType
from braze.kir import nodes as k

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
OPTIONS = ("--fmad=false",)  # as CudaLoopKernel compiles
CASES = all_cases()


def compile_source(source: cuda_loops.LoopCudaSource, name: str) -> bytes:
    return nvrtc.compile_cubin(source.text, name, "sm_90", OPTIONS)


@bz.kernel
def integrate(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], f: bz.Array[bz.float32, 1], dt: bz.float32):
    for i in range(x.shape[0]):
        v[i] += f[i] * dt
    for i in range(x.shape[0]):
        x[i] += v[i] * dt


def test_integrate_golden():
    x = np.zeros(8, np.float32)
    source = integrate.cuda_source(x, x.copy(), x.copy(), 0.5)
    body = source.body.split("\n", 2)[2]  # after the header comment, which names this file
    assert body == textwrap.dedent("""\
        extern "C" __global__ void __launch_bounds__(256)
        integrate_t0__integrate_t1(const BzArgs<10> bz_args) {
          float* __restrict__ const x = (float*)bz_args.s[0];
          const long long x_shape0 = bz_args.s[1];
          float* __restrict__ const v = (float*)bz_args.s[3];
          const float* __restrict__ const f = (const float*)bz_args.s[6];
          const float dt = __int_as_float((int)(bz_args.s[9]));
          const long long bz_begin = 0LL, bz_end = x_shape0;
          for (long long i = bz_begin + (long long)blockIdx.x * blockDim.x + threadIdx.x;
               i < bz_end; i += (long long)gridDim.x * blockDim.x) {
            v[i] = bz_add(v[i], bz_mul(f[i], dt));
            x[i] = bz_add(x[i], bz_mul(v[i], dt));
          }
        }
        """)
    assert source.functions == ("integrate_t0__integrate_t1",)


def test_unfused_tasks_are_one_function_each_and_overlapping_arrays_drop_restrict():
    x = np.zeros(8, np.float32)
    unfused = bz.kernel(fuse_tasks=False)(integrate.fn).cuda_source(x, x.copy(), x.copy(), 0.5)
    assert unfused.functions == ("integrate_t0", "integrate_t1") and unfused.body.count("__global__") == 2
    same = integrate.cuda_source(x, x, x, 0.5)  # one array three times: no fusion, no __restrict__
    assert "__restrict__" not in same.body and same.body.count("__global__") == 2


def test_serial_tasks_and_elif_chains_read_like_the_python():
    case = next(c for c in CASES if c.name == "collatz")
    body = case.kernel.cuda_source(*case.args(np.random.default_rng(0))).body
    assert "} else if (" in body and "while ((x != 1LL))" in body and "break;" in body and "continue;" in body
    assert re.search(r"for \(long long (j_\d) = 10LL; \1 > 0LL; \1 \+= -3\)", body)
    serial = next(c for c in CASES if c.name == "serial_tasks")
    body = serial.kernel.cuda_source(*serial.args(np.random.default_rng(0))).body
    assert body.count("// a serial task: the runtime launches one thread") == 2


def test_names_cpp_cannot_take_are_renamed():
    case = next(c for c in CASES if c.name == "keyword_names")
    body = case.kernel.cuda_source(*case.args(np.random.default_rng(0))).body
    for renamed in ("v_new", "v_threadIdx", "v_int", "v_float", "v_this", "v_delete", "v_template", "v_blockIdx",
                    "v_bz_args", "v_exp"):
        assert f" {renamed} = " in body, renamed
    assert "v_new_shape0 = bz_args" in body and "long long new_shape0 = v_new_shape0;" in body
    assert "expf(" in body  # the math function itself is still reachable


@pytest.mark.parametrize("name, expected", [("int", "v_int"), ("threadIdx", "v_threadIdx"), ("__x", "v_x"),
                                            ("_Up", "v_Up"), ("bz_begin", "v_bz_begin"), ("sqrtf", "v_sqrtf"),
                                            ("float4", "v_float4"), ("atomicAdd", "v_atomicAdd"),
                                            ("\u03b1", "v_u03b1"), ("w[0]", "v_w_0_"), ("speed", "speed")])
def test_reserved_names(name, expected):
    assert Names()(name) == expected


def test_a_renamed_name_never_meets_a_name_it_could_be():
    names = Names()
    assert [names("v_int"), names("int"), names(("field", "x", 0), "x_shape0"), names("x_shape0")] == \
        ["v_int", "v_int_2", "x_shape0", "x_shape0_2"]
    assert is_reserved("class") and not is_reserved("klass")


def test_a_local_first_set_in_a_branch_is_declared_at_the_top():
    case = next(c for c in CASES if c.name == "locals_and_updates")
    body = case.kernel.cuda_source(*case.args(np.random.default_rng(0))).body
    loop_body = body.split("gridDim.x * blockDim.x) {\n", 1)[1]
    assert loop_body.lstrip().startswith("double late = 0x0.0p+0;")
    assert "      late = bz_mul(acc" in body


def test_a_loop_index_read_after_its_loop_is_declared_at_the_top():
    i, j = k.Var("i"), k.Var("j")
    out = k.ArrayParam("out", bz.int64, 1, (1,))
    body = (k.For(j, k.Const(0, bz.int64), k.Const(4, bz.int64), ()), k.Store(out, (i,), j))
    kernel = k.Kernel("after", (out,), (k.Task("after_t0", "range_for", body, i, k.Const(0, bz.int64),
                                                k.ArrayExtent(out, 0)),))
    text = cuda_loops.generate(kernel).body
    assert "long long j = 0LL;" in text and "for (j = 0LL; j < 4LL; ++j)" in text


def test_what_the_loop_generator_does_not_take_is_an_error():
    i = k.Var("i")
    kernel = k.Kernel("sync", (), (k.Task("sync_t0", "range_for", (k.Sync(),), i),))
    with pytest.raises(UnsupportedError, match="barriers"):
        cuda_loops.generate(kernel)
    many = tuple(k.ArrayParam(f"a{n}", bz.float32, 3) for n in range(80))
    with pytest.raises(UnsupportedError, match="bytes of kernel arguments"):
        cuda_loops.generate(k.Kernel("wide", many, ()))


def test_loop_kernels_compile_without_fused_multiply_adds():
    x = np.zeros(8, np.float32)
    integrate(x, x.copy(), x.copy(), 0.5)
    kernel = integrate.last_entry.launcher.kernel
    assert "--fmad=false" in CudaLoopKernel(kernel, CompileParams(arch="sm_90")).options()
    assert "--fmad=false" not in CudaLoopKernel(kernel, CompileParams(arch="sm_90", fast_math=True)).options()


# --- NVRTC ----------------------------------------------------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_case_compiles_with_nvrtc(case):
    args = case.args(np.random.default_rng(0))
    case.kernel(*args)  # runs on the CPU too: the case itself is sound
    for kernel in (case.kernel, bz.kernel(fuse_tasks=False, debug=True)(case.kernel.fn)):
        assert compile_source(kernel.cuda_source(*args), case.name)[:4] == b"\x7fELF"


def _load_test_module(folder: str, name: str):
    path = Path(__file__).parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"braze_tests_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _decision_kernels():
    """The task-fusion decision kernels of tests/passes/test_fuse_tasks.py (their CUDA depends only on
    the argument types: arrays of each annotated dtype and rank will do)."""
    module = _load_test_module("passes", "test_fuse_tasks")
    found = [pytest.param(fn, id=name) for name, fn in vars(module).items()
             if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith(("test_", "_"))
             and any(isinstance(p.annotation, ArrayType) for p in inspect.signature(fn).parameters.values())]
    return found + [pytest.param(module._same_index_kernel(index), id=f"index {index}")
                    for index in ("i ^ 5", "n - 1 - i")]


def _arguments_like(fn) -> list:
    args = []
    for p in inspect.signature(fn).parameters.values():
        if isinstance(p.annotation, ArrayType):
            args.append(np.zeros((40,) * p.annotation.ndim, p.annotation.dtype.numpy))
        else:
            args.append(16)
    return args


@needs_nvrtc
@pytest.mark.parametrize("fn", _decision_kernels())
def test_task_fusion_decision_kernels_compile(fn):
    args = _arguments_like(fn)
    for kernel in (bz.kernel(fn), bz.kernel(fuse_tasks=False)(fn)):
        compile_source(kernel.cuda_source(*args), fn.__name__)


FUZZ = _load_test_module("passes", "test_fuzz_tasks")


@needs_nvrtc
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FUZZ.programs())
def test_random_task_programs_compile(program):
    arrays, columns, overlapping, tasks = program
    kernel = bz.kernel(FUZZ.load(FUZZ.render(arrays, columns, tasks, atomics=True)))
    compile_source(kernel.cuda_source(*FUZZ.inputs(arrays, columns, overlapping, 0)), "program")


VECTOR_FUZZ = _load_test_module("frontend", "test_fuzz_vector_programs")


@needs_nvrtc
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VECTOR_FUZZ.programs())
def test_random_vector_programs_compile(program):
    arrays, tasks = program
    kernel = bz.kernel(VECTOR_FUZZ.load(VECTOR_FUZZ.render(arrays, tasks, python=False)))
    compile_source(kernel.cuda_source(*VECTOR_FUZZ.inputs(arrays, 0)), "program")


@bz.kernel
def negated_literal(out: bz.Array[bz.float32, 1]):
    for i in range(out.shape[0]):
        out[i] = -bz.float32(-1.25)


@needs_nvrtc
def test_the_negation_of_a_negative_literal_is_no_decrement():
    out = np.zeros(4, np.float32)
    negated_literal(out)
    assert out.tolist() == [1.25] * 4
    source = negated_literal.cuda_source(out)
    assert "(-(-0x1.4" in source.body
    compile_source(source, "negated_literal")
