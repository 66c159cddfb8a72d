"""Type promotion (braze.dtypes): strong pairs, weak Python scalars, as_dtype, and the promotion and
broadcasting seen through the frontend on the reference backend."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import dtypes as dt

ALL = dt.ALL_DTYPES
KIND_ORDER = "bif"  # bool < integer < floating (DType.category: unsigned integers are integers)
FAST = settings(max_examples=100, deadline=None)

dtypes = st.sampled_from(ALL)
no_bf16 = st.sampled_from([d for d in ALL if d is not bz.bfloat16])


def test_all_dtypes_are_the_public_ones() -> None:
    assert set(ALL) == {bz.bool_, bz.int8, bz.int16, bz.int32, bz.int64, bz.uint8, bz.uint16, bz.uint32, bz.uint64,
                        bz.float16, bz.bfloat16, bz.float32, bz.float64}
    assert dt.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert [d.itemsize for d in ALL] == [d.numpy.itemsize for d in ALL]


# --- strong pairs ----------------------------------------------------------------------------------
@FAST
@given(dtypes, dtypes)
def test_promote_types_is_commutative(a: dt.DType, b: dt.DType) -> None:
    assert dt.promote_types(a, b) == dt.promote_types(b, a)


def _uint64_with_signed(*ds: dt.DType) -> bool:
    return bz.uint64 in ds and any(d.kind == "i" for d in ds)


@FAST
@given(dtypes, dtypes, dtypes)
def test_promote_types_is_associative(a: dt.DType, b: dt.DType, c: dt.DType) -> None:
    # uint64 with a signed integer is float64, as in NumPy 2, whose lattice is not associative there:
    # (uint64, int8) then float16 is float64, uint64 then (int8, float16) is float16.
    if _uint64_with_signed(a, b, c) and any(d.is_floating for d in (a, b, c)):
        return
    assert dt.promote_types(dt.promote_types(a, b), c) == dt.promote_types(a, dt.promote_types(b, c))


@pytest.mark.parametrize("d", ALL, ids=str)
def test_promote_types_is_idempotent(d: dt.DType) -> None:
    assert dt.promote_types(d, d) is d


@FAST
@given(dtypes, dtypes)
def test_promote_types_result_is_one_of_the_lattice(a: dt.DType, b: dt.DType) -> None:
    result = dt.promote_types(a, b)
    assert result in ALL
    if _uint64_with_signed(a, b):
        assert result is bz.float64  # NumPy 2: no integer type holds both
        return
    # Never narrower than an operand of the same kind, and of the higher kind.
    assert KIND_ORDER.index(result.category) == max(KIND_ORDER.index(a.category), KIND_ORDER.index(b.category))
    for d in (a, b):
        if d.category == result.category:
            assert result.itemsize >= d.itemsize


@FAST
@given(no_bf16, no_bf16)
def test_same_kind_pairs_match_numpy(a: dt.DType, b: dt.DType) -> None:
    if a.category != b.category:
        return
    assert dt.promote_types(a, b).numpy == np.result_type(a.numpy, b.numpy)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (bz.float16, bz.bfloat16, bz.float32),
        (bz.bfloat16, bz.float16, bz.float32),
        (bz.bfloat16, bz.float32, bz.float32),
        (bz.float32, bz.bfloat16, bz.float32),
        (bz.bfloat16, bz.float64, bz.float64),
        (bz.bfloat16, bz.bfloat16, bz.bfloat16),
        (bz.int8, bz.bfloat16, bz.bfloat16),
        (bz.bool_, bz.bfloat16, bz.bfloat16),
    ],
)
def test_bfloat16_pairs(a: dt.DType, b: dt.DType, expected: dt.DType) -> None:
    assert dt.promote_types(a, b) is expected


@FAST
@given(dtypes, dtypes)
def test_cross_kind_takes_the_higher_kinds_dtype(a: dt.DType, b: dt.DType) -> None:
    if a.category == b.category:
        return
    higher = a if KIND_ORDER.index(a.category) > KIND_ORDER.index(b.category) else b
    assert dt.promote_types(a, b) is higher


@pytest.mark.parametrize(
    "i, f, numpy_gives",
    [
        (bz.int32, bz.float16, np.float64),
        (bz.int64, bz.float16, np.float64),
        (bz.int32, bz.float32, np.float64),
        (bz.int64, bz.float32, np.float64),
        (bz.int8, bz.float16, np.float16),  # the one pair where NumPy agrees
        (bz.int64, bz.float64, np.float64),
    ],
)
def test_int_float_differs_from_numpy_as_documented(i: dt.DType, f: dt.DType, numpy_gives) -> None:
    """braze (like JAX) takes the float operand's dtype; NumPy widens to hold every integer value."""
    ours = dt.promote_types(i, f)
    assert ours is f
    numpy = np.result_type(i.numpy, f.numpy)
    assert numpy == np.dtype(numpy_gives)
    assert (numpy == ours.numpy) == (np.dtype(numpy_gives) == f.numpy)


