"""Full reductions over arrays dense in memory (braze/codegen/cuda_grid.py, walk_dense), no GPU
needed: which reductions take the path and with what vectors, the suite's full sum and gradient
norm as written, NVRTC compiling the path for every dtype with a vector type, and the kernels run on
the CPU (tests/cuda_on_cpu.py) over extents 0, 1, odd and several blocks' worth, dense, strided and
one element into their buffer (the last two must take the element walk), outputs poisoned first,
against float64 NumPy."""

from __future__ import annotations

import ctypes
import re
from unittest import mock

import cuda_on_cpu
import numpy as np
import pytest
from dense_reduction_fusions import NUMPY, REDUCTIONS, check, fusion, operands
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.codegen import cuda
from braze.compile import nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")


def source(name: str, dtype: bz.DType, ndim: int = 1) -> str:
    reduction = REDUCTIONS[name]
    return engine.cuda_source(fusion(reduction, dtype, ndim), operands(reduction, dtype, (4,) * ndim)).body


def suite_source(name: str) -> str:
    """The case's CUDA at its GPU shape (arrays allocated, never touched)."""
    case = next(c for c in CASES if c.name == name)
    return engine.cuda_source(build_fusion(case, case.shape("gpu")), [np.empty(case.shape("gpu"), np.float32)]).body


def step_of(body: str) -> str:
    """The dense path's step: every thread's vectors of a tile, then their folds."""
    return re.search(r"bz_b \+= bz_tile\) \{\n(.*?)\n    \}\n", body, re.S).group(1)


# --- the text ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["full_sum", "grad_norm"])
def test_the_suites_full_reductions_load_four_float4_a_thread_a_step(name):
    body = suite_source(name)
    assert "__launch_bounds__(256, 6)" in body  # 1536 threads an SM: ptxas keeps the four loads in flight
    step = step_of(body)
    loads = re.findall(r"const float4 (bz_v0_\d) = \*reinterpret_cast<const float4\*>\(bz_p0 \+ ", step)
    assert loads == ["bz_v0_0", "bz_v0_1", "bz_v0_2", "bz_v0_3"]
    assert step.index("bz_v0_3 =") < step.index("acc1 = ")  # every load issued before the first fold
    for slot in ("acc1", "acc1_s1", "acc1_s2", "acc1_s3"):  # a chain of its own for each vector
        assert len(re.findall(rf"\b{slot} = bz_add\({slot}, ", step)) == 4
    # The copies meet in a fixed tree, then the block, then the blocks in block order.
    assert "acc1 = BzReduceAdd()(acc1, acc1_s1);\n    acc1_s2 = BzReduceAdd()(acc1_s2, acc1_s3);\n" \
           "    acc1 = BzReduceAdd()(acc1, acc1_s2);" in body
    assert "bz_carry" in body.split("} else {")[1]  # arrays not dense: the element walk, carrying digits
    with config.scope(disable="dense_reductions"):
        plain = suite_source(name)
    assert "float4" not in plain and "__launch_bounds__(256)\n" in plain


@pytest.mark.parametrize("name, dtype, vector, vectors, slots", [
    ("sum", bz.float32, "float4", 4, 4),
    ("sum", bz.bfloat16, "bz_bfloat168", 4, 4),
    ("sum", bz.float16, "bz_half8", 4, 4),
    ("sum", bz.float64, "bz_double4", 2, 2),
    ("sum", bz.int32, "int4", 4, 2),  # int64 accumulators: two copies
    ("dot", bz.float32, "float4", 2, 2),  # two arrays: 64 bytes a step in two vectors of each
    ("sum_as_float32", bz.bfloat16, "bz_bfloat168", 4, 4),
    ("max", bz.float32, "float4", 4, 4),
])
def test_each_dtype_moves_its_vectors(name, dtype, vector, vectors, slots):
    body = source(name, dtype, ndim=2)
    step = step_of(body)
    assert len(re.findall(rf"const {vector} bz_v0_\d+ = ", step)) == vectors
    copies = {m for m in re.findall(r"\b(acc\d+(?:_s\d)?) = ", step)}
    assert len(copies) == slots


def test_a_variance_keeps_one_copy_of_its_three_accumulators():
    # Sum, shifted sum and sum of squares (two of them float64): four copies spilled registers.
    with bz.Fusion() as f:
        f.add_output(bz.ops.var(f.define_tensor([-1, -1], dtype=bz.bfloat16), correction=1))
    body = engine.cuda_source(f, [np.ones((4, 4), NUMPY[bz.bfloat16])]).body
    step = step_of(body)
    assert len(re.findall(r"const bz_bfloat168 bz_v0_\d = ", step)) == 4
    assert not re.search(r"\bacc\w*_s1\b", body)


@pytest.mark.parametrize("build", [
    lambda x, b: bz.ops.sum(x + b),  # b repeats along the rows: dense only where there is one row
    lambda x, b: bz.ops.sum(x[:, 1:]),  # loads x[i, j + 1]: the same run, but never aligned when x is
], ids=["broadcast", "shifted"])
def test_reads_that_cannot_be_one_run_keep_the_element_walk(build):
    with bz.Fusion() as f:
        x, b = f.define_tensor([-1, -1]), f.define_tensor([-1])
        f.add_output(build(x, b))
    body = engine.cuda_source(f, [np.ones((4, 4), np.float32), np.ones(4, np.float32)]).body
    assert "bz_carry" in body
    if "bz_p0" in body:  # the shifted read may take the path; the kernel then tests its alignment
        assert "& 15) == 0)" in body


