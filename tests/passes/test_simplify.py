"""The Kernel IR simplifier (braze/passes/simplify.py): each rewrite on golden Kernel IR text, the
rewrites it must not make, and compiled results that do not change by a bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

import braze as bz
from braze import config
from braze import dtypes as dt
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.simplify import simplify, simplify_expr

F32, I64, I32 = dt.float32, dt.int64, dt.int32
X = k.ArrayParam("X", F32, 1, (1,))
OUT = k.ArrayParam("OUT", F32, 1, (1,))
INDEX = k.Var("i")
x = k.Load(X, (INDEX,))


def c(value, dtype=F32) -> k.Const:
    return k.Const(value, dtype)


def b(op: str, a: k.Expr, b_: k.Expr, dtype=F32) -> k.Binary:
    return k.Binary(op, a, b_, dtype)


def golden(*body: k.Stmt) -> str:
    """The simplified kernel's text, without its header lines."""
    task = k.Task("t", "range_for", tuple(body), INDEX, c(0, I64), k.ScalarRef(k.ScalarParam("n", I64)))
    kernel = k.Kernel("kern", (X, OUT, k.ScalarParam("n", I64)), (task,))
    return "\n".join(line.strip() for line in kernel_text(simplify(kernel)).splitlines()[2:])


def test_constant_folding_of_exact_ops_in_their_dtype():
    assert golden(k.Store(OUT, (INDEX,), b("add", x, b("mul", c(0.1), c(3.0))))) == \
        f"OUT[i] = add(X[i], {float(np.float32(0.1) * np.float32(3.0))!r}:float32)"  # rounded as float32 would
    assert simplify_expr(b("add", c(2**31 - 1, I32), c(1, I32), I32)) == c(-(2**31), I32)  # wraps
    assert simplify_expr(b("lt", c(1.0), c(math.nan), dt.bool_)) == k.Const(False, dt.bool_)
    negative_zero = simplify_expr(k.Unary("neg", c(0.0), F32))
    assert negative_zero == c(-0.0) and math.copysign(1, negative_zero.value) == -1


def test_float_maximum_is_not_folded_where_numpy_orders_signed_zeros_otherwise():
    e = b("maximum", c(0.0), c(-0.0))
    assert simplify_expr(e) == e
    assert simplify_expr(b("maximum", c(3, I32), c(-5, I32), I32)) == c(3, I32)


def test_transcendental_ops_casts_and_half_types_are_not_folded():
    for e in (k.Unary("exp", c(1.0), F32), k.Cast(c(1.5), I32), b("add", c(1.0, dt.float16), c(2.0, dt.float16),
                                                                    dt.float16)):
        assert simplify_expr(e) == e


def test_identities_that_hold_for_every_float():
    assert golden(k.Store(OUT, (INDEX,), b("sub", b("mul", x, c(1.0)), c(0.0)))) == "OUT[i] = X[i]"
    assert golden(k.Store(OUT, (INDEX,), b("truediv", b("add", c(-0.0), x), c(1.0)))) == "OUT[i] = X[i]"


@pytest.mark.parametrize("expr", [b("add", x, c(0.0)), b("mul", x, c(0.0)), b("sub", x, c(-0.0)),
                                  b("sub", c(0.0), x)])
def test_float_rewrites_that_would_change_bits_are_not_made(expr):
    assert simplify_expr(expr) == expr  # -0.0 + 0.0 is +0.0; NaN * 0.0 is NaN; x - -0.0 turns -0.0 into +0.0


def test_index_arithmetic_drops_identities_and_combines_constants():
    j = k.Var("j")
    index = b("add", b("add", b("mul", b("add", j, c(0, I64), I64), c(1, I64), I64), c(3, I64), I64), c(4, I64), I64)
    assert simplify_expr(index) == b("add", j, c(7, I64), I64)
    assert simplify_expr(b("mul", c(2, I64), b("mul", j, c(5, I64), I64), I64)) == b("mul", j, c(10, I64), I64)
    assert simplify_expr(b("mul", j, c(0, I64), I64)) == c(0, I64)


def test_where_with_a_constant_condition_picks_its_branch():
    assert simplify_expr(k.Ternary("where", k.TRUE, x, c(2.0), F32)) == x
    assert simplify_expr(k.Ternary("where", k.Const(False, dt.bool_), x, c(2.0), F32)) == c(2.0)


def test_a_constant_operand_of_and_or_decides_it_or_leaves_the_other():
    true, false, below = k.TRUE, k.Const(False, dt.bool_), b("lt", x, c(2.0), dt.bool_)
    for op, decides in (("logical_and", false), ("logical_or", true)):
        keeps = true if decides is false else false
        for left, right in ((decides, below), (below, decides)):
            assert simplify_expr(b(op, left, right, dt.bool_)) == decides
        for left, right in ((keeps, below), (below, keeps)):
            assert simplify_expr(b(op, left, right, dt.bool_)) == below
    both = b("logical_and", below, b("gt", x, c(0.0), dt.bool_), dt.bool_)
    assert simplify_expr(both) == both


