"""Every reduction against an exact oracle (math.fsum, Python ints, first-index arg-reductions):
on every dtype, over several axes, keepdim and negative axes, with half types accumulating in
float32, var/std corrections, ties, NaN and empty axes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from oracle import ALL_DTYPES, assert_matches, choice, define, execute, python_ints, rng_for, run, uniform, wrap

import braze as bz
from braze.ops.reductions import REDUCTIONS

# NumPy warnings (overflow, invalid casts, empty means) must not leak out of braze.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def _exact_sum(values: list, floating: bool) -> float | int:
    return math.fsum(values) if floating else sum(values)


def _mean(values: list, floating: bool) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _var(values: list, floating: bool, correction: float = 0) -> float:
    if not values:
        return math.nan
    mu = math.fsum(values) / len(values)
    dof = len(values) - correction
    return math.fsum((v - mu) ** 2 for v in values) / dof if dof > 0 else math.inf


def _extreme(better: Callable[[object, object], bool]) -> Callable[[list, bool], object]:
    def pick(values: list, floating: bool) -> object:
        if floating and any(math.isnan(v) for v in values):
            return math.nan
        best = values[0]
        for v in values[1:]:
            best = v if better(v, best) else best
        return best

    return pick


def _arg_extreme(better: Callable[[object, object], bool]) -> Callable[[list, bool], int]:
    def index(values: list, floating: bool) -> int:
        if floating:
            nans = [i for i, v in enumerate(values) if math.isnan(v)]
            if nans:  # NaN counts as the extreme, as max() returns it
                return nans[0]
        best = 0
        for i, v in enumerate(values):
            best = i if better(v, values[best]) else best  # strict: the first of ties wins
        return best

    return index


@dataclass(frozen=True)
class ReductionOracle:
    """`fn(values, floating)` of one reduced row; `result`: 'sum' (ints widen to int64), 'same',
    'float' (ints give float32), 'bool' or 'index'."""

    result: str
    fn: Callable
    domain: Callable
    fn_name: str = ""

    def result_dtype(self, dtype: bz.DType) -> bz.DType:
        if self.result == "sum":
            return dtype if dtype.kind == "f" else bz.uint64 if dtype.kind == "u" else bz.int64
        if self.result == "float":
            return dtype if dtype.kind == "f" else bz.float32
        return {"same": dtype, "bool": bz.bool_, "index": bz.int64}[self.result]


def _factors(rng: np.random.Generator, dtype: bz.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Products of 60 of these stay well inside float16's range and int64's."""
    pool = [-1.25, -1.0, -0.875, 0.75, 1.0, 1.125, 1.5] if dtype.kind == "f" else [-2, -1, 1, 1, 2]
    return choice(pool if dtype.kind != "b" else [0, 1, 1, 1])(rng, dtype, shape)


TIES = choice([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0])
SIGNED = uniform(-2, 2, ints=(-100, 100))
REDUCTION_ORACLE: dict[str, ReductionOracle] = {
    "sum": ReductionOracle("sum", _exact_sum, uniform(-2, 2, ints=(-(1 << 63), (1 << 63) - 1))),
    "prod": ReductionOracle("sum", lambda v, f: math.prod(v), _factors),
    "max": ReductionOracle("same", _extreme(lambda a, b: a > b), TIES),
    "min": ReductionOracle("same", _extreme(lambda a, b: a < b), TIES),
    "mean": ReductionOracle("float", _mean, SIGNED),
    "var": ReductionOracle("float", _var, SIGNED),
    "std": ReductionOracle("float", lambda v, f, correction=0: math.sqrt(_var(v, f, correction)), SIGNED),
    "any": ReductionOracle("bool", lambda v, f: any(x != 0 for x in v), choice([0.0, 0.0, 0.0, 1.5, -1.0, math.nan])),
    "all": ReductionOracle("bool", lambda v, f: all(x != 0 for x in v), choice([0.0, 1.5, -1.0, 2.0, 3.0, math.nan])),
    "argmax": ReductionOracle("index", _arg_extreme(lambda a, b: a > b), TIES),
    "argmin": ReductionOracle("index", _arg_extreme(lambda a, b: a < b), TIES),
}
OPS_COVERED = frozenset(REDUCTIONS)


