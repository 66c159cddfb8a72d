"""Compile work grows with a fusion's ops, however much it reuses values.

A value used twice is one Kernel IR node (a DAG); each stage must visit each distinct node once.
The work of every stage is counted in Python function calls (cProfile's count: the same on any
machine, however loaded) and the generated code in characters, at n and 2n ops: linear growth at
most doubles them, a stage walking the DAG as a tree multiplies them by a power of the reuse.
"""

from __future__ import annotations

import cProfile
import pickle
import pstats
import time

import numpy as np
import pytest
import reuse_fusions as programs

import braze as bz
from braze import config, engine
from braze.codegen import cuda, llvm
from braze.compile import nvrtc
from braze.kir import nodes as k
from braze.kir.printer import kernel as kernel_text
from braze.passes.fuse_tasks import fuse_tasks


def lazy_chain(ops, x, n: int):
    """The chain under a `where` branch: each step's DAG is where the CUDA C++ `?:` may skip it."""
    t = x
    for _ in range(n):
        t = ops.where(x < 0.5, t * ops.sin(t) + t, x)
    return t


def gradients(ops, x, row, n: int) -> list:
    """`n` groups of a few ops over x, each giving a column sum (a weight gradient) and a row sum: a
    GPU plan merges the column tasks where the merged task still splits across blocks
    (engine._merged_row_tasks) and lets row tasks carry them (codegen/cuda_inner_outer.py)."""
    outputs = []
    for group in range(n):
        h = ops.tanh(x * row + (group + 1) / n) * x
        outputs += [ops.sum(h * x, axes=[0]), ops.sum(h, axes=[1])]
    return outputs


BUILDS = {
    "chain": lambda ops, x, row, n: [programs.chain(ops, x, n)],
    "lazy_chain": lambda ops, x, row, n: [lazy_chain(ops, x, n)],
    "wide": lambda ops, x, row, n: programs.wide(ops, x, row, 8 * n),
    "rolls": lambda ops, x, row, n: [programs.rolls(ops, x, n)],
    # each step read at three shifts gets a task of its own (lower/values.py, ELEMENTWISE_PER_TENSOR)
    "stencil_steps": lambda ops, x, row, n: [programs.stencil_steps(ops, x, n)],
    "gradients": lambda ops, x, row, n: gradients(ops, x, row, 4 * n),  # 40 ops at n = 2
}


def fusion(build, n: int) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        row = f.define_tensor(shape=(-1,), dtype=bz.float32)
        for out in build(bz.ops, x, row, n):
            f.add_output(out)
    return f


def inputs(rows: int = 16, cols: int = 33) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 0, (rows, cols)).astype(np.float32), rng.uniform(-1, 1, cols).astype(np.float32)]


def stages(f: bz.Fusion) -> dict:
    """Each compile stage of `f` on the CPU and (its source) for CUDA, as a thunk."""
    key = engine.signature(f, engine.bind_inputs(f, inputs()))
    cpu = engine.lower_fusion(f, key).kernel
    gpu = engine.plan_kernel(f, key, views_on_host=False)[1]
    return {
        "lower and simplify": lambda: engine.lower_fusion(f, key),
        "plan for a GPU": lambda: engine.plan_kernel(f, key, views_on_host=False, gpu=True),
        "kernel_text": lambda: kernel_text(cpu),
        "fuse_tasks": lambda: fuse_tasks(cpu),
        "llvm": lambda: llvm.generate(cpu),
        "cuda": lambda: cuda.generate(gpu, restrict=True),
    }


def calls(thunk) -> int:
    profiler = cProfile.Profile()
    profiler.enable()
    thunk()
    profiler.disable()
    return pstats.Stats(profiler).total_calls


@pytest.mark.parametrize("program", BUILDS)
@pytest.mark.parametrize("disable", ["", "simplify"])
def test_every_stage_does_work_linear_in_the_ops(program, disable):
    with config.scope(disable=disable):
        small, large = (stages(fusion(BUILDS[program], n)) for n in (4, 8))
        for stage in small:
            before, after = calls(small[stage]), calls(large[stage])
            assert after < 2.5 * before, f"{stage}: {before} calls at n=4, {after} at n=8"


def test_a_200_op_fusion_plans_for_a_gpu_in_bounded_work():
    f = fusion(BUILDS["gradients"], 12)  # 48 column sums, 48 row sums, 200 ops
    key = engine.signature(f, engine.bind_inputs(f, inputs()))
    work = calls(lambda: engine.plan_kernel(f, key, views_on_host=False, gpu=True))
    assert work < 1_500_000, f"{work} Python calls"  # 1.1M; 2.1M when walks met shared expressions once a path


def generated(f: bz.Fusion) -> dict[str, int]:
    """The characters of each form of `f`'s code."""
    key = engine.signature(f, engine.bind_inputs(f, inputs()))
    cpu = engine.lower_fusion(f, key).kernel
    gpu = engine.plan_kernel(f, key, views_on_host=False)[1]
    return {"kernel_text": len(kernel_text(cpu)), "llvm": len(llvm.generate(cpu)),
            "cuda": len(cuda.generate(gpu, restrict=True).body)}


@pytest.mark.parametrize("program", BUILDS)
def test_generated_code_grows_linearly(program):
    small, large = (generated(fusion(BUILDS[program], n)) for n in (20, 40))
    for form in small:
        assert large[form] < 2.2 * small[form], f"{form}: {small[form]} characters at n=20, {large[form]} at n=40"


def dag(depth: int) -> k.Expr:
    """`t = t * sin(t) + t`, `depth` times, as Kernel IR: 2**depth paths through 4 * depth nodes."""
    t = k.Var("x", bz.float32)
    for _ in range(depth):
        t = k.Binary("add", k.Binary("mul", t, k.Unary("sin", t, bz.float32), bz.float32), t, bz.float32)
    return t


def test_a_value_built_twice_is_one_node_hashed_once():
    first, second, copied = dag(20), dag(20), pickle.loads(pickle.dumps(dag(20)))
    assert second is first and copied is first
    # Hashing or comparing along the paths would take a million calls.
    assert calls(lambda: (hash(first), first == second, len({first, second, copied}))) < 100


def test_constants_equal_in_python_stay_distinct_nodes():
    zero, negative_zero = k.Const(0.0, bz.float32), k.Const(-0.0, bz.float32)
    assert zero != negative_zero and str(negative_zero.value) == "-0.0"
    assert k.Const(1, bz.float32) != k.Const(1.0, bz.float32)
    assert k.Const(float("nan"), bz.float32) == k.Const(float("nan"), bz.float32)


@pytest.mark.parametrize("program, n", [("chain", 40), ("lazy_chain", 40), ("wide", 25), ("stencil_steps", 12)])
def test_reuse_heavy_fusions_compile_fast_and_match_numpy(program, n):
    f = fusion(BUILDS[program], n)
    x, row = inputs(64, 100)
    started = time.perf_counter()
    results = f.execute([x, row])
    assert time.perf_counter() - started < 20  # 0.1 to 1 s; an exponential stage takes minutes
    expected = BUILDS[program](programs.NUMPY, x.astype(np.float64), row.astype(np.float64), n)
    for result, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(result, want, rtol=2e-5, atol=1e-5)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_a_200_op_fusion_compiles_with_nvrtc():
    src = engine.cuda_source(fusion(BUILDS["wide"], 25), inputs())
    nvrtc.compile_ptx(cuda.with_prelude(src.body), "wide", "sm_90", ("-G",))  # unoptimized: the C++ is valid
