"""The float64 oracle the op tests compare braze against, and the helpers they share.

The oracle is written independently of the op table's reference rules: floating ops are evaluated
in float64 on the inputs upcast exactly, integer and bool ops in exact Python integers then
wrapped to the result's width. Only the tolerance table below decides how close is close enough.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import braze as bz
from braze import dtypes as dt

# The backend every op test executes on: the NumPy reference by default. A compiled backend checks
# itself against the same oracle with BRAZE_OPS_BACKEND=llvm (or any name in engine.BACKENDS);
# `cuda` runs each fusion on the GPU (host inputs copied in, outputs poisoned before the kernels
# write them); `nvrtc` needs no GPU: results come from the compiled CPU backend (llvm), checked as
# under `llvm`, and every fusion's CUDA source is collected and compiled with NVRTC at the end of
# the session (tests/ops/conftest.py): one pass checks both compiled backends' code.
BACKEND = os.environ.get("BRAZE_OPS_BACKEND", "reference")
CUDA_SOURCES: list[tuple[str, object]] = []  # (test id, CudaSource) under BRAZE_OPS_BACKEND=nvrtc

ALL_DTYPES = bz.dtypes.ALL_DTYPES
FLOAT_DTYPES = tuple(d for d in ALL_DTYPES if d.kind == "f")

# --- tolerances: the one place that says how close a floating result must be -----------------------
# (rtol, atol) per result dtype. Half types compute in float32 and round once, so they get about one
# unit in the last place; float32 allows a few ulps of NumPy's float32 math; float64 nearly nothing.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (8e-3, 1e-5),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
}


def tolerance(dtype: bz.DType, k: float = 1) -> tuple[float, float]:
    """(rtol, atol) for a result of `dtype`, loosened `k` times for ops that round more than once."""
    rtol, atol = TOLERANCES[dtype.name]
    return rtol * k, atol * k


def assert_matches(actual: np.ndarray, expected: np.ndarray, dtype: bz.DType, k: float = 1,
                   scale: np.ndarray | float = 0.0, what: str = "") -> None:
    """Checks dtype and shape exactly, integers and bools exactly, floats within the tolerance of
    `dtype` (NaN where NaN is expected, the same infinities). `scale` adds rtol * scale to the
    allowed error where a result is small only through cancellation (sums, variances)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == dtype.numpy, f"{what}: dtype {actual.dtype}, expected {dtype.numpy}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    if dtype.kind != "f":
        mismatch = python_ints(actual) != python_ints(expected)
        assert not mismatch.any(), f"{what}: {actual[mismatch][:8]} != expected {expected[mismatch][:8]}"
        return
    rtol, atol = tolerance(dtype, k)
    got, want = actual.astype(np.float64), expected.astype(np.float64)
    nan_ok = np.isnan(got) == np.isnan(want)
    assert nan_ok.all(), f"{what}: NaN mismatch: got {got[~nan_ok][:8]}, expected {want[~nan_ok][:8]}"
    inf = np.isinf(want) | np.isinf(got)
    assert (got[inf] == want[inf]).all(), f"{what}: infinities differ: got {got[inf]}, expected {want[inf]}"
    finite = ~np.isnan(want) & ~inf
    allowed = atol + rtol * (np.abs(want) + np.broadcast_to(scale, want.shape))
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: checked above
        error = np.abs(got - want)
    bad = finite & (error > allowed)
    assert not bad.any(), (
        f"{what}: {dtype.name} values off: got {got[bad][:6]}, expected {want[bad][:6]} "
        f"(max error {error[bad].max():.3g}, allowed {allowed[bad].min():.3g})"
    )