def expected_reduction(name: str, x: np.ndarray, axes: tuple[int, ...], keepdim: bool = False,
                       **attrs) -> np.ndarray:
    """The oracle over rows: the reduced axes moved last and flattened row-major."""
    entry = REDUCTION_ORACLE[name]
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    rows = moved.reshape(moved.shape[: len(kept)] + (-1,))
    floating = bz.dtypes.from_numpy(x.dtype).is_floating  # not x.dtype.kind: bfloat16 has kind "V"
    values = rows.astype(np.float64) if floating else python_ints(rows)
    result = entry.result_dtype(bz.dtypes.from_numpy(x.dtype))
    out = np.empty(rows.shape[:-1], dtype=object)
    for index in np.ndindex(out.shape):
        out[index] = entry.fn([v.item() if floating else v for v in values[index]], floating, **attrs)
    if result in (bz.int64, bz.uint64) and name in ("sum", "prod"):
        out = np.vectorize(lambda v: wrap(int(v), 64, result.kind == "u"), otypes=[object])(out) if out.size else out
    out = out.astype(np.float64 if result.kind == "f" else (bool if result.kind == "b" else result.numpy))
    if keepdim:
        out = np.expand_dims(out, tuple(axes))
    return out


def scale_of(name: str, x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray | float:
    """The magnitude a sum-like result is small against only through cancellation."""
    if name not in ("sum", "mean") or x.dtype.kind == "b":
        return 0.0
    total = np.sum(np.abs(x.astype(np.float64)), axis=axes, keepdims=keepdim)
    return total / max(1, math.prod(x.shape[a] for a in axes)) if name == "mean" else total


def _normalize(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    listed = [axes] if isinstance(axes, int) else list(axes)
    return tuple(sorted(a % ndim for a in listed))


def check_reduction(name: str, x: np.ndarray, axes, static: bool = False, **attrs) -> None:
    fn = getattr(bz.ops, name)
    outs = execute(lambda f: [fn(t := define(f, x, static), axes=axes, **attrs),
                              fn(t, axes=axes, keepdim=True, **attrs)], [x])
    normalized = _normalize(axes, x.ndim)
    result = REDUCTION_ORACLE[name].result_dtype(bz.dtypes.from_numpy(x.dtype))
    for out, keepdim in zip(outs, (False, True)):
        expected = expected_reduction(name, x, normalized, keepdim, **attrs)
        assert_matches(out, expected, result, scale=scale_of(name, x, normalized, keepdim),
                       what=f"{name}({x.dtype}, axes={axes}, keepdim={keepdim})")


def test_every_reduction_has_an_oracle():
    assert set(REDUCTION_ORACLE) == set(REDUCTIONS) | {"std"}


AXES = [None, 0, -1, (0, 2), [-1, -3]]


@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(REDUCTION_ORACLE))
def test_reduction_values(name, dtype, axes):
    x = np.asarray(REDUCTION_ORACLE[name].domain(rng_for("reduce", name, dtype.name, axes), dtype, (3, 4, 5)))
    check_reduction(name, x, axes)


@pytest.mark.parametrize("name", list(REDUCTION_ORACLE))
def test_reduction_static_shapes_and_rank_0(name):
    x = np.asarray(REDUCTION_ORACLE[name].domain(rng_for("static", name), bz.float32, (2, 6)))
    check_reduction(name, x, 1, static=True)
    check_reduction(name, np.array(1.5, np.float32), None)  # a 0-d tensor reduces over no axes


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("dtype", [bz.float16, bz.bfloat16, bz.float32, bz.float64, bz.int32], ids=lambda d: d.name)
def test_var_std_corrections(name, dtype, correction):
    x = np.asarray(SIGNED(rng_for("var", name, dtype.name, correction), dtype, (4, 7)))
    check_reduction(name, x, 1, correction=correction)
    check_reduction(name, x, None, correction=correction)
    if correction:  # the correction changes the value: sample and population variance differ
        population = execute(lambda f: getattr(bz.ops, name)(define(f, x), axes=1), [x])[0]
        corrected = execute(lambda f: getattr(bz.ops, name)(define(f, x), axes=1, correction=correction), [x])[0]
        assert (np.abs(corrected.astype(np.float64)) > np.abs(population.astype(np.float64))).any()


# --- accumulation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [bz.float16, bz.bfloat16], ids=lambda d: d.name)
def test_half_sums_accumulate_in_float32(dtype):
    ones = np.ones(4096, dtype.numpy)
    # A half running sum stalls (at 2048 for float16, 256 for bfloat16).
    assert execute(lambda f: bz.ops.sum(define(f, ones)), [ones])[0] == 4096
    assert np.cumsum(ones)[-1] != 4096
    big_then_ones = np.concatenate([[2048.0], np.ones(4095)]).astype(np.float16)
    total, mean = execute(lambda f: [bz.ops.sum(t := define(f, big_then_ones)), bz.ops.mean(t)], [big_then_ones])
    # 6143 rounds to 6144 in float16; a float16 running sum (a serial loop's) stays at 2048.
    assert total == 6144 and np.cumsum(big_then_ones)[-1] == 2048
    assert mean == np.float16(6143 / 4096) == 1.5


def test_integer_sums_and_products_widen_to_int64():
    x = np.full((2, 100), 100, np.int8)
    s, p = execute(lambda f: [bz.ops.sum(t := define(f, x), axes=1), bz.ops.prod(t[:, :5], axes=1)], [x])
    assert s.dtype == np.int64 and p.dtype == np.int64
    np.testing.assert_array_equal(s, [10000, 10000])
    np.testing.assert_array_equal(p, [10**10, 10**10])
    flags = np.array([[True, True, False], [True, True, True]])
    np.testing.assert_array_equal(execute(lambda f: bz.ops.sum(define(f, flags), axes=1), [flags])[0], [2, 3])


# --- ties, NaN, empty axes --------------------------------------------------------------------
def test_arg_reductions_pick_the_first_tie():
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 1]], np.float32)
    amax, amin = execute(lambda f: [bz.ops.argmax(t := define(f, x), axes=1), bz.ops.argmin(t, axes=1)], [x])
    np.testing.assert_array_equal(amax, [1, 0])
    np.testing.assert_array_equal(amin, [3, 2])


