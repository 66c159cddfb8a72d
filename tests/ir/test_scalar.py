"""Tests for braze.ir.scalar: folding, identities, printing, evaluation and a round-trip property."""

from __future__ import annotations

import operator
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.errors import InputError
from braze.ir.scalar import Scalar, as_scalar, ceildiv, const, smax, smin, symbol

a, b, c, i0 = symbol("a"), symbol("b"), symbol("c"), symbol("i0")

# How each op is spelled on Scalars, so one table drives the folding tests.
BUILD = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "ceildiv": ceildiv, "min": smin, "max": smax,
}


def py_ceildiv(x: int, y: int) -> int:
    """Ceiling division written independently of the module, via divmod."""
    q, r = divmod(x, y)
    return q + (r != 0)


@pytest.mark.parametrize(
    "op, x, y, expected",
    [
        ("+", 7, 3, 10), ("-", 7, 3, 4), ("*", 7, 3, 21), ("//", 7, 3, 2), ("//", -7, 3, -3),
        ("%", 7, 3, 1), ("%", -7, 3, 2), ("ceildiv", 7, 3, 3), ("ceildiv", -7, 3, -2),
        ("ceildiv", 6, 3, 2), ("min", 7, 3, 3), ("max", 7, 3, 7), ("min", -2, 5, -2),
    ],
)
def test_constant_folding(op: str, x: int, y: int, expected: int) -> None:
    for lhs, rhs in [(const(x), const(y)), (const(x), y), (x, const(y))]:
        result = BUILD[op](lhs, rhs)
        assert result.is_const and result.value == expected, (op, lhs, rhs, result)


