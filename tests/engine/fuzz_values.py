"""The values of random fusion programs (tests/engine/random_fusions.py builds them): nodes with a
static bound and an error bound, input recipes, operand typing and broadcasting, and the check of an
output against the reference backend's.

Hypothesis builds a random fusion per example: 1-3 inputs of rank 1-3 (symbolic, static and broadcast
dimensions; transposed, `[::k]`-strided, negative-stride and zero-stride arrays), then random ops over
every kind of the op table (elementwise ops with tensors and weak Python scalars, casts, broadcasts,
views, reductions, composites) and 1-3 outputs. Both backends run it; the compiled one must agree with
the reference and launch at most one task per output plus one per reduction.

How close is close enough. Every node carries a static bound on |value| and a bound `err` on how far
the compiled value may be from the reference's:

- `err == 0` (exact): integer and bool values, views and correctly rounded float ops (add, mul, div,
  sqrt, fma, lerp, max/min, casts, ...) of exact operands. Both backends round each op once from its
  compute type, so they must agree bit for bit (compared by value).
- otherwise `err` is propagated with the op's Lipschitz constant on its bounded domain, plus a few
  ulps of the compute type where the backends approximate (exp, sin, sums in another order) and one
  ulp of the result type where it is rounded. Ops with singularities only see safe domains
  (`log(abs(x) + 0.5)`, `a / (abs(b) + 0.5)`, `exp` of bounded values).
- Discontinuous ops (comparisons, floor, sign, float->int casts, argmax, truth tests) only take exact
  operands, so a last-bit difference upstream can never flip them.

A failure prints the program, its inputs' dtypes, shapes and strides, and the values that differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from braze import dtypes as dt
from braze.ir.tensor import TensorView
from braze.ops.table import OPS

ALL = dt.ALL_DTYPES  # the dtypes the random fusion generator draws
# Values a node of each dtype may reach. Signed and float types stay far from overflow (int8 wraps at 128,
# float16 at 65504). An unsigned value lies in [0, bound]: its bound may be the whole range, as after a
# subtraction that wraps (`uint8 3 - 5` is 254), which both backends compute exactly alike.
LIMIT = {"bool": 1, "int8": 120, "int16": 30000, "int32": 2**30, "int64": 2**60,
         **{d.name: int(np.iinfo(d.numpy).max) for d in dt.INT_DTYPES if d.is_unsigned},
         "float16": 1e4, "bfloat16": 1e4, "float32": 1e6, "float64": 1e6}
# Ops whose unsigned result wraps below zero: their bound is the type's whole range.
WRAPPING_OPS = frozenset({"sub", "neg", "bitwise_not"})
MAX_RANK, MAX_NUMEL = 4, 8200  # a node of more elements is left out of the program
ODD_EXTENTS = (7, 9, 17, 31, 33, 63, 65, 127, 129)
LARGE_EXTENTS = (255, 257, 1023, 1025, 2049, 4097)
SAFETY = 4.0  # the error bounds are first order; this covers their second-order terms
APPROX_ULPS = 8  # NumPy's SIMD float32 exp/sin/... are within 4 ulp; libm within 1
FLOAT_LITERALS = (0.5, 2.0, -1.5, 0.1, 3.0, 0.25)
INT_LITERALS = (1, 2, 3, -2, 5)


# Ops the compiled backend computes with its inlined float32 exp. Nesting them once made LLVM's optimizer
# exponential (test_exp_chain_on_a_broadcast_input_compiles_quickly below); the generator nests up to four.
EXP_OPS = frozenset({"exp", "sigmoid", "silu"})
MAX_EXP_NESTING = 4


def exp_nesting(tv: TensorView, memo: dict[int, int]) -> int:
    """The most EXP_OPS on one path from the inputs to tv."""
    if id(tv) not in memo:
        expr = tv.definition
        memo[id(tv)] = 0 if expr is None else (expr.op in EXP_OPS) + max(
            (exp_nesting(i, memo) for i in expr.inputs), default=0)
    return memo[id(tv)]


# Each op with a bfloat16 result rounds with integer code; a chain of them on a value that is the same all
# along the innermost loop makes LLVM's loop vectorizer exponential (six `y * 0.5 + 0.25` take minutes:
# test_bfloat16_chain_on_a_broadcast_input_compiles_quickly below). The generator takes no operand that
# ends such a chain of four.
MAX_BF16_CHAIN = 4


def bf16_chain(tv: TensorView, memo: dict[int, int]) -> int:
    """The most ops with a bfloat16 result (views aside) on one path from the inputs to tv."""
    if id(tv) not in memo:
        expr = tv.definition
        memo[id(tv)] = 0 if expr is None else (tv.dtype == dt.bfloat16 and OPS[expr.op].category != "view") + max(
            (bf16_chain(i, memo) for i in expr.inputs), default=0)
    return memo[id(tv)]


def ulp(d: dt.DType) -> float:
    return dt.finfo_eps(d) if d.is_floating else 0.0


def compute_ulp(d: dt.DType) -> float:
    return ulp(dt.compute_dtype(d))


@dataclass(eq=False)  # identity: TensorView's == builds an expression
class Node:
    """A tensor of the fusion being built, with the concrete shape it will have at run time."""

    tv: TensorView
    shape: tuple[int, ...]
    bound: float  # |value| <= bound
    err: float  # |compiled - reference| <= SAFETY * err (0: bit for bit)
    name: str

    @property
    def dtype(self) -> dt.DType:
        return self.tv.dtype

    @property
    def kind(self) -> str:
        """'b', 'i' (signed or unsigned integer) or 'f', as the op table's kinds."""
        return self.tv.dtype.category

    @property
    def unsigned(self) -> bool:
        return self.tv.dtype.is_unsigned

    @property
    def exact(self) -> bool:
        return self.err == 0

    @property
    def bcast(self) -> tuple[bool, ...]:
        return tuple(d.is_broadcast for d in self.tv.visible)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


