"""Every elementwise op of the op table, and cast, against the float64 oracle of `oracle.py`:
on each dtype it accepts, refused on each it does not, over broadcast shapes, weak Python
scalars, 0-d and zero-size operands, NaN and infinities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import (
    ALL_DTYPES,
    BINARY_ORACLE,
    FLOAT_DTYPES,
    ORACLE,
    TERNARY_ORACLE,
    UNARY_ORACLE,
    assert_matches,
    assert_same,
    bits,
    define,
    elementwise_inputs,
    expected_dtype,
    expected_elementwise,
    gelu_tanh,
    int_range,
    python_ints,
    rng_for,
    run,
    run_op,
    tolerance,
    wrap,
)

import braze as bz
from braze.ops.elementwise import BINARY, TERNARY, UNARY

# NumPy warnings (overflow, invalid casts, empty means) must not leak out of braze.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

TABLE = {**UNARY, **BINARY, **TERNARY}
ARITY = {**dict.fromkeys(UNARY, 1), **dict.fromkeys(BINARY, 2), **dict.fromkeys(TERNARY, 3)}
ACCEPTED = [(name, d) for name in TABLE for d in ALL_DTYPES if d.category in TABLE[name][0]]
REJECTED = [(name, d) for name in TABLE for d in ALL_DTYPES if d.category not in TABLE[name][0]]
OPS_COVERED = frozenset(TABLE) | {"cast"}


def _id(value: object) -> str:
    return value.name if isinstance(value, bz.DType) else str(value)


def op_fn(name: str):
    return getattr(bz.ops, name)


def check(name: str, operands: list, static: bool = False, what: str = "") -> None:
    """Runs op `name` over the operands and compares with the oracle, dtype included."""
    out = run_op(op_fn(name), operands, static)
    assert_matches(out, expected_elementwise(name, operands), expected_dtype(name, operands),
                   k=ORACLE[name].k, what=what or name)


def test_every_table_op_has_an_oracle():
    assert set(UNARY_ORACLE) == set(UNARY)
    assert set(BINARY_ORACLE) == set(BINARY)
    assert set(TERNARY_ORACLE) == set(TERNARY)


def test_every_table_op_is_exported():
    for name in TABLE:
        assert callable(getattr(bz.ops, name)), name


# --- values on every accepted dtype -------------------------------------------------------------
@pytest.mark.parametrize("name,dtype", ACCEPTED, ids=_id)
def test_values(name, dtype):
    rng = rng_for("values", name, dtype.name)
    operands = _inputs(name, dtype, [(6, 8)] * ARITY[name], rng)
    check(name, operands, what=f"{name}({dtype.name})")


_inputs = elementwise_inputs


@pytest.mark.parametrize("name,dtype", REJECTED, ids=_id)
def test_rejects_dtype(name, dtype):
    with bz.Fusion() as f:
        operands = [f.define_tensor(shape=(-1,), dtype=dtype) for _ in range(ARITY[name])]
        if name == "where":
            operands[0] = f.define_tensor(shape=(-1,), dtype=bz.bool_)
        with pytest.raises(bz.FusionDefinitionError) as err:
            op_fn(name)(*operands)
    assert name in str(err.value) and dtype.name in str(err.value)


@pytest.mark.parametrize("name", [n for n in BINARY if "f" not in BINARY[n][0]])
def test_rejects_float_promoted_by_weak_scalar(name):
    # A weak float raises an integer tensor to float32, which an integer-only op refuses.
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1,), dtype=bz.int32)
        with pytest.raises(bz.FusionDefinitionError, match=f"{name}.*promoted type float32"):
            op_fn(name)(x, 2.5)


# --- broadcasting ------------------------------------------------------------------------------
SHAPE_PAIRS = [
    ((3, 4), (4,)),
    ((2, 1, 5), (3, 1)),
    ((4, 1), (1, 3)),
    ((5,), ()),
    ((), (2, 3)),
    ((0, 3), (3,)),
    ((2, 0), (1,)),
    ((1,), (1, 1)),
]


def _broadcast_dtype(name: str) -> bz.DType:
    kinds = TABLE[name][0]
    return bz.float32 if "f" in kinds else bz.int32


@pytest.mark.parametrize("shape", [(0, 3), ()], ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_zero_size_and_0d(name, shape):
    operands = _inputs(name, _broadcast_dtype(name), [shape], rng_for("unary shapes", name, shape))
    check(name, operands, what=f"{name}{shape}")
    assert run_op(op_fn(name), operands).shape == shape


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_broadcast(name, shapes, static):
    dtype = _broadcast_dtype(name)
    operands = _inputs(name, dtype, shapes, rng_for("broadcast", name, shapes))
    out_shape = np.broadcast_shapes(*shapes)
    check(name, operands, static, what=f"{name}{shapes}")
    assert run_op(op_fn(name), operands, static).shape == out_shape


TERNARY_SHAPES = [((3, 1), (1, 4), ()), ((2, 3, 4), (4,), (3, 1)), ((0, 2), (2,), (1, 1)), ((), (), ())]


@pytest.mark.parametrize("shapes", TERNARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", list(TERNARY))
def test_ternary_broadcast(name, shapes):
    operands = _inputs(name, _broadcast_dtype(name), shapes, rng_for("ternary", name, shapes))
    check(name, operands, what=f"{name}{shapes}")


def test_symbolic_extents_that_differ_fail_at_execute():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1,), name="x")
        y = f.define_tensor(shape=(-1,), name="y")
        f.add_output(x + y)
    with pytest.raises(bz.InputError, match="'x'.*'y'"):
        run(f, [np.ones(3, np.float32), np.ones(4, np.float32)])


def test_static_extents_that_differ_fail_at_definition():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(3,))
        y = f.define_tensor(shape=(4,))
        with pytest.raises(bz.FusionDefinitionError, match="add"):
            x + y


# --- weak scalars and 0-d tensors ---------------------------------------------------------------
def _scalar_for(name: str, dtype: bz.DType) -> bool | int | float:
    """A Python operand of the tensor's kind (so it never changes the result type)."""
    if dtype.kind == "b":
        return True
    value = ORACLE[name].scalar
    return value + 0.5 if dtype.kind == "f" else value


