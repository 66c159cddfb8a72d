"""Index-set splitting (braze.passes.split_loops): loops cut where a condition on their index changes.

Each split kernel is checked against the kernel it came from by a small interpreter of Kernel IR
(below): the same stores for every extent, including extents that put the cuts before, inside and
after the loop's range, and no load out of its array's bounds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze import config
from braze import dtypes as dt
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.split_loops import GROWTH, MAX_PIECES, split_loops

F32, I32, I64, BOOL = dt.float32, dt.int32, dt.int64, dt.bool_
SIZE = 48  # elements of each array: every index the programs below use, for n, m in [0, 20]
X = k.ArrayParam("x", F32, 1, (1,))
OUT = k.ArrayParam("out", F32, 1, (1,))
N, M = k.ScalarParam("n", I32), k.ScalarParam("m", I32)
n, m = k.ScalarRef(N), k.ScalarRef(M)
J, SEL = k.Var("j", I32), k.Var("sel", F32)


def c(value: int, dtype=I32) -> k.Const:
    return k.Const(value, dtype)


def binary(op: str, a: k.Expr, b: k.Expr) -> k.Binary:
    return k.Binary(op, a, b, BOOL if op in ("lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or")
                    else a.dtype)


def kernel(*body: k.Stmt) -> k.Kernel:
    task = k.Task("t", "range_for", body, k.Var("p", I32), c(0), c(1))
    return k.Kernel("kern", (X, OUT, N, M), (task,), index_type=I32)


def loop(*body: k.Stmt, begin: k.Expr | None = None, end: k.Expr | None = None) -> k.For:
    """`for j in [begin, end)` (by default [0, 32))."""
    return k.For(J, begin or c(0), end or c(32), body, vectorize=True)


def select(cond: k.Expr, then: k.Expr, orelse: k.Expr, var: k.Var = SEL) -> list[k.Stmt]:
    """`var = then if cond else orelse`, as the lowering writes a cat or a pad."""
    return [k.Let(var, k.Const(0.0, F32)), k.If(cond, (k.Assign(var, then),), (k.Assign(var, orelse),))]


def loops_of(kern: k.Kernel) -> list[k.For]:
    return [s for s in kern.tasks[0].body if isinstance(s, k.For)]


def branches(kern: k.Kernel) -> int:
    text = kernel_text(kern)
    return text.count("if ") + text.count("where(")


# --- a Kernel IR interpreter (the subset these programs use) --------------------------------------
_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "minimum": min, "maximum": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b, "logical_and": lambda a, b: a and b, "logical_or": lambda a, b: a or b}


def evaluate(e: k.Expr, env: dict, arrays: dict[str, np.ndarray]):
    match e:
        case k.Const():
            return e.value
        case k.Var():
            return env[e]
        case k.ScalarRef():
            return env[e.param.name]
        case k.Load():
            (index,) = (evaluate(i, env, arrays) for i in e.indices)
            assert 0 <= index < SIZE, f"load out of bounds: {e.param.name}[{index}]"
            return arrays[e.param.name][index]
        case k.Unary(op="neg"):
            return -evaluate(e.x, env, arrays)
        case k.Unary(op="logical_not"):
            return not evaluate(e.x, env, arrays)
        case k.Ternary(op="where"):
            return evaluate(e.b if evaluate(e.a, env, arrays) else e.c, env, arrays)
        case k.Cast():
            value = evaluate(e.x, env, arrays)
            return float(value) if e.dtype.is_floating else int(value)
        case k.Binary():
            return _OPS[e.op](evaluate(e.a, env, arrays), evaluate(e.b, env, arrays))
    raise TypeError(f"no rule for {e}")


def execute(stmts: tuple[k.Stmt, ...], env: dict, arrays: dict[str, np.ndarray]) -> None:
    for s in stmts:
        match s:
            case k.Let() | k.Assign():
                env[s.var] = evaluate(s.value, env, arrays)
            case k.Store():
                (index,) = (evaluate(i, env, arrays) for i in s.indices)
                assert 0 <= index < SIZE, f"store out of bounds: {s.param.name}[{index}]"
                arrays[s.param.name][index] = evaluate(s.value, env, arrays)
            case k.If():
                execute(s.then if evaluate(s.cond, env, arrays) else s.orelse, env, arrays)
            case k.For():
                for i in range(evaluate(s.begin, env, arrays), evaluate(s.end, env, arrays)):
                    env[s.var] = i
                    execute(s.body, env, arrays)
            case _:
                raise TypeError(f"no rule for {s}")


def run(kern: k.Kernel, n_value: int, m_value: int) -> np.ndarray:
    arrays = {"x": np.arange(SIZE, dtype=np.float64) + 100.0, "out": np.full(SIZE, -1.0)}
    execute(kern.tasks[0].body, {"n": n_value, "m": m_value}, arrays)
    return arrays["out"]


def assert_same_stores(original: k.Kernel, split: k.Kernel, extents=range(0, 21, 3)) -> None:
    for n_value in extents:
        for m_value in (0, 1, 7, 20):
            np.testing.assert_array_equal(run(split, n_value, m_value), run(original, n_value, m_value),
                                          err_msg=f"n={n_value}, m={m_value}\n{kernel_text(split)}")


def test_rotate_half_becomes_two_loops_without_a_branch():
    original = kernel(loop(*select(binary("lt", J, c(16)), k.Load(X, (binary("add", J, c(16)),)),
                                   k.Load(X, (binary("sub", J, c(16)),))),
                           k.Store(OUT, (J,), SEL)))
    split = split_loops(original)
    first, second = loops_of(split)
    assert (first.begin, first.end, second.begin, second.end) == (c(0), c(16), c(16), c(32))
    assert branches(split) == 0
    text = kernel_text(split)
    assert "sel: float32 = x[add(j, 16:int32)]" in text  # the branch's value, with no dead initial value
    assert "sel_p1: float32 = x[sub(j_p1, 16:int32)]" in text  # every name still defined once
    assert first.vectorize and second.vectorize
    assert_same_stores(original, split)


def test_a_cut_outside_the_range_leaves_one_loop_with_the_branch_resolved():
    original = kernel(loop(*select(binary("lt", J, c(40)), k.Load(X, (J,)), k.Const(0.0, F32)),
                           k.Store(OUT, (J,), SEL)))
    split = split_loops(original)
    (only,) = loops_of(split)
    assert (only.begin, only.end) == (c(0), c(32)) and branches(split) == 0
    assert_same_stores(original, split)


def test_a_cut_at_an_extent_is_clamped_into_the_range():
    original = kernel(loop(*select(binary("lt", J, n), k.Load(X, (J,)), k.Const(0.5, F32)),
                           k.Store(OUT, (J,), SEL), begin=c(3), end=binary("add", m, c(5))))
    split = split_loops(original)
    first, second = loops_of(split)
    assert first.end == second.begin == binary("minimum", binary("maximum", n, c(3)), binary("add", m, c(5)))
    assert branches(split) == 0
    assert_same_stores(original, split)


def test_a_cat_of_three_and_a_pad_on_both_sides_take_three_loops_each():
    # cat([x[:n], x[:m], x]) along j: nested branches, as the lowering writes them.
    third = select(binary("lt", J, binary("add", n, m)), k.Load(X, (binary("sub", J, n),)),
                   k.Load(X, (binary("sub", J, binary("add", n, m)),)))
    cat = kernel(loop(k.Let(SEL, k.Const(0.0, F32)),
                      k.If(binary("lt", J, n), (k.Assign(SEL, k.Load(X, (J,))),), tuple(third[1:])),
                      k.Store(OUT, (J,), SEL), end=binary("add", binary("add", n, m), c(5))))
    # pad(x[:n], (2, 3)): the input read where 0 <= j - 2 < n.
    shifted = binary("sub", J, c(2))
    inside = binary("logical_and", binary("ge", shifted, c(0)), binary("lt", shifted, n))
    pad = kernel(loop(*select(inside, k.Load(X, (shifted,)), k.Const(-0.0, F32)), k.Store(OUT, (J,), SEL),
                      end=binary("add", n, c(5))))
    for original in (cat, pad):
        split = split_loops(original)
        assert len(loops_of(split)) == 3 and branches(split) == 0
        assert_same_stores(original, split)


@pytest.mark.parametrize("op, value, parts", [("eq", c(0), 2), ("eq", binary("add", n, c(-1)), 2), ("ne", c(5), 3)])
def test_equality_cuts_before_and_after_the_index(op, value, parts):
    """The first and the last index of a row take one part with the rest; an inner one, three."""
    original = kernel(loop(k.Store(OUT, (J,), k.Ternary("where", binary(op, J, value), k.Const(1.0, F32),
                                                        k.Cast(J, F32), F32)), end=n))
    split = split_loops(original)
    assert len(loops_of(split)) == parts and branches(split) == 0
    assert_same_stores(original, split)


def test_a_where_on_an_iota_comparison_in_a_wider_type():
    iota = binary("add", k.Cast(J, I64), c(-3, I64))  # arange(-3, ...) compared in int64
    original = kernel(loop(k.Store(OUT, (J,), k.Ternary("where", binary("le", c(4, I64), iota), k.Load(X, (J,)),
                                                        k.Const(0.0, F32), F32))))
    split = split_loops(original)
    first, second = loops_of(split)
    assert first.end == c(7) and branches(split) == 0
    assert_same_stores(original, split)


def test_a_negated_index_and_a_definition_in_the_loop():
    flipped = k.Var("flipped", I32)
    original = kernel(loop(k.Let(flipped, binary("sub", c(31), J)),  # flip: 31 - j
                           *select(k.Unary("logical_not", binary("gt", flipped, n), BOOL), k.Load(X, (flipped,)),
                                   k.Const(2.0, F32)),
                           k.Store(OUT, (J,), SEL)))
    split = split_loops(original)
    assert len(loops_of(split)) == 2 and branches(split) == 0
    assert_same_stores(original, split)


def test_cuts_a_constant_apart_are_ordered():
    # rolls by 1 and by 2 of a row of n: cuts at n - 1 and n - 2; the part below n - 2 is below n - 1.
    body = [*select(binary("lt", J, binary("add", n, c(-1))), k.Const(1.0, F32), k.Const(2.0, F32)),
            *select(binary("lt", J, binary("add", n, c(-2))), k.Const(3.0, F32), k.Const(4.0, F32),
                    k.Var("other", F32)),
            k.Store(OUT, (J,), binary("add", SEL, k.Var("other", F32)))]
    original = kernel(loop(*body, end=n))
    split = split_loops(original)
    assert len(loops_of(split)) == 3 and branches(split) == 0
    assert_same_stores(original, split)


@pytest.mark.parametrize("cond, why", [
    (binary("lt", k.Load(X, (J,)), k.Const(0.0, F32)), "a value read from memory"),
    (binary("lt", J, k.Var("p", I32)), "the task's index: not known to the host"),
    (binary("lt", binary("mul", J, c(2)), n), "a step of 2"),
    (binary("lt", binary("add", J, J), n), "the index twice"),
    (binary("lt", k.Cast(binary("add", J, c(1)), dt.int8), c(5, dt.int8)), "a narrowing cast"),
])
def test_conditions_on_anything_else_are_left_alone(cond, why):
    original = kernel(loop(*select(cond, k.Load(X, (J,)), k.Const(0.0, F32)), k.Store(OUT, (J,), SEL)))
    assert split_loops(original) == original, why


def test_loops_that_carry_a_value_are_left_alone():
    acc = k.Var("acc", F32)
    reduction = kernel(k.Let(acc, k.Const(0.0, F32)),
                       loop(k.If(binary("lt", J, c(16)), (k.Assign(acc, binary("add", acc, k.Load(X, (J,)))),))),
                       k.Store(OUT, (c(0),), acc))
    stepped = kernel(k.For(J, c(0), c(32), tuple(select(binary("lt", J, c(16)), k.Const(1.0, F32),
                                                        k.Const(2.0, F32))) + (k.Store(OUT, (J,), SEL),), step=2))
    for original in (reduction, stepped):
        assert split_loops(original) == original


def selects(cuts: list[k.Expr]) -> list[k.Stmt]:
    body = []
    for i, cut in enumerate(cuts):
        body += select(binary("lt", J, cut), k.Const(float(i), F32), k.Const(-1.0, F32), k.Var(f"s{i}", F32))
    return body


def test_a_loop_that_would_take_too_many_parts_stays_whole():
    # Cuts n * 2, n * 3, n * 4: in no known order, so each part would be split by the others again.
    unordered = kernel(loop(*selects([binary("mul", n, c(i + 2)) for i in range(3)]),
                            k.Store(OUT, (J,), k.Var("s0", F32))))
    assert len(loops_of(split_loops(unordered))) == 2 ** 3 == MAX_PIECES
    unordered = kernel(loop(*selects([binary("mul", n, c(i + 2)) for i in range(4)]),
                            k.Store(OUT, (J,), k.Var("s0", F32))))
    assert split_loops(unordered) == unordered
    ordered = kernel(loop(*selects([c(2 * i + 1) for i in range(MAX_PIECES)]), k.Store(OUT, (J,), k.Var("s0", F32))))
    assert split_loops(ordered) == ordered  # nine parts


def test_a_loop_whose_parts_would_repeat_too_much_stays_whole():
    inner = k.For(k.Var("r", I32), c(0), c(1), tuple(k.Store(OUT, (c(40),), k.Const(float(i), F32)) for i in range(20)))
    cuts = [c(2 * i + 1) for i in range(MAX_PIECES - 1)]  # eight parts, each with the inner loop
    original = kernel(loop(*selects(cuts), inner, k.Store(OUT, (J,), k.Var("s0", F32))))
    assert 8 * (len(cuts) + 22) > GROWTH * (4 * len(cuts) + 22)
    assert split_loops(original) == original
    fewer = kernel(loop(*selects(cuts[:3]), inner, k.Store(OUT, (J,), k.Var("s0", F32))))
    assert len(loops_of(split_loops(fewer))) == 4


def test_a_nested_loop_splits_in_each_part_of_the_loop_around_it():
    i = k.Var("i", I32)
    row = binary("sub", i, c(1))
    column = binary("sub", J, c(2))
    inside = binary("logical_and", binary("logical_and", binary("ge", row, c(0)), binary("lt", row, c(4))),
                    binary("logical_and", binary("ge", column, c(0)), binary("lt", column, c(5))))
    flat = binary("add", binary("mul", i, c(8)), J)
    original = kernel(k.For(i, c(0), c(6), (k.For(J, c(0), c(8), (
        *select(inside, k.Load(X, (binary("add", binary("mul", row, c(5)), column),)), k.Const(0.0, F32)),
        k.Store(OUT, (flat,), SEL))),)))
    split = split_loops(original)
    outer = loops_of(split)
    assert len(outer) == 3 and branches(split) == 0  # rows: pad, inside, pad; columns the same inside
    assert [len([s for s in o.body if isinstance(s, k.For)]) for o in outer] == [1, 3, 1]
    assert_same_stores(original, split, extents=[0])


def test_the_pass_can_be_turned_off():
    original = kernel(loop(*select(binary("lt", J, c(16)), k.Const(1.0, F32), k.Const(2.0, F32)),
                           k.Store(OUT, (J,), SEL)))
    with config.scope(disable="split_loops"):
        assert split_loops(original) == original


# --- generated programs -----------------------------------------------------------------------------
_VALUES = [c(0), c(5), c(17), n, m, binary("add", n, c(3)), binary("sub", m, c(2)), binary("add", n, m)]


@st.composite
def index_forms(draw) -> k.Expr:
    """j, j + o, o - j, -j, or j widened to int64 (then compared with int64 values)."""
    offset = draw(st.sampled_from([c(0), c(2), c(-3), n]))
    return draw(st.sampled_from([J, binary("add", J, offset), binary("sub", J, offset), binary("sub", offset, J),
                                 k.Unary("neg", J, I32), binary("add", k.Cast(J, I64), c(1, I64))]))


@st.composite
def conditions(draw, depth: int = 0) -> k.Expr:
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        op = draw(st.sampled_from(["logical_and", "logical_or", "logical_not"]))
        if op == "logical_not":
            return k.Unary(op, draw(conditions(depth + 1)), BOOL)
        return binary(op, draw(conditions(depth + 1)), draw(conditions(depth + 1)))
    form, value = draw(index_forms()), draw(st.sampled_from(_VALUES))
    value = k.Cast(value, I64) if form.dtype == I64 else value
    op = draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
    return binary(op, form, value) if draw(st.booleans()) else binary(op, value, form)


@st.composite
def programs(draw) -> k.Kernel:
    """A loop over a range of extents with 1 to 3 selects (an if/else or a where), some nested."""
    body: list[k.Stmt] = []
    terms: list[k.Expr] = []
    for n_select in range(draw(st.integers(1, 3))):
        var = k.Var(f"s{n_select}", F32)
        read = k.Load(X, (J,))
        if draw(st.booleans()):
            inner = draw(st.booleans())
            then = (k.If(draw(conditions()), (k.Assign(var, read),), (k.Assign(var, k.Const(3.0, F32)),)),) \
                if inner else (k.Assign(var, read),)
            body += [k.Let(var, k.Const(0.0, F32)), k.If(draw(conditions()), then, (k.Assign(var, k.Cast(J, F32)),))]
        else:
            body.append(k.Let(var, k.Ternary("where", draw(conditions()), read, k.Const(-1.0, F32), F32)))
        terms.append(var)
    total = terms[0]
    for term in terms[1:]:
        total = binary("add", binary("mul", total, k.Const(3.0, F32)), term)
    begin = draw(st.sampled_from([c(0), c(2), n]))
    end = draw(st.sampled_from([c(20), binary("add", n, c(4)), binary("add", m, c(9))]))
    return kernel(loop(*body, k.Store(OUT, (J,), total), begin=begin, end=end))


@settings(max_examples=150, deadline=None)
@given(programs())
def test_generated_loops_store_the_same_after_splitting(original):
    split = split_loops(original)
    assert len(loops_of(split)) <= MAX_PIECES
    names = [s.var.name for s in split.tasks[0].body if isinstance(s, k.For)]
    assert len(names) == len(set(names))
    assert_same_stores(original, split, extents=(0, 1, 4, 13, 20))