Operand = Node | bool | int | float


def _value(x: Operand):
    return x.tv if isinstance(x, Node) else x


def _text(x: Operand) -> str:
    return x.name if isinstance(x, Node) else repr(x)


def _bound(x: Operand) -> float:
    return x.bound if isinstance(x, Node) else abs(float(x))


def _err(x: Operand) -> float:
    return x.err if isinstance(x, Node) else 0.0


def _typed(x: Operand) -> tuple[dt.DType, int]:
    return (x.dtype, x.tv.weak) if isinstance(x, Node) else (dt.python_scalar_dtype(x), 2)


def promoted_kind(kinds: str, values: list[Operand]) -> dt.DType | None:
    """The promoted type of an op's value operands, or None where the op rejects their kinds."""
    typed = [_typed(v) for v in values]
    if any(w == 0 and d.category not in kinds for d, w in typed):
        return None
    promoted = dt.result_type(*typed)
    return promoted if promoted.category in kinds else None


def literals_fit(values: list[Operand]) -> bool:
    """Whether the op's Python int literals fit the type they meet: a negative one never fits an unsigned
    type (`uint8_x - (-1)` is an error, as in NumPy 2)."""
    promoted = dt.result_type(*[_typed(v) for v in values])
    return not (promoted.is_unsigned and any(type(v) is int and v < 0 for v in values))


def broadcast_shape(operands: list[Operand]) -> tuple[int, ...] | None:
    """NumPy broadcasting over the operands' concrete shapes, as braze allows it: extents must be
    equal unless one of the dimensions is a broadcast one (a symbolic extent of 1 is not)."""
    shaped = [n for n in operands if isinstance(n, Node) and n.tv.ndim > 0]
    rank = max((n.tv.ndim for n in shaped), default=0)
    out = []
    for axis in range(rank):
        extent = 1
        full = None
        for n in shaped:
            i = axis - (rank - n.tv.ndim)
            if i < 0 or n.bcast[i]:
                continue
            if full is not None and n.shape[i] != full:
                return None
            full = extent = n.shape[i]
        out.append(extent)
    return tuple(out)


