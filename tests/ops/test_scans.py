"""Every scan (cumsum, cumprod, cummax, cummin, logcumsumexp) against an exact oracle: running sums in float64 with
math.fsum, integer sums and products in Python ints wrapped to int64, running extremes that
propagate NaN; on every dtype and axis, with half types accumulating in float32, empty and
size-1 axes, non-contiguous inputs, and pointwise producers and consumers in the same fusion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import ALL_DTYPES, assert_matches, choice, define, execute, python_ints, rng_for, uniform, wrap

import braze as bz
from braze.errors import FusionDefinitionError
from braze.ops.scans import SCANS

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
OPS_COVERED = frozenset(SCANS)


def _running(name: str, values: list, floating: bool) -> list:
    """The scan of one row, exactly: each prefix's fsum, product or NaN-propagating extreme."""
    out, prefix = [], []
    for v in values:
        prefix.append(v)
        if name == "cumsum":
            out.append(math.fsum(prefix) if floating else sum(prefix))
        elif name == "cumprod":
            out.append(math.prod(prefix))
        elif name == "logcumsumexp":
            out.append(_log_sum_exp(prefix))
        elif floating and any(math.isnan(p) for p in prefix):
            out.append(math.nan)
        else:
            out.append(max(prefix) if name == "cummax" else min(prefix))
    return out


def _log_sum_exp(values: list[float]) -> float:
    top = max(values)
    if any(math.isnan(v) for v in values) or math.isinf(top):
        return math.nan if any(math.isnan(v) for v in values) else top
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def result_dtype(name: str, dtype: bz.DType) -> bz.DType:
    if name in ("cummax", "cummin", "logcumsumexp") or dtype.kind == "f":
        return dtype
    return bz.uint64 if dtype.kind == "u" else bz.int64


def expected_scan(name: str, x: np.ndarray, axis: int) -> np.ndarray:
    floating = bz.dtypes.from_numpy(x.dtype).is_floating
    moved = np.moveaxis(x, axis, -1)
    values = moved.astype(np.float64) if floating else python_ints(moved)
    out = np.empty(moved.shape, dtype=object)
    for index in np.ndindex(moved.shape[:-1]):
        out[index] = _running(name, [v.item() if floating else v for v in values[index]], floating)
    result = result_dtype(name, bz.dtypes.from_numpy(x.dtype))
    if result in (bz.int64, bz.uint64) and out.size:
        out = np.vectorize(lambda v: wrap(int(v), 64, result.kind == "u"), otypes=[object])(out)
    out = out.astype(np.float64 if result.kind == "f" else (bool if result.kind == "b" else result.numpy))
    return np.moveaxis(out, -1, axis)


def _scale(name: str, x: np.ndarray, axis: int) -> np.ndarray | float:
    """A running sum is small only through cancellation against the sum of magnitudes so far."""
    if name == "logcumsumexp":  # an absolute error of the largest magnitude so far
        return np.fmax.accumulate(np.where(np.isfinite(x), np.abs(x.astype(np.float64)), 0.0), axis=axis) + 1
    if name != "cumsum" or x.dtype.kind == "b":
        return 0.0
    return np.cumsum(np.abs(x.astype(np.float64)), axis=axis)


