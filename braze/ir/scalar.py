"""Symbolic integer expressions (`Scalar`) for tensor extents, split factors and indices.

A `Scalar` is an immutable tree: a constant, a named symbol, or a binary op over two Scalars.
Equality and hashing are structural, so Scalars serve as dict keys and cache-key parts; `==`
never builds an expression (a constant also equals, and hashes like, its int). A symbolic
extent compared with an int (`x.shape[-1] == 4` inside `@bz.jit`) has no answer until the fusion
runs, so that comparison refuses to be a Python bool; `same_as(4)` asks structurally. Operators build
expressions through `_make`, which folds constants and applies a few identities, so
expressions built the same way print the same.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from braze.errors import InputError, TracerBoolConversionError


def _ceildiv(a: int, b: int) -> int:
    return -((-a) // b)


# One table gives the meaning of every op; evaluation and constant folding both use it.
_EVAL: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "ceildiv": _ceildiv, "min": min, "max": max,
}
_ORDER: dict[str, Callable[[int, int], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_COMMUTATIVE = frozenset({"+", "*", "min", "max"})
# `+` is absent: additive constants are merged by `_offset`, which also picks `+` or `-`.
_ASSOCIATIVE = frozenset({"*", "min", "max"})
_DIVISIONS = frozenset({"//", "%", "ceildiv"})
_LEAVES = frozenset({"const", "symbol"})
# Printing precedence of the infix ops; anything else (leaves, calls) binds tightest.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}
_ATOM = 3


class Scalar:
    """An immutable symbolic integer expression.

    Build Scalars with `const`, `symbol`, the operators `+ - * // %` (ints mix in freely) and
    `ceildiv`, `smin`, `smax`, rather than calling the constructor, which does not simplify.
    """

    __slots__ = ("_op", "_args", "_leaf", "_hash")

    def __init__(self, op: str, args: tuple[Scalar, ...] = (), leaf: int | str | None = None) -> None:
        if op not in _LEAVES and op not in _EVAL:
            raise ValueError(f"unknown Scalar op {op!r}; expected one of {sorted(_LEAVES | _EVAL.keys())}")
        object.__setattr__(self, "_op", op)
        object.__setattr__(self, "_args", args)
        object.__setattr__(self, "_leaf", leaf)
        # A constant hashes like its int, because it also compares equal to it.
        key = leaf if op == "const" else (op, leaf, args)
        object.__setattr__(self, "_hash", hash(key))

    @staticmethod
    def const(v: int) -> Scalar:
        """The constant `v`."""
        return const(v)

    @staticmethod
    def symbol(name: str) -> Scalar:
        """The free symbol called `name`."""
        return symbol(name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Scalar is immutable")

    def __reduce__(self) -> tuple[type[Scalar], tuple[str, tuple[Scalar, ...], int | str | None]]:
        # The default pickling protocol would restore slots through the blocked __setattr__.
        return (Scalar, (self._op, self._args, self._leaf))

    @property
    def op(self) -> str:
        """`"const"`, `"symbol"`, or one of `+ - * // % ceildiv min max`."""
        return self._op

    @property
    def args(self) -> tuple[Scalar, ...]:
        """The operands of an op; empty for constants and symbols."""
        return self._args

    @property
    def is_const(self) -> bool:
        """Whether this is a constant."""
        return self._op == "const"

    @property
    def is_symbol(self) -> bool:
        """Whether this is a free symbol."""
        return self._op == "symbol"

    @property
    def value(self) -> int:
        """The value of a constant; `ValueError` for anything else."""
        if self._op != "const":
            raise ValueError(f"Scalar {self} is not a constant")
        return self._leaf  # type: ignore[return-value]

    @property
    def name(self) -> str:
        """The name of a symbol; `ValueError` for anything else."""
        if self._op != "symbol":
            raise ValueError(f"Scalar {self} is not a symbol")
        return self._leaf  # type: ignore[return-value]

    def same_as(self, other: Scalar | int) -> bool:
        """Structural equality with another Scalar or an int (`n.same_as(1)`: whether `n` is known to be
        1); unlike `==` with an int, never an error for a symbolic extent."""
        if isinstance(other, int) and not isinstance(other, bool):
            other = const(other)
        return isinstance(other, Scalar) and self._same(other)

    def __eq__(self, other: object) -> bool:
        return self._equality(other, "==")

    def __ne__(self, other: object) -> bool:
        return self._equality(other, "!=")

    def _equality(self, other: object, symbol: str) -> bool:
        """Structural between Scalars (dict keys, cache keys); with an int, the int's answer for a
        constant, and for anything else an answer that refuses to be a Python bool."""
        if not isinstance(other, Scalar):
            try:
                other = as_scalar(other)  # type: ignore[arg-type]
            except TypeError:
                return NotImplemented
            if not self.is_const:
                return UnknownComparison(self, symbol, other)  # type: ignore[return-value]
        return self._same(other) == (symbol == "==")

    def _same(self, other: Scalar) -> bool:
        return self is other or (
            self._hash == other._hash
            and self._op == other._op
            and self._leaf == other._leaf
            and self._args == other._args
        )

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        raise TracerBoolConversionError(
            f"Scalar {self} has no truth value: compare with .same_as() or ==, or test .is_const/.value"
        )

    def _order(self, other: object, symbol: str) -> bool:
        """`<` and friends on constants; a symbolic extent (`x.shape[0]` inside `@bz.jit`) has no
        value while the fusion is defined, so comparing it is an error that says what to do instead."""
        if isinstance(other, (int, Scalar)) and not isinstance(other, bool):
            a, b = concrete_value(self), concrete_value(as_scalar(other))
            if a is not None and b is not None:
                return _ORDER[symbol](a, b)
        raise _symbolic_extent_error(self, symbol, other)

    def __lt__(self, other: object) -> bool:
        return self._order(other, "<")

    def __le__(self, other: object) -> bool:
        return self._order(other, "<=")

    def __gt__(self, other: object) -> bool:
        return self._order(other, ">")

    def __ge__(self, other: object) -> bool:
        return self._order(other, ">=")

    def __int__(self) -> int:
        return self.value

    def free_symbols(self) -> frozenset[str]:
        """The names of the symbols this expression mentions."""
        if self._op == "symbol":
            return frozenset((self._leaf,))  # type: ignore[arg-type]
        return frozenset().union(*(arg.free_symbols() for arg in self._args))

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The value with each symbol bound by `bindings`; Python's floor `//` and `%` semantics."""
        if self._op == "const":
            return self._leaf  # type: ignore[return-value]
        if self._op == "symbol":
            if self._leaf not in bindings:
                raise InputError(f"symbol {self._leaf!r} is not bound; bound symbols: {sorted(bindings)}")
            return operator.index(bindings[self._leaf])  # type: ignore[index]
        a, b = (arg.evaluate(bindings) for arg in self._args)
        if b == 0 and self._op in _DIVISIONS:
            raise ZeroDivisionError(f"{self}: divisor {self._args[1]} evaluated to 0")
        return _EVAL[self._op](a, b)

    def substitute(self, mapping: Mapping[str, Scalar | int]) -> Scalar:
        """This expression with symbols replaced by `mapping`, simplified again."""
        if self._op == "symbol":
            return as_scalar(mapping[self._leaf]) if self._leaf in mapping else self
        if not self._args:
            return self
        return _make(self._op, *(arg.substitute(mapping) for arg in self._args))

    def __str__(self) -> str:
        if self._op in _LEAVES:
            return str(self._leaf)
        a, b = self._args
        if self._op not in _PRECEDENCE:
            return f"{self._op}({a}, {b})"
        prec = _PRECEDENCE[self._op]
        # Left-associative: a right operand at the same level needs parentheses, a left one not.
        return f"{_paren(a, _precedence(a) < prec)} {self._op} {_paren(b, _precedence(b) <= prec)}"

    def __repr__(self) -> str:
        return f"Scalar({self})"

    def __neg__(self) -> Scalar:
        return _make("*", self, const(-1))

    def __add__(self, other: int | Scalar) -> Scalar:
        return _binary("+", self, other)

    def __radd__(self, other: int | Scalar) -> Scalar:
        return _binary("+", other, self)

    def __sub__(self, other: int | Scalar) -> Scalar:
        return _binary("-", self, other)

    def __rsub__(self, other: int | Scalar) -> Scalar:
        return _binary("-", other, self)

    def __mul__(self, other: int | Scalar) -> Scalar:
        return _binary("*", self, other)

    def __rmul__(self, other: int | Scalar) -> Scalar:
        return _binary("*", other, self)

    def __floordiv__(self, other: int | Scalar) -> Scalar:
        return _binary("//", self, other)

    def __rfloordiv__(self, other: int | Scalar) -> Scalar:
        return _binary("//", other, self)

    def __mod__(self, other: int | Scalar) -> Scalar:
        return _binary("%", self, other)

    def __rmod__(self, other: int | Scalar) -> Scalar:
        return _binary("%", other, self)

    # Python's abs() and divmod() of an extent (`abs(x.shape[0] - 5)`): the expressions they stand for.
    def __abs__(self) -> Scalar:
        return _make("max", self, -self)

    def __divmod__(self, other: int | Scalar) -> tuple[Scalar, Scalar]:
        return self // other, self % other

    def __rdivmod__(self, other: int | Scalar) -> tuple[Scalar, Scalar]:
        return other // self, other % self


