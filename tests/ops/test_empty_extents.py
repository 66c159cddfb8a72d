"""Reductions over extents 0 and 1, as NumPy defines them: sums of nothing are the identity (0 for
sum, 1 for prod, False for any, True for all), a mean or variance of nothing is NaN, a max, min,
argmax or argmin of nothing is an InputError naming the user's op, but only where an output
element reads it: softmax over an empty axis is an empty result. The reference and CPU backends
agree on every case (and the backend under test, BRAZE_OPS_BACKEND=cuda or nvrtc)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import oracle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.ops.composites import composite

BACKENDS = ["reference", "llvm"] + ([oracle.BACKEND] if oracle.BACKEND in ("cuda", "nvrtc") else [])
NO_IDENTITY = ("max", "min", "argmax", "argmin")
REDUCTIONS = ("sum", "prod", "mean", "var", "std", "any", "all", *NO_IDENTITY)


def run_everywhere(build, inputs: list[np.ndarray]) -> dict[str, list | Exception]:
    """Each backend's outputs, or the braze error it raised."""
    with bz.Fusion() as f:
        outs = build(*[oracle.define(f, a) for a in inputs])
        for out in outs if isinstance(outs, list) else [outs]:
            f.add_output(out)
    results: dict[str, list | Exception] = {}
    for backend in BACKENDS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # NumPy's empty-mean warnings must not leak out
                results[backend] = oracle.run(f, inputs) if backend in ("cuda", "nvrtc") else f.execute(
                    inputs, backend=backend)
        except bz.InputError as e:
            results[backend] = e
    return results


def numpy_reduction(name: str, x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
    """NumPy's value in float64 (flattened row-major axes for argmax); zeros where it has none (an
    empty result, or a max of nothing)."""
    kept = [a for a in range(x.ndim) if a not in axes]
    shape = tuple(1 if a in axes else n for a, n in enumerate(x.shape)) if keepdim else tuple(x.shape[a] for a in kept)
    if math.prod(shape) == 0 or name in NO_IDENTITY and any(x.shape[a] == 0 for a in axes):
        return np.zeros(shape)
    values = x.astype(np.float64)
    if name in ("argmax", "argmin"):
        moved = np.transpose(values, kept + list(axes))
        flat = moved.reshape(moved.shape[: len(kept)] + (-1,))
        return getattr(np, name)(flat, axis=-1).reshape(shape)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(getattr(np, name)(values, axis=axes, keepdims=keepdim))


def shapes_and_axes():
    extents = st.lists(st.sampled_from([0, 1, 2, 3]), min_size=1, max_size=3)
    return extents.flatmap(lambda shape: st.tuples(
        st.just(tuple(shape)), st.sets(st.integers(0, len(shape) - 1), min_size=1).map(lambda s: tuple(sorted(s)))))


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(REDUCTIONS), shape_axes=shapes_and_axes(), keepdim=st.booleans(),
       dtype=st.sampled_from([bz.float32, bz.int32, bz.bool_]))
def test_reductions_over_extents_zero_and_one(name: str, shape_axes, keepdim: bool, dtype: bz.DType) -> None:
    shape, axes = shape_axes
    x = oracle.uniform(-3, 3)(oracle.rng_for(name, shape, axes), dtype, shape)
    results = run_everywhere(lambda t: getattr(bz.ops, name)(t, axes=axes, keepdim=keepdim), [x])
    expected = numpy_reduction(name, x, axes, keepdim)
    reads_nothing = any(shape[a] == 0 for a in axes) and expected.size > 0
    for backend, result in results.items():
        if name in NO_IDENTITY and reads_nothing:
            assert isinstance(result, bz.InputError), f"{backend}: expected an InputError, got {result}"
            assert str(result).startswith(f"{name}: T0 has an empty dimension among the reduced axes {axes}")
            continue
        assert not isinstance(result, Exception), f"{backend}: {result}"
        (out,) = result
        out = np.asarray(out)
        assert out.shape == expected.shape, f"{backend}: shape {out.shape}, expected {expected.shape}"
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-5, atol=1e-6, err_msg=backend)