@needs_nvrtc
def test_the_dense_path_compiles_with_nvrtc_for_every_dtype():
    sources = [source(name, dtype, ndim) for name, dtype in [
        ("sum", bz.float32), ("sum", bz.bfloat16), ("sum", bz.float16), ("sum", bz.float64), ("sum", bz.int32),
        ("mean", bz.float32), ("max", bz.bfloat16), ("min", bz.float64), ("norm", bz.float32), ("dot", bz.bfloat16),
        ("dot", bz.float64), ("sum_as_float32", bz.bfloat16)] for ndim in (1, 3)]
    assert all("bz_p0" in s for s in sources)
    assert nvrtc.compile_ptx(cuda.with_prelude("\n".join(sources)), "dense_reductions", "sm_90", ("-G",))


# --- the kernels run on the CPU ------------------------------------------------------------------
DENSE_MARK = re.compile(r"const (?:unsigned|long long) bz_run = ")  # the dense path's first statement


def run_counting_dense(reduction, dtype, arrays):
    """The fusion's output run on the CPU (outputs poisoned first), how many blocks took the dense
    path, and whether the kernel has one."""
    if not cuda_on_cpu.available():
        pytest.skip("needs g++")
    library = cuda_on_cpu._library
    opened, written = [], []

    def counting(source, functions):
        written.append(DENSE_MARK.search(source) is not None)
        marked = "extern \"C\" { long long bz_dense_blocks = 0; }\n" + DENSE_MARK.sub(
            lambda mark: "if (threadIdx.x == 0) __atomic_fetch_add(&bz_dense_blocks, 1, __ATOMIC_RELAXED);\n    "
            + mark.group(0), source)
        opened.append(library(marked, functions))
        return opened[-1]

    with mock.patch.object(cuda_on_cpu, "_library", counting), config.scope(enable="poison_outputs"):
        outputs, launches = cuda_on_cpu.run_on_cpu(fusion(reduction, dtype, arrays[0].ndim), arrays)
    counter = ctypes.c_longlong.in_dll(opened[-1], "bz_dense_blocks")  # one library a source: reset it
    blocks, counter.value = counter.value, 0
    return outputs[0], blocks, written[-1]


# (reduction, dtype, shape, buffer or offset, whether it takes the dense path). No element and one
# element are other signatures (an extent of 0 or 1 has no stride to speak of): the GPU tests run them.
CPU_CASES = [
    ("sum", bz.float32, (7,), 0, True),  # less than a vector a thread: the tail alone
    ("sum", bz.float32, (4096 * 3 + 5,), 0, True),  # several blocks, whole steps, a rest, a tail
    ("sum", bz.float32, (4096 * 3 + 5,), 1, False),  # one element into its buffer: misaligned
    ("sum", bz.float32, (37, 129), None, True),  # dense rows of odd length: one run all the same
    ("sum", bz.float32, (37, 129), (37, 132), False),  # rows apart
    ("dot", bz.bfloat16, (1031,), 0, True),
    ("dot", bz.bfloat16, (1031,), 1, False),
    ("norm", bz.float64, (3, 5, 67), None, True),
]


@pytest.mark.parametrize("name, dtype, shape, layout, dense", CPU_CASES,
                         ids=[f"{c[0]}-{c[1].name}-{'x'.join(map(str, c[2]))}-{c[3]}" for c in CPU_CASES])
def test_the_kernels_run_on_the_cpu(name, dtype, shape, layout, dense):
    reduction = REDUCTIONS[name]
    buffer, offset = (layout, 0) if isinstance(layout, tuple) else (None, layout or 0)
    arrays = operands(reduction, dtype, shape, buffer=buffer, offset=offset)
    out, blocks, written = run_counting_dense(reduction, dtype, arrays)
    assert written and (blocks > 0) == dense
    check(reduction, dtype, out, arrays)


def runs_dense(array: np.ndarray) -> bool:
    """Whether a kernel finds `array` dense over all of it: 16-byte aligned, each axis of more
    than one element stepping by the elements of the axes after it."""
    inner, steps = 1, []
    for extent, stride in zip(reversed(array.shape), reversed(array.strides)):
        steps.append(extent <= 1 or stride == inner * array.itemsize)
        inner *= extent
    return array.ctypes.data % 16 == 0 and all(steps)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.sampled_from([2, 3, 5, 8, 33, 130]), min_size=1, max_size=2),
       pad=st.sampled_from([0, 0, 1, 4]), offset=st.sampled_from([0, 0, 1, 2, 4]))
def test_generated_layouts_take_the_dense_path_exactly_when_dense(shape, pad, offset):
    # A float32 sum over the leading `shape` of a buffer whose rows are `pad` longer, `offset`
    # elements into it: the kernel's test against the layout's, and the sum against float64.
    shape = tuple(shape)
    buffer = shape[:-1] + (shape[-1] + pad,)
    arrays = operands(REDUCTIONS["sum"], bz.float32, shape, buffer=buffer, offset=offset)
    out, blocks, written = run_counting_dense(REDUCTIONS["sum"], bz.float32, arrays)
    assert written and (blocks > 0) == runs_dense(arrays[0])
    check(REDUCTIONS["sum"], bz.float32, out, arrays)