class UnknownComparison:
    """`n == 4` with a symbolic extent `n` (`x.shape[-1]` inside `@bz.jit`): its answer depends on the
    size the fusion will run with, which one compiled fusion leaves open, so using it as a Python
    bool raises, as `<` and `>` on extents do. Structurally a symbolic extent never equals a
    constant, and Scalar-to-Scalar `==` (dict keys, cache keys) stays a plain structural bool."""

    __slots__ = ("_extent", "_symbol", "_other")

    def __init__(self, extent: Scalar, symbol: str, other: Scalar) -> None:
        self._extent, self._symbol, self._other = extent, symbol, other

    def __bool__(self) -> bool:
        a, b = concrete_value(self._extent), concrete_value(self._other)
        if a is None or b is None:
            raise _symbolic_extent_error(self._extent, self._symbol, self._other)
        return (a == b) == (self._symbol == "==")

    def __repr__(self) -> str:
        return f"UnknownComparison({self._extent} {self._symbol} {self._other})"


def _symbolic_extent_error(extent: Scalar, symbol: str, other: object) -> TracerBoolConversionError:
    return TracerBoolConversionError(
        f"extent {extent} {symbol} {other}: extents are symbolic while a fusion is defined (one compiled "
        "fusion serves every size), so they cannot steer Python control flow; use bz.ops.where, or give "
        "the dimension a static size (define_tensor((4, -1))); a @bz.jit trace takes the call's size instead")