@pytest.mark.parametrize("name,dtype", [(n, d) for n, d in ACCEPTED if n in BINARY], ids=_id)
def test_weak_scalar_operands(name, dtype):
    (x, _) = _inputs(name, dtype, [(7,), (7,)], rng_for("scalar", name, dtype.name))
    s = _scalar_for(name, dtype)
    for operands in ([x, s], [s, x]):
        assert expected_dtype(name, operands) == ORACLE[name].result_dtype(dtype)  # the scalar never widens
        check(name, operands, what=f"{name}({operands[0]!r:.12}, ...) on {dtype.name}")


@pytest.mark.parametrize("dtype", [bz.bool_, bz.int8, bz.int32])
def test_weak_float_scalar_raises_integer_tensors_to_float32(dtype):
    x = np.arange(6).astype(dtype.numpy)
    out = run_op(lambda t: t * 0.5, [x])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.astype(np.float64) * 0.5)


def test_weak_scalars_keep_half_types():
    x = rng_for("half").uniform(-3, 3, 16).astype(np.float16)
    for fn, expected in [
        (lambda t: t + 2.5, x.astype(np.float64) + 2.5),
        (lambda t: 1 - t, 1 - x.astype(np.float64)),
        (lambda t: t * 3, x.astype(np.float64) * 3),
        (lambda t: bz.ops.maximum(t, 0.25), np.maximum(x.astype(np.float64), 0.25)),
    ]:
        assert_matches(run_op(fn, [x]), expected, bz.float16)


def test_zero_dim_tensor_is_strong():
    # A 0-d tensor input is not a weak scalar: float16 with a 0-d float32 tensor gives float32.
    x = np.array([1.5, -2.0, 3.25], np.float16)
    s = np.array(0.1, np.float32)
    out = run_op(bz.ops.add, [x, s])
    assert_matches(out, x.astype(np.float64) + np.float64(s), bz.float32)
    out = run_op(bz.ops.mul, [s, np.array(4, np.int8)])
    assert out.shape == () and out.dtype == np.float32
    assert out == np.float32(s) * 4


