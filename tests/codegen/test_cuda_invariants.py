"""Row-invariant work of CUDA tasks done once a thread (braze/codegen/cuda_invariants.py): divisors of
index arithmetic as BzDivisors, and one alignment test a thread for the vector paths of row loops. The
text, each feature turned off, NVRTC compiling it, and the same results as NumPy on the CPU harness
(tests/cuda_on_cpu.py) at odd and empty extents, for aligned, misaligned and mixed layouts."""

from __future__ import annotations

import re
from unittest import mock

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import config, engine
from braze import dtypes as dt
from braze.codegen.cuda_invariants import InvariantWriter, kernel_invariant
from braze.compile import nvrtc
from braze.kir import nodes as k

I32 = dt.int32
N = k.ScalarRef(k.ScalarParam("T0_s0", I32))
X = k.ArrayParam("x", dt.float32, 1, (1,))
P = k.Var("p", I32)


def test_what_is_kernel_invariant():
    assert kernel_invariant(N) and kernel_invariant(k.ArrayExtent(X, 0, I32))
    assert kernel_invariant(k.Binary("add", k.Binary("mul", N, k.Const(32, I32), I32), k.ArrayStride(X, 0, I32), I32))
    assert not kernel_invariant(P) and not kernel_invariant(k.Binary("floordiv", P, N, I32))
    assert not kernel_invariant(k.Cast(k.Load(X, (k.Const(0, I32),)), I32))


def rope(f, d=8):
    """RoPE's halves; rows of a constant length (as a model's head dimension is), which a thread takes
    many of: the per-row work is done once a thread (cuda_invariants.long_rows)."""
    x, cos = f.define_tensor([-1, -1, -1, d]), f.define_tensor([1, -1, 1, d])
    return x * cos + bz.ops.cat([-x[..., 4:], x[..., :4]], -1)


def source(arrays, **scope) -> str:
    with bz.Fusion(name="inv_rope") as f:
        f.add_output(rope(f))
    with config.scope(**scope):
        return engine.cuda_source(f, arrays).body


ROPE = [np.empty((2, 5, 3, 8), np.float32), np.empty((1, 5, 1, 8), np.float32)]


def source_long(arrays) -> str:
    with bz.Fusion(name="inv_rope_long") as f:
        x, cos = f.define_tensor([-1, -1, -1, -1]), f.define_tensor([1, -1, 1, -1])
        f.add_output(x * cos + bz.ops.cat([-x[..., 4:], x[..., :4]], -1))
    return engine.cuda_source(f, arrays).body


def test_rope_divides_by_divisors_computed_once_and_tests_alignment_once():
    body = source(ROPE)
    names = set(re.findall(r"const BzDivisor (bz_div\d+) = bz_divisor\(\(unsigned\)\((T0_s\d)\)\);", body))
    assert len(names) == 2 and "bz_index_" not in body
    assert re.search(r"bz_fast_remainder\(p1, bz_div\d\)", body)
    aligned = re.findall(r"const bool (bz_aligned_rows\d+) = (.*);", body)
    assert len(aligned) == 1  # both halves start at constant offsets, multiples of the vector: one test
    for name, test in aligned:
        assert "& 15) == 0)" in test and "T0_st0 % 4 == 0" in test and "[" not in test  # no row's address in it
        assert body.count(f"({name} || (") == 2  # each half's per-row test only where it fails


def test_each_feature_turns_off_alone():
    divisions_off = source(ROPE, disable="fast_divisors")
    assert "BzDivisor" not in divisions_off and "bz_index_remainder(p1, T0_s" in divisions_off
    assert "bz_aligned_rows0 ||" in divisions_off
    alignment_off = source(ROPE, disable="uniform_alignment")
    assert "bz_aligned_rows" not in alignment_off and "bz_fast_remainder" in alignment_off


def test_rows_of_run_time_length_keep_their_per_row_work():
    """Over long rows the per-row work is small and the setup costs more: none is done once a thread."""
    body = source_long(ROPE)
    assert "bz_divisor(" not in body and "bz_aligned_rows" not in body and "bz_index_remainder(p1" in body