@pytest.mark.parametrize("a", [d for d in ALL if d.category != "f"], ids=str)
@pytest.mark.parametrize("b", [d for d in ALL if d.category != "f"], ids=str)
def test_bool_int_cross_kind_matches_numpy(a: dt.DType, b: dt.DType) -> None:
    assert dt.promote_types(a, b).numpy == np.result_type(a.numpy, b.numpy)


# --- weak scalars ----------------------------------------------------------------------------------
PY_VALUES = [True, 1, 1.0]


def weak(d: dt.DType, value: object) -> dt.DType:
    return dt.result_type((d, False), (dt.python_scalar_dtype(value), True))


SAME_OR_LOWER_KIND = [(d, v) for d in ALL for v in PY_VALUES
                      if KIND_ORDER.index(dt.python_scalar_dtype(v).category) <= KIND_ORDER.index(d.category)]


@pytest.mark.parametrize("d, value", SAME_OR_LOWER_KIND, ids=str)
def test_weak_scalar_never_widens_same_or_higher_kind(d: dt.DType, value: object) -> None:
    assert weak(d, value) is d
    if d is not bz.bfloat16:  # ml_dtypes' bfloat16 does not take part in NEP 50 weak promotion
        assert weak(d, value).numpy == np.result_type(d.numpy, value)  # NumPy 2, NEP 50


@pytest.mark.parametrize(
    "d, value, expected",
    [
        (bz.float16, 1.0, bz.float16),
        (bz.bfloat16, 1.0, bz.bfloat16),
        (bz.int8, 1, bz.int8),
        (bz.int8, 10**6, bz.int8),
        (bz.int32, True, bz.int32),
        (bz.float16, 7, bz.float16),
        (bz.int8, 0.5, bz.float32),
        (bz.int64, 0.5, bz.float32),
        (bz.int32, 2.0, bz.float32),
        (bz.bool_, 1, bz.int64),
        (bz.bool_, 1.5, bz.float32),
        (bz.bool_, False, bz.bool_),
    ],
)
def test_weak_scalar_table(d: dt.DType, value: object, expected: dt.DType) -> None:
    assert weak(d, value) is expected
    assert dt.result_type((dt.python_scalar_dtype(value), True), (d, False)) is expected  # order-free


@FAST
@given(dtypes, dtypes, st.lists(st.sampled_from(PY_VALUES), max_size=3))
def test_weak_scalars_only_raise_the_kind(a: dt.DType, b: dt.DType, values: list) -> None:
    operands = [(a, False), (b, False)] + [(dt.python_scalar_dtype(v), True) for v in values]
    result = dt.result_type(*operands)
    strong = dt.promote_types(a, b)
    kinds = [strong.category] + [dt.python_scalar_dtype(v).category for v in values]
    top = max(kinds, key=KIND_ORDER.index)
    assert result is (strong if top == strong.category else {"i": bz.int64, "f": bz.float32}[top])


@pytest.mark.parametrize("d", ALL, ids=str)
def test_a_lone_weak_operand_keeps_its_dtype(d: dt.DType) -> None:
    assert dt.result_type((d, True)) is d
    assert dt.result_type((d, True), (bz.bool_, True)) is d


# --- as_dtype ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", ALL, ids=str)
def test_as_dtype_accepts_dtypes_names_and_numpy(d: dt.DType) -> None:
    assert dt.as_dtype(d) is d
    assert dt.as_dtype(d.name) is d
    assert dt.as_dtype(d.numpy) is d
    assert dt.as_dtype(d.numpy.type) is d


@pytest.mark.parametrize("obj, expected", [(bool, bz.bool_), (int, bz.int64), (float, bz.float64),
                                           (np.float32, bz.float32), ("torch.float16", bz.float16),
                                           (ml_dtypes.bfloat16, bz.bfloat16)])
def test_as_dtype_accepts_python_and_library_types(obj: object, expected: dt.DType) -> None:
    assert dt.as_dtype(obj) is expected


@pytest.mark.parametrize("obj, shown", [("complex64", "complex64"), (np.complex64, "complex64"),
                                        ("timedelta64", "timedelta64"), (np.timedelta64, "timedelta64"),
                                        ("floaty", "'floaty'"),
                                        ("", "''"), (3, "3")])