@pytest.mark.parametrize("dtype", [bz.float16, bz.float32, bz.int32])
def test_scalar_inputs_are_weak(dtype):
    x = np.arange(-3, 5).astype(dtype.numpy)
    value = 2.5 if dtype.kind == "f" else 3
    with bz.Fusion() as f:
        t = define(f, x)
        s = f.define_scalar(dtype=bz.float32 if dtype.kind == "f" else bz.int64)
        f.add_output(t * s)
        f.add_output(bz.ops.maximum(s, t))
    prod, biggest = run(f, [x, value])
    assert_matches(prod, x.astype(np.float64) * value, dtype)
    assert_matches(biggest, np.maximum(x.astype(np.float64), value), dtype)


def test_arithmetic_on_scalar_inputs_stays_weak():
    # nvFuser's scalar arithmetic gives a scalar: a float32 running mean updated by a float64
    # momentum, (1 - momentum) * mean, stays float32 and can be written in place into its input.
    mean = np.array([1.0, -2.0, 0.5], np.float32)
    with bz.Fusion() as f:
        m = define(f, mean)
        momentum = f.define_scalar(dtype=bz.float64)
        keep = bz.ops.sub(1.0, momentum)
        f.add_output(bz.ops.mul(m, keep) + bz.ops.mul(m, momentum * 0.5), alias=m)
        f.add_output(m * bz.ops.cast(momentum, bz.float64))
        f.add_output(bz.ops.cast(m, bz.float16) * bz.ops.cast(momentum, bz.float32))
    _, scaled, half = run(f, [mean.copy(), 0.25])
    assert scaled.dtype == np.float32 and half.dtype == np.float16
    np.testing.assert_allclose(scaled, mean * 0.25)
    with bz.Fusion() as f:
        m = define(f, mean)
        f.add_output(bz.ops.mul(m, bz.ops.sub(1.0, f.define_scalar(dtype=bz.float64))), alias=m)
    updated = mean.copy()
    f.execute([updated, 0.25])
    np.testing.assert_allclose(updated, mean * np.float32(0.75))


def test_python_ints_beyond_int64_are_refused():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1,), dtype=bz.int64)
        with pytest.raises(bz.FusionDefinitionError, match=r"add: operand 1.*2\*\*63"):
            x + 2**70


def test_weak_scalars_overflow_to_infinity_quietly():
    out = run_op(lambda t: bz.ops.where(t > 0, 1e300, t), [np.array([1.0, -2.0], np.float16)])
    np.testing.assert_array_equal(out, np.array([np.inf, -2.0], np.float16))


# --- NaN, infinities, signed zeros --------------------------------------------------------------
SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0]


@pytest.mark.parametrize("name", [n for n in UNARY if "f" in UNARY[n][0]])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_unary_special_values(name, dtype):
    x = np.asarray(SPECIALS, dtype=np.float64).astype(dtype.numpy)
    check(name, [x], what=f"{name}({dtype.name}) on {SPECIALS}")


# floordiv and remainder leave division by zero and infinities unspecified for floats.
_BINARY_SPECIAL = [n for n in BINARY if "f" in BINARY[n][0] and n not in ("floordiv", "remainder")]


@pytest.mark.parametrize("name", _BINARY_SPECIAL)
@pytest.mark.parametrize("dtype", [bz.float16, bz.float32, bz.float64], ids=_id)
def test_binary_special_values(name, dtype):
    values = np.asarray([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -2.5], dtype=np.float64)
    a, b = (v.reshape(-1).astype(dtype.numpy) for v in np.meshgrid(values, values))
    check(name, [a, b], what=f"{name}({dtype.name}) on special pairs")