def test_common_subexpressions_of_a_statement_are_computed_once():
    h = b("add", x, c(1.0))
    square = b("mul", h, h)
    assert golden(k.Store(OUT, (INDEX,), b("add", b("mul", square, h), k.Unary("exp", square, F32)))).splitlines() == [
        "cse1: float32 = add(X[i], 1.0:float32)",  # the largest repeated expression is named first
        "cse0: float32 = mul(cse1, cse1)",
        "OUT[i] = add(mul(cse0, cse1), exp(cse0))",
    ]


def test_expressions_only_a_branch_may_compute_are_not_hoisted():
    costly = k.Unary("exp", x, F32)
    chosen = k.Ternary("where", b("gt", x, c(0.0), dt.bool_), b("add", costly, costly), c(0.0), F32)
    assert golden(k.Store(OUT, (INDEX,), chosen)) == \
        "OUT[i] = where(gt(X[i], 0.0:float32), add(exp(X[i]), exp(X[i])), 0.0:float32)"


def test_a_dag_in_a_branch_is_computed_up_front_only_when_its_reads_are_made_anyway():
    def dag(leaf: k.Expr) -> k.Expr:  # h used twice, the product twice: a tree of 7 uses of `leaf`
        h = k.Unary("exp", leaf, F32)
        square = b("mul", h, h)
        return b("add", square, square)

    chosen = k.Ternary("where", b("gt", x, c(0.0), dt.bool_), dag(x), c(0.0), F32)
    assert golden(k.Store(OUT, (INDEX,), chosen)).splitlines() == [
        "cse1: float32 = exp(X[i])",  # X[i] is read by the condition anyway
        "cse0: float32 = mul(cse1, cse1)",
        "OUT[i] = where(gt(X[i], 0.0:float32), add(cse0, cse0), 0.0:float32)",
    ]
    guarded = k.Load(X, (b("add", INDEX, c(1, I64), I64),))  # X[i + 1]: maybe out of bounds
    chosen = k.Ternary("where", b("lt", INDEX, c(7, I64), dt.bool_), dag(guarded), c(0.0), F32)
    assert golden(k.Store(OUT, (INDEX,), chosen)) == "OUT[i] = where(lt(i, 7), add(mul(exp(X[add(i, 1)]), " \
        "exp(X[add(i, 1)])), mul(exp(X[add(i, 1)]), exp(X[add(i, 1)]))), 0.0:float32)"


def test_expressions_reading_an_accumulator_are_not_hoisted():
    acc, r = k.Var("acc", F32), k.Var("r")
    delta = b("sub", k.Load(X, (r,)), acc)
    loop = k.For(r, c(0, I64), c(8, I64), (k.Assign(acc, b("add", acc, b("mul", delta, delta))),))
    assert golden(k.Let(acc, c(0.0)), loop, k.Store(OUT, (INDEX,), acc)).splitlines() == [
        "acc: float32 = 0.0:float32",
        "for r in range(0, 8):",
        "acc = add(acc, mul(sub(X[r], acc), sub(X[r], acc)))",
        "OUT[i] = acc",
    ]


def _fusions():
    def layer_norm(f):
        f.add_output(bz.ops.layer_norm(f.define_tensor((-1, -1))))

    def gelu_chain(f):
        a, bias = f.define_tensor((-1, -1)), f.define_tensor((-1,))
        h = a + bias
        f.add_output(0.5 * h * (1.0 + bz.ops.tanh(0.7978845608 * (h + 0.044715 * h * h * h))) * 1.0 - 0.0)

    def indexing(f):
        a = f.define_tensor((-1, -1))
        f.add_output(a.permute((1, 0))[1:, ::2] * bz.ops.flip(a, 0).permute((1, 0))[1:, ::2] + 2.0 * 3.0)

    return {"layer_norm": (layer_norm, [(3, 4)]), "gelu_chain": (gelu_chain, [(3, 4), (4,)]),
            "indexing": (indexing, [(4, 3)])}


@pytest.mark.parametrize("name", ["layer_norm", "gelu_chain", "indexing"])
def test_compiled_results_are_bit_for_bit_unchanged(name, tmp_path):
    build, shapes = _fusions()[name]
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    inputs[0].flat[:3] = [-0.0, math.nan, -math.inf]  # where a wrong identity would show
    results = []
    for disable in (frozenset(), frozenset({"simplify"})):
        with config.scope(disable=disable, cache_dir=tmp_path):
            with bz.Fusion() as f:
                build(f)
            results.append(f.execute(inputs, backend="llvm")[0])
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))


def _sum_loop(acc: k.Var, r: k.Var, element=None) -> tuple[k.Stmt, k.Stmt]:
    element = element if element is not None else k.Load(X, (r,))
    return k.Let(acc, c(0.0)), k.For(r, c(0, I64), c(8, I64), (k.Assign(acc, b("reduce_add", acc, element)),))