@pytest.mark.parametrize("shape", [(0, 16), (16, 0), (0, 0), (0, 1), (1, 0)], ids=str)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis_is_empty(op: str, axis: int, shape: tuple[int, int]) -> None:
    """torch.softmax of a (0, 16) tensor over dim 0 is a (0, 16) tensor: no max is read, none raises."""
    x = np.zeros(shape, np.float32)
    for backend, result in run_everywhere(lambda t: getattr(bz.ops, op)(t, axis), [x]).items():
        assert not isinstance(result, Exception), f"{backend}: {result}"
        assert np.asarray(result[0]).shape == shape, backend


@pytest.mark.parametrize("shape", [(0, 16), (16, 0), (0, 0)], ids=str)
def test_a_max_that_only_empty_outputs_read_raises_nothing(shape: tuple[int, int]) -> None:
    """x - max(x, 0) is empty where x is; beside it, a sum of nothing is 0 and a max of nothing that
    a non-empty output reads is still an error."""
    x = np.zeros(shape, np.float32)
    centered = run_everywhere(lambda t: [t - t.max(0, keepdim=True), t.sum(0)], [x])
    for backend, result in centered.items():
        assert not isinstance(result, Exception), f"{backend}: {result}"
        np.testing.assert_array_equal(result[1], np.zeros(shape[1]))
    read = run_everywhere(lambda t: [t - t.max(0, keepdim=True), t.max(0)], [x])
    for backend, result in read.items():
        if shape[1]:
            assert isinstance(result, bz.InputError) and str(result).startswith("max: T0"), backend
        else:
            assert not isinstance(result, Exception), f"{backend}: {result}"


def test_a_max_of_nothing_inside_a_composite_names_the_composite() -> None:
    @composite
    def peak_to_peak(x: bz.TensorView) -> bz.TensorView:
        return x.max(0) - x.min(0)

    x = np.zeros((0, 3), np.float32)
    for backend, result in run_everywhere(peak_to_peak, [x]).items():
        assert isinstance(result, bz.InputError), backend
        assert str(result).startswith("peak_to_peak (its max): T0 has an empty dimension among the reduced axes (0,)")


def test_a_one_element_piece_of_an_empty_slice_broadcasts_on_every_backend() -> None:
    """exp of the first piece of `split(x[:0], 1)` (a one-element slice, empty) added to an empty x: the
    reference backend squeezed that empty dimension with NumPy, which refuses an axis of extent 0. Added
    to 5 elements it is refused everywhere, as NumPy refuses (0,) against (5,)."""
    def build(x):
        return [bz.ops.exp(bz.ops.split(x.narrow(0, 0, 0), 1, 0)[0]) + x]

    for backend, got in run_everywhere(build, [np.zeros(0, np.float32)]).items():
        assert not isinstance(got, Exception), f"{backend}: {got}"
        assert got[0].shape == (0,) and got[0].dtype == np.float32, backend
    for backend, got in run_everywhere(build, [np.ones(5, np.float32)]).items():
        assert isinstance(got, bz.InputError) and "one element of a slice" in str(got), f"{backend}: {got}"


def test_a_one_element_slice_of_an_empty_array_meets_an_empty_one_as_numpy_s() -> None:
    """`x - x[:1]` and `y[1:] = y[1:][:1]` of an empty array: the one-element slice is empty there and
    broadcasts against nothing, as NumPy's (0,) meets (0,); braze required it to hold one element."""
    def shifted(x):
        y = x.copy()
        y[1:] = y[1:][0:1]
        return y, x[1:] - x[1:][:1], x - x[:1]

    jitted = bz.jit(shifted)
    for n in (0, 1, 4):
        x = np.arange(n, dtype=np.float32) + 1
        for got, want in zip(jitted(x), shifted(x), strict=True):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    with pytest.raises(bz.InputError, match=r"one element of a slice, broadcast: got extents 0 and 1"):
        bz.jit(lambda x, y: x[:1] + y)(np.zeros(0), np.zeros(3))  # (0,) meets (3,): refused, as NumPy does