@pytest.mark.parametrize("name", ["maximum", "minimum", "clamp"])
def test_nan_propagates(name):
    x = np.array([math.nan, 1.0, -1.0, math.nan], np.float32)
    y = np.array([0.0, math.nan, 2.0, math.nan], np.float32)
    operands = [x, y] if name != "clamp" else [x, -0.5, 0.5]
    out = run_op(op_fn(name), operands)
    assert np.isnan(out[0]) and not np.isnan(out[2])
    if name != "clamp":
        assert np.isnan(out[1]) and np.isnan(out[3])


# --- documented integer and rounding semantics, spelled out ---------------------------------------
def test_integer_division_by_zero_gives_zero():
    a = np.array([7, -7, 0, 5], np.int32)
    b = np.array([0, 0, 0, 2], np.int32)
    np.testing.assert_array_equal(run_op(bz.ops.floordiv, [a, b]), [0, 0, 0, 2])
    np.testing.assert_array_equal(run_op(bz.ops.remainder, [a, b]), [0, 0, 0, 1])


def test_integer_division_rounds_down_and_wraps():
    a = np.array([-128, -7, 7, -7], np.int8)
    b = np.array([-1, 2, -2, -2], np.int8)
    np.testing.assert_array_equal(run_op(bz.ops.floordiv, [a, b]), [-128, -4, -4, 3])
    np.testing.assert_array_equal(run_op(bz.ops.remainder, [a, b]), [0, 1, -1, -1])  # the divisor's sign


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_zero_float_remainder_takes_the_divisors_sign(dtype):
    a = np.array([-1.0, 1.0, -3.0, 0.0, -0.0, 2.0], dtype)
    b = np.array([1.0, -1.0, 1.5, -2.0, 2.0, 0.5], dtype)
    out = run_op(bz.ops.remainder, [a, b])
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(np.remainder(a, b)))  # as Python: -1.0 % 1.0 is 0.0


def test_integer_pow():
    base = np.array([2, -2, 1, -1, -1, 3, 0, 2], np.int64)
    exponent = np.array([10, 3, -5, -3, -4, -1, 0, 63], np.int64)
    np.testing.assert_array_equal(run_op(bz.ops.pow, [base, exponent]),
                                  [1024, -8, 1, -1, 1, 0, 1, -(2**63)])
    np.testing.assert_array_equal(run_op(lambda t: t ** 3, [np.array([5, 6], np.int8)]), [125, -40])


def test_shifts_past_the_width():
    a = np.array([1, -8, 5, -8, 3], np.int8)
    s = np.array([7, 8, 100, 2, -1], np.int8)
    np.testing.assert_array_equal(run_op(bz.ops.left_shift, [a, s]), [-128, 0, 0, -32, 0])
    np.testing.assert_array_equal(run_op(bz.ops.right_shift, [a, s]), [0, -1, 0, -2, 0])


def test_round_is_half_to_even_and_cast_truncates():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.7, -2.7], np.float32)
    np.testing.assert_array_equal(run_op(bz.ops.round, [x]), [-2, -2, -0, 0, 2, 2, 3, -3])
    np.testing.assert_array_equal(run_op(lambda t: bz.ops.cast(t, bz.int32), [x]), [-2, -1, 0, 0, 1, 2, 2, -2])


