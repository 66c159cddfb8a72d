"""Row-invariant work out of the loops of a task (braze.passes.hoist)."""

from __future__ import annotations

from braze import config
from braze import dtypes as dt
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.hoist import hoist_invariants, reciprocal_divisions

F32, I32 = dt.float32, dt.int32
X = k.ArrayParam("x", F32, 1, (1,))
OUT = k.ArrayParam("out", F32, 1, (1,))
N = k.ScalarParam("n", I32)
J = k.Var("j", I32)
TOTAL = k.Var("total", F32)


def _kernel(*body: k.Stmt) -> k.Kernel:
    task = k.Task("t", "range_for", body, k.Var("p", I32), k.Const(0, I32), k.Const(1, I32))
    return k.Kernel("kern", (X, OUT, N), (task,), index_type=I32)


def _loop(*body: k.Stmt) -> k.For:
    return k.For(J, k.Const(0, I32), k.ScalarRef(N), body)


def test_invariant_expressions_and_lets_move_before_the_loop():
    mean = k.Binary("truediv", TOTAL, k.Cast(k.ScalarRef(N), F32), F32)
    scale = k.Var("scale", F32)
    kernel = _kernel(k.Let(TOTAL, k.Const(2.0, F32)), _loop(
        k.Let(scale, k.Unary("sqrt", TOTAL, F32)),
        k.Store(OUT, (J,), k.Binary("mul", k.Binary("sub", k.Load(X, (J,)), mean, F32), scale, F32))))
    text = kernel_text(hoist_invariants(kernel))
    loop_text = text[text.index("for j"):]
    assert "truediv" not in loop_text and "sqrt" not in loop_text  # computed once, before the loop
    assert "scale: float32 = sqrt(total)" in text[:text.index("for j")]
    assert "x[j]" in loop_text  # loads stay where they are


def test_loop_carried_values_stay_in_the_loop():
    acc = k.Var("acc", F32)
    kernel = _kernel(k.Let(acc, k.Const(0.0, F32)), _loop(
        k.Assign(acc, k.Binary("reduce_add", acc, k.Unary("exp", acc, F32), F32))))
    assert hoist_invariants(kernel) == kernel


def test_loops_over_one_row_share_the_invariant_that_addresses_it():
    # A sliced and reshaped row (x[:, :-1].reshape(-1, n)): every loop of the row indexes it by the
    # same invariant start, which the second loop reads from the first one's Let. The online softmax
    # rewrite (codegen/cuda_online.py) matches a max loop and a sum loop by their loads.
    m, acc = k.Var("m", F32), k.Var("acc", F32)
    start = k.Binary("mul", k.Binary("floordiv", k.Var("p", I32), k.Const(8, I32), I32), k.ScalarRef(N), I32)
    row = k.Load(X, (k.Binary("add", start, J, I32),))
    kernel = _kernel(k.Let(m, k.Const(float("-inf"), F32)),
                     _loop(k.Assign(m, k.Binary("reduce_maximum", m, row, F32))),
                     k.Let(acc, k.Const(0.0, F32)),
                     _loop(k.Assign(acc, k.Binary("reduce_add", acc, k.Unary("exp", row, F32), F32))))
    text = kernel_text(hoist_invariants(kernel))
    assert text.count("floordiv") == 1 and text.count("x[add(inv0, j)]") == 2
    with config.scope(disable={"shared_invariants"}):
        assert kernel_text(hoist_invariants(kernel)).count("floordiv") == 2


def test_an_invariant_of_a_reassigned_value_is_not_shared():
    # `acc` changes between the loops: the second loop's `acc * 2` is the value after the first.
    acc = k.Var("acc", F32)
    twice = k.Binary("mul", acc, k.Const(2.0, F32), F32)
    kernel = _kernel(k.Let(acc, k.Const(0.0, F32)),
                     _loop(k.Store(OUT, (J,), twice)),
                     k.Assign(acc, k.Const(1.0, F32)),
                     _loop(k.Store(OUT, (J,), twice)))
    text = kernel_text(hoist_invariants(kernel))
    assert "inv0: float32 = mul(acc, 2.0:float32)" in text and "inv1: float32 = mul(acc, 2.0:float32)" in text


def test_a_stored_quotient_by_a_row_invariant_multiplies_by_its_scaled_reciprocal_without_a_branch():
    kernel = _kernel(k.Let(TOTAL, k.Const(2.0, F32)), _loop(
        k.Store(OUT, (J,), k.Binary("truediv", k.Unary("exp", k.Load(X, (J,)), F32), TOTAL, F32))))
    text = kernel_text(reciprocal_divisions(kernel))
    before, loop_text = text[:text.index("for j")], text[text.index("for j"):]
    assert "lt(abs(total), 1.1754943508222875e-38:float32)" in before  # the scale, once a row
    assert "truediv(1.0:float32, mul(total, rcp1))" in before
    assert "mul(mul(rcp2, rcp0), rcp1)" in loop_text and "truediv" not in loop_text and "where" not in loop_text
    assert "rcp2: float32 = exp(x[j])" in loop_text  # the load stays unconditional

