"""CPU column strips: outer reductions and normalizations (the innermost axis kept) against a float64
reference, generated over shapes, axes, keepdim, ops and dtypes; their schedule; and float sums that
stay accurate and keep their bits whatever the thread count."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import schedule
from braze.runtime import thread_pool

# Extents around the edges of the schedule: empty, one, odd, a block of pairwise rows (64) and more,
# a strip's width (4096 columns) and more.
EXTENTS = (0, 1, 2, 3, 7, 64, 65, 130)
OPS = ("sum", "mean", "max", "min", "prod", "any", "all", "var", "argmax")
_NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "any": np.any,
          "all": np.all, "var": np.var, "argmax": None}
_DTYPES = {"float32": bz.float32, "float16": bz.float16, "int32": bz.int32, "bool": bz.bool_}


def _fusion(rank: int, dtype, build) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,) * rank, dtype=dtype)
        outputs = build(x)
        for out in outputs if isinstance(outputs, tuple) else (outputs,):
            f.add_output(out)
    return f


def _data(shape, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.7
    if dtype == "int32":
        return rng.integers(-3, 4, shape).astype(np.int32)
    # Away from zero, so a relative tolerance means something for sums and products.
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dtype)


def _reference(op: str, x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
    wide = x.astype(np.float64) if x.dtype.kind == "f" else x
    if op == "argmax":
        (axis,) = axes
        return np.argmax(wide, axis=axis, keepdims=keepdim)
    if op in ("sum", "prod") and x.dtype.kind != "f":
        wide = x.astype(np.int64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean and var of nothing: NaN, as braze's
        return _NUMPY[op](wide, axis=axes, keepdims=keepdim)


def _check(out: np.ndarray, expected: np.ndarray, dtype: str, count: int) -> None:
    assert out.shape == expected.shape
    if out.dtype.kind in "biu":
        np.testing.assert_array_equal(out, expected)
        return
    rtol = {"float32": 1e-5, "float16": 2e-3}[dtype] * max(1.0, np.log2(max(count, 1)))
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=rtol, atol=rtol)


@st.composite
def outer_reductions(draw):
    """A reduction that keeps the innermost axis (what takes column strips), or now and then one
    that does not, over random axes of a tensor of rank 2 to 4."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.sampled_from(EXTENTS)) for _ in range(rank))
    keep_inner = draw(st.booleans()) or draw(st.booleans())
    candidates = list(range(rank - 1 if keep_inner else rank))
    axes = tuple(sorted(draw(st.sets(st.sampled_from(candidates), min_size=1))))
    op = draw(st.sampled_from(OPS))
    dtype = draw(st.sampled_from(("float32", "float32", "float16", "int32", "bool")))
    if op == "argmax":
        axes = axes[:1]
    if op in ("max", "min", "argmax") and any(shape[a] == 0 for a in axes):
        shape = tuple(max(n, 1) if a in axes else n for a, n in enumerate(shape))  # undefined on nothing
    if op in ("mean", "var") and dtype in ("int32", "bool"):
        dtype = "float32"
    return shape, axes, draw(st.booleans()), op, dtype


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outer_reductions(), st.integers(0, 2**16))
def test_reductions_over_random_axes_match_float64(case, seed):
    shape, axes, keepdim, op, dtype = case
    f = _fusion(len(shape), _DTYPES[dtype], lambda x: getattr(bz.ops, op)(x, axes, keepdim))
    x = _data(shape, dtype, seed)
    (out,) = f.execute([x], backend="llvm")
    count = int(np.prod([shape[a] for a in axes]))
    _check(np.asarray(out), _reference(op, x, axes, keepdim), dtype, count)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 3), st.data(), st.integers(0, 2**16))