def test_a_reduction_computed_twice_reuses_the_first_accumulator():
    (a, ra), (s, rs) = (k.Var("a", F32), k.Var("ra")), (k.Var("s", F32), k.Var("rs"))
    assert golden(*_sum_loop(a, ra), *_sum_loop(s, rs), k.Store(OUT, (INDEX,), b("mul", a, s))).splitlines() == [
        "a: float32 = 0.0:float32",
        "for ra in range(0, 8):",
        "a = reduce_add(a, X[ra])",
        "OUT[i] = mul(a, a)",
    ]


def test_reductions_are_not_reused_across_a_write_or_when_they_differ():
    (a, ra), (s, rs) = (k.Var("a", F32), k.Var("ra")), (k.Var("s", F32), k.Var("rs"))
    store = k.Store(X, (INDEX,), c(1.0))  # the second loop reads what this wrote
    kept = golden(*_sum_loop(a, ra), store, *_sum_loop(s, rs), k.Store(OUT, (INDEX,), b("mul", a, s)))
    assert "s = reduce_add(s, X[rs])" in kept
    other = golden(*_sum_loop(a, ra), *_sum_loop(s, rs, b("mul", k.Load(X, (rs,)), c(2.0))),
                   k.Store(OUT, (INDEX,), b("mul", a, s)))
    assert "s = reduce_add(s, mul(X[rs], 2.0:float32))" in other


def test_a_repeated_sum_sharing_a_loop_with_others_reads_the_first():
    # var_mean: the mean output's sum of x rides in the loop of the variance's sum of squares
    (a, ra), (q, s, rs) = (k.Var("a", F32), k.Var("ra")), (k.Var("q", F32), k.Var("s", F32), k.Var("rs"))
    square = b("mul", k.Load(X, (rs,)), k.Load(X, (rs,)))
    lines = golden(*_sum_loop(a, ra), k.Let(q, c(0.0)), k.Let(s, c(0.0)),
                   k.For(rs, c(0, I64), c(8, I64), (k.Assign(q, b("reduce_add", q, square)),
                                                    k.Assign(s, b("reduce_add", s, k.Load(X, (rs,)))))),
                   k.Store(OUT, (INDEX,), b("mul", q, s))).splitlines()
    assert "s = reduce_add(s, X[rs])" not in lines and "OUT[i] = mul(q, a)" in lines
    assert "q = reduce_add(q, mul(X[rs], X[rs]))" in lines


def test_sums_over_the_same_loop_nest_are_one():
    # batch_norm's channel statistics: two sums of x over (batch, pixels), one nest
    s, t, n, m = k.Var("s", F32), k.Var("t", F32), k.Var("n"), k.Var("m")
    x = k.Load(X, (b("add", b("mul", n, c(4, I64), I64), m, I64),))
    inner = k.For(m, c(0, I64), c(4, I64), (k.Assign(s, b("reduce_add", s, x)), k.Assign(t, b("reduce_add", t, x))))
    lines = golden(k.Let(s, c(0.0)), k.Let(t, c(0.0)), k.For(n, c(0, I64), c(2, I64), (inner,)),
                   k.Store(OUT, (INDEX,), b("mul", s, t))).splitlines()
    assert "OUT[i] = mul(s, s)" in lines and not any(line.startswith("t") for line in lines)


def test_a_definition_repeated_by_a_merged_task_reads_the_first():
    # two merged row tasks each decompose the task index: the second's sum then matches the first's
    i1, i2, a, s = k.Var("i1"), k.Var("i2"), k.Var("a", F32), k.Var("s", F32)
    ra, rs = k.Var("ra"), k.Var("rs")
    row = b("floordiv", INDEX, c(32, I64), I64)
    lines = golden(k.Let(i1, row), *_sum_loop(a, ra, k.Load(X, (b("add", i1, ra, I64),))),
                   k.Let(i2, row), *_sum_loop(s, rs, k.Load(X, (b("add", i2, rs, I64),))),
                   k.Store(OUT, (INDEX,), b("mul", a, s))).splitlines()
    assert "OUT[i] = mul(a, a)" in lines and not any(line.startswith(("i2", "s")) for line in lines)


def test_an_accumulator_read_inside_its_loop_is_kept():
    (a, ra), (s, rs), seen = (k.Var("a", F32), k.Var("ra")), (k.Var("s", F32), k.Var("rs")), k.Var("seen", F32)
    loop = k.For(rs, c(0, I64), c(8, I64), (k.Assign(s, b("reduce_add", s, k.Load(X, (rs,)))),
                                            k.Store(OUT, (rs,), s)))  # a running sum, stored
    lines = golden(*_sum_loop(a, ra), k.Let(s, c(0.0)), loop, k.Let(seen, s)).splitlines()
    assert "s = reduce_add(s, X[rs])" in lines