def test_as_dtype_rejects_with_the_supported_list(obj: object, shown: str) -> None:
    supported = ", ".join(d.name for d in ALL)
    with pytest.raises(bz.UnsupportedError) as info:
        dt.as_dtype(obj)
    message = str(info.value)
    assert f"got {shown}" in message
    assert supported in message


@pytest.mark.parametrize("obj", [[1], {}], ids=["list", "dict"])
def test_as_dtype_rejects_unhashable_values_with_unsupported_error(obj: object) -> None:
    with pytest.raises(bz.UnsupportedError, match="expected one of"):
        dt.as_dtype(obj)


# --- through the frontend ----------------------------------------------------------------------------
@st.composite
def broadcastable_pair(draw):
    """Two shapes that broadcast, and for each dim whether it is defined symbolic (-1)."""
    rank = draw(st.integers(0, 4))
    out = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    shapes, defs = [], []
    for _ in range(2):
        r = draw(st.integers(0, rank))
        shape = [e if draw(st.booleans()) else 1 for e in out[rank - r:]]
        # A symbolic extent never broadcasts, so only a dimension as large as the output may be -1.
        defined = [-1 if e == o and draw(st.booleans()) else e for e, o in zip(shape, out[rank - r:])]
        shapes.append(tuple(shape))
        defs.append(tuple(defined))
    return shapes, defs


def _data(shape: tuple[int, ...], d: dt.DType, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 5, size=shape)
    return values.astype(d.numpy)


@FAST
@given(broadcastable_pair(), dtypes, dtypes)
def test_add_broadcasts_and_promotes(pair, da: dt.DType, db: dt.DType) -> None:
    (sa, sb), (defa, defb) = pair
    with bz.Fusion() as f:
        a = f.define_tensor(defa, dtype=da, name="a")
        b = f.define_tensor(defb, dtype=db, name="b")
        f.add_output(a + b)
    expected_dtype = dt.promote_types(da, db)
    xa, xb = _data(sa, da, 1), _data(sb, db, 2)
    (y,) = f.execute([xa, xb])
    assert y.shape == np.broadcast_shapes(sa, sb)
    assert y.dtype == expected_dtype.numpy
    res = expected_dtype.numpy
    np.testing.assert_array_equal(y, np.add(xa.astype(res), xb.astype(res)))


@FAST
@given(st.integers(1, 3), st.integers(0, 2), st.integers(2, 5), st.integers(2, 5), st.booleans())
def test_static_extents_that_cannot_broadcast_fail_at_definition(rank, axis, m, n, symbolic_other):
    if m == n:
        n += 1
    axis = min(axis, rank - 1)
    sa = [2] * rank
    sb = [-1 if symbolic_other else 2] * rank
    sa[axis], sb[axis] = m, n
    with bz.Fusion() as f:
        a = f.define_tensor(sa, name="a")
        b = f.define_tensor(sb, name="b")
        with pytest.raises(bz.FusionDefinitionError, match=rf"add: dimension {axis - rank} of .*'a'.*'b'.*"
                                                           rf"got extents {m} and {n}"):
            a + b  # noqa: B018


@FAST
@given(st.integers(1, 3), st.integers(2, 5), st.integers(2, 5))
def test_symbolic_extents_that_cannot_broadcast_fail_at_execute(rank, m, n):
    if m == n:
        n += 1
    with bz.Fusion() as f:
        a = f.define_tensor([-1] * rank, name="a")
        b = f.define_tensor([-1] * rank, name="b")
        f.add_output(a * b)
    sa, sb = [3] * rank, [3] * rank
    sa[-1], sb[-1] = m, n
    with pytest.raises(bz.InputError, match=rf"mul: dimension -1 of T\d+ \('a'\) and T\d+ \('b'\) must match: "
                                            rf"got extents {m} and {n}"):
        f.execute([np.ones(sa, np.float32), np.ones(sb, np.float32)])


@pytest.mark.parametrize("d", ALL, ids=str)
@pytest.mark.parametrize("value", [True, 3, 0.5], ids=repr)
def test_python_scalar_operand_through_the_frontend(d: dt.DType, value: object) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=d, name="x")
        f.add_output(x * value)
    (y,) = f.execute([np.ones(3, d.numpy)])
    assert y.dtype == weak(d, value).numpy


def test_scalar_input_is_weak_through_the_frontend() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float16, name="x")
        s = f.define_scalar(dtype=bz.float64, name="s")
        i = f.define_tensor((-1,), dtype=bz.int8, name="i")
        f.add_output(x * s)
        f.add_output(i * s)
    y, z = f.execute([np.ones(3, np.float16), 2.5, np.ones(3, np.int8)])
    assert y.dtype == np.float16 and z.dtype == np.float32
    np.testing.assert_array_equal(y, np.full(3, 2.5, np.float16))
    np.testing.assert_array_equal(z, np.full(3, 2.5, np.float32))


