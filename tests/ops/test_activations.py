"""The composites of braze/ops/activations.py, the `*_like` creation ops, `dtype=` on reductions,
scans and softmax, and the methods `numel` and `movedim`, against float64 NumPy formulas written
out here, on half, single, double and integer inputs of several shapes (one element, odd sizes,
empty extents)."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import FLOAT_DTYPES, assert_matches, define, execute, rng_for

import braze as bz
from braze.ops.activations import SELU_ALPHA, SELU_SCALE

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

COMPOSITES_COVERED = frozenset({
    "addcdiv", "addcmul", "celu", "elu", "hardsigmoid", "hardswish", "leaky_relu", "logaddexp", "logsigmoid",
    "logsumexp", "mish", "nan_to_num", "one_hot", "relu6", "selu", "softplus", "softsign",
    "full_like", "ones_like", "zeros_like",
})
K = 2  # a composite computes several float32 steps and rounds once
DTYPES = (*FLOAT_DTYPES, bz.int32)
SHAPES = [(1,), (7,), (3, 5), (0, 4)]


def _id(value: object) -> str:
    return value.name if isinstance(value, bz.DType) else str(value)


def _sample(dtype: bz.DType, shape: tuple[int, ...], *salt: object, scale: float = 8.0) -> np.ndarray:
    rng = rng_for("activation", dtype.name, shape, *salt)
    if dtype.kind in "iu":
        return rng.integers(-9 if dtype.kind == "i" else 0, 10, shape).astype(dtype.numpy)
    x = rng.uniform(-scale, scale, shape)
    if x.size >= 7:  # the pieces' edges and softplus's threshold
        x.flat[:7] = [0.0, -3.0, 3.0, 6.5, 25.0, -30.0, 0.5]
    return x.astype(dtype.numpy)


def _softplus64(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.logaddexp(0.0, beta * x) / beta)


def _elu64(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


ACTIVATIONS = {  # name: (braze, float64 reference)
    "softplus": (bz.ops.softplus, _softplus64),
    "softplus_beta": (lambda x: bz.ops.softplus(x, beta=2, threshold=5), lambda x: _softplus64(x, 2.0, 5.0)),
    # beta * 25 = 100 is below the threshold, and exp(100) overflows float32: softplus is 25 there
    "softplus_no_threshold": (lambda x: bz.ops.softplus(x, beta=4, threshold=1000),
                              lambda x: _softplus64(x, 4.0, 1000.0)),
    "logsigmoid": (bz.ops.logsigmoid, lambda x: -np.logaddexp(0.0, -x)),
    "mish": (bz.ops.mish, lambda x: x * np.tanh(_softplus64(x))),
    "relu6": (bz.ops.relu6, lambda x: np.clip(x, 0, 6)),
    "hardsigmoid": (bz.ops.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hardswish": (bz.ops.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "leaky_relu": (lambda x: bz.ops.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x: bz.ops.elu(x, alpha=0.5), lambda x: _elu64(x, 0.5)),
    "celu": (lambda x: bz.ops.celu(x, alpha=2.0),
             lambda x: np.maximum(x, 0) + np.minimum(0, 2.0 * np.expm1(np.minimum(x, 0) / 2.0))),
    "selu": (bz.ops.selu, lambda x: SELU_SCALE * _elu64(x, SELU_ALPHA)),
    "softsign": (bz.ops.softsign, lambda x: x / (1 + np.abs(x))),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_activations_match_float64(dtype, shape):
    x = _sample(dtype, shape)
    outs = execute(lambda f: [fn(t) for t in [define(f, x)] for fn, _ in ACTIVATIONS.values()], [x])
    result = dtype if dtype.kind == "f" else bz.float32
    x64 = x.astype(np.float64)
    for (name, (_, reference)), got in zip(ACTIVATIONS.items(), outs, strict=True):
        assert_matches(got, reference(x64), result, k=K, scale=1.0, what=name)


@pytest.mark.parametrize("call, message", [
    (lambda x: bz.ops.softplus(x, beta=0), "softplus: beta: expected a non-zero number, got 0"),
    (lambda x: bz.ops.softplus(x, threshold="20"), "softplus: threshold: expected a number, got str '20'"),
    (lambda x: bz.ops.celu(x, alpha=0), "celu: alpha: expected a non-zero number, got 0"),
    (lambda x: bz.ops.leaky_relu(x, None), "leaky_relu: negative_slope: expected a number, got NoneType"),
    (lambda x: bz.ops.elu([1.0]), "elu: expected a TensorView, got list"),
    (lambda x: bz.ops.nan_to_num(x, nan="0"), "nan_to_num: nan: expected a number, got str"),
    (lambda x: bz.ops.addcmul(x, x, x, value=True), "addcmul: value: expected a number, got bool"),
    (lambda x: bz.ops.logaddexp(1.0, 2.0), "logaddexp: expected at least one TensorView operand, got float"),
    (lambda x: bz.ops.one_hot(x, 3), "one_hot: ids: expected an integer tensor of class indices, got float32"),
    (lambda x: bz.ops.one_hot(x.long(), -1), "one_hot: num_classes: expected a non-negative Python int or an extent "
                                             "of the fusion, got int -1"),
    (lambda x: bz.ops.one_hot(x.long(), 2.0), "one_hot: num_classes: expected .* got float 2.0"),
    (lambda x: x.movedim(0, [0, 1]), "movedim: expected as many destinations as sources, got 2 for 1"),
    (lambda x: x.movedim([0, 0], [0, 1]), r"movedim: source: expected distinct dimensions, got \[0, 0\]"),
    (lambda x: x.movedim(2, 0), "movedim source"),
    (lambda x: bz.ops.zeros_like(3.0), "zeros_like: expected a TensorView, got float"),
])
def test_bad_arguments_name_the_op_and_argument(call, message):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 4), dtype=bz.float32)
        with pytest.raises(bz.Error, match=message):
            call(x)


# --- logaddexp and logsumexp ---------------------------------------------------------------------------
SPECIAL = [0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 30.0, -30.0]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_logaddexp_over_every_pair_of_special_values(dtype):
    x = np.array(SPECIAL, dtype.numpy)[:, None]
    y = np.array(SPECIAL, dtype.numpy)[None, :]
    both, method, scalar = execute(lambda f: [bz.ops.logaddexp(a := define(f, x), b := define(f, y)),
                                              a.logaddexp(b), bz.ops.logaddexp(a, 0.0)], [x, y])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(invalid="ignore"):  # NaN in, NaN out
        expected, with_zero = np.logaddexp(x64, y64), np.logaddexp(x64, 0.0)
    assert_matches(both, expected, dtype, k=K, what="logaddexp")
    assert_matches(method, expected, dtype, k=K, what="x.logaddexp(y)")
    assert_matches(scalar, with_zero, dtype, k=K, what="logaddexp(x, 0.0)")


def test_logaddexp_of_integers_is_float32():
    x, y = np.arange(-3, 4, dtype=np.int32), np.arange(3, -4, -1, dtype=np.int32)
    (got,) = execute(lambda f: bz.ops.logaddexp(define(f, x), define(f, y)), [x, y])
    assert_matches(got, np.logaddexp(x, y).astype(np.float64), bz.float32, k=K)


def _logsumexp64(x: np.ndarray, axes, keepdim: bool) -> np.ndarray:
    with np.errstate(divide="ignore"):  # log(0) over an empty axis is -inf, as torch gives
        return np.log(np.exp(x).sum(axis=axes, keepdims=keepdim))


@pytest.mark.parametrize("shape, dim, keepdim", [
    ((1,), -1, False), ((5, 7), -1, False), ((5, 7), 0, True), ((2, 3, 5), (0, 2), False), ((3, 0), -1, False),
    ((3, 0), -1, True), ((0, 4), -1, False), ((2, 0, 3), (1, 2), False), ((4, 3), None, False),
], ids=str)
@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
def test_logsumexp_matches_float64_and_is_minus_infinity_over_nothing(shape, dim, keepdim, static):
    x = _sample(bz.float32, shape, dim, scale=40.0)
    (got,) = execute(lambda f: bz.ops.logsumexp(define(f, x, static), dim, keepdim), [x])
    expected = _logsumexp64(x.astype(np.float64), dim, keepdim)
    assert_matches(got, expected, bz.float32, k=K, scale=np.abs(x).max(initial=1.0))


@pytest.mark.parametrize("static, padded", [(True, False), (False, True)], ids=["static", "symbolic"])
def test_logsumexp_pads_only_axes_that_may_be_empty(static, padded):
    """A static non-empty axis cannot be empty: its logsumexp keeps the plain max (no pad)."""
    x = np.zeros((3, 5), np.float32)
    with bz.Fusion() as f:
        f.add_output(bz.ops.logsumexp(define(f, x, static), -1))
    assert any(e.op == "pad" for e in f.exprs) == padded


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_logsumexp_of_half_types_rounds_once(dtype):
    x = _sample(dtype, (4, 9), "half")
    (got,) = execute(lambda f: define(f, x).logsumexp(dim=1), [x])
    assert_matches(got, _logsumexp64(x.astype(np.float64), 1, False), dtype, k=K, scale=8.0)


# --- nan_to_num, addcmul, addcdiv -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_nan_to_num_replaces_nan_and_infinities(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0, 3.0, np.nan], dtype.numpy)
    default, custom, method = execute(
        lambda f: [bz.ops.nan_to_num(t := define(f, x)), bz.ops.nan_to_num(t, nan=-1.0, posinf=9.0, neginf=-9.0),
                   t.nan_to_num(nan=2.0)], [x])
    big = float(ml_dtypes.finfo(dtype.numpy).max)
    x64 = x.astype(np.float64)
    assert_matches(default, np.nan_to_num(x64, nan=0.0, posinf=big, neginf=-big), dtype, what="defaults")
    assert_matches(custom, np.nan_to_num(x64, nan=-1.0, posinf=9.0, neginf=-9.0), dtype, what="custom")
    assert_matches(method, np.nan_to_num(x64, nan=2.0, posinf=big, neginf=-big), dtype, what="method")


@pytest.mark.parametrize("dtype", [bz.int32, bz.bool_], ids=_id)
def test_nan_to_num_keeps_integers_and_bools(dtype):
    x = np.array([0, 1, 1, 0], dtype.numpy)
    (got,) = execute(lambda f: bz.ops.nan_to_num(define(f, x)), [x])
    assert_matches(got, x, dtype)


@pytest.mark.parametrize("shape", [(1,), (3, 5), (0, 5)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_addcmul_and_addcdiv_match_float64(dtype, shape):
    x, a = _sample(dtype, shape, "x"), _sample(dtype, shape, "a")
    b = _sample(dtype, shape[-1:], "b")  # broadcast along the rows
    b = np.where(b == 0, 1, b).astype(dtype.numpy)
    outs = execute(lambda f: [bz.ops.addcmul(t := define(f, x), p := define(f, a), q := define(f, b)),
                              t.addcmul(p, q, value=3), bz.ops.addcdiv(t, p, q, value=0.5), t.addcdiv(p, q)],
                   [x, a, b])
    x64, a64, b64 = (v.astype(np.float64) for v in (x, a, b))
    quotient_type = dtype if dtype.kind == "f" else bz.float32
    assert_matches(outs[0], x64 + a64 * b64, dtype, k=K, scale=np.abs(a64 * b64).max(initial=1.0), what="addcmul")
    assert_matches(outs[1], x64 + 3 * a64 * b64, dtype, k=K, scale=3 * np.abs(a64 * b64).max(initial=1.0),
                   what="addcmul value=3")
    assert_matches(outs[2], x64 + 0.5 * a64 / b64, quotient_type, k=K, scale=np.abs(a64).max(initial=1.0),
                   what="addcdiv value=0.5")
    assert_matches(outs[3], x64 + a64 / b64, quotient_type, k=K, scale=np.abs(a64).max(initial=1.0), what="addcdiv")


# --- one_hot ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, classes", [((5,), 7), ((2, 3), 4), ((1,), 1), ((0,), 3), ((3,), 0)], ids=str)
@pytest.mark.parametrize("dtype", [bz.int64, bz.int32, bz.int8], ids=_id)
def test_one_hot_compares_with_the_class_index(dtype, shape, classes):
    ids = rng_for("one_hot", shape, classes).integers(0, max(classes, 1), shape).astype(dtype.numpy)
    (got,) = execute(lambda f: bz.ops.one_hot(define(f, ids), classes), [ids])
    expected = (ids[..., None].astype(np.int64) == np.arange(classes)).astype(np.int64)
    assert_matches(got, expected, bz.int64)


def test_one_hot_of_an_id_out_of_range_is_a_row_of_zeros():
    ids = np.array([0, 5, -1, 2], np.int64)
    (got,) = execute(lambda f: bz.ops.one_hot(define(f, ids), 3), [ids])
    assert_matches(got, np.array([[1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1]]), bz.int64)


def test_one_hot_takes_its_class_count_from_another_tensors_extent():
    """`F.one_hot(labels, logits.shape[-1])` as torch code writes it: the class count is an extent, and
    the one compiled fusion serves every class count."""
    one_hot_like = bz.jit(lambda labels, logits: bz.ops.one_hot(labels, logits.shape[-1]))
    with bz.record() as rec:
        for classes in (4, 9):
            labels = np.array([0, 3, 2, 5], np.int64) % classes
            got = one_hot_like(labels, np.zeros((4, classes), np.float32))
            np.testing.assert_array_equal(got, labels[:, None] == np.arange(classes))
            assert got.dtype == np.int64
    assert len(rec.compiles) == 1, rec.compiles


def test_one_hot_counts_past_its_ids_type():
    ids = np.array([-56, 100], np.int8)
    (got,) = execute(lambda f: bz.ops.one_hot(define(f, ids), 300), [ids])
    assert got.shape == (2, 300) and got[1, 100] == 1 and got.sum() == 1


# --- dtype= ---------------------------------------------------------------------------------------------
DTYPE_CASES = {  # name: (braze with dtype=, float64 reference along axis 1)
    "sum": (lambda x, d: bz.ops.sum(x, 1, dtype=d), lambda x: x.sum(1)),
    "sum_method": (lambda x, d: x.sum(1, keepdim=True, dtype=d), lambda x: x.sum(1, keepdims=True)),
    "mean": (lambda x, d: bz.ops.mean(x, axes=[1], dtype=d), lambda x: x.mean(1)),
    "prod": (lambda x, d: x.prod(dim=1, dtype=d), lambda x: (x / 4).prod(1) * 4.0 ** x.shape[1]),
    "cumsum": (lambda x, d: x.cumsum(1, dtype=d), lambda x: x.cumsum(1)),
    "cumprod": (lambda x, d: bz.ops.cumprod(x, dim=1, dtype=d), lambda x: x.cumprod(1)),
    "softmax": (lambda x, d: x.softmax(-1, dtype=d), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    "log_softmax": (lambda x, d: bz.ops.log_softmax(x, 1, d),  # torch's positional dtype
                    lambda x: x - np.log(np.exp(x).sum(1, keepdims=True))),
}


@pytest.mark.parametrize("shape", [(3, 5), (1, 1), (2, 0)], ids=str)
@pytest.mark.parametrize("source, target", [(bz.float16, bz.float32), (bz.bfloat16, bz.float64),
                                            (bz.int32, bz.float32), (bz.float64, bz.float32)], ids=_id)
def test_dtype_casts_the_input_first(source, target, shape):
    x = _sample(source, shape, "dtype", scale=2.0)
    outs = execute(lambda f: [fn(t, target) for t in [define(f, x)] for fn, _ in DTYPE_CASES.values()], [x])
    x64 = x.astype(np.float64)
    for (name, (_, reference)), got in zip(DTYPE_CASES.items(), outs, strict=True):
        if x.size == 0 and name == "prod":
            expected = np.ones(shape[0])
        else:
            with warnings.catch_warnings():  # the mean of nothing is NaN by definition
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = reference(x64)
        assert_matches(got, expected, target, k=4, scale=np.abs(expected).max(initial=1.0), what=name)


def test_integer_dtype_keeps_sums_in_that_type():
    x = np.array([[1.7, -2.9, 3.2]], np.float32)
    total, running = execute(lambda f: [bz.ops.sum(t := define(f, x), dtype=bz.int32), t.cumsum(-1, dtype="int64")],
                             [x])
    assert_matches(total, np.array(2), bz.int32)  # ints cast toward zero (1 - 2 + 3), an int32 as torch gives
    assert_matches(running, np.array([[1, -1, 2]]), bz.int64)


def test_dtype_accepts_torch_dtypes():
    torch = pytest.importorskip("torch")
    x = np.ones((2, 3), np.float16)
    (got,) = execute(lambda f: define(f, x).sum(1, dtype=torch.float32), [x])
    assert_matches(got, np.full(2, 3.0), bz.float32)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: x.mean(1, dtype=bz.int32), bz.FusionDefinitionError,
     "mean: dtype: expected a floating dtype, got int32"),
    (lambda x: x.softmax(-1, dtype="int64"), bz.FusionDefinitionError, "softmax: dtype: expected a floating dtype"),
    (lambda x: bz.ops.log_softmax(x, dtype=bz.bool_), bz.FusionDefinitionError, "log_softmax: dtype: expected a"),
    (lambda x: x.sum(dtype="complex64"), bz.UnsupportedError, "sum: dtype: expected one of .*, got complex64"),
    (lambda x: bz.ops.cumsum([1], 0, dtype=bz.float32), bz.FusionDefinitionError, "cumsum: expected a TensorView"),
])
def test_bad_dtype_is_named(call, error, message):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 4), dtype=bz.float16)
        with pytest.raises(error, match=message):
            call(x)


# --- *_like ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1,), (3, 5), (0, 2)], ids=str)
@pytest.mark.parametrize("dtype", [bz.float16, bz.float32, bz.int32, bz.bool_], ids=_id)
def test_like_ops_take_the_shape_and_dtype(dtype, shape):
    x = np.zeros(shape, dtype.numpy)
    zeros, ones, full, full_float = execute(
        lambda f: [bz.ops.zeros_like(t := define(f, x)), bz.ops.ones_like(t), bz.ops.full_like(t, 1),
                   bz.ops.full_like(t, 2.5, dtype=bz.float64)], [x])
    assert_matches(zeros, np.zeros(shape), dtype)
    assert_matches(ones, np.ones(shape), dtype)
    assert_matches(full, np.ones(shape), dtype)
    assert_matches(full_float, np.full(shape, 2.5), bz.float64)


def test_like_ops_of_a_symbolic_tensor_follow_its_extents():
    like = bz.jit(lambda x: bz.ops.ones_like(x, dtype=bz.int64) + x.long())
    for n in (0, 1, 7):
        np.testing.assert_array_equal(like(np.full((n, 3), 2.0, np.float32)), np.full((n, 3), 3, np.int64))


# --- numel and movedim ------------------------------------------------------------------------------------
def test_numel_is_an_int_when_static_and_an_extent_otherwise():
    with bz.Fusion() as f:
        static = f.define_tensor(shape=(3, 5), dtype=bz.float32)
        symbolic = f.define_tensor(shape=(-1, 5), dtype=bz.float32)
        assert static.numel() == 15 and isinstance(static.numel(), int)
        assert not isinstance(symbolic.numel(), int)
        f.add_output(symbolic / symbolic.numel())
    x = np.ones((4, 5), np.float32)
    (got,) = f.execute([np.ones((3, 5), np.float32), x])
    np.testing.assert_allclose(got, x / 20)


@pytest.mark.parametrize("source, destination", [
    (0, -1), (-1, 0), (1, 1), ([0, 1], [2, 0]), ((2, 0), (0, 1)), ([], []),
], ids=str)
def test_movedim_matches_numpy(source, destination):
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    moved, axis = execute(lambda f: [define(f, x).movedim(source, destination),
                                     define(f, x, name="y").moveaxis(source, destination)], [x, x])
    expected = np.moveaxis(x, source, destination)
    np.testing.assert_array_equal(moved, expected)
    np.testing.assert_array_equal(axis, expected)


@st.composite
def _moves(draw):
    """A rank, and distinct sources moved to distinct destinations (negative ones too)."""
    rank = draw(st.integers(1, 4))
    count = draw(st.integers(0, rank))
    axes = st.integers(-rank, rank - 1)
    sources = draw(st.lists(axes, min_size=count, max_size=count, unique_by=lambda a: a % rank))
    destinations = draw(st.lists(axes, min_size=count, max_size=count, unique_by=lambda a: a % rank))
    return rank, sources, destinations


@settings(max_examples=25, deadline=None)
@given(_moves())
def test_movedim_over_generated_moves(move):
    rank, sources, destinations = move
    x = np.arange(math.prod(range(2, rank + 2)), dtype=np.int32).reshape(range(2, rank + 2))
    (got,) = execute(lambda f: define(f, x).movedim(sources, destinations), [x])
    np.testing.assert_array_equal(got, np.moveaxis(x, sources, destinations))