def test_relu_keeps_nan_and_zeroes_negative_infinity():
    out = run_op(bz.ops.relu, [np.array([math.nan, -math.inf, math.inf, -1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(out, [math.nan, 0.0, math.inf, 0.0, 2.0])


def test_where_takes_any_truthy_condition():
    c = np.array([0.0, math.nan, -2.0, 0.0], np.float32)
    out = run_op(bz.ops.where, [c, np.arange(4, dtype=np.int32), -1])
    np.testing.assert_array_equal(out, [-1, 1, 2, -1])
    assert out.dtype == np.int32


# --- gelu's tanh form -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (bz.int32,), ids=_id)
def test_gelu_tanh(dtype):
    x = rng_for("gelu", dtype.name).uniform(-5, 5, 40).astype(dtype.numpy)
    out = run_op(lambda t: bz.ops.gelu(t, approximate="tanh"), [x])
    result = dtype if dtype.kind == "f" else bz.float32
    assert_matches(out, gelu_tanh(x.astype(np.float64)), result)
    exact = run_op(bz.ops.gelu, [x])
    if dtype == bz.float64:  # the two forms differ by up to ~5e-4: both must not be the same formula
        assert np.abs(out - exact).max() > 1e-5


def test_gelu_rejects_unknown_approximation():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1,))
        with pytest.raises(bz.FusionDefinitionError, match="gelu.*approximate"):
            bz.ops.gelu(x, approximate="fast")


# --- Python operators ---------------------------------------------------------------------------
BINARY_OPERATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "remainder": lambda a, b: a % b,
    "pow": lambda a, b: a**b, "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b, "left_shift": lambda a, b: a << b, "right_shift": lambda a, b: a >> b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}
UNARY_OPERATORS = {"neg": lambda a: -a, "abs": lambda a: abs(a), "bitwise_not": lambda a: ~a}


@pytest.mark.parametrize("name", list(BINARY_OPERATORS))
def test_binary_operators(name):
    dtype = _broadcast_dtype(name)
    a, b = _inputs(name, dtype, [(3, 4), (4,)], rng_for("operator", name))
    s = _scalar_for(name, dtype)
    for operands in ([a, b], [a, s], [s, b]):  # the last uses the reflected operator (or a flipped comparison)
        out = run_op(BINARY_OPERATORS[name], operands)
        assert_matches(out, expected_elementwise(name, operands), expected_dtype(name, operands), what=name)


@pytest.mark.parametrize("name", list(UNARY_OPERATORS))
def test_unary_operators(name):
    x = _inputs(name, bz.int32, [(5,)], rng_for("unary operator", name))
    assert_matches(run_op(UNARY_OPERATORS[name], x), expected_elementwise(name, x), bz.int32, what=name)


# --- cast -----------------------------------------------------------------------------------------
_CAST_FLOATS = [-100.75, -3.7, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5, 99.9, 127.0]


def _cast_source(src: bz.DType, dst: bz.DType) -> np.ndarray:
    rng = rng_for("cast", src.name, dst.name)
    if src.kind == "b":
        return np.array([True, False, True, True, False])
    if src.kind in "iu":
        low, high = int_range(src)
        if dst in (bz.float16, bz.bfloat16):  # keep int -> half in range
            low, high = max(low, -1000), min(high, 1000)
        edges = [low, high, 0, 1] + ([-1] if src.kind == "i" else [])
        drawn = rng.integers(low, high, 20, endpoint=True, dtype=np.uint64 if high >= 2**63 else np.int64)
        return np.concatenate([np.asarray(edges, object), drawn.astype(object)]).astype(src.numpy)
    values = list(_CAST_FLOATS)
    if dst.kind in "bf":
        values += [math.nan]
    if dst.kind == "f":
        values += [math.inf, -math.inf]
    return np.asarray(values, np.float64).astype(src.numpy)


def _cast_expected(x: np.ndarray, dst: bz.DType) -> np.ndarray:
    if dst.kind == "b":
        return x.astype(np.float64) != 0  # NaN is nonzero
    if dst.kind == "f":
        return x.astype(np.float64)
    if bz.dtypes.from_numpy(x.dtype).is_floating:  # toward zero (a bfloat16 array has kind "V"), saturating
        low, high = int_range(dst)
        return np.asarray([min(max(math.trunc(v), low), high) for v in x.astype(np.float64)], object)
    return np.asarray([wrap(int(v), bits(dst), dst.kind == "u") for v in python_ints(x)], object)


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=_id)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=_id)
def test_cast(src, dst):
    x = _cast_source(src, dst)
    out = run_op(lambda t: bz.ops.cast(t, dst), [x])
    assert_matches(out, _cast_expected(x, dst), dst, what=f"cast {src.name} -> {dst.name}")
    assert_matches(run_op(lambda t: t.astype(dst), [x]), _cast_expected(x, dst), dst)