def test_finfo_and_iinfo_give_the_limits_torch_code_masks_with() -> None:
    assert float(bz.finfo(bz.bfloat16).min) == -float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert bz.finfo(np.float32).eps == np.finfo(np.float32).eps and bz.finfo("float16").max == 65504
    assert bz.iinfo(bz.int8).min == -128 and bz.iinfo(np.int64).max == 2**63 - 1
    with pytest.raises(bz.UnsupportedError, match="finfo: expected a floating dtype, got int32"):
        bz.finfo(bz.int32)
    with pytest.raises(bz.UnsupportedError, match="iinfo: expected an integer dtype, got float32"):
        bz.iinfo(bz.float32)


def test_a_bfloat16_limit_masks_a_bfloat16_tensor_in_a_fusion() -> None:
    x = np.array([[1.0, -2.0, 3.0]], ml_dtypes.bfloat16)
    masked = bz.jit(lambda x: x.masked_fill(x > 0, bz.finfo(x.dtype).min))(x)
    lowest = ml_dtypes.finfo(ml_dtypes.bfloat16).min
    assert masked.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(masked.astype(np.float64), [[lowest, -2.0, lowest]])


# --- unsigned integers -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "a, b, expected",
    [
        (bz.uint8, bz.int8, bz.int16),
        (bz.uint8, bz.int16, bz.int16),
        (bz.uint16, bz.int16, bz.int32),
        (bz.uint32, bz.int8, bz.int64),
        (bz.uint32, bz.int64, bz.int64),
        (bz.uint64, bz.int8, bz.float64),
        (bz.uint64, bz.int64, bz.float64),
        (bz.uint8, bz.uint32, bz.uint32),
        (bz.bool_, bz.uint16, bz.uint16),
        (bz.uint32, bz.float32, bz.float32),  # the float operand's dtype, as for signed integers
        (bz.uint8, bz.float16, bz.float16),
    ],
)
def test_unsigned_pairs(a: dt.DType, b: dt.DType, expected: dt.DType) -> None:
    assert dt.promote_types(a, b) is expected
    assert dt.promote_types(b, a) is expected


@pytest.mark.parametrize("d", [bz.uint8, bz.uint16, bz.uint32, bz.uint64], ids=str)
def test_unsigned_dtypes_map_to_numpy_and_torch(d: dt.DType) -> None:
    assert d.kind == "u" and d.category == "i" and d.is_integer and d.is_unsigned
    assert d.numpy == np.dtype(d.name) and d.itemsize == d.numpy.itemsize
    assert dt.as_dtype(np.dtype(d.name)) is d and dt.as_dtype(d.name) is d and dt.as_dtype(f"torch.{d.name}") is d
    assert bz.iinfo(d).min == 0 and bz.iinfo(d).max == 2 ** (8 * d.itemsize) - 1
    torch = pytest.importorskip("torch")
    if hasattr(torch, d.name):
        assert dt.as_dtype(getattr(torch, d.name)) is d


def test_weak_python_int_out_of_range_is_an_error() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), bz.uint8)
        with pytest.raises(bz.FusionDefinitionError, match=r"add: operand 1: .*\[0, 255\].*uint8.*300"):
            x + 300
        with pytest.raises(bz.FusionDefinitionError, match=r"sub: operand 1: .*\[0, 255\].*-1"):
            x - (-1)
        with pytest.raises(bz.FusionDefinitionError, match=r"full: value: .*uint8.*-1"):
            bz.ops.full((2,), -1, bz.uint8)
        f.add_output(x + 255)
    (out,) = f.execute([np.array([0, 1, 2], np.uint8)])
    np.testing.assert_array_equal(out, np.array([255, 0, 1], np.uint8))


def test_python_int_past_int64_with_uint64() -> None:
    x = np.array([1, 2**63 + 5, 2**64 - 1], np.uint64)
    with bz.Fusion() as f:
        t = f.define_tensor((-1,), bz.uint64)
        f.add_output(t & 0xFFFF_FFFF_FFFF_FFF0)
        f.add_output(t ^ (2**64 - 1))
    for backend in ("reference", "llvm"):
        masked, flipped = f.execute([x], backend=backend)
        np.testing.assert_array_equal(masked, x & np.uint64(0xFFFF_FFFF_FFFF_FFF0))
        np.testing.assert_array_equal(flipped, ~x)
