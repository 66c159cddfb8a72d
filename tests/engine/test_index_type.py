"""The index type of a fusion's kernel: int32 while every tensor's size and every input's reach stay
below the limit, int64 otherwise, decided per signature (so a new shape past the limit compiles the
int64 kernel instead of overflowing). The large cases are views of small buffers: nothing of 8 GB is
allocated, and only the decision and the generated code are looked at where running would be too big."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import engine
from braze.kir import kernel_text
from braze.runtime.inputs import bind_inputs

LIMIT = engine.INT32_INDEX_LIMIT


def _fusion(build, ranks, dtype=bz.float32):
    with bz.Fusion() as f:
        for out in build(*(f.define_tensor([-1] * rank, dtype=dtype) for rank in ranks)):
            f.add_output(out)
    return f


def _softmax():
    return _fusion(lambda x: [bz.ops.softmax(x, -1)], [2])


def _index_type(fusion, inputs) -> str:
    return engine.index_type(fusion, bind_inputs(fusion, inputs)).name


def _kernel_ir(fusion, inputs) -> str:
    key = engine.signature(fusion, bind_inputs(fusion, inputs))
    return kernel_text(engine.plan_kernel(fusion, key)[1])


def _huge_reach(rows: int = 3) -> np.ndarray:
    """A (rows, 4) view of a small buffer whose rows lie 2**30 elements apart: 8 GB apart in memory,
    so it may only be looked at, never read."""
    buffer = np.zeros(16, np.float32)
    return np.lib.stride_tricks.as_strided(buffer, (rows, 4), (2**30 * 4, 4))


def test_reach_sums_the_extent_times_the_stride_of_each_dimension():
    a = np.zeros((5, 7), np.float32)
    assert engine.reach(a) == 4 * 7 + 6
    assert engine.reach(a[::-1, ::2]) == 4 * 7 + 3 * 2  # negative strides count by their size
    assert engine.reach(np.broadcast_to(np.zeros(3, np.float32), (1000, 3))) == 2  # stride 0 reaches nothing
    assert engine.reach(np.zeros((0, 4), np.float32)) == 0
    assert engine.reach(_huge_reach()) == 2 * 2**30 + 3


def test_small_tensors_index_in_int32_on_both_backends():
    f, x = _softmax(), np.ones((4, 8), np.float32)
    assert _index_type(f, [x]) == "int32"
    ir = _kernel_ir(f, [x])
    assert ir.splitlines()[0].endswith(" index int32:") and "T0_s1: int32" in ir
    source = engine.cuda_source(f, [x]).body
    assert "const int T0_s1 = (int)(a.s[" in source and "long long row0" not in source
    assert "const int T0_st0 = (int)a.s[" in source  # the row stride, narrowed once at entry


def test_the_cpu_kernel_compiles_with_int32_params_and_matches_numpy():
    f, x = _softmax(), np.random.default_rng(0).standard_normal((5, 33)).astype(np.float32)
    (y,) = f.execute([x])
    (runtime,) = engine._cache_of(f).entries.values()
    compiled = runtime.executor.compiled
    assert compiled.params.index_type == "int32" and compiled.kernel.index_type == bz.int32
    assert "icmp slt i32" in compiled.source  # the loops count in 32 bits
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_an_input_reaching_past_the_limit_picks_int64():
    f = _fusion(lambda x: [x * 2.0], [2])
    assert _index_type(f, [np.ones((3, 4), np.float32)]) == "int32"
    assert _index_type(f, [_huge_reach()]) == "int64"  # 12 elements, but 2**31 apart
    ir = _kernel_ir(f, [_huge_reach()])
    assert " index " not in ir.splitlines()[0] and "T0_s1: int64" in ir
    source = engine.cuda_source(f, [_huge_reach()]).body
    assert "const long long T0_s1 = a.s[" in source and "for (long long row0" in source


def test_a_broadcast_input_counts_its_size_not_its_memory():
    f = _fusion(lambda x: [x + 1.0], [1])
    small = np.broadcast_to(np.ones(1, np.float32), (LIMIT - 1,))
    large = np.broadcast_to(np.ones(1, np.float32), (LIMIT,))  # one float of memory, LIMIT loop iterations
    assert _index_type(f, [small]) == "int32" and _index_type(f, [large]) == "int64"


def test_an_output_larger_than_every_input_picks_int64():
    f = _fusion(lambda x, y: [bz.ops.broadcast(x, [False, True]) * bz.ops.broadcast(y, [True, False])], [1, 1])
    x = np.ones(2**16, np.float32)
    assert _index_type(f, [x[:100], x[:100]]) == "int32"
    assert _index_type(f, [x, x]) == "int64"  # the product holds 2**32 elements


def test_a_new_shape_past_the_limit_is_a_new_signature():
    f = _fusion(lambda x: [x * 2.0], [2])
    small = engine.signature(f, bind_inputs(f, [np.ones((3, 4), np.float32)]))
    large = engine.signature(f, bind_inputs(f, [_huge_reach()]))
    assert small != large and small[1] == "int32" and large[1] == "int64"


def test_the_int64_kernel_runs_a_sum_over_two_to_the_31_elements():
    # 2**31 elements read from one byte of memory (a broadcast), summed per row on the CPU.
    f = _fusion(lambda x: [bz.ops.sum(x, axes=[1])], [2], dtype=bz.int8)
    x = np.broadcast_to(np.ones(1, np.int8), (2**16, 2**15))
    assert _index_type(f, [x]) == "int64"
    with bz.record() as rec:
        (total,) = f.execute([x])
    assert total.shape == (2**16,) and (total == 2**15).all() and len(rec.launches) == 1