@pytest.mark.parametrize(
    "expr, expected",
    [
        (i0 + 0, i0), (0 + i0, i0), (i0 - 0, i0), (i0 * 1, i0), (1 * i0, i0), (i0 // 1, i0),
        (ceildiv(i0, 1), i0), (i0 * 0, const(0)), (0 * i0, const(0)), (i0 % 1, const(0)),
        (smin(i0, i0), i0), (smax(a + b, a + b), a + b), (i0 - i0, const(0)), ((a * b) - (a * b), const(0)),
        (-i0 * -1, i0), (-const(3), const(-3)),
    ],
)
def test_identities(expr: Scalar, expected: Scalar) -> None:
    assert expr.same_as(expected), f"{expr} is not {expected}"


def test_constants_go_right_and_nested_constants_fold() -> None:
    assert str(2 * i0) == "i0 * 2"
    assert str(smin(4, i0)) == "min(i0, 4)"
    assert (i0 + 2) + 3 == i0 + 5
    assert (i0 * 2) * 3 == i0 * 6
    assert str((i0 + 2) - 3) == "i0 - 1"
    assert (i0 - 4) + 4 == i0
    assert smax(smax(i0, 2), 5) == smax(i0, 5)
    assert (i0 * 2) * 0 == const(0)


@pytest.mark.parametrize(
    "expr, text",
    [
        ((i0 + 3) * 2, "(i0 + 3) * 2"),
        (ceildiv(i0, 4), "ceildiv(i0, 4)"),
        (a - (b - c), "a - (b - c)"),
        ((a - b) - c, "a - b - c"),
        (a + (b + c), "a + (b + c)"),
        (a * b + c, "a * b + c"),
        (a + b * c, "a + b * c"),
        (a * (b + c), "a * (b + c)"),
        (a // (b * c), "a // (b * c)"),
        ((a // b) * c, "a // b * c"),
        ((a + b) % c, "(a + b) % c"),
        (smin(a + 1, b * 2), "min(a + 1, b * 2)"),
        (ceildiv(a - b, smax(b, 1)), "ceildiv(a - b, max(b, 1))"),
        (const(-3), "-3"),
        (3 - a, "3 - a"),
        (a + -3, "a - 3"),
        (-a, "a * -1"),
    ],
)
def test_printer(expr: Scalar, text: str) -> None:
    assert str(expr) == text


def test_repr() -> None:
    assert repr(i0 * 4) == "Scalar(i0 * 4)"


def test_accessors() -> None:
    e = ceildiv(a, 4)
    assert e.op == "ceildiv" and e.args == (a, const(4)) and not e.is_const and not e.is_symbol
    assert a.is_symbol and a.name == "a" and a.args == ()
    assert Scalar.const(7).value == 7 and int(Scalar.const(7)) == 7 and Scalar.symbol("a") == a
    assert (a * b + ceildiv(c, a)).free_symbols() == frozenset({"a", "b", "c"})
    assert const(3).free_symbols() == frozenset()
    with pytest.raises(ValueError, match="not a constant"):
        _ = a.value
    with pytest.raises(ValueError):
        int(a + 1)
    with pytest.raises(ValueError, match="not a symbol"):
        _ = const(1).name


def test_evaluate() -> None:
    env = {"a": 10, "b": 3, "c": -7}
    assert ((a + 3) * b).evaluate(env) == 39
    assert (c // b).evaluate(env) == -3
    assert (c % b).evaluate(env) == 2
    assert ceildiv(c, b).evaluate(env) == -2
    assert ceildiv(a, b).evaluate(env) == 4
    assert smin(a, c).evaluate(env) == -7 and smax(a, c).evaluate(env) == 10
    assert (a - b - c).evaluate(env) == 14


def test_missing_binding_names_the_symbol() -> None:
    with pytest.raises(InputError, match="'extent_7'"):
        (a + symbol("extent_7")).evaluate({"a": 1})


@pytest.mark.parametrize("op", ["//", "%", "ceildiv"])
def test_division_by_zero(op: str) -> None:
    with pytest.raises(ZeroDivisionError):
        BUILD[op](a, b).evaluate({"a": 5, "b": 0})
    with pytest.raises(ZeroDivisionError):
        BUILD[op](a, 0)


def test_substitute() -> None:
    e = ceildiv(a, 4) * b
    assert e.substitute({"a": 10}) == const(3) * b
    assert e.substitute({"a": 10, "b": 2}) == const(6)
    assert e.substitute({"a": c + 4}) == ceildiv(c + 4, 4) * b
    # Substitution re-simplifies: a - b with b := a cancels.
    assert (a - b).substitute({"b": a}) == const(0)
    assert e.substitute({"zzz": 1}) == e


def test_structural_equality_and_hashing() -> None:
    assert (a + 1) * b == (a + 1) * b
    assert hash((a + 1) * b) == hash((a + 1) * b)
    assert a + b != b + a  # structural, not semantic
    assert (a + 1) != (a + 2) and a != symbol("b")
    table = {ceildiv(i0, 4): "tiles"}
    assert table[ceildiv(symbol("i0"), 4)] == "tiles"
    assert const(7) == 7 and hash(const(7)) == hash(7)
    assert isinstance(a == b, bool)  # == compares, it never builds an expression
    assert pickle.loads(pickle.dumps(ceildiv(a, 4) * b)) == ceildiv(a, 4) * b
    with pytest.raises(AttributeError):
        a._op = "+"


def test_bool_raises() -> None:
    with pytest.raises(TypeError, match="truth value"):
        bool(a + 1)
    with pytest.raises(TypeError):
        if const(1):
            pass


def test_order_of_constants_and_of_symbols() -> None:
    assert const(3) < 4 and const(3) <= 3 and const(4) > const(3) and 5 >= const(5)
    for compare in (lambda: a > 0, lambda: 0 < a, lambda: a + 1 <= const(2), lambda: const(1) >= a):
        with pytest.raises(bz.TracerBoolConversionError, match="a static size"):
            compare()


def test_equality_of_a_symbolic_extent_with_an_int_has_no_truth_value() -> None:
    for compare in (lambda: a == 4, lambda: a != 4, lambda: 4 == a, lambda: a + 1 == 1, lambda: 2 in (a, 3)):
        with pytest.raises(bz.TracerBoolConversionError, match="a static size"):
            bool(compare())
    assert a.same_as(a) and not a.same_as(4) and const(4).same_as(4) and not const(4).same_as(True)


def test_equality_of_constants_and_between_scalars_stays_a_bool() -> None:
    assert (const(4) == 4) is True and (const(4) != 4) is False and (4 == const(3)) is False
    assert (a == a) is True and (a != b) is True and (a == "a") is False
    assert {a: 1, 4: 2}[a] == 1 and {4: 2, a: 1}[4] == 2  # dict keys of both kinds still work


@pytest.mark.parametrize("bad", [1.5, True, False, "3", None])
def test_as_scalar_rejects_non_ints(bad: object) -> None:
    with pytest.raises(TypeError, match=type(bad).__name__):
        as_scalar(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        a + bad  # type: ignore[operator]


def test_as_scalar_accepts_ints_and_scalars() -> None:
    assert as_scalar(5) == const(5) and as_scalar(a) is a


# --- property test: random trees, evaluated three ways -------------------------------------------

SYMBOLS = ("a", "b", "c")
PY_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "ceildiv": py_ceildiv, "min": min, "max": max,
}
symbols = st.sampled_from(SYMBOLS).map(lambda n: ("sym", n))
positive = st.integers(1, 5).map(lambda v: ("int", v))
leaves = st.one_of(symbols, st.integers(-6, 6).map(lambda v: ("int", v)))
# Divisors are never zero: a positive constant, or a symbol (bound positive) plus a positive constant.
divisors = st.one_of(positive, st.tuples(st.just("+"), symbols, positive))


def trees(depth: int) -> st.SearchStrategy:
    if depth == 0:
        return leaves
    sub = trees(depth - 1)
    return st.one_of(
        leaves,
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), sub, sub),
        st.tuples(st.sampled_from(["//", "%", "ceildiv"]), sub, divisors),
    )


def build(tree: tuple) -> Scalar | int:
    """The tree as a Scalar; integer leaves stay plain ints so that reflected operators get used."""
    if tree[0] == "sym":
        return symbol(tree[1])
    if tree[0] == "int":
        return tree[1]
    return BUILD[tree[0]](build(tree[1]), build(tree[2]))


def reference(tree: tuple, env: dict[str, int]) -> int:
    if tree[0] == "sym":
        return env[tree[1]]
    if tree[0] == "int":
        return tree[1]
    return PY_OPS[tree[0]](reference(tree[1], env), reference(tree[2], env))


@settings(max_examples=300, deadline=None)
@given(tree=trees(4), env=st.fixed_dictionaries({n: st.integers(1, 40) for n in SYMBOLS}))
def test_random_trees_agree_with_python(tree: tuple, env: dict[str, int]) -> None:
    expr = as_scalar(build(tree))
    expected = reference(tree, env)
    assert expr.evaluate(env) == expected
    substituted = expr.substitute(env)
    assert substituted.is_const and substituted.value == expected
    printed = eval(str(expr), {"__builtins__": {}, "ceildiv": py_ceildiv, "min": min, "max": max}, dict(env))
    assert printed == expected, str(expr)
    assert expr.free_symbols() <= set(SYMBOLS)


@settings(max_examples=100, deadline=None)
@given(tree=trees(3), value=st.integers(-6, 6))
def test_random_trees_compare_with_an_int_only_when_constant(tree: tuple, value: int) -> None:
    expr = as_scalar(build(tree))
    if expr.is_const:
        assert (expr == value) is (expr.value == value) and (expr != value) is (expr.value != value)
        return
    for compare in (lambda: expr == value, lambda: expr != value, lambda: value == expr):
        with pytest.raises(bz.TracerBoolConversionError, match="extents are symbolic"):
            bool(compare())
    assert not expr.same_as(value) and expr.same_as(expr) and expr == expr and {expr: 1}[expr] == 1
