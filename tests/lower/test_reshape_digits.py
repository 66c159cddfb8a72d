"""Reshape indices split digit by digit (braze/lower/radix.py): generated regroupings of static and
symbolic extents (merges, splits of a static extent across its neighbours, -1, extents 0 and 1)
against NumPy, bit for bit; and group_norm's reshape back from its groups, whose input index divides
the channel by a constant instead of the flat index by the group size."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.ir.scalar import as_scalar, symbol
from braze.kir import nodes as k
from braze.lower import radix
from braze.lower.exprs import index_op

INT32 = bz.int32


@st.composite
def regroupings(draw):
    """(input shape, which extents are symbolic, the target as a list of (kind, payload)): each target
    extent a product of consecutive input extents, where a static composite extent may be split and
    its parts merged into its neighbours' groups."""
    shape = draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=4))
    if draw(st.integers(0, 9)) == 0:
        shape[draw(st.integers(0, len(shape) - 1))] = 0
    symbolic = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    # Factors of the flat order, outer to inner: an input axis whole, or a static split of one.
    factors = []
    for axis, n in enumerate(shape):
        if not symbolic[axis] and n in (4, 6) and draw(st.booleans()):
            outer = 2
            factors += [("part", (axis, outer)), ("part", (axis, n // outer))]
        else:
            factors.append(("axis", axis))
    cuts = sorted(draw(st.sets(st.integers(1, len(factors) - 1), max_size=len(factors) - 1))) \
        if len(factors) > 1 else []
    groups = [factors[a:b] for a, b in zip([0] + cuts, cuts + [len(factors)])]
    inferred = draw(st.integers(-1, len(groups) - 1))
    return shape, symbolic, groups, inferred


def _target(x, shape, groups, inferred):
    """The braze extents (Scalars from x.shape where symbolic, -1 at `inferred`) and NumPy's."""
    braze_shape, numpy_shape = [], []
    for position, group in enumerate(groups):
        extent, value = 1, 1
        for kind, payload in group:
            if kind == "axis":
                extent, value = extent * x.shape[payload], value * shape[payload]
            else:
                extent, value = extent * payload[1], value * payload[1]
        braze_shape.append(-1 if position == inferred and 0 not in shape else extent)
        numpy_shape.append(value)
    return braze_shape, numpy_shape


@settings(max_examples=60, deadline=None)
@given(regroupings(), st.integers(0, 2**31))
def test_generated_regroupings_against_numpy(case, seed):
    shape, symbolic, groups, inferred = case
    with bz.Fusion() as f:
        x = f.define_tensor(tuple(-1 if s else n for s, n in zip(symbolic, shape)))
        braze_shape, numpy_shape = _target(x, shape, groups, inferred)
        y = bz.ops.reshape(x + 1.0, braze_shape)  # a computed input: its index is split, not loaded flat
        f.add_output(y * 2.0)
        f.add_output(bz.ops.reshape(y, x.shape) - 1.0)  # and back
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    there, back = f.execute([data])
    np.testing.assert_array_equal(there, ((data + np.float32(1)) * np.float32(2)).reshape(numpy_shape))
    np.testing.assert_array_equal(back, (data + np.float32(1)) - np.float32(1))


def _divisors(e: k.Expr) -> list[k.Expr]:
    found = [e.b] if isinstance(e, k.Binary) and e.op in ("floordiv", "remainder") else []
    for child in (getattr(e, name) for name in ("a", "b") if isinstance(e, k.Binary)):
        found += _divisors(child)
    return found


def _extent(s) -> k.Expr:
    return k.Const(s.value, INT32) if s.is_const else k.Var(s.name, INT32)


def _to_expr(m: radix.Monomial) -> k.Expr:
    total = k.Const(m.coef, INT32)
    for factor, power in m.factors:
        for _ in range(power):
            total = index_op("mul", total, _extent(factor))
    return total


def _evaluate(e: k.Expr, values: dict[str, int]) -> int:
    if isinstance(e, k.Const):
        return e.value
    if isinstance(e, k.Var):
        return values[e.name]
    operation = {"add": int.__add__, "mul": int.__mul__, "floordiv": int.__floordiv__, "remainder": int.__mod__}
    return operation[e.op](_evaluate(e.a, values), _evaluate(e.b, values))


def _split(idx, out_extents, in_extents):
    return radix.split(idx, [as_scalar(e) for e in out_extents], [as_scalar(e) for e in in_extents], _to_expr,
                       k.Const(0, INT32))


def test_group_norm_reshape_back_divides_the_channel_by_a_constant():
    n, h, w = symbol("N"), symbol("H"), symbol("W")
    group_size = (n * 64 * h * w) // (n * 32)  # what reshape([N, 32, -1]) infers
    idx = tuple(k.Var(name, INT32) for name in ("n", "c", "h", "w"))
    split = _split(idx, [n, 64, h, w], [n, 32, group_size])
    assert split is not None
    assert all(isinstance(d, k.Const) for e in split for d in _divisors(e)), split
    extents = {"N": 3, "H": 5, "W": 7}
    for flat in range(3 * 64 * 5 * 7):
        nn, c, hh, ww = np.unravel_index(flat, (3, 64, 5, 7))
        got = [_evaluate(e, {**extents, "n": int(nn), "c": int(c), "h": int(hh), "w": int(ww)}) for e in split]
        assert got == list(np.unravel_index(flat, (3, 32, 2 * 5 * 7)))


def test_extents_that_do_not_line_up_fall_back():
    h, w = symbol("H"), symbol("W")
    idx = (k.Var("h", INT32), k.Var("w", INT32))
    assert _split(idx, [h, w], [w, h]) is None  # [H, W] -> [W, H]
    assert _split(idx, [h, 6], [h * 3, 2]) is not None
    assert _split(idx, [6, h], [4, (6 * h) // 4]) is None  # 4 splits no digit