def _factors(rng: np.random.Generator, dtype: bz.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Products of a row of these stay inside float16's range and int64's."""
    pool = [-1.25, -1.0, -0.875, 0.75, 1.0, 1.125, 1.5] if dtype.kind == "f" else [-2, -1, 1, 1, 2]
    return choice(pool if dtype.kind != "b" else [0, 1, 1, 1])(rng, dtype, shape)


DOMAINS = {
    "cumsum": uniform(-2, 2, ints=(-(1 << 62), (1 << 62))),  # int64 sums wrap as NumPy's do
    "cumprod": _factors,
    "cummax": choice([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, math.nan]),
    "cummin": choice([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, math.nan]),
    # a prefix far below what follows (-1e4 against 30) must keep its value, not underflow to -inf
    "logcumsumexp": choice([-1e4, -60.0, -2.0, -0.5, 0.0, 1.5, 30.0, -math.inf]),
}


def check_scan(name: str, x: np.ndarray, axis: int, static: bool = False) -> None:
    (out,) = execute(lambda f: getattr(bz.ops, name)(define(f, x, static), axis), [x])
    expected = expected_scan(name, x, axis % max(x.ndim, 1))
    result = result_dtype(name, bz.dtypes.from_numpy(x.dtype))
    assert_matches(out, expected, result, k=2, scale=_scale(name, x, axis % x.ndim),
                   what=f"{name}({x.dtype}, axis={axis})")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(SCANS))
def test_scan_values(name, dtype, axis):
    x = np.asarray(DOMAINS[name](rng_for("scan", name, dtype.name, axis), dtype, (3, 6, 5)))
    if name == "logcumsumexp" and dtype.kind != "f":  # as in torch, which has none of integers
        with bz.Fusion() as f, pytest.raises(FusionDefinitionError, match="logcumsumexp.*expected a floating dtype"):
            bz.ops.logcumsumexp(define(f, x), axis)
        return
    check_scan(name, x, axis)


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (1, 1), (7,), (1, 9), (9, 1), (2, 3, 1, 4)], ids=str)
@pytest.mark.parametrize("name", list(SCANS))
def test_scan_extents_empty_one_and_ranks(name, shape):
    x = np.asarray(DOMAINS[name](rng_for("extents", name, shape), bz.float32, shape))
    for axis in range(-len(shape), len(shape)):
        check_scan(name, x, axis)


@pytest.mark.parametrize("name", list(SCANS))
def test_scan_static_shapes(name):
    x = np.asarray(DOMAINS[name](rng_for("static", name), bz.float64, (4, 6)))
    check_scan(name, x, 1, static=True)


@pytest.mark.parametrize("name", list(SCANS))
def test_scan_non_contiguous_inputs(name):
    base = np.asarray(DOMAINS[name](rng_for("strided", name), bz.float32, (6, 10)))
    for x in (base.T, base[::2, 1::3], base[:, ::-1]):
        for axis in (0, 1):
            check_scan(name, x, axis)


def test_scan_of_a_0d_tensor_is_the_value():
    x = np.array(3, np.int32)
    (out,) = execute(lambda f: bz.ops.cumsum(define(f, x), 0), [x])
    assert out.dtype == np.int64 and out == 3


@pytest.mark.parametrize("dtype", [bz.float16, bz.bfloat16], ids=lambda d: d.name)
def test_half_running_sums_accumulate_in_float32(dtype):
    ones = np.ones(4096, dtype.numpy)
    (out,) = execute(lambda f: bz.ops.cumsum(define(f, ones), 0), [ones])
    # A half running sum stalls (at 2048 for float16, 256 for bfloat16); a float32 one reaches 4096.
    assert out.dtype == dtype.numpy and out[-1] == 4096 and np.cumsum(ones)[-1] != 4096


def test_positions_from_a_mask_fuse_with_producers_and_consumers():
    """`(mask.cumsum(-1) - 1) * mask` (positions of an attention mask), a scan of a product and a
    reduction of a scan, in one fusion, each as NumPy computes it."""
    rng = rng_for("mask")
    mask = rng.integers(0, 2, (4, 9)).astype(bool)
    x = rng.uniform(0.5, 1.5, (4, 9)).astype(np.float32)

    def build(f):
        m, t = define(f, mask), define(f, x)
        return [(m.cumsum(-1) - 1) * m, bz.ops.cumprod(t * 2, axis=1), bz.ops.cumsum(t, dim=0).sum(1),
                bz.ops.cummax(bz.ops.cumsum(t, -1), 0)]

    positions, products, sums, nested = execute(build, [mask, x])
    assert positions.dtype == np.int64
    np.testing.assert_array_equal(positions, (np.cumsum(mask, -1) - 1) * mask)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(products, np.cumprod(x64 * 2, 1), rtol=1e-5)
    np.testing.assert_allclose(sums, np.cumsum(x64, 0).sum(1), rtol=1e-5)
    np.testing.assert_allclose(nested, np.maximum.accumulate(np.cumsum(x64, -1), 0), rtol=1e-5)


def test_methods_and_keyword_aliases():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    outs = execute(lambda f: [(t := define(f, x)).cumsum(-1), t.cumprod(dim=0), t.cummax(1), t.cummin(axis=0)], [x])
    for out, want in zip(outs, [np.cumsum(x, -1), np.cumprod(x, 0), np.maximum.accumulate(x, 1),
                                np.minimum.accumulate(x, 0)]):
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("axis, message", [(2, r"cumsum axis: expected an axis in \[-2, 2\), got 2"),
                                           (-3, r"expected an axis in \[-2, 2\), got -3"),
                                           (1.0, "cumsum axis: expected an int, got float"),
                                           (None, "cumsum axis: expected an int, got NoneType")])
def test_bad_axes_name_the_argument(axis, message):
    with bz.Fusion() as f, pytest.raises(FusionDefinitionError, match=message):
        bz.ops.cumsum(f.define_tensor(shape=(-1, -1), dtype=bz.float32), axis)


def test_axis_given_twice_is_an_error():
    with bz.Fusion() as f, pytest.raises(FusionDefinitionError, match="both axis= and dim="):
        bz.ops.cummax(f.define_tensor(shape=(-1,), dtype=bz.float32), axis=0, dim=0)