def test_a_row_start_on_a_unit_stride_is_aligned_where_the_row_length_is():
    """x.reshape(rows, -1) summed: row r starts at r * n on the unit-stride axis of x, aligned at every
    row where x is and n is a multiple of the vector (a division by a constant stays a shift)."""
    with bz.Fusion(name="inv_grouped") as f:
        x = f.define_tensor([-1, -1, -1])
        f.add_output(bz.ops.sum(bz.ops.reshape(x, [x.shape[0], 4, -1]), axes=[2]))
    with mock.patch.object(InvariantWriter, "long_rows", lambda self: False):  # as if the rows were short
        body = engine.cuda_source(f, [np.empty((3, 8, 5), np.float32)]).body
    (test,) = set(re.findall(r"const bool bz_aligned_rows0 = (.*);", body))
    row_length = "bz_index_floordiv(bz_mul(bz_mul(T0_s0, T0_s1), T0_s2), bz_mul(T0_s0, 4))"
    assert test == f"((reinterpret_cast<unsigned long long>(T0_) & 15) == 0) && " \
                   f"(((unsigned long long)({row_length})) % 4 == 0)"
    assert "(bz_aligned_rows0 || (" in body and "(p1 & 3)" in body


class _Writer(InvariantWriter):
    """The tests a thread of InvariantWriter, over a task of one `Let`."""

    def __init__(self, let: k.Let) -> None:
        self.task = k.Task("t", "range_for", (let,), P, k.Const(0, I32), N)

    def expr(self, e: k.Expr) -> str:
        return e.param.name if isinstance(e, k.ScalarRef) else e.name if isinstance(e, k.Var) else str(e.value)


@pytest.mark.parametrize("index, scale, expected", [
    (P, 8, "true"), (P, 6, None), (P, "st", "(st % 4 == 0)"),  # changes by row: only the stride counts
    (k.Const(8, I32), 1, "true"), (k.Const(6, I32), 1, None), (k.Const(8, I32), "st", "true"),
    (k.Binary("mul", P, N, I32), 1, "(((unsigned long long)(T0_s0)) % 4 == 0)"),
    (k.Binary("mul", k.Binary("mul", P, N, I32), k.Const(2, I32), I32), "st",
     "(((unsigned long long)(T0_s0) * (unsigned long long)(st) * 2) % 4 == 0)"),
    (k.Binary("add", k.Binary("mul", P, k.Const(12, I32), I32), k.Const(4, I32), I32), 1, "true"),
    (k.Binary("sub", P, k.Var("h", I32), I32), 1, None),
    (k.Var("h", I32), 1, "(((unsigned long long)(h)) % 4 == 0)"),  # a hoisted invariant (the task's Let)
    (k.Binary("add", P, k.Const(2, I32), I32), 4, "true"),
])
def test_which_row_starts_a_test_a_thread_covers(index, scale, expected):
    writer = _Writer(k.Let(k.Var("h", I32), k.Binary("add", N, k.Const(1, I32), I32)))
    assert writer.multiple_of(index, scale, 4) == expected


@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
@pytest.mark.parametrize("index", [dt.int32, dt.int64])
def test_the_invariants_compile_with_nvrtc(index):
    with bz.Fusion(name="inv_nvrtc") as f:
        f.add_output(rope(f))
    with mock.patch.object(engine, "index_type", return_value=index):
        src = engine.cuda_source(f, ROPE)
    # 64-bit index arithmetic divides as before; the alignment test is the same.
    assert ("BzDivisor" in src.body) == (index == dt.int32) and "bz_aligned_rows0" in src.body
    assert nvrtc.compile_ptx(src.text, "inv_nvrtc", "sm_90")


def _layouts():
    """(x, cos) with x contiguous (every row aligned), sliced off its first element (none aligned) and
    sliced from rows of 10 (every other row aligned), at odd and empty extents."""
    rng = np.random.default_rng(3)
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    return [
        (normal(3, 5, 3, 8), normal(1, 5, 1, 8)),
        (normal(2, 7, 3, 9)[..., 1:], normal(1, 7, 1, 8)),
        (normal(2, 3, 5, 10)[..., :8], normal(1, 3, 1, 8)),
        (normal(2, 0, 3, 8), normal(1, 0, 1, 8)),
    ]


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("case", range(4))
def test_rope_gives_the_reference_for_every_layout_on_the_cpu_harness(case):
    x, cos = _layouts()[case]
    with bz.Fusion(name="inv_cpu") as f:
        f.add_output(rope(f))
    (out,), _ = run_on_cpu(f, [x, cos])
    x64, cos64 = x.astype(np.float64), cos.astype(np.float64)
    want = x64 * cos64 + np.concatenate([-x64[..., 4:], x64[..., :4]], -1)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=1e-6, atol=1e-6)