def _binary(op: str, a: object, b: object) -> Scalar:
    # NotImplemented, not TypeError, lets Python try the other operand and then name both types.
    try:
        a, b = as_scalar(a), as_scalar(b)  # type: ignore[arg-type]
    except TypeError:
        return NotImplemented
    return _make(op, a, b)


def _precedence(x: Scalar) -> int:
    return _PRECEDENCE.get(x.op, _ATOM)


def _paren(x: Scalar, needed: bool) -> str:
    return f"({x})" if needed else str(x)


def const(v: int) -> Scalar:
    """The constant `v` (an int, or anything with `__index__` other than a bool)."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError(f"a Scalar constant must be an int, got {type(v).__name__}")
    return Scalar("const", leaf=operator.index(v))


def symbol(name: str) -> Scalar:
    """The free symbol `name`, which must be a Python identifier so that printed expressions parse."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a Scalar symbol name must be an identifier, got {name!r}")
    return Scalar("symbol", leaf=name)


def as_scalar(x: int | Scalar) -> Scalar:
    """`x` itself if it is a Scalar, else the constant `x`; `TypeError` for bools, floats and the rest."""
    return x if isinstance(x, Scalar) else const(x)


def ceildiv(a: int | Scalar, b: int | Scalar) -> Scalar:
    """`a` divided by `b`, rounded up."""
    return _make("ceildiv", as_scalar(a), as_scalar(b))


def smin(a: int | Scalar, b: int | Scalar) -> Scalar:
    """The smaller of `a` and `b`."""
    return _make("min", as_scalar(a), as_scalar(b))


def smax(a: int | Scalar, b: int | Scalar) -> Scalar:
    """The larger of `a` and `b`."""
    return _make("max", as_scalar(a), as_scalar(b))


_ZERO = Scalar("const", leaf=0)


def _keep(x: Scalar) -> Scalar:
    return x


def _zero(_: Scalar) -> Scalar:
    return _ZERO