def test_argmax_over_several_axes_indexes_them_row_major():
    x = np.zeros((2, 3, 4), np.int32)
    x[1, 0, 2] = 5  # for j = 0: i0 * 4 + i2 = 6
    x[0, 2, 3] = 7  # for j = 2: 3
    x[1, 2, 0] = 7  # a later tie for j = 2
    out = execute(lambda f: bz.ops.argmax(define(f, x), axes=(0, 2)), [x])[0]
    np.testing.assert_array_equal(out, [6, 0, 3])


def test_nan_propagates_through_max_min_and_sum():
    x = np.array([[1.0, math.nan, 3.0, math.nan], [1.0, 2.0, 0.5, -1.0]], np.float32)
    names = ("max", "min", "sum", "argmax", "argmin")
    mx, mn, total, amax, amin = execute(lambda f: [getattr(bz.ops, n)(t, axes=1) for t in [define(f, x)]
                                                   for n in names], [x])
    assert np.isnan(mx[0]) and np.isnan(mn[0]) and np.isnan(total[0])
    assert (mx[1], mn[1], total[1]) == (2.0, -1.0, 2.5)
    np.testing.assert_array_equal(amax, [1, 1])
    np.testing.assert_array_equal(amin, [1, 3])


EMPTY_VALUES = {"sum": 0, "prod": 1, "any": False, "all": True, "mean": math.nan, "var": math.nan, "std": math.nan}


@pytest.mark.filterwarnings("error")  # an empty mean is NaN by definition, not a NumPy warning
@pytest.mark.parametrize("name", list(REDUCTION_ORACLE))
def test_empty_axis(name):
    x = np.zeros((2, 0), np.float32)
    fn = getattr(bz.ops, name)
    along_kept = execute(lambda f: fn(define(f, x), axes=0), [x])[0]  # reduces 2 rows of nothing: no values needed
    assert along_kept.shape == (0,)
    if name in EMPTY_VALUES:
        out = execute(lambda f: fn(define(f, x), axes=1), [x])[0]
        np.testing.assert_array_equal(out, np.full(2, EMPTY_VALUES[name]))
        return
    with bz.Fusion() as f:
        f.add_output(fn(define(f, x), axes=1))
    with pytest.raises(bz.InputError, match=name):
        run(f, [x])


# --- the surface: methods, axes handling --------------------------------------------------------
def test_tensor_methods():
    x = np.asarray(SIGNED(rng_for("methods"), bz.float32, (3, 4)))
    outs = execute(lambda f: [(t := define(f, x)).sum(1), t.mean(), t.max(0, keepdim=True), t.std(),
                              t.var(correction=1), t.argmin(axes=[0, 1]), (t > 0).any(1), (t > -5).all()], [x])
    x64 = x.astype(np.float64)
    expected = [x64.sum(1), x64.mean(), x64.max(0, keepdims=True), x64.std(), x64.var(ddof=1),
                np.argmin(x64), (x64 > 0).any(1), (x64 > -5).all()]
    for out, want in zip(outs, expected):
        dtype = bz.dtypes.from_numpy(out.dtype)
        assert_matches(out, np.asarray(want), dtype if dtype.kind == "f" else dtype, scale=4.0)


def test_numpy_and_torch_keyword_names_for_axes_and_keepdim():
    x = np.asarray(SIGNED(rng_for("aliases"), bz.float32, (3, 4)))
    ops = bz.ops
    outs = execute(lambda f: [ops.sum(t := define(f, x), axis=1), ops.mean(t, dim=0, keepdims=True), ops.max(t, dim=-1),
                              ops.min(t, axis=(0, 1)), ops.var(t, dim=1, correction=1), ops.std(t, axis=0),
                              ops.prod(t, dim=1), ops.argmax(t, axis=1), ops.argmin(t, dim=0),
                              ops.softmax(t, dim=0), ops.log_softmax(t, dim=0), t.sum(dim=1, keepdims=True)], [x])
    x64 = x.astype(np.float64)
    softmax = np.exp(x64) / np.exp(x64).sum(0)
    expected = [x64.sum(1), x64.mean(0, keepdims=True), x64.max(-1), x64.min(), x64.var(1, ddof=1), x64.std(0),
                x64.prod(1), x64.argmax(1), x64.argmin(0), softmax, np.log(softmax), x64.sum(1, keepdims=True)]
    for out, want in zip(outs, expected, strict=True):
        dtype = bz.dtypes.from_numpy(out.dtype)
        assert_matches(out, np.asarray(want), dtype, scale=4.0)