@dataclass
class InputRecipe:
    """How to make one input array: its dtype, shape and memory layout."""

    dtype: dt.DType
    shape: tuple[int, ...]
    perm: tuple[int, ...]  # memory order of the buffer (outermost first)
    steps: tuple[int, ...]  # every steps[d]-th element of a bigger buffer
    flips: tuple[bool, ...]  # negative strides
    repeat: tuple[bool, ...]  # stride 0: the values repeat along these dimensions
    grid: bool  # float values on a grid of quarters (ties, exact zeros) instead of uniform
    zero_unit_strides: bool = False  # stride 0 on dimensions of extent 1
    scalar: bool = False  # a define_scalar input, passed as a Python number
    wide: bool = False  # unsigned values over the whole range (a uint8 image's 0-255) instead of 0-8

    def make(self, rng: np.random.Generator):
        d = self.dtype
        if self.scalar:
            return {"b": True, "i": 3, "f": 0.75}[d.category]
        value_shape = tuple(1 if r else n for n, r in zip(self.shape, self.repeat))
        if d.is_bool:
            values = rng.random(value_shape) < 0.5
        elif self.wide:
            values = rng.integers(0, np.iinfo(d.numpy).max, value_shape, dtype=d.numpy, endpoint=True)
        elif d.is_integer:
            values = rng.integers(0 if d.is_unsigned else -8, 9, value_shape)
        elif self.grid:
            values = rng.integers(-8, 9, value_shape) / 4
        else:
            values = rng.uniform(-2, 2, value_shape)
        values = np.broadcast_to(values.astype(d.numpy), self.shape)
        garbage = {"b": True, "i": 99, "f": np.nan}[d.category]  # what a wrong index reads
        buffer = np.full([self.shape[p] * self.steps[p] for p in self.perm], garbage, d.numpy)
        view = buffer[tuple(slice(None, None, self.steps[p]) for p in self.perm)].transpose(np.argsort(self.perm))
        view = view[tuple(slice(None, None, -1 if f else 1) for f in self.flips)]
        view[...] = values
        if any(self.repeat):
            view = np.broadcast_to(view[tuple(slice(0, 1) if r else slice(None) for r in self.repeat)], self.shape)
        elif self.zero_unit_strides:
            view = np.lib.stride_tricks.as_strided(view, strides=[0 if n == 1 else s for n, s in
                                                                  zip(view.shape, view.strides)])
        return view


def describe(array) -> str:
    if not isinstance(array, np.ndarray):
        return f"scalar {array!r}"
    return f"{array.dtype}{list(array.shape)} strides={array.strides}"


def _slice_text(s: slice) -> str:
    return ":".join("" if v is None else str(v) for v in (s.start, s.stop, s.step)).removesuffix(":") or ":"


def check_output(node: Node, got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == node.dtype.numpy, f"{what}: dtype {got.dtype}, reference {want.dtype}"
    assert got.shape == want.shape == node.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    if not node.dtype.is_floating:  # exact, compared as integers: float64 would round 64-bit values
        check_integers(node, got, want, what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    # Sanity of the generator's own bounds: the reference stays finite and within them.
    assert np.isfinite(w).all() and (np.abs(w) <= node.bound * 1.01 + 1e-9).all(), (
        f"{what}: the generator's bound {node.bound} is wrong: reference {want}")
    allowed = SAFETY * node.err
    bad = ~(np.abs(g - w) <= allowed)  # NaN in `got` is bad too
    assert not bad.any(), (
        f"{what}: {node.dtype.name} {'exact' if allowed == 0 else f'within {allowed:.3g}'}: got {g[bad][:6]}, "
        f"reference {w[bad][:6]} at {np.argwhere(bad)[:6].tolist()}")


def check_integers(node: Node, got: np.ndarray, want: np.ndarray, what: str) -> None:
    magnitude = np.abs(want.astype(object))  # Python ints: a uint64's bound is exact
    assert np.all(magnitude <= node.bound), f"{what}: the generator's bound {node.bound} is wrong: reference {want}"
    bad = np.asarray(got != want)
    assert not bad.any(), (f"{what}: {node.dtype.name} exact: got {got[bad][:6]}, reference {want[bad][:6]} "
                           f"at {np.argwhere(bad)[:6].tolist()}")
