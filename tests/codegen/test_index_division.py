"""Index arithmetic of CUDA fusions divides as unsigned values where its operands are never negative
(braze/kir/signs.py, cuda_rules.index_division): the analysis, the text it gives, and the same
results on the CPU harness (tests/cuda_on_cpu.py) for views whose extents are 0, 1 and odd."""

from __future__ import annotations

import re
from unittest import mock

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import dtypes as dt
from braze import engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.codegen.cuda_rules import index_division
from braze.compile import nvrtc
from braze.kir import nodes as k
from braze.kir.signs import index_signs

I32 = dt.int32
N = k.ScalarParam("T0_s0", I32)  # an extent symbol
USER = k.ScalarParam("n", I32)  # a scalar input of the fusion
X = k.ArrayParam("x", dt.float32, 1, (1,))
P, Q = k.Var("p", I32), k.Var("q", I32)


def c(value: int) -> k.Const:
    return k.Const(value, I32)


def b(op: str, a: k.Expr, other: k.Expr) -> k.Binary:
    return k.Binary(op, a, other, I32)


def signs(*body: k.Stmt, begin: k.Expr | None = None):
    task = k.Task("t", "range_for", tuple(body), P, c(0) if begin is None else begin, k.ScalarRef(N))
    kernel = k.Kernel("kernel", (X, N, USER), (task,), index_type=I32, extents=frozenset({N.name}))
    return index_signs(kernel, task)


def test_extents_task_indices_and_their_quotients_are_never_negative():
    s = signs(k.Let(Q, b("remainder", P, k.ScalarRef(N))))
    assert s.nonnegative(P) and s.nonnegative(Q) and s.nonnegative(k.ArrayExtent(X, 0, I32))
    assert s.nonnegative(b("floordiv", b("add", b("mul", Q, c(3)), k.ScalarRef(N)), c(32)))
    assert s.nonnegative(b("maximum", Q, c(0))) and s.nonnegative(k.Cast(Q, dt.int64))
    assert s.nonnegative(b("sub", b("add", k.ScalarRef(N), c(32)), c(1)))  # ceil(n / 32)'s numerator


@pytest.mark.parametrize("value", [
    c(-1),  # a negative constant
    b("sub", P, c(1)),  # a subtraction
    b("add", P, c(-3)),
    b("sub", b("add", P, c(1)), c(2)),  # x + 1 - 2
    b("sub", b("add", P, k.ScalarRef(N)), c(1)),
    k.ScalarRef(USER),  # a user's scalar
    b("floordiv", P, k.ScalarRef(USER)),
    k.Cast(k.Var("wide", dt.int64), I32),  # a narrowing cast may wrap
    k.Load(X, (P,)),  # a value from memory
    k.Const(2.0, dt.float32),
])
def test_what_may_be_negative_is_not_claimed(value):
    s = signs(k.Let(Q, value))
    assert not s.nonnegative(value) and not s.nonnegative(Q)
    assert not s.nonnegative(b("floordiv", Q, c(4)))


def test_a_loop_from_a_negative_bound_or_counting_down_is_not_claimed():
    j, i = k.Var("j", I32), k.Var("i", I32)
    down = k.For(j, c(10), c(0), (k.Let(Q, b("remainder", j, c(4))),), step=-1)
    assert not signs(down).nonnegative(j) and not signs(down).nonnegative(Q)
    negative = k.For(i, c(-2), k.ScalarRef(N), (k.Let(Q, i),))
    assert not signs(negative).nonnegative(i) and not signs(negative).nonnegative(Q)
    assert signs(k.For(i, P, k.ScalarRef(N), (k.Let(Q, i),))).nonnegative(Q)
    assert not signs(k.Let(Q, P), begin=c(-5)).nonnegative(Q)  # the task's range starts below 0


def test_a_local_counts_only_if_every_value_it_is_given_does():
    count = k.Let(Q, c(0))
    assert signs(count, k.Assign(Q, b("add", Q, c(1)))).nonnegative(Q)
    assert not signs(count, k.Assign(Q, b("sub", Q, c(1)))).nonnegative(Q)
    assert not signs(count, k.If(k.TRUE, (k.Assign(Q, k.ScalarRef(USER)),))).nonnegative(Q)


@pytest.mark.parametrize("op, divisor, dtype, expected", [
    ("floordiv", 8, dt.int32, "(a >> 3)"), ("remainder", 8, dt.int32, "(a & 7)"),
    ("remainder", 64, dt.int64, "(a & 63LL)"), ("floordiv", 1, dt.int32, "(a >> 0)"),
    ("floordiv", 3, dt.int32, "((int)((unsigned)(a) / 3u))"),
    ("remainder", 12, dt.int64, "((long long)((unsigned long long)(a) % 12ULL))"),
    ("floordiv", None, dt.int32, "bz_index_floordiv(a, b)"), ("remainder", None, dt.int64, "bz_index_remainder(a, b)"),
])
def test_the_text_of_an_unsigned_division(op, divisor, dtype, expected):
    assert index_division(op, "a", "b", divisor, dtype) == expected