# (op, constant right operand) -> result, for ops whose constant operand makes them trivial.
_RIGHT_CONST_RULES: dict[tuple[str, int], Callable[[Scalar], Scalar]] = {
    ("*", 1): _keep, ("*", 0): _zero, ("//", 1): _keep, ("ceildiv", 1): _keep,
    ("%", 1): _zero, ("%", -1): _zero,
}
# op -> result, when both operands are structurally equal.
_SAME_OPERAND_RULES: dict[str, Callable[[Scalar], Scalar]] = {"-": _zero, "min": _keep, "max": _keep}


def _make(op: str, a: Scalar, b: Scalar) -> Scalar:
    """The smart constructor behind every operator: folds constants and applies the rule tables."""
    if a.is_const and b.is_const:
        return Scalar("const", leaf=_EVAL[op](a.value, b.value))
    if op in _COMMUTATIVE and a.is_const:
        a, b = b, a
    if b.is_const:
        if op in _DIVISIONS and b.value == 0:
            raise ZeroDivisionError(f"{a} {op} 0: division by a constant zero")
        if op in ("+", "-"):
            return _offset(a, b.value if op == "+" else -b.value)
        if op in _ASSOCIATIVE and a.op == op and a.args[1].is_const:
            return _make(op, a.args[0], _make(op, a.args[1], b))
        rule = _RIGHT_CONST_RULES.get((op, b.value))
    else:
        rule = _SAME_OPERAND_RULES.get(op) if a == b else None
    return rule(a) if rule is not None else Scalar(op, (a, b))


def _offset(x: Scalar, k: int) -> Scalar:
    """`x + k`, merging into a constant that `x` already adds, and written `x - n` when `k` is negative."""
    if x.op in ("+", "-") and x.args[1].is_const:
        k += x.args[1].value if x.op == "+" else -x.args[1].value
        x = x.args[0]
    if k == 0:
        return x
    return Scalar("+", (x, const(k))) if k > 0 else Scalar("-", (x, const(-k)))



# While `@bz.jit` traces a call, the sizes of that call: an extent its Python code uses as a number
# (`range(n)`, `np.ones(n)`, `if n > 128`) is that number, and the trace serves only calls whose
# extents it so used have the same values (braze/frontend/jit.py keys its traces by them).
_concrete = threading.local()


class _CallSizes:
    """The sizes of the call a trace runs with, the symbols asked for, and the last `__index__` asked
    (its call site, a Python frame and the instruction it was at, and the symbols it added), which
    torch's argument parser may have asked only to check the type."""

    def __init__(self, bindings: Mapping[str, int]) -> None:
        self.bindings, self.used = bindings, set()
        self.probe: tuple[object, frozenset[str]] | None = None


@contextmanager
def concretizing(bindings: Mapping[str, int]) -> Iterator[set[str]]:
    """Within the block, `concrete_value` answers from `bindings`; yields the symbols it was asked for."""
    outer = getattr(_concrete, "sizes", None)
    _concrete.sizes = sizes = _CallSizes(bindings)
    try:
        yield sizes.used
    finally:
        _concrete.sizes = outer


def concrete_value(x: Scalar, site: object = None) -> int | None:
    """A constant's value; a symbolic extent's value under `concretizing`, noting the symbols it used;
    else None. `site` (where `__index__` was called from) lets `forget_type_probe` take the use back."""
    if x.is_const:
        return x.value
    sizes = getattr(_concrete, "sizes", None)
    symbols = x.free_symbols()
    if sizes is None or not symbols <= sizes.bindings.keys():
        return None
    sizes.probe = None if site is None else (site, symbols - sizes.used)
    sizes.used.update(symbols)
    return x.evaluate(sizes.bindings)


def caller_site() -> tuple[object, int]:
    """Where the function that calls this was called from: the Python frame and the instruction it is at
    (a C function such as torch's parser or `range` has no frame of its own: its caller's is the site)."""
    frame = sys._getframe(2)
    return frame, frame.f_lasti


def forget_type_probe(site: object) -> None:
    """torch's argument parser calls `__index__` on the first extent of a list of sizes (`torch.reshape(x,
    (n * m, -1))`) only to check its type, then hands the extent itself to `__torch_function__`: the
    symbols that call added, at the same call site with nothing asked in between, were not used."""
    sizes = getattr(_concrete, "sizes", None)
    if sizes is not None and sizes.probe is not None and sizes.probe[0] == site:
        sizes.used.difference_update(sizes.probe[1])
        sizes.probe = None