def assert_same(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Same dtype, shape and bytes (NaN and -0.0 included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    got = np.ascontiguousarray(actual).view(np.uint8)
    want = np.ascontiguousarray(expected).view(np.uint8)
    assert np.array_equal(got, want), f"{what}: values differ:\n{actual}\nexpected\n{expected}"


# --- building and running one-op fusions --------------------------------------------------------
def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded from the test's parameters: stable across runs and test orders."""
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def define(f: bz.Fusion, array: np.ndarray, static: bool = False, name: str | None = None) -> bz.TensorView:
    """An input matching `array`: static extents, or symbolic (-1) ones with size-1 dims kept as
    broadcast dims (1), which is how NumPy's broadcasting is spelled in a definition."""
    shape = array.shape if static else tuple(1 if n == 1 else -1 for n in array.shape)
    return f.define_tensor(shape=shape, dtype=bz.dtypes.from_numpy(array.dtype), name=name)


def run_op(fn: Callable, operands: Sequence[object], static: bool = False) -> np.ndarray:
    """Runs `fn` over the operands (arrays become inputs, Python scalars stay weak literals)."""
    with bz.Fusion() as f:
        args = [define(f, o, static) if isinstance(o, np.ndarray) else o for o in operands]
        f.add_output(fn(*args))
    (out,) = run(f, [o for o in operands if isinstance(o, np.ndarray)])
    return out


def execute(build: Callable[[bz.Fusion], object], inputs: Sequence[object]) -> list[np.ndarray]:
    """Defines a fusion with `build(f)` (returning an output or a list of them) and executes it."""
    with bz.Fusion() as f:
        outs = build(f)
        for out in outs if isinstance(outs, (list, tuple)) else [outs]:
            f.add_output(out)
    return run(f, inputs)


def run(f: bz.Fusion, inputs: Sequence[object]) -> list[np.ndarray]:
    """`f.execute(inputs)` on the backend under test."""
    if BACKEND == "cuda":
        with bz.config.scope(enable="poison_outputs"):
            return f.execute(list(inputs), device="cuda")
    if BACKEND == "nvrtc":
        from braze import engine

        CUDA_SOURCES.append((os.environ.get("PYTEST_CURRENT_TEST", "?"), engine.cuda_source(f, list(inputs))))
        return f.execute(list(inputs), backend="llvm")
    return f.execute(list(inputs), backend=BACKEND)


# --- exact integer arithmetic -----------------------------------------------------------------
def bits(dtype: bz.DType) -> int:
    return dtype.itemsize * 8


def wrap(value: int, width: int, unsigned: bool = False) -> int:
    """`value` wrapped to an integer of `width` bits: two's complement, or unsigned."""
    if unsigned:
        return value % (1 << width)
    half = 1 << (width - 1)
    return (value + half) % (1 << width) - half


def wrap_to(value: int, dtype: bz.DType) -> int:
    return wrap(value, bits(dtype), dtype.kind == "u")


def python_ints(a: np.ndarray | int | float) -> np.ndarray:
    """An object array of exact Python ints (bools as 0 and 1; uint64 values past int64 too)."""
    a = np.asarray(a)
    return (a if a.dtype.kind in "biuO" else a.astype(np.int64)).astype(object)


def int_range(dtype: bz.DType) -> tuple[int, int]:
    if dtype.kind == "b":
        return 0, 1
    if dtype.kind == "u":
        return 0, (1 << bits(dtype)) - 1
    return -(1 << (bits(dtype) - 1)), (1 << (bits(dtype) - 1)) - 1


# --- input domains ------------------------------------------------------------------------------
Domain = Callable[[np.random.Generator, bz.DType, tuple[int, ...]], np.ndarray]


def uniform(lo: float, hi: float, ints: tuple[int, int] | None = None) -> Domain:
    """Floats uniform in [lo, hi]; integers in `ints` (default: the integers of [lo, hi]) clipped to
    the dtype; random bools."""
    int_lo, int_hi = ints if ints is not None else (math.ceil(lo), math.floor(hi))

    def draw(rng, dtype, shape):
        if dtype.kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if dtype.kind in "iu":
            low, high = int_range(dtype)
            low, high = max(int_lo, low), min(int_hi, high)
            if low > high:  # a range of negative integers only: an unsigned type takes them modulo 2^n
                low, high = int_lo, int_hi
            values = rng.integers(low, high, shape, endpoint=True, dtype=np.uint64 if high >= 2**63 else np.int64)
            return np.asarray(values).astype(dtype.numpy)
        return rng.uniform(lo, hi, shape).astype(dtype.numpy)

    return draw


def full_range(lo: float = -5, hi: float = 5) -> Domain:
    """Integers over the dtype's whole range (so wrap-around is exercised), floats in [lo, hi]."""
    return uniform(lo, hi, ints=(-(1 << 63), (1 << 64) - 1))


def nonzero(lo: float, hi: float, ints: tuple[int, int] = (1, 9)) -> Domain:
    """Magnitudes in [lo, hi] (integers in `ints`) with random signs; bools are all True."""

    def draw(rng, dtype, shape):
        if dtype.kind == "b":
            return np.ones(shape, dtype=bool)
        sign = rng.choice([-1, 1], shape) if dtype.kind != "u" else np.ones(shape, np.int64)
        if dtype.kind in "iu":
            return (sign * rng.integers(ints[0], ints[1], shape, endpoint=True)).astype(dtype.numpy)
        return (sign * rng.uniform(lo, hi, shape)).astype(dtype.numpy)

    return draw


def choice(values: Sequence[float]) -> Domain:
    """Values picked from a small set (so ties and equalities happen); integer and bool dtypes keep
    the values they can hold exactly."""

    def draw(rng, dtype, shape):
        if dtype.kind == "f":
            pool = list(values)
        else:
            low, high = int_range(dtype)
            pool = sorted({int(v) for v in values if math.isfinite(v) and v == int(v) and low <= v <= high})
        return np.asarray(rng.choice(pool, shape)).astype(dtype.numpy)

    return draw


def shift_amounts(rng: np.random.Generator, dtype: bz.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Shift amounts from -2 (0 for unsigned types) to a little past the dtype's width, most of them inside it."""
    width = bits(dtype)
    inside = rng.integers(0, width, shape)
    outside = rng.integers(-2 if dtype.kind == "i" else 0, width + 3, shape)
    return np.where(rng.random(shape) < 0.7, inside, outside).astype(dtype.numpy)


def with_specials(domain: Domain, specials: Sequence[float] = (math.nan, math.inf, -math.inf)) -> Domain:
    """`domain` with some entries of floating inputs replaced by NaN and infinities."""

    def draw(rng, dtype, shape):
        a = domain(rng, dtype, shape)
        if dtype.kind == "f" and a.size:
            flat = a.reshape(-1)
            spots = rng.choice(flat.size, min(len(specials) * 2, flat.size), replace=False)
            flat[spots] = np.resize(np.asarray(specials, dtype=np.float64), spots.size).astype(a.dtype)
        return a

    return draw


# --- the elementwise oracle ---------------------------------------------------------------------
def _vectorized(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    scalar = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(scalar(x), dtype=np.float64)


def _erf(x: float) -> float:
    return math.erf(x)


def _gelu(x: float) -> float:
    # erfc keeps the left tail accurate where 1 + erf(x) would cancel.
    return 0.5 * x * math.erfc(-x / math.sqrt(2)) if math.isfinite(x) else (x if x > 0 else math.nan)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return 0.5 * x * (1 + np.tanh(inner))


def _round_half_even(x: float) -> float:
    return float(round(x)) if math.isfinite(x) else x  # Python's round() ties to even


def _propagate_nan(pick: Callable) -> Callable:
    """maximum/minimum: NaN if either side is NaN, else the picked side."""
    return lambda a, b: np.where(np.isnan(a) | np.isnan(b), np.nan, pick(a, b))


def _int_floordiv(a: int, b: int) -> int:
    return 0 if b == 0 else a // b  # integer division by zero gives 0 (documented)


def _int_remainder(a: int, b: int) -> int:
    return 0 if b == 0 else a % b  # Python's sign rule: the sign of the divisor


def _int_pow(a: int, e: int) -> int:
    if e < 0:  # 1/a**|e| truncates to 0 except for bases 1 and -1
        return 1 if a == 1 else ((-1 if e % 2 else 1) if a == -1 else 0)
    return pow(a, e, 1 << 64)  # wrapped afterwards to the result width


def _left_shift(a: int, s: int) -> int:
    return 0 if s < 0 else a << min(s, 128)  # wrapping to <= 64 bits makes shifts past the width 0


def _right_shift(a: int, s: int) -> int:
    return (-1 if a < 0 else 0) if s < 0 else a >> s  # Python's >> is arithmetic: past the width, the sign


def _truth(x: np.ndarray) -> np.ndarray:
    return x != 0  # NaN is true


@dataclass(frozen=True)
class ElementwiseOracle:
    """What an elementwise op computes: `floating` on float64 arrays, `integer` on Python ints
    (`boolean` overrides it for bool operands). `result`: 'same', 'float' or 'bool'."""

    result: str
    floating: Callable | None
    integer: Callable | None
    domains: tuple[Domain, ...]
    boolean: Callable | None = None
    scalar: bool | int | float = 2  # a Python operand valid for the op's domain
    k: float = 1

    def result_dtype(self, promoted: bz.DType) -> bz.DType:
        if self.result == "bool":
            return bz.bool_
        if self.result == "float" and promoted.kind != "f":
            return bz.float32
        return promoted


def _unary(result: str, floating: Callable, integer: Callable | None, domain: Domain, **kw) -> ElementwiseOracle:
    return ElementwiseOracle(result, floating, integer, (domain,), **kw)


WIDE = uniform(-5, 5)
POSITIVE = uniform(0.1, 10, ints=(1, 100))
NON_NEGATIVE = uniform(0, 10, ints=(0, 100))
WITH_HALVES = choice([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -2.7, 2.2, 0.4, -0.3, 0.0, 7.0])
SMALL_SET = choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.nan])
TRUTHS = choice([0.0, 0.0, 1.5, -2.0, math.nan, 1.0, 3.0])
# Integer divisors include 0 (division by zero gives 0) and -1 (INT_MIN // -1 wraps); float divisors
# leave 0 out: what x // 0.0 gives is not specified.
_INT_DIVISORS = choice([-7, -3, -1, 0, 1, 2, 3, 5, 128, 40000])
_FLOAT_DIVISORS = choice([-7.5, -3.0, -1.25, -1.0, 0.75, 1.0, 2.0, 3.5])


def DIVISORS(rng: np.random.Generator, dtype: bz.DType, shape: tuple[int, ...]) -> np.ndarray:  # noqa: N802
    return (_FLOAT_DIVISORS if dtype.kind == "f" else _INT_DIVISORS)(rng, dtype, shape)


UNARY_ORACLE: dict[str, ElementwiseOracle] = {
    "set": _unary("same", lambda x: x, lambda x: x, full_range()),
    "neg": _unary("same", lambda x: -x, lambda x: -x, full_range()),
    "abs": _unary("same", np.abs, abs, full_range()),
    "exp": _unary("float", np.exp, None, WIDE),
    "exp2": _unary("float", lambda x: 2.0**x, None, WIDE),
    "expm1": _unary("float", np.expm1, None, uniform(-3, 3)),
    "log": _unary("float", np.log, None, POSITIVE),
    "log2": _unary("float", lambda x: np.log(x) / math.log(2), None, POSITIVE),
    "log1p": _unary("float", np.log1p, None, uniform(-0.9, 5, ints=(0, 100))),
    "sqrt": _unary("float", np.sqrt, None, NON_NEGATIVE),
    "rsqrt": _unary("float", lambda x: 1 / np.sqrt(x), None, POSITIVE),
    "reciprocal": _unary("float", lambda x: 1 / x, None, nonzero(0.1, 5)),
    "sin": _unary("float", np.sin, None, uniform(-4, 4)),
    "cos": _unary("float", np.cos, None, uniform(-4, 4)),
    "tan": _unary("float", np.tan, None, uniform(-1.2, 1.2)),
    "tanh": _unary("float", np.tanh, None, WIDE),
    "sigmoid": _unary("float", lambda x: 1 / (1 + np.exp(-x)), None, WIDE),
    "relu": _unary("same", lambda x: np.where(np.isnan(x), x, np.where(x > 0, x, 0.0)),
                   lambda x: max(x, 0), full_range()),
    "gelu": _unary("float", _vectorized(_gelu), None, WIDE),
    "silu": _unary("float", lambda x: x / (1 + np.exp(-x)), None, WIDE),
    "erf": _unary("float", _vectorized(_erf), None, uniform(-3, 3)),
    "erfc": _unary("float", _vectorized(math.erfc), None, uniform(-9, 9)),
    "floor": _unary("same", np.floor, lambda x: x, WITH_HALVES),
    "ceil": _unary("same", np.ceil, lambda x: x, WITH_HALVES),
    "round": _unary("same", _vectorized(_round_half_even), lambda x: x, WITH_HALVES),
    "trunc": _unary("same", np.trunc, lambda x: x, WITH_HALVES),
    "sign": _unary("same", np.sign, lambda x: (x > 0) - (x < 0), choice([-3.5, -1.0, 0.0, 0.25, 4.0, 100.0])),
    "isnan": _unary("bool", lambda x: x != x, lambda x: False, with_specials(WIDE)),
    "isinf": _unary("bool", lambda x: np.abs(x) == np.inf, lambda x: False, with_specials(WIDE)),
    "isfinite": _unary("bool", lambda x: np.abs(x) < np.inf, lambda x: True, with_specials(WIDE)),
    "logical_not": _unary("bool", lambda x: x == 0, lambda x: x == 0, TRUTHS),
    "bitwise_not": _unary("same", None, lambda x: ~x, full_range(), boolean=lambda x: 1 - x),
}


def _binary(result: str, floating: Callable | None, integer: Callable | None,
            a: Domain = WIDE, b: Domain = WIDE, **kw) -> ElementwiseOracle:
    return ElementwiseOracle(result, floating, integer, (a, b), **kw)


def _compare(op: Callable) -> ElementwiseOracle:
    return _binary("bool", op, op, SMALL_SET, SMALL_SET)


def _logical(op: Callable) -> ElementwiseOracle:
    return _binary("bool", lambda a, b: op(_truth(a), _truth(b)), lambda a, b: op(a != 0, b != 0), TRUTHS, TRUTHS)


BINARY_ORACLE: dict[str, ElementwiseOracle] = {
    "add": _binary("same", lambda a, b: a + b, lambda a, b: a + b, full_range(), full_range()),
    "sub": _binary("same", lambda a, b: a - b, lambda a, b: a - b, full_range(), full_range()),
    "mul": _binary("same", lambda a, b: a * b, lambda a, b: a * b, full_range(), full_range()),
    "truediv": _binary("float", lambda a, b: a / b, None, WIDE, nonzero(0.5, 5), scalar=4),
    "floordiv": _binary("same", np.frompyfunc(lambda a, b: a // b, 2, 1), _int_floordiv,
                        uniform(-20, 20, ints=(-(1 << 63), (1 << 63) - 1)), DIVISORS, scalar=3),
    "remainder": _binary("same", np.frompyfunc(lambda a, b: a % b, 2, 1), _int_remainder,
                         uniform(-20, 20, ints=(-(1 << 63), (1 << 63) - 1)), DIVISORS, scalar=3),
    "pow": _binary("same", np.power, _int_pow, uniform(0.1, 3, ints=(-4, 4)), uniform(-2, 2, ints=(-3, 40))),
    "maximum": _binary("same", _propagate_nan(lambda a, b: np.where(a > b, a, b)), max,
                       with_specials(full_range(), [math.nan]), with_specials(full_range(), [math.nan])),
    "minimum": _binary("same", _propagate_nan(lambda a, b: np.where(a < b, a, b)), min,
                       with_specials(full_range(), [math.nan]), with_specials(full_range(), [math.nan])),
    "atan2": _binary("float", np.arctan2, None, uniform(-3, 3), uniform(-3, 3)),
    "copysign": _binary("float", np.copysign, None, with_specials(uniform(-3, 3), [0.0, -0.0, math.nan]),
                        with_specials(uniform(-3, 3), [0.0, -0.0])),
    "eq": _compare(lambda a, b: a == b),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "logical_and": _logical(lambda a, b: a & b),
    "logical_or": _logical(lambda a, b: a | b),
    "logical_xor": _logical(lambda a, b: a ^ b),
    "bitwise_and": _binary("same", None, lambda a, b: a & b, full_range(), full_range()),
    "bitwise_or": _binary("same", None, lambda a, b: a | b, full_range(), full_range()),
    "bitwise_xor": _binary("same", None, lambda a, b: a ^ b, full_range(), full_range()),
    "left_shift": _binary("same", None, _left_shift, full_range(), shift_amounts, scalar=3),
    "right_shift": _binary("same", None, _right_shift, full_range(), shift_amounts, scalar=3),
}

BOOLS = uniform(0, 1)
TERNARY_ORACLE: dict[str, ElementwiseOracle] = {
    # where's first operand is the condition: it is given as bools and never promotes.
    "where": ElementwiseOracle("same", lambda c, a, b: np.where(_truth(c), a, b), lambda c, a, b: a if c else b,
                               (BOOLS, full_range(), full_range())),
    "clamp": ElementwiseOracle("same", lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
                               lambda x, lo, hi: min(max(x, lo), hi),
                               (with_specials(full_range(), [math.nan]), uniform(-4, 0, ints=(-50, 0)),
                                uniform(0, 4, ints=(0, 50)))),
    "lerp": ElementwiseOracle("float", lambda a, b, w: a + w * (b - a), None,
                              (WIDE, WIDE, uniform(0, 1, ints=(0, 2))), k=2),
    "fma": ElementwiseOracle("same", lambda a, b, c: a * b + c, lambda a, b, c: a * b + c,
                             (uniform(-3, 3, ints=(-(1 << 63), (1 << 63) - 1)),) * 3, k=2),
}

ORACLE: dict[str, ElementwiseOracle] = {**UNARY_ORACLE, **BINARY_ORACLE, **TERNARY_ORACLE}

# Where unsigned operands compute otherwise than their exact values would (operands arrive as their
# non-negative Python ints, results are wrapped modulo 2^n): abs keeps the value, a right shift past
# the width fills with zeros.
UNSIGNED_INTEGER: dict[str, Callable] = {
    "abs": lambda x: x,
    "right_shift": lambda a, s: a >> s,
}


def value_operands(name: str, operands: Sequence) -> Sequence:
    """The operands that take part in type promotion (all but where's condition)."""
    return operands[1:] if name == "where" else operands


def operand_dtype(x: object) -> tuple[bz.DType, bool]:
    """(dtype, weak) of an operand: an array is strong, a Python scalar weak."""
    if isinstance(x, np.ndarray):
        return bz.dtypes.from_numpy(x.dtype), False
    return dt.python_scalar_dtype(x), True


def expected_dtype(name: str, operands: Sequence) -> bz.DType:
    promoted = bz.dtypes.result_type(*[operand_dtype(x) for x in value_operands(name, operands)])
    return ORACLE[name].result_dtype(promoted)


def expected_elementwise(name: str, operands: Sequence) -> np.ndarray:
    """The oracle's value of op `name` over arrays and Python scalars, in float64, exact ints or bools.

    Floats are computed in float64 whenever the promoted or result type is floating; otherwise in
    exact Python integers, wrapped to the result's width (bools: nonzero is True).
    """
    entry = ORACLE[name]
    promoted = bz.dtypes.result_type(*[operand_dtype(x) for x in value_operands(name, operands)])
    result = entry.result_dtype(promoted)
    shape = np.broadcast_shapes(*[np.shape(x) for x in operands])
    if promoted.kind == "f" or result.kind == "f":
        with np.errstate(all="ignore"):
            args = [np.asarray(x, dtype=np.float64) for x in operands]
            out = np.asarray(entry.floating(*args))
        return np.broadcast_to(out.astype(bool if result.kind == "b" else np.float64), shape)
    fn = entry.boolean if promoted.kind == "b" and entry.boolean is not None else entry.integer
    if promoted.kind == "u":
        fn = UNSIGNED_INTEGER.get(name, fn)
    args = [python_ints(x) for x in operands]
    exact = np.broadcast_to(np.frompyfunc(fn, len(args), 1)(*args), shape)
    if result.kind == "b":
        return np.asarray(exact != 0, dtype=bool).reshape(shape)
    return np.asarray([wrap_to(int(v), result) for v in exact.reshape(-1)], dtype=object).reshape(shape)


def elementwise_inputs(name: str, dtype: bz.DType, shapes: Sequence[tuple[int, ...]],
                       rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs from the op's domains; where's condition is bool whatever the value dtype."""
    entry = ORACLE[name]
    arrays = []
    for position, (domain, shape) in enumerate(zip(entry.domains, shapes)):
        operand_dtype_ = bz.bool_ if name == "where" and position == 0 else dtype
        arrays.append(np.asarray(domain(rng, operand_dtype_, shape)))  # 0-d draws come back as NumPy scalars
    return arrays
