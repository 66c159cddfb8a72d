"""rand/randn as Kernel IR: the per-element mapping of `braze.ops.philox`, word for word."""

from __future__ import annotations

import math

from braze import dtypes as dt
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower.values import ValueEmitter, _linear, cast, index_op, register_view_rule
from braze.ops.philox import UNIFORM_BITS

WIDE = dt.int64  # Philox counters and words are 64-bit whatever the kernel's index type


def _as_int64(value: int) -> k.Const:
    """A uint64 seed or offset as the int64 with the same bits."""
    return k.Const(value - 2**64 if value >= 2**63 else value, dt.int64)


def _word(em: ValueEmitter, tv: TensorView, group: k.Expr, word: k.Expr) -> k.Expr:
    expr = tv.definition
    if expr.inputs:  # int64 operands read at run time
        seed, offset = (cast(em.value(x, ()), WIDE) for x in expr.inputs)
    elif expr.attrs["seed"] is not None:
        seed, offset = _as_int64(expr.attrs["seed"]), _as_int64(expr.attrs["offset"])
    else:  # drawn from the global generator at every run
        seed, offset = (k.ScalarRef(p) for p in em.params.rng(tv))
    return k.Philox(seed, offset, group, word)


def _scaled(bits: k.Expr, shift: int, scale_bits: int, compute: dt.DType, plus_one: bool = False) -> k.Expr:
    kept = k.Binary("right_shift", bits, k.Const(shift, WIDE), WIDE)
    if plus_one:
        kept = k.Binary("add", kept, k.Const(1, WIDE), WIDE)
    return k.Binary("mul", cast(kept, compute), k.Const(2.0**-scale_bits, compute), compute)


def uniform_from_bits(bits: k.Expr, dtype: dt.DType) -> k.Expr:
    """A Philox word (int64 in [0, 2**32)) as a `dtype` value in [0, 1), as `philox.bits_to_uniform`."""
    m = UNIFORM_BITS[dtype.name]
    compute = dt.float64 if dtype == dt.float64 else dt.float32
    return cast(_scaled(bits, 32 - m, m, compute), dtype)


def normal_from_bits(a: k.Expr, b: k.Expr, dtype: dt.DType) -> k.Expr:
    """Two Philox words as one standard normal `dtype` value, as `philox.bits_to_normal`."""
    compute = dt.float64  # as braze.ops.philox.normal: float64 math, so backends agree bit for bit
    u1 = _scaled(a, 8, 24, compute, plus_one=True)
    u2 = _scaled(b, 8, 24, compute)
    radius = k.Unary("sqrt", k.Binary("mul", k.Const(-2.0, compute), k.Unary("log", u1, compute), compute), compute)
    angle = k.Binary("mul", k.Const(2.0 * math.pi, compute), u2, compute)
    return cast(k.Binary("mul", radius, k.Unary("cos", angle, compute), compute), dtype)


def _rand(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
    flat = cast(_linear(em, idx, em.shape(tv)), WIDE)
    bits = _word(em, tv, index_op("floordiv", flat, k.Const(4, WIDE)), index_op("remainder", flat, k.Const(4, WIDE)))
    return uniform_from_bits(bits, tv.dtype)


def _randn(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
    flat = cast(_linear(em, idx, em.shape(tv)), WIDE)
    group = index_op("floordiv", flat, k.Const(2, WIDE))
    first = index_op("mul", index_op("remainder", flat, k.Const(2, WIDE)), k.Const(2, WIDE))
    second = index_op("add", first, k.Const(1, WIDE))
    return normal_from_bits(_word(em, tv, group, first), _word(em, tv, group, second), tv.dtype)


register_view_rule("rand", _rand)
register_view_rule("randn", _randn)