def test_cast_overflow_to_half_gives_infinity():
    out = run_op(lambda t: bz.ops.cast(t, bz.float16), [np.array([1e6, -1e6, 65504.0], np.float32)])
    np.testing.assert_array_equal(out, [np.inf, -np.inf, 65504.0])


def test_cast_accepts_dtype_spellings():
    x = np.array([1.5, -2.5], np.float32)
    for spelling in ("float16", np.float16, "torch.float16"):
        assert run_op(lambda t, s=spelling: bz.ops.cast(t, s), [x]).dtype == np.float16


def test_half_compute_rounds_once():
    # (a * b) + c computed in float32 and rounded once differs from rounding a * b to float16 first.
    a = np.array([1 + 3 * 2**-10], np.float16)
    c = np.array([-1.0], np.float16)
    out = run_op(bz.ops.fma, [a, a, c])
    exact = (1 + 3 * 2**-10) ** 2 - 1  # a * a in float16 would lose the 9 * 2**-20, 2 ulps of the result
    rtol, _ = tolerance(bz.float16)
    assert abs(float(out[0]) - exact) <= rtol * exact
    assert abs(float(np.float16(a[0] * a[0]) - np.float16(1)) - exact) > rtol * exact


# --- casts between every pair of dtypes -----------------------------------------------------------
# Values every dtype holds exactly, whose casts every dtype holds (float -> int truncates toward zero).
CAST_VALUES = [0.0, 1.0, -1.0, 3.0, 100.0, -100.0, 0.5, -2.75, 7.25]
# float64 values just off a float16 halfway point: rounding to float32 first lands on the halfway
# point, then to even, the wrong way (1 + 2**-11 + 2**-40 must give 1 + 2**-10, not 1.0).
FLOAT16_DOUBLE_ROUNDING = [1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1 + 3 * 2**-11 - 2**-40,
                           2**-24 * 1.5 + 2**-60, 65519.99, 65520.0, 1e-9, -1e-300]


@pytest.mark.parametrize("target", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("source", ALL_DTYPES, ids=lambda d: d.name)
def test_cast_between_every_pair_of_dtypes(source, target):
    values = [v for v in CAST_VALUES if source.kind == "f" or v == int(v)]
    if source.kind == "b" or target.kind == "b":
        values = [0.0, 1.0, 0.5, -2.75] if source.kind == "f" else [0.0, 1.0]
    if target.name == "int8" or source.name == "int8":
        values = [v for v in values if abs(v) < 100]
    if source.kind == "u":  # negative values would wrap past float16's range
        values = [v for v in values if v >= 0]
    x = np.array(values, np.float64).astype(source.numpy)
    got = run_op(lambda t: bz.ops.cast(t, target), [x])
    with np.errstate(invalid="ignore"):  # a negative float to an unsigned type: NumPy leaves it undefined
        want = x.astype(target.numpy) if target.kind != "b" else x != 0
    if target.kind == "u" and source.kind == "f":  # braze saturates it to 0
        want = np.where(x < 0, 0, want).astype(target.numpy)
    np.testing.assert_array_equal(got, want, err_msg=f"cast {source.name} -> {target.name} of {x}")


def test_float64_to_float16_rounds_once():
    x = np.array(FLOAT16_DOUBLE_ROUNDING + [math.inf, -math.inf, math.nan, -0.0], np.float64)
    got = run_op(lambda t: bz.ops.cast(t, bz.float16), [x])
    with np.errstate(over="ignore"):  # 65520 overflows to inf, as it must
        want = x.astype(np.float16)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[-1])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_negation_flips_the_sign_of_zero(dtype):
    """-x is -0.0 for 0.0 and 0.0 for -0.0, as NumPy gives (0 - x would give +0.0 for both)."""
    x = np.asarray([0.0, -0.0, 1.5, -math.inf], dtype=dtype.numpy)
    assert_same(run_op(op_fn("neg"), [x]), np.negative(x), what=f"neg({dtype.name})")
    assert_same(run_op(lambda t: -t, [x]), np.negative(x), what=f"-x ({dtype.name})")
