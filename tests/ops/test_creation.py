"""Creation ops: full, zeros, ones, arange against NumPy; rand and randn against the Philox
stream of `braze.ops.philox` (explicit seeds), the global generator (`bz.manual_seed`) and their
distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import ALL_DTYPES, BACKEND, FLOAT_DTYPES, assert_matches, assert_same, define, execute, run

import braze as bz
from braze.ops import philox

# NumPy warnings (overflow, invalid casts, empty means) must not leak out of braze.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

OPS_COVERED = frozenset({"full", "arange", "rand", "randn"})
SHAPES = [(), (3,), (2, 3), (0, 4)]
FILL = {"b": True, "i": -7, "u": 7, "f": 2.5}


def _id(value: object) -> str:
    return value.name if isinstance(value, bz.DType) else str(value)


# --- full, zeros, ones ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_full(dtype, shape):
    value = FILL[dtype.kind]
    full, zeros, ones = execute(lambda f: [bz.ops.full(shape, value, dtype), bz.ops.zeros(shape, dtype),
                                           bz.ops.ones(shape, dtype)], [])
    assert_same(full, np.full(shape, value, dtype=dtype.numpy))
    assert_same(zeros, np.zeros(shape, dtype=dtype.numpy))
    assert_same(ones, np.ones(shape, dtype=dtype.numpy))


def test_full_default_dtypes():
    flags, ints, floats, zeros, ones = execute(
        lambda f: [bz.ops.full((2,), True), bz.ops.full((2,), 3), bz.ops.full((2,), 0.5), bz.ops.zeros(2),
                   bz.ops.ones([2])], [])
    # The value's Python type decides its kind (a Python float gives float32, as in torch and JAX);
    # zeros and ones are float32.
    assert (flags.dtype, ints.dtype, floats.dtype) == (np.bool_, np.int64, np.float32)
    assert zeros.dtype == ones.dtype == np.float32
    assert_same(ints, np.array([3, 3], np.int64))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_full_special_floats(dtype):
    values = [math.nan, math.inf, -math.inf, -0.0]
    outs = execute(lambda f: [bz.ops.full((2,), v, dtype) for v in values], [])
    for v, out in zip(values, outs):
        assert_same(out, np.full((2,), v, dtype=dtype.numpy))


def test_full_overflows_to_infinity_quietly():
    (out,) = execute(lambda f: bz.ops.full((2,), 1e6, bz.float16), [])
    assert_same(out, np.array([np.inf, np.inf], np.float16))


def test_full_with_symbolic_shape():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = execute(lambda f: (t := define(f, x)) + bz.ops.full(t.shape, 0.5, bz.float32), [x])
    assert_same(out, x + np.float32(0.5))


def test_fill_value_and_new_shape_as_torch_and_nvfuser_name_them():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    outs = execute(lambda f: [bz.ops.full(shape=(t := define(f, x)).shape, fill_value=0.5, dtype=bz.float32),
                              bz.ops.full_like(t, fill_value=2), bz.ops.reshape(t, new_shape=[-1, 2])], [x])
    for out, want in zip(outs, [np.full((3, 4), 0.5, np.float32), np.full((3, 4), 2, np.float32), x.reshape(-1, 2)],
                         strict=True):
        assert_same(out, want)


# --- arange -----------------------------------------------------------------------------------------
ARANGE = [(5,), (2, 9), (9, 2, -2), (0, 10, 3), (5, 5), (5, 2), (-3, 4, 2), (7, -8, -5), (0,)]


@pytest.mark.parametrize("dtype", [bz.int64, bz.int32, bz.int8, bz.float16, bz.float32, bz.float64], ids=_id)
@pytest.mark.parametrize("args", ARANGE, ids=str)
def test_arange(args, dtype):
    (out,) = execute(lambda f: bz.ops.arange(*args, dtype=dtype), [])
    assert_same(out, np.arange(*args).astype(dtype.numpy), f"arange{args}")


def test_arange_defaults_to_int64():
    (out,) = execute(lambda f: bz.ops.arange(4), [])
    assert_same(out, np.arange(4, dtype=np.int64))


@pytest.mark.parametrize("n", [0, 1, 6])
def test_arange_to_a_symbolic_extent(n):
    x = np.ones(n, np.float32)
    outs = execute(lambda f: [bz.ops.arange((t := define(f, np.ones(2, np.float32))).shape[0]),
                              bz.ops.arange(1, t.shape[0], 2, dtype=bz.float32) * t[1::2]], [x])
    assert_same(outs[0], np.arange(n, dtype=np.int64))
    assert_same(outs[1], np.arange(1, n, 2).astype(np.float32))


# --- rand / randn ---------------------------------------------------------------------------------
DRAW = {"rand": philox.uniform, "randn": philox.normal}


@pytest.mark.parametrize("offset", [0, 5])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (0,), ()], ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
@pytest.mark.parametrize("op", ["rand", "randn"])
def test_seeded_random_is_the_philox_stream(op, dtype, shape, offset):
    fn = getattr(bz.ops, op)
    first, again = execute(lambda f: [fn(shape, dtype, seed=1234, offset=offset),
                                      fn(shape, dtype, seed=1234, offset=offset)], [])
    expected = DRAW[op](shape, dtype.numpy, 1234, offset)
    if op == "randn" and BACKEND == "cuda":  # the GPU's log and cos differ from libm's in the last bits
        assert_matches(first, expected, dtype)
    else:
        assert_same(first, expected)
    assert_same(again, first)  # the same seed and offset give the same numbers


def test_nvfusers_uniform_and_normal_scale_the_philox_stream():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 3), bz.float32)
        low = f.define_scalar(dtype=bz.float32)
        f.add_output(bz.ops.uniform(low, 2.0, x.shape, rng_seed=7, rng_offset=1))
        f.add_output(bz.ops.normal(1.0, 0.5, (4,), bz.float64, rng_seed=7))
    uniform, normal = run(f, [np.zeros((5, 3), np.float32), -1.0])
    expected = np.float32(-1.0) + np.float32(3.0) * philox.uniform((5, 3), np.float32, 7, 1)
    assert_matches(uniform, expected, bz.float32)
    assert uniform.min() >= -1.0 and uniform.max() < 2.0
    assert_matches(normal, 1.0 + 0.5 * philox.normal((4,), np.float64, 7, 0), bz.float64)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_uniform_stays_below_maxval_after_rounding(dtype):
    # In float16 1 + (1 - 2**-11) rounds to 2.0, in bfloat16 1 + (1 - 2**-8) does: a few of 4096 draws
    low, high = execute(lambda f: [bz.ops.uniform(1.0, 2.0, (4096,), dtype, rng_seed=3),
                                   bz.ops.uniform(-3.0, -2.0, (4096,), dtype, rng_seed=3)], [])
    for got, lo, hi in ((low, 1.0, 2.0), (high, -3.0, -2.0)):
        values = got.astype(np.float64)
        assert values.min() >= lo and values.max() < hi, (dtype.name, values.min(), values.max())
        # the draws that round up give minval, the others are the scaled stream
        scaled = (lo + philox.uniform((4096,), dtype.numpy, 3, 0).astype(np.float64)).astype(dtype.numpy)
        np.testing.assert_array_equal(got, np.where(scaled.astype(np.float64) >= hi, lo, scaled).astype(dtype.numpy))


@pytest.mark.parametrize("op", ["rand", "randn"])
def test_seed_and_offset_select_different_streams(op):
    fn = getattr(bz.ops, op)
    base, other_seed, other_offset = execute(
        lambda f: [fn((64,), seed=7), fn((64,), seed=8), fn((64,), seed=7, offset=1)], [])
    assert not np.array_equal(base, other_seed) and not np.array_equal(base, other_offset)


@pytest.mark.parametrize("op", ["rand", "randn"])
def test_unseeded_random_follows_manual_seed(op):
    fn = getattr(bz.ops, op)

    def fresh() -> bz.Fusion:
        with bz.Fusion() as f:
            f.add_output(fn((4, 6), bz.float32))
            f.add_output(fn((4, 6), bz.float32))
        return f

    bz.manual_seed(2024)
    f = fresh()
    a1, a2 = run(f, [])
    b1, _ = run(f, [])
    bz.manual_seed(2024)
    c1, c2 = run(fresh(), [])
    assert_same(c1, a1)
    assert_same(c2, a2)  # reproducible across fresh fusions after the same manual_seed
    assert not np.array_equal(a1, a2)  # two ops of one execution draw different numbers
    assert not np.array_equal(a1, b1)  # and so do two executions
    bz.manual_seed(2024)
    (first,) = execute(lambda f: fn((4, 6), bz.float32), [])
    assert_same(first, DRAW[op]((4, 6), np.float32, 2024, 0))  # the stream restarts at (seed, offset 0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_random_distributions(dtype):
    rand, randn = execute(lambda f: [bz.ops.rand((100, 100), dtype, seed=3), bz.ops.randn((100, 100), dtype, seed=3)],
                          [])
    u, z = rand.astype(np.float64), randn.astype(np.float64)
    assert u.min() >= 0 and u.max() < 1  # [0, 1), even after rounding to a half type
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.std() - math.sqrt(1 / 12)) < 0.01
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert np.isfinite(z).all() and abs(np.mean(np.abs(z) > 1.5) - 0.1336) < 0.01  # the normal's tails


def test_random_with_symbolic_shape():
    x = np.ones((3, 5), np.float32)
    (out,) = execute(lambda f: (t := define(f, x)) * bz.ops.rand(t.shape, seed=11), [x])
    assert_same(out, philox.uniform((3, 5), np.float32, 11, 0))


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16, bz.float64], ids=_id)
@pytest.mark.parametrize("op", ["rand", "randn"])
def test_a_run_time_seed_and_offset_give_the_philox_stream_they_name(op, dtype):
    """seed and offset read at every run (the torch backend's dropout replays a mask this way): the
    numbers of the fixed-seed stream, a new stream per value, and no draw from the global generator."""
    fn = getattr(bz.ops, op)
    with bz.Fusion() as f:
        seed, offset = f.define_scalar(dtype=bz.int64), f.define_scalar(dtype=bz.int64)
        x = f.define_tensor(shape=(-1, -1), dtype=dtype)
        f.add_output(fn(x.shape, dtype, seed=seed, offset=offset))
        f.add_output(fn(x.shape, dtype, seed=seed, offset=3) * x)
    x = np.ones((3, 5), dtype.numpy)
    bz.manual_seed(1)
    for seed_value, offset_value in [(1234, 0), (-1, 7), (2**62, 2)]:  # a negative int64 is its uint64 bits
        keyed, fixed_offset = run(f, [seed_value, offset_value, x])
        key = seed_value % 2**64
        for out, expected in ((keyed, DRAW[op]((3, 5), dtype.numpy, key, offset_value)),
                              (fixed_offset, DRAW[op]((3, 5), dtype.numpy, key, 3))):
            if op == "randn" and BACKEND == "cuda":
                assert_matches(out, expected, dtype)
            else:
                assert_same(out, expected)
    bz.manual_seed(1)
    (unseeded,) = execute(lambda f: fn((4,), bz.float32), [])
    assert_same(unseeded, DRAW[op]((4,), np.float32, 1, 0))  # the keyed runs drew nothing


@pytest.mark.parametrize("build, message", [
    (lambda f: bz.ops.rand((2,), seed=f.define_scalar(dtype=bz.int32)), "rand: seed: expected an int64 scalar"),
    (lambda f: bz.ops.randn((2,), seed=f.define_tensor((2,), bz.int64)), "randn: seed: expected an int64 scalar"),
    (lambda f: bz.ops.rand((2,), seed=3, offset=f.define_scalar(dtype=bz.int64)),
     "a run-time offset needs a run-time seed"),
    (lambda f: bz.ops.rand((2,), seed=f.define_scalar(dtype=bz.int64), offset=-1), "rand: offset"),
])
def test_run_time_seed_errors(build, message):
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=message):
            build(f)


# --- definition errors ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d.kind != "f"], ids=_id)
@pytest.mark.parametrize("op", ["rand", "randn"])
def test_random_rejects_non_float_dtypes(op, dtype):
    with bz.Fusion():
        with pytest.raises(bz.FusionDefinitionError, match=f"{op}.*{dtype.name}"):
            getattr(bz.ops, op)((3,), dtype)


@pytest.mark.parametrize("build,op", [
    (lambda: bz.ops.rand((2,), seed=-1), "rand"),
    (lambda: bz.ops.randn((2,), seed=1, offset=2**64), "randn"),
    (lambda: bz.ops.full((2, -3), 1.0), "full"),
    (lambda: bz.ops.zeros((2.5,)), "zeros"),
    (lambda: bz.ops.full((2,), math.nan, bz.int32), "full.*nan"),
    (lambda: bz.ops.full((2,), -math.inf, bz.int8), "full.*inf"),
    (lambda: bz.ops.arange(0, 5, 0), "arange"),
    (lambda: bz.ops.arange(0, 5, 1.5), "arange"),
    (lambda: bz.ops.arange(0.5, 5), "arange"),
])
def test_creation_definition_errors(build, op):
    with bz.Fusion():
        with pytest.raises(bz.FusionDefinitionError, match=op):
            build()


@pytest.mark.parametrize("build,op", [
    (lambda: bz.ops.full((2,), 1.0), "full"),
    (lambda: bz.ops.zeros((2,)), ""),  # which name it gives: tests/frontend/test_errors.py
    (lambda: bz.ops.arange(3), "arange"),
    (lambda: bz.ops.rand((2,)), "rand"),
    (lambda: bz.ops.randn((2,)), "randn"),
])
def test_creation_outside_a_fusion(build, op):
    with pytest.raises(bz.FusionDefinitionError, match=rf"{op}.*bz\.Fusion"):
        build()