# --- suite fusions at their GPU shapes: no floor division left in their index arithmetic ------------
def suite_source(name: str, shapes: list[tuple[int, ...]], dtype) -> str:
    case = next(case for case in CASES if case.name == name)
    fusion = build_fusion(case, case.shape("gpu"))
    return engine.cuda_source(fusion, [np.empty(shape, dtype) for shape in shapes]).body  # np.empty: untouched


def test_rope_and_group_norm_divide_their_indices_unsigned():
    import ml_dtypes
    rope = suite_source("rope", [(16, 2048, 32, 128), (1, 2048, 1, 128), (1, 2048, 1, 128)], ml_dtypes.bfloat16)
    group_norm = suite_source("group_norm", [(16, 512, 64, 64), (512,), (512,)], np.float32)
    for body in (rope, group_norm):
        assert "bz_floordiv" not in body and "bz_remainder" not in body
    # Divided by the extents through divisors computed once a thread (codegen/cuda_invariants.py).
    assert "bz_fast_remainder(p1, bz_div0)" in rope and "bz_divisor((unsigned)(T0_s2))" in rope
    assert re.search(r"\(p1 >> 5\)|\(p1 & 31\)", group_norm)  # 32 groups
    # The vector paths' alignment tests read the row's indices, not their divisions again.
    for test in re.findall(r"if \(\(\(.*reinterpret_cast.*\n", rope):
        assert "index_floordiv" not in test and "index_remainder" not in test


# --- the same results on the CPU harness --------------------------------------------------------
def _rope(f):
    x, cos = f.define_tensor([-1, -1, -1, -1]), f.define_tensor([1, -1, 1, -1])
    half = 2
    return [x * cos + bz.ops.cat([-x[..., half:], x[..., :half]], -1)]


def _reshape_bias(f):
    x, bias = f.define_tensor([-1, -1, -1]), f.define_tensor([-1])
    return [bz.ops.reshape(x, [x.shape[0], -1]) + bias]


def _grouped_sums(f):
    x = f.define_tensor([-1, 6, -1, -1])
    return [bz.ops.sum(bz.ops.reshape(x, [x.shape[0], 3, -1]), axes=[2])]


def _transposed(f):
    x, y = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
    return [x + bz.ops.transpose(y, 0, 1)]


def _references():
    def rope(x, cos):
        return [x * cos + np.concatenate([-x[..., 2:], x[..., :2]], -1)]
    return {
        _rope: rope,
        _reshape_bias: lambda x, bias: [x.reshape(x.shape[0], -1) + bias],
        _grouped_sums: lambda x: [x.reshape(x.shape[0], 3, -1).sum(axis=2)],
        _transposed: lambda x, y: [x + y.T],
    }


CPU_CASES = [  # a g++ build each (about a second): few, but every view at an empty, a unit and an odd extent
    (_rope, [(2, 5, 3, 4), (1, 5, 1, 4)]), (_rope, [(3, 0, 2, 4), (1, 0, 1, 4)]),
    (_reshape_bias, [(2, 0, 3), (0,)]), (_reshape_bias, [(1, 1, 1), (1,)]),
    (_grouped_sums, [(3, 6, 5, 7)]), (_grouped_sums, [(2, 6, 0, 3)]),
    (_transposed, [(5, 7), (7, 5)]),
]

@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("build, shapes", CPU_CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_views_at_odd_and_empty_extents_give_the_reference_on_the_cpu_harness(build, shapes):
    rng = np.random.default_rng(len(str(shapes)))
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    with bz.Fusion(name=f"idiv_{build.__name__}") as f:
        for out in build(f):
            f.add_output(out)
    body = engine.cuda_source(f, arrays).body
    assert "bz_floordiv" not in body and "bz_remainder" not in body  # every division unsigned
    outputs, _ = run_on_cpu(f, arrays)
    for actual, wanted in zip(outputs, _references()[build](*[a.astype(np.float64) for a in arrays])):
        np.testing.assert_allclose(np.asarray(actual, np.float64), wanted, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
@pytest.mark.parametrize("index", [dt.int32, dt.int64])
def test_unsigned_index_division_compiles_with_nvrtc(index):
    arrays = [np.empty(shape, np.float32) for shape in [(3, 6, 5, 7)]]
    with bz.Fusion(name="idiv_nvrtc") as f:
        for out in _grouped_sums(f):
            f.add_output(out)
    with mock.patch.object(engine, "index_type", return_value=index):  # int64: arrays of 2**31 elements
        src = engine.cuda_source(f, arrays)
    assert "bz_index_floordiv" in src.body and ("long long p" in src.body) == (index == dt.int64)
    assert nvrtc.compile_ptx(src.text, "idiv_nvrtc", "sm_90")