def test_nvfusers_definitions_of_reductions():
    """nvFuser's names: `dims=` for the axes, and `var_mean` returning (var, mean)."""
    x = np.asarray(SIGNED(rng_for("nvfuser"), bz.float32, (3, 4, 5)))

    def build(f):
        t = define(f, x)
        var, mean = bz.ops.var_mean(t, dims=[0, 2], correction=1, keepdim=True)
        return [bz.ops.sum(t, dims=[1]), bz.ops.max(t, dims=[2], keepdim=True), var, mean,
                *bz.ops.var_mean(t, [1]), bz.ops.squeeze(bz.ops.sum(t, dims=[1], keepdim=True), dims=[1])]

    x64 = x.astype(np.float64)
    expected = [x64.sum(1), x64.max(2, keepdims=True), x64.var((0, 2), ddof=1, keepdims=True),
                x64.mean((0, 2), keepdims=True), x64.var(1), x64.mean(1), x64.sum(1)]
    for out, want in zip(execute(build, [x]), expected, strict=True):
        assert_matches(out, want, bz.float32, scale=4.0)


def test_nvfusers_positional_dtype_of_sums():
    # nvFuser's sum(x, dims, keepdim, dtype): the dtype fourth, as its python tests write it
    x = np.asarray(SIGNED(rng_for("nvfuser"), bz.float16, (3, 4)))
    outs = execute(lambda f: [bz.ops.sum(t := define(f, x), [1], False, bz.float64),
                              bz.ops.mean(t, [0], True, bz.float32), bz.ops.prod(t, [1], False, bz.float32)], [x])
    x64 = x.astype(np.float64)
    for out, want, dtype in zip(outs, [x64.sum(1), x64.mean(0, keepdims=True), x64.prod(1)],
                                [bz.float64, bz.float32, bz.float32], strict=True):
        assert_matches(out, want, dtype, scale=4.0)


def test_too_many_positional_arguments_name_the_parameters():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match=r"max: expected at most 3 positional arguments "
                                                            r"\(x, axes, keepdim\), got 4"):
            bz.ops.max(x, [1], False, bz.float32)


@pytest.mark.parametrize("call", [
    lambda x: bz.ops.var(x, [1], 1, False),  # nvFuser's order: (x, dims, correction, keepdim)
    lambda x: bz.ops.var_mean(x, [1], 0),
    lambda x: bz.ops.sum(x, 1, 1),
])
def test_keepdim_other_than_a_bool_is_refused(call):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match="keepdim: expected a bool, got int"):
            call(x)


@pytest.mark.parametrize("call, names", [
    (lambda x: bz.ops.sum(x, axis=1, dim=1), "axis= and dim="),
    (lambda x: bz.ops.mean(x, 0, axis=1), "axes= and axis="),
    (lambda x: bz.ops.max(x, axes=0, dim=0), "axes= and dim="),
    (lambda x: x.sum(1, keepdim=True, keepdims=True), "keepdim= and keepdims="),
    (lambda x: bz.ops.softmax(x, axis=0, dim=0), "axis= and dim="),
])
def test_one_parameter_under_two_names_is_an_error_naming_both(call, names):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match=names):
            call(x)


@pytest.mark.parametrize("axes", [(0, 0), (0, -2), 2, -3, (0, 5)], ids=str)
def test_bad_axes(axes):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match="sum"):
            bz.ops.sum(x, axes=axes)


def test_reduction_of_a_python_scalar_is_refused():
    with bz.Fusion():
        with pytest.raises(bz.FusionDefinitionError, match="sum"):
            bz.ops.sum(2.0)


def test_a_misspelled_keyword_names_the_ones_the_reduction_takes():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match=r"sum: unexpected keyword argument\(s\) axs=; expected "
                                                           r"some of x=, axes=, keepdim=, dtype=, axis=, dim="):
            bz.ops.sum(x, axs=1)
        with pytest.raises(bz.FusionDefinitionError, match=r"var: unexpected keyword argument\(s\) keepdmi=.*ddof="):
            bz.ops.var(x, 1, keepdmi=True)
        assert bz.ops.var(x, axis=1, ddof=1, keepdims=True).ndim == 2  # every alias, from either wrapper