def test_normalizations_over_an_outer_axis_match_float64(rank, data, seed):
    shape = tuple(data.draw(st.sampled_from(EXTENTS[1:])) for _ in range(rank))
    axis = data.draw(st.integers(0, rank - 2))
    f = _fusion(rank, bz.float32, lambda x: (bz.ops.softmax(x, axis), x - x.mean(axis, keepdim=True)))
    x = _data(shape, "float32", seed)
    softmax, centered = f.execute([x], backend="llvm")
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis, keepdims=True))
    np.testing.assert_allclose(softmax, e / e.sum(axis, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(centered, wide - wide.mean(axis, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(5, 4097), (70, 8200), (3, 4096, 2)])
def test_columns_wider_than_a_strip_split_into_strips(shape):
    f = _fusion(len(shape), bz.float32, lambda x: (x.sum(0), bz.ops.softmax(x, 0)))
    x = _data(shape, "float32", 1)
    with bz.record() as rec:
        total, softmax = f.execute([x], backend="llvm")
    wide = x.astype(np.float64)
    np.testing.assert_allclose(total, wide.sum(0), rtol=1e-5, atol=1e-5)
    e = np.exp(wide - wide.max(0, keepdims=True))
    np.testing.assert_allclose(softmax, e / e.sum(0, keepdims=True), rtol=1e-5, atol=1e-7)
    if len(shape) == 2:  # one task index per strip of up to 4096 columns
        assert [launch.end for launch in rec.launches] == [-(-shape[1] // 4096)] * 2


@pytest.mark.parametrize(("build", "rank", "scheduler", "serial"), [
    (lambda x: x.sum(0), 2, "outer_reduction", ()),
    (lambda x: x.sum(1), 3, "outer_reduction", ()),
    (lambda x: bz.ops.softmax(x, 0), 2, "outer_normalization", (0,)),
    (lambda x: bz.ops.softmax(x, 1), 3, "outer_normalization", (1,)),
    (lambda x: bz.ops.argmax(x, 0), 2, "outer_reduction", ()),
    (lambda x: bz.ops.argmin(x, 1), 3, "outer_reduction", ()),
])
def test_outer_reductions_and_normalizations_take_column_strips_on_the_cpu(build, rank, scheduler, serial):
    f = _fusion(rank, bz.float32, build)
    (heuristics,), (loops,) = schedule.plan(f, set(), cpu=True).heuristics, schedule.plan(f, set(), cpu=True).loops
    assert heuristics.scheduler == scheduler and heuristics.serial == serial
    assert loops.strip is not None and loops.serial_axes == serial
    assert loops.loop_order[-1] == rank - (1 if scheduler == "outer_normalization" else 2)
    # The GPU's plan is left as it was: no strips.
    (gpu,) = schedule.plan(f, set()).heuristics
    assert not gpu.scheduler.startswith("outer_")


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16])
def test_pointwise_ops_over_a_column_sum_take_column_strips(dtype):
    # A weight gradient in the input's dtype: cast(sum over rows of g * x * s) reads rows of columns,
    # as the column sum alone does, not one strided column per task.
    def build(x):
        return bz.ops.cast(bz.ops.sum(bz.ops.cast(x, bz.float32) * 0.5, axes=[0]) + 1.0, dtype)

    f = _fusion(2, dtype, build)
    (heuristics,) = schedule.plan(f, set(), cpu=True).heuristics
    assert heuristics.scheduler == "outer_normalization" and heuristics.serial == ()
    x = np.random.default_rng(0).standard_normal((300, 77)).astype(dtype.numpy)
    (got,) = f.execute([x])
    want = x.astype(np.float64).sum(0) * 0.5 + 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2 if dtype == bz.bfloat16 else 1e-5)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize(("shape", "axes"), [((70, 9), (0,)), ((3, 5, 7), (0, 1)), ((4, 66, 3), (1,))], ids=str)
def test_strip_arg_reductions_take_the_first_occurrence_over_flattened_rows(name, shape, axes):
    rng = np.random.default_rng(len(shape))
    x = rng.integers(-2, 3, shape).astype(np.float32)  # many ties
    x[rng.random(shape) < 0.05] = np.inf
    x[rng.random(shape) < 0.05] = -np.inf
    x[rng.random(shape) < 0.03] = np.nan
    x[..., 0] = np.nan  # a column of NaNs
    f = _fusion(len(shape), bz.float32, lambda t: getattr(bz.ops, name)(t, axes))
    (got,) = f.execute([x], backend="llvm")
    moved = np.moveaxis(x, axes, range(len(axes)))
    rows = int(np.prod([shape[a] for a in axes]))
    np.testing.assert_array_equal(got, getattr(np, name)(moved.reshape(rows, -1), axis=0).reshape(got.shape))


def test_inner_reductions_keep_their_schedule():
    f = _fusion(2, bz.float32, lambda x: (x.sum(1), bz.ops.softmax(x, 1), x.sum()))
    assert [h.scheduler for h in schedule.plan(f, set(), cpu=True).heuristics] == \
        ["reduction", "normalization", "reduction"]


def test_a_16m_float32_sum_is_within_1e6_of_float64():
    x = np.full(1 << 24, 0.1, np.float32)
    f = _fusion(1, bz.float32, lambda t: bz.ops.sum(t))
    (out,) = f.execute([x], backend="llvm")
    exact = x.astype(np.float64).sum()
    assert abs(float(out) - exact) / exact < 1e-6


def test_long_column_and_row_sums_stay_accurate():
    x = np.full((1 << 16, 64), 0.1, np.float32)
    f = _fusion(2, bz.float32, lambda t: (t.sum(0), t.T.sum(1), t.sum()))
    exact = x.astype(np.float64).sum(0)
    for out, expected in zip(f.execute([x], backend="llvm"), (exact, exact, exact.sum())):
        assert np.max(np.abs(out - expected) / expected) < 1e-6


def _run_with_workers(monkeypatch, f: bz.Fusion, inputs, workers: int) -> tuple[list[np.ndarray], int]:
    """The outputs, and the most chunks any task was split into."""
    monkeypatch.setattr(thread_pool, "worker_count", lambda: workers)
    with bz.record() as rec:
        outputs = [np.array(o) for o in f.execute(inputs, backend="llvm")]
    return outputs, max(launch.chunks for launch in rec.launches)


def test_results_are_the_same_bits_whatever_the_worker_count(monkeypatch):
    monkeypatch.setattr(thread_pool.parallel_for, "__defaults__", (1,))  # split every range the workers allow
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 9000)).astype(np.float32)
    y = rng.standard_normal((4, 300, 70)).astype(np.float32)
    with bz.Fusion() as f:
        a, b = f.define_tensor((-1, -1)), f.define_tensor((-1, -1, -1))
        for out in (a.sum(0), bz.ops.softmax(a, 0), a.sum(1), a.sum(), b.sum(1), b.mean((0, 1)),
                    bz.ops.softmax(b, 1)):
            f.add_output(out)
    runs = [_run_with_workers(monkeypatch, f, [x, y], n) for n in (1, 2, 3, 2)]
    assert [chunks for _, chunks in runs] == [1, 2, 3, 2]
    for other, _ in runs[1:]:
        for first, again in zip(runs[0][0], other):
            assert first.tobytes() == again.tobytes()


def test_a_full_pairwise_stack_absorbs_partials_instead_of_overflowing(monkeypatch):
    from braze.lower import strips

    monkeypatch.setattr(strips, "STACK_LEVELS", 3)  # full after a few blocks of 64 rows
    x = _data((64 * 37 + 5, 70), "float32", 7)
    f = _fusion(2, bz.float32, lambda t: (t.sum(0), t.var(0)))
    total, variance = f.execute([x], backend="llvm")
    wide = x.astype(np.float64)
    np.testing.assert_allclose(total, wide.sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(variance, wide.var(0), rtol=1e-5)
