"""Reshape indices without a division per element, where the extents allow.

A reshape reads element `flat` of its input, where `flat` is the row-major flat index of the output
element: input index k is `(flat % T[k-1]) // T[k]` with T the input's row-major strides. Divided
blindly, that is an integer division by a runtime extent per element, which the CPU's loops cannot
vectorize (group_norm's reshape from [N, G, C/G*H*W] back to [N, C, H, W]).

Here the output index is a mixed-radix number instead: its digits are the output's indices, each
with its extent. Extents are monomials (a positive constant times a product of opaque factors:
symbols, or whatever else a Scalar is), so divisibility is decided at compile time. Dividing by
(or taking the remainder of) a stride that falls on a digit boundary (a product of the inner
digits' extents times a factor of one digit's extent) touches that one digit: `c // 2` for
group_norm's group index, not `flat // (2*H*W)`. Where the strides do not line up, `split` returns
None and the lowering divides the flat index as before.

A monomial quotient equals the integer quotient whenever the divisor is not zero, and a zero extent
leaves the reshape without elements, so no index built here is ever used with a zero extent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from braze.ir.scalar import Scalar
from braze.kir import nodes as k
from braze.lower.exprs import index_op


@dataclass(frozen=True)
class Monomial:
    """coef * the product of `factors` (each Scalar with its power): a positive integer."""

    coef: int
    factors: frozenset[tuple[Scalar, int]] = frozenset()

    def __mul__(self, other: Monomial) -> Monomial:
        powers = Counter(dict(self.factors)) + Counter(dict(other.factors))
        return Monomial(self.coef * other.coef, frozenset(powers.items()))

    def divides(self, other: Monomial) -> bool:
        theirs = dict(other.factors)
        return other.coef % self.coef == 0 and all(theirs.get(f, 0) >= n for f, n in self.factors)

    def __floordiv__(self, other: Monomial) -> Monomial:
        """The exact quotient; only where `other.divides(self)`."""
        powers = Counter(dict(self.factors))
        powers.subtract(dict(other.factors))
        return Monomial(self.coef // other.coef, frozenset((f, n) for f, n in powers.items() if n))

    @property
    def is_one(self) -> bool:
        return self.coef == 1 and not self.factors


ONE = Monomial(1)


def monomial(s: Scalar) -> Monomial | None:
    """`s` as a monomial: products and exact quotients of its parts, anything else one opaque factor;
    None for a constant that is not positive."""
    if s.is_const:
        return Monomial(s.value) if s.value > 0 else None
    if s.op in ("*", "//"):
        a, b = (monomial(x) for x in s.args)
        if a is None or b is None:
            return None
        if s.op == "*":
            return a * b
        if b.divides(a):
            return a // b
    return Monomial(1, frozenset({(s, 1)}))


@dataclass(frozen=True)
class Digit:
    index: k.Expr
    extent: Monomial


def _strides(digits: Sequence[Digit]) -> list[Monomial]:
    strides, stride = [], ONE
    for d in reversed(digits):
        strides.append(stride)
        stride = stride * d.extent
    return strides[::-1]


def _boundary(digits: Sequence[Digit], t: Monomial) -> tuple[int, Monomial] | None:
    """(p, q) with t = q * stride[p] and q dividing digit p's extent: where t cuts the number."""
    for p, stride in enumerate(_strides(digits)):
        if stride.divides(t) and (t // stride).divides(digits[p].extent):
            return p, t // stride
    return None


class RadixSplit:
    """Splits a mixed-radix index by strides; `to_expr` turns a monomial into an index expression."""

    def __init__(self, to_expr: Callable[[Monomial], k.Expr]) -> None:
        self.to_expr = to_expr

    def div(self, digits: list[Digit], t: Monomial) -> list[Digit] | None:
        """The number // t: the digits above t's boundary, the cut digit divided."""
        if not digits:  # the number 0
            return digits
        found = _boundary(digits, t)
        if found is None:
            return None
        p, q = found
        cut = digits[p]
        index = cut.index if q.is_one else index_op("floordiv", cut.index, self.to_expr(q))
        return digits[:p] + [Digit(index, cut.extent // q)]

    def mod(self, digits: list[Digit], m: Monomial) -> list[Digit] | None:
        """The number % m: the digits below m's boundary, the cut digit reduced."""
        if not digits:
            return digits
        found = _boundary(digits, m)
        if found is None:
            return None
        p, q = found
        cut = digits[p]
        if q == cut.extent:
            return digits[p:]
        if q.is_one:
            return digits[p + 1:]
        return [Digit(index_op("remainder", cut.index, self.to_expr(q)), q)] + digits[p + 1:]

    def value(self, digits: list[Digit], zero: k.Expr) -> k.Expr:
        """The number the digits make."""
        total = zero
        for d in digits:
            total = index_op("add", index_op("mul", total, self.to_expr(d.extent)), d.index)
        return total


def split(idx: Sequence[k.Expr], out_extents: Sequence[Scalar], in_extents: Sequence[Scalar],
          to_expr: Callable[[Monomial], k.Expr], zero: k.Expr) -> tuple[k.Expr, ...] | None:
    """The input index of a reshape from `in_extents` to `out_extents` at output index `idx`, with
    divisions only of single output indices; None where the extents do not line up."""
    out_monomials = [monomial(e) for e in out_extents]
    in_monomials = [monomial(e) for e in in_extents]
    if any(m is None for m in out_monomials + in_monomials):
        return None
    digits = [Digit(i, m) for i, m in zip(idx, out_monomials) if not m.is_one]  # extent 1: index 0
    radix = RadixSplit(to_expr)
    strides = _strides([Digit(zero, m) for m in in_monomials])
    result = []
    for axis, (stride, extent) in enumerate(zip(strides, in_monomials)):
        above = digits if axis == 0 else radix.mod(digits, stride * extent)
        part = None if above is None else radix.div(above, stride)
        if part is None:
            return None
        result.append(radix.value(part, zero))
    return tuple(result)
