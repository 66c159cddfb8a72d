"""NumPy-style code under `@bz.jit` (braze/ops/numpy_api.py): NumPy's ufuncs, their reduce and
accumulate, and its functions on traced tensors give NumPy's float64 results on the llvm and reference
backends; NumPy's spellings of methods (`x.transpose(2, 0, 1)`, `x.var(ddof=1)`); and what braze has no
op for raises UnsupportedError naming the NumPy function, never an object array."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz

rng = np.random.default_rng(0)
X = rng.standard_normal((6, 5)).astype(np.float32)
Z = rng.standard_normal((2, 3, 4)).astype(np.float32)
V = rng.standard_normal(5).astype(np.float32)

# name: (function of NumPy arrays, its arguments); the same function is traced and run in NumPy.
PROGRAMS = {
    "ufuncs": (lambda a: np.sqrt(np.abs(a)) + np.exp(-a) * np.tanh(a) - np.log1p(np.square(a)), (X,)),
    "binary_ufuncs": (lambda a, b: np.maximum(a, b) - np.minimum(a, 0.5) + np.power(np.abs(a), 1.5)
                      + np.arctan2(a, b) + np.hypot(a, b) + np.copysign(1.0, a), (X, V)),
    "comparisons": (lambda a: (np.greater(a, 0) & np.less_equal(a, 1)).astype(np.float32) + np.isnan(np.log(a)),
                    (X,)),
    "remainders": (lambda a: np.fmod(a * 7, 2.5) + np.remainder(a * 7, 2.5) + np.floor_divide(a * 7, 2.5), (X,)),
    "rounding": (lambda a: np.round(a * 3) + np.around(a, 2) + np.floor(a) + np.ceil(a) + np.trunc(a) + np.rint(a),
                 (X,)),
    "angles_logs": (lambda a: np.degrees(a) + np.radians(a) + np.log10(np.abs(a) + 1) + np.logaddexp(a, -a), (X,)),
    "reductions": (lambda a: np.sum(a, axis=0) + np.mean(a) + np.max(a, axis=0) - np.min(a, axis=0)
                   + np.prod(a * 0.1 + 1, axis=0), (X,)),
    "keepdims": (lambda a: np.sum(a, axis=(0, 2), keepdims=True) * np.amax(a, axis=1, keepdims=True), (Z,)),
    "moments": (lambda a: np.var(a, axis=0, ddof=1) + np.std(a, axis=0) + a.var(axis=0, ddof=1), (X,)),
    "ufunc_reduce": (lambda a: np.add.reduce(a, axis=1) * np.maximum.reduce(a) .sum() + np.minimum.reduce(a, axis=1),
                     (X,)),
    "ufunc_accumulate": (lambda a: np.add.accumulate(a, axis=1) + np.multiply.accumulate(a * 0.1 + 1), (X,)),
    "scans": (lambda a: np.cumsum(a, axis=1) + np.cumsum(a).reshape(a.shape) + np.cumprod(a * 0.1 + 1, axis=0), (X,)),
    "where_clip": (lambda a: np.where(a > 0, a, 0.1 * a) + np.clip(a, -0.5, 0.5) + np.nan_to_num(np.log(a)), (X,)),
    "arg_reductions": (lambda a: (np.argmax(a, axis=1) + np.argmin(a, axis=0).sum() + np.argmax(a)).astype(np.float32),
                       (X,)),
    "any_all": (lambda a: (np.any(a > 1.5, axis=1) | np.all(a > -3, axis=1)).astype(np.float32), (X,)),
    "joins": (lambda a: np.concatenate([a, a * 2], axis=1).sum(0) + np.stack([a, a + 1], -1).sum((0, 1)).sum(), (X,)),
    "shapes": (lambda a: np.expand_dims(a, (0, 2)).squeeze((0, 2)) + np.transpose(np.transpose(a)) + np.ravel(a)
               .reshape(6, 5) + np.reshape(a, (5, 6)).T, (X,)),
    "axes": (lambda a: (np.swapaxes(a, 0, 2), np.moveaxis(a, 0, -1), a.transpose(2, 0, 1), a.transpose((1, 2, 0)),
                        a.transpose()), (Z,)),
    "broadcasts": (lambda a, v: np.broadcast_to(v, (6, 5)) * a + np.flip(a, 0) + np.roll(a, 2, axis=1)
                   + np.tril(a) - np.triu(a, 1), (X, V)),
    "likes": (lambda a: np.zeros_like(a) + np.ones_like(a) * 2 + np.full_like(a, 0.5) * a, (X,)),
    "copies": (lambda a: np.tile(a[:2], (2, 1)).sum(0) + np.repeat(a, 2, axis=0)[::2].sum(0) + np.diff(a, axis=0)
               .sum(0) + np.pad(a, ((1, 0), (0, 2)))[1:, :5].sum(0), (X,)),
    "norms": (lambda a: np.linalg.norm(a, axis=1) + np.linalg.norm(a) + np.linalg.norm(a, 1, axis=1)
              + np.linalg.norm(a, np.inf, axis=1) + np.linalg.norm(a, 0, axis=1) + np.linalg.norm(a, 3, axis=1)
              + np.linalg.norm(a[0], 1), (X,)),
    "flat_concatenate": (lambda a: np.concatenate([a, a[:2]], axis=None), (X,)),
    "numpy_ints": (lambda a: np.cumsum(a, axis=np.int64(1))[np.int64(2)] + a[np.int64(1):].sum(np.int64(0))
                   + a.reshape(np.int64(5), np.int64(-1)).sum(axis=(np.int32(1),))[:np.int64(5)], (X,)),
    "extent_ufuncs": (lambda a: a / np.sqrt(a.shape[-1]) + np.log(a.shape[0]) + np.float32(2) * a.shape[1]
                      + a.reshape(-1, np.int64(2) * a.shape[1]).sum(1).sum(), (X,)),
    "astype_copy": (lambda a: a.astype(np.float64, copy=False) * 2, (X,)),
    # a VAE's encoder output split into its mean and log-variance; pieces at given indices
    "splits": (lambda a: (np.split(a, 2, axis=0)[1] * np.exp(np.split(a, 2, axis=0)[0]),
                          *np.split(a, [1, 3], axis=1), np.split(a, [7], axis=0)[1]), (X,)),
    "masked_reductions": (lambda a: (np.sum(a, axis=1, where=a > 0), np.prod(a * 0.1 + 1, axis=0, where=a < 1),
                                     np.max(a, axis=1, where=a < 0, initial=-5.0), np.min(a, initial=0.5),
                                     np.mean(a, axis=0, where=a > -0.5), np.mean(a, axis=1, keepdims=True, where=a > 0),
                                     np.any(a > 1, axis=1, where=a < 1.5), np.all(a > -1, axis=0, where=a < 0),
                                     np.sum(a, axis=0, initial=2.0), a.sum(axis=1, where=a > 0),
                                     a.mean(0, where=a < 1), a.prod(initial=0.5), a.all(where=a > 5)), (X,)),
    "cube_roots": (lambda a: np.cbrt(a * 1e6) + np.cbrt(-a) + np.cbrt(a * 1e-20), (X,)),
    "ndarray_methods": (lambda a: (a.round(2), a.round(decimals=1), a.ravel(), a.cumsum(),
                                   a.cumprod(axis=0), a.repeat(2, axis=1), divmod(a, 0.3)[0], divmod(a, 0.3)[1],
                                   divmod(2.0, a + 4)[1]), (X,)),
    "uneven_splits": (lambda a: (*np.array_split(a, 4, axis=0), *np.array_split(a, 3, axis=1),
                                 np.array_split(a, [2], axis=1)[1]), (X,)),
    "at_least": (lambda a: (np.atleast_1d(a.sum()), np.atleast_2d(a[0]), np.atleast_3d(a[0]), np.atleast_3d(a),
                            np.atleast_2d(a.sum()), *np.atleast_2d(a[1], a)), (X,)),
    "stacks": (lambda a, v: (np.hstack([a, a[:, :2]]), np.hstack([v, v[:2]]), np.vstack([v, v * 2]),
                             np.vstack([a, v]), np.dstack([a, a + 1]), np.dstack([v, v]), np.column_stack([v, v * 3]),
                             np.column_stack([a[:5], v])), (X, V)),
    "meshgrids": (lambda a, v: (*np.meshgrid(v, a[0, :3]), *np.meshgrid(v, a[:2, 0], indexing="ij"),
                                *np.meshgrid(v[:2], v[:3], v[:4], sparse=True), np.meshgrid(v)[0]), (X, V)),
    # channel orders (BGR -> RGB), a permutation of rows, picks by a table of positions
    "index_arrays": (lambda a: (a[:, [2, 1, 0]], a[[5, 0, -1]], a[np.array([1, 1, 4])], a[1, [0, 4]],
                                a[np.array([[0, 2], [3, -2]])], a[..., np.array([4, 0])], a[None, [2, 3], 1:],
                                a[1:4][[0, 2], ::2]), (X,)),
    "takes": (lambda a: (np.take(a, [3, 0]), np.take(a, np.array([[1, 2], [0, 0]]), axis=1), np.take(a, 7),
                         np.take(a, 2, axis=1), a.take([4, 1], axis=0), a.take(np.array([5, 2]))), (X,)),
    "unravel": (lambda a: np.unravel_index(np.argmax(a), a.shape)[0] * 10 + np.unravel_index(np.argmin(a), a.shape)[1],
                (X,)),
    "numpy_repeat": (lambda a: (a.repeat(2), a[0].repeat(3), np.repeat(a, 2)), (X,)),
    "nan_extremes_of_numbers": (lambda a: (np.fmax(np.log(a), 0.0), np.fmin(0.5, np.log(a)), np.fmax(a, np.nan),
                                           np.fmin(np.nan, np.log(a))), (X,)),
    # a piecewise-linear schedule, Huber's two pieces, the classes kept by a label filter
    "choices": (lambda a: (np.select([a > 1, a < -1, a > 0.5], [a * 2, a * 3, 9.0], default=-1.0),
                           np.select([a > 0], [a]), np.piecewise(a, [a < 0, a >= 0], [lambda v: -v, lambda v: v ** 2]),
                           np.piecewise(a, [a < -0.5, a > 0.5], [0.25, lambda v: v * 3, lambda v: np.sin(v)]),
                           np.piecewise(a[0], a[0] > 0, [lambda v: v + 1]),
                           np.isin(np.floor(a * 3), [0.0, 2, -1, 2]), np.isin(np.floor(a * 3), np.array([1.0, -2.0])),
                           np.isin(np.floor(a), np.floor(a[0]), invert=True), np.isin(a, []), np.copy(a) * 2), (X,)),
}


def _float64(args: tuple) -> tuple:
    return tuple(a.astype(np.float64) for a in args)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_numpy_code_traces_and_gives_numpys_result(name: str, backend: str) -> None:
    fn, args = PROGRAMS[name]
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = fn(*_float64(args))
    actual = bz.jit(fn, backend=backend)(*args)
    pairs = zip(actual, expected, strict=True) if isinstance(expected, tuple) else [(actual, expected)]
    for got, want in pairs:
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=2e-5)


UNARY = ["sqrt", "exp", "log1p", "expm1", "sin", "cos", "tanh", "abs", "negative", "square", "sign", "floor",
         "reciprocal", "exp2", "log2"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(UNARY), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_random_chains_of_ufuncs_give_numpys_result(chain: list[str], seed: int) -> None:
    def program(a):
        for name in chain:
            # 0.5 * tanh keeps every step in (-0.5, 0.5), where no function is ill-conditioned (tanh itself
            # saturates to +-1 in float32 sooner than in float64: log2 of it is then 0 against a tiny value)
            a = getattr(np, name)(0.5 * np.tanh(a))
        return a

    x = np.random.default_rng(seed).standard_normal((3, 7)).astype(np.float32)
    with np.errstate(all="ignore"):
        expected = program(x.astype(np.float64))
    np.testing.assert_allclose(bz.jit(program)(x), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["sum", "prod", "mean", "max", "min", "any", "all"]), st.sampled_from([None, 0, 1, (0, 1)]),
       st.booleans(), st.sampled_from([None, -0.75, 1.5]), st.integers(0, 2**31 - 1))
def test_random_masked_reductions_give_numpys_result(name: str, axis, keepdims: bool, initial, seed: int) -> None:
    """NumPy's where= and initial= over random masks (rows and columns left empty too), each axis."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    mask = rng.random((4, 6)) < rng.choice([0.0, 0.3, 0.8, 1.0])
    if name in ("any", "all"):
        initial = None  # NumPy's any and all take no initial=
    elif name in ("max", "min") and initial is None:
        initial = 0.25  # a max or min over a mask needs one
    if name == "mean":
        initial = None
    keywords = {"axis": axis, "keepdims": keepdims, "where": mask, **({} if initial is None else {"initial": initial})}

    def program(a, m):
        b = a > 0 if name in ("any", "all") else a
        return getattr(np, name)(b, **{**keywords, "where": m})

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a mean of an empty slice is NaN, as braze's
        expected = program(x.astype(np.float64), mask)
    np.testing.assert_allclose(bz.jit(program)(x, mask), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, named", [
    (lambda a: np.dot(a, a.T), "np.dot"),
    (lambda a: np.sort(a, axis=1), "np.sort"),
    (lambda a: np.where(a > 0), "np.where(condition) alone"),
    (lambda a: np.sum(a, axis=0, out=np.zeros(5, np.float32)), "out="),
    (lambda a: np.sqrt(a, out=np.zeros((6, 5), np.float32)), "out="),
    (lambda a: np.spacing(a), "np.spacing"),
    (lambda a: np.linalg.norm(a, 1), "matrix norm"),
    (lambda a: np.argmax(a, axis=0, keepdims=True, out=None) + np.median(a), "np.median"),
    (lambda a: np.cross(a, a), r"np.cross: vectors of length 5: expected 2 or 3"),
    (lambda a: np.add.at(a, np.argmax(a, 1), 1.0), r"np.add.at: .* bz.atomic_add"),
    (lambda a: np.nanargmax(a), "np.nanargmax"),
    (lambda a: np.nanmean(a, where=a > 0), "np.nanmean: where="),
], ids=["dot", "sort", "where_indices", "reduction_out", "ufunc_out", "no_op", "matrix_norm",
        "median", "cross_of_five", "add_at", "nanargmax", "nanmean_where"])
def test_what_braze_has_no_op_for_is_named(fn, named: str) -> None:
    with pytest.raises(bz.UnsupportedError, match=named.replace("(", r"\(").replace(")", r"\)")):
        bz.jit(fn)(X)


def test_numbers_traced_at_run_time_are_only_blamed_where_a_constant_would_help() -> None:
    """A number argument is a runtime value: where it is used as a shape the error says how to bake it in;
    where braze has no op for what the function calls, no constant would change that, so no such note."""
    with pytest.raises(bz.FusionDefinitionError) as shaped:
        bz.jit(lambda a, n: a[:n / 2])(X, 2)  # an int would do (a symbolic extent), a float sizes nothing
    assert any("static_argnames" in note for note in shaped.value.__notes__)
    with pytest.raises(bz.UnsupportedError, match="np.sort") as unsupported:
        bz.jit(lambda a, s: np.sort(a) * s)(X, 2.0)
    assert not any("static_argnames" in note for note in getattr(unsupported.value, "__notes__", []))


def test_split_into_equal_pieces_needs_an_extent_they_divide() -> None:
    """np.split of a symbolic extent into sections it does not divide is an error at run time, as NumPy's
    (a static extent: when the function is traced)."""
    halves = bz.jit(lambda a: np.split(a, 2, axis=1)[0])
    np.testing.assert_array_equal(halves(X[:, :4]), X[:, :2])
    with pytest.raises(bz.InputError, match="np.split: .*multiple of 2"):
        halves(X)
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 5))
        with pytest.raises(bz.FusionDefinitionError, match="np.split: .*multiple of 2"):
            np.split(x, 2, axis=1)


def test_uneven_pieces_follow_each_new_extent() -> None:
    """np.array_split's piece lengths depend on the extent: the trace specializes on it, and another
    extent gives NumPy's other pieces; in a Fusion, where the extent is symbolic, it is an error."""
    thirds = bz.jit(lambda a: np.array_split(a, 3, axis=0)[0] * 2)
    for rows in (6, 5, 4, 2):
        np.testing.assert_array_equal(thirds(X[:rows]), np.array_split(X[:rows], 3)[0] * 2)
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 5))
        with pytest.raises(bz.UnsupportedError, match="np.array_split: dimension 0 .* is symbolic"):
            np.array_split(x, 3)


def test_an_op_given_too_many_operands_is_an_error_at_definition() -> None:
    """A method of an elementwise op given a second operand by mistake (`x.exp(2)`) is refused when
    defined, not turned into an op of the wrong arity that the compiler rejects."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        with pytest.raises(bz.FusionDefinitionError, match="exp: expected 1 operand, got 2"):
            x.exp(2)
        with pytest.raises(bz.FusionDefinitionError, match="maximum: expected 2 operands, got 1"):
            bz.ops.elementwise("maximum", x)


def test_item_size_and_bytes_are_the_traced_dtype_s() -> None:
    sizes = bz.jit(lambda a: a * 0 + a.itemsize * 1000 + a.nbytes)
    np.testing.assert_array_equal(sizes(X), np.full(X.shape, 4000 + X.nbytes, np.float32))
    np.testing.assert_array_equal(sizes(X.astype(np.float64)), np.full(X.shape, 8000 + 2 * X.nbytes))


def test_a_max_of_masked_elements_needs_an_initial_value() -> None:
    with pytest.raises(bz.FusionDefinitionError, match="np.max: where= needs initial="):
        bz.jit(lambda a: np.max(a, axis=1, where=a > 0))(X)


def test_cross_products_of_vectors_of_a_static_length() -> None:
    """np.cross of 3-vectors (one broadcast over rows) and of 2-vectors, whose length a fusion fixes."""
    a3, b3, a2 = C[:, :3], C[:1, 2:], C[:, 3:]
    with bz.Fusion() as f:
        a = f.define_tensor((-1, 3), bz.float64)
        b = f.define_tensor((1, 3), bz.float64)
        c = f.define_tensor((-1, 2), bz.float64)
        f.add_output(np.cross(a, b))
        f.add_output(np.cross(c, c * 2 + 1))
    got3, got2 = f.execute([a3, b3, a2])
    np.testing.assert_allclose(got3, np.cross(a3, b3), rtol=1e-12)
    np.testing.assert_allclose(got2, a2[:, 0] * (a2[:, 1] * 2 + 1) - a2[:, 1] * (a2[:, 0] * 2 + 1), rtol=1e-12)
    assert got2.shape == (4,)
    with bz.Fusion() as f, pytest.raises(bz.UnsupportedError, match="np.cross: .*must be a static extent"):
        np.cross(f.define_tensor((-1, -1)), f.define_tensor((-1, 3)))
    traced = bz.jit(lambda a, b: (np.cross(a[:, :3], b), np.cross(a[:, 3:], a[:, 3:] * 2 + 1)))
    got3, got2 = traced(C, b3)
    np.testing.assert_allclose(got3, np.cross(a3, b3), rtol=1e-12)
    np.testing.assert_allclose(got2, a2[:, 0] * (a2[:, 1] * 2 + 1) - a2[:, 1] * (a2[:, 0] * 2 + 1), rtol=1e-12)


def test_a_traced_tensor_as_an_array_says_what_to_write() -> None:
    with pytest.raises(bz.TracerBoolConversionError, match=r"np.asarray\(T0\): expected a Python value, got a traced"):
        bz.jit(lambda a: np.asarray(a) * 2)(X)


TABLE = np.linspace(0.0, 1.0, 5, dtype=np.float32)


def test_an_operand_given_by_mistake_says_what_was_meant() -> None:
    with pytest.raises(bz.FusionDefinitionError, match=r"sub: T\d+: expected an integer or floating dtype, got bool; "
                                                       "cast a mask to numbers"):
        bz.jit(lambda a: a - (a > 0))(X)


def test_size_is_numpy_s_element_count_in_a_numpy_trace_and_torch_s_method_elsewhere() -> None:
    """`x.size / 4` of NumPy code failed with a Python TypeError (a method divided by an int)."""
    scaled = bz.jit(lambda a: a.sum() / a.size + a * (a.size / 4))
    np.testing.assert_allclose(scaled(X), X.sum() / X.size + X * (X.size / 4), rtol=1e-6)
    np.testing.assert_allclose(scaled(X[:2]), X[:2].sum() / 10 + X[:2] * 2.5, rtol=1e-6)
    with bz.Fusion() as f, pytest.raises(bz.FusionDefinitionError, match=r"got method \(a method of T0, not "
                                                                         r"called\): .*x.numel\(\)"):
        a = f.define_tensor((-1, -1), bz.float64)
        assert a.size(1) is a.shape[1]
        f.add_output(a.sum() / a.size)


@pytest.mark.parametrize("call", [
    lambda a: bz.ops.exp(a), lambda a: bz.ops.gelu(a), lambda a: bz.ops.where(a > 0, a, 0.0),
    lambda a: bz.ops.softmax(a, -1), lambda a: bz.ops.sum(a, axes=[1]), lambda a: bz.ops.reshape(a, (-1,)),
    lambda a: bz.ops.cat([a, a]), lambda a: bz.ops.cast(a, bz.float16), lambda a: bz.ops.relu6(a),
    lambda a: bz.ops.cumsum(a, axis=1), lambda a: bz.ops.asin(a),
], ids=["exp", "gelu", "where", "softmax", "sum", "reshape", "cat", "cast", "relu6", "cumsum", "asin"])
def test_an_op_on_an_array_outside_any_fusion_says_ops_build_fusions(call) -> None:
    """`bz.ops.gelu(array)` computes at once in NumPy, torch or JAX; here it names the array and says
    where ops run (it was 'got only Python scalars' or a bare 'got ndarray')."""
    with pytest.raises(bz.FusionDefinitionError, match=r"got ndarray of shape \(6, 5\): bz.ops functions build a "
                                                       r"fusion, .*@bz.jit"):
        call(X)
    with bz.Fusion() as f, pytest.raises(bz.FusionDefinitionError, match=r"got ndarray of shape \(1, 5\): .*as an "):
        f.define_tensor(shape=(-1, -1)) + call(TABLE[None])  # a builder takes arrays only as its inputs


def test_two_axes_of_a_transpose_swap_as_in_torch() -> None:
    """`x.transpose(0, 2)` is torch's spelling (NumPy's needs every axis): it swaps the two."""
    np.testing.assert_array_equal(bz.jit(lambda a: a.transpose(0, 2))(Z), np.swapaxes(Z, 0, 2))


def test_a_dtype_given_to_a_reduction_or_scan_is_the_results() -> None:
    """`np.sum(x, dtype=np.int32)` is int32 in NumPy, wrapped where it overflows; braze sums integers in
    int64 and gave that (int64 2**40, where NumPy gives int32 0)."""
    x, flags = np.full((3, 1024), 2**30, np.int32), np.ones((2, 5), bool)

    def program(x, flags):
        return (np.sum(x, axis=-1, dtype=np.int32), np.cumsum(x, 1, dtype=np.int32), np.sum(flags, 1, dtype=np.int16),
                np.prod(flags, dtype=np.uint8), np.mean(x, 1, dtype=np.float64), np.sum(x, axis=-1))

    for got, want in zip(bz.jit(program)(x, flags), program(x, flags), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


R = np.random.default_rng(1)
A = R.standard_normal((4, 5))
A[0, 1], A[2, :], A[1, 2], A[3, 3] = np.nan, np.nan, -np.inf, 0.0  # a NaN, a row of NaNs, -inf, zero
B = R.standard_normal((4, 5))
B[1, 1], B[3, 3], B[0, 0] = np.nan, 0.0, -0.0
W, W1, C = R.random((4, 5)), R.random(5), R.standard_normal((4, 5))  # weights, and data without NaNs

# group: (function of float64 arrays giving a tuple, its arguments), traced once and run in NumPy; each
# result must have NumPy's values, shape and dtype.
COMPOSITIONS = {
    "nan_reductions": (lambda a: (np.nansum(a, axis=1), np.nanprod(a, 0, keepdims=True), np.nanmax(a, 1),
                                  np.nanmin(a), np.nanmean(a, 1), np.nanvar(a, 1, ddof=1), np.nanvar(a, 1, ddof=4),
                                  np.nanstd(a, axis=(0, 1), keepdims=True)), (A,)),
    "nan_ufuncs": (lambda a, b: (np.fmax(a, b), np.fmin(a, b), np.heaviside(a, b), np.logaddexp2(a, b),
                                 np.logaddexp2(a, a), np.signbit(b), np.copysign(a, b)), (A, B)),
    "averages": (lambda a, w, v: (np.average(a), np.average(a, 1, w), np.average(a, axis=1, weights=v, keepdims=True),
                                  np.average(a, 0, w, returned=True)[1], np.average(a, 1, v, returned=True)[1],
                                  np.ptp(a, 1), np.ptp(a), np.count_nonzero(a > 0, axis=0), np.count_nonzero(a)),
                 (A, W, W1)),
    "covariances": (lambda c, w, v: (np.cov(c), np.cov(c, bias=True), np.cov(c, rowvar=False, ddof=2), np.cov(v),
                                     np.cov(c[0], v), np.corrcoef(c), np.corrcoef(v), np.corrcoef(c, w, rowvar=False),
                                     np.cov(c.astype(np.int64))), (C, W, W1)),
    "calculus": (lambda c, v: (np.gradient(v), np.gradient(c, axis=1), np.gradient(c, 0.5, axis=0),
                               np.gradient(v, 2.0, edge_order=2), np.gradient(c, 2.0, 3.0)[1], np.gradient(c)[0],
                               np.gradient(c.astype(np.int64), axis=-1), np.trapezoid(c),
                               np.trapezoid(c, dx=0.5, axis=0), np.trapezoid(c, v), np.trapezoid(v, v),
                               np.trapezoid(c, c, axis=0)), (C, np.sort(W1))),
    "products": (lambda c, v, z: (np.outer(v, v), np.outer(c, v), np.inner(v, v), np.inner(c, v), np.inner(c, c),
                                  np.sinc(z), np.sinc(c)), (C, W1, np.array([0.0, 1.0, -2.5, 1e-30, np.nan]))),
    # np.clip(x, min=0) was refused; diff's prepend= and append= were dropped (a shorter result); np.round of
    # integers gave float32 (NumPy keeps the integers, rounding to tens for decimals=-1)
    "clip_diff_round": (lambda c, i: (np.clip(c, min=0), np.clip(c, max=0.5), np.clip(c, None, 0.5), np.clip(c),
                                      np.diff(c, n=2, axis=1, prepend=c[:, :1]), np.diff(c, append=c[:, -2:], n=3),
                                      np.diff(c, axis=0, prepend=0.0, append=np.nan), np.diff(i, 2, prepend=1),
                                      np.round(c * 1000, -2), np.round(i, 2), np.round(i, -2), np.around(i, -1)),
                        (C, np.array([[-250, 350, 449, 12, -7]]))),
    # a number joined by diff is an array of NumPy's dtype for it (0.5 is float64, so float32 x gives float64,
    # where it gave float32), and an axis of extent 0 takes it too (it was cut from x, which had none there)
    "diff_numbers": (lambda f, e, h: (np.diff(f, prepend=0.5), np.diff(e, axis=0, prepend=1.0, append=2.0),
                                      np.diff(e, prepend=True), np.diff(h, append=2)),
                     (np.linspace(-1, 1, 5, dtype=np.float32), np.ones((0, 2), np.float32), np.ones(3, np.float16))),
    "isclose": (lambda a, b: (np.isclose(a, a + 1e-9), np.isclose(a, b, atol=0.5, equal_nan=True),
                              np.isclose(a, a, equal_nan=True)), (A, B)),
}


@pytest.mark.parametrize("group", COMPOSITIONS)
def test_numpy_compositions_give_numpys_values_and_dtypes(group: str) -> None:
    fn, args = COMPOSITIONS[group]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's all-NaN slices
        expected = fn(*args)
    for got, want in zip(bz.jit(fn)(*args), expected, strict=True):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["edge", "wrap", "reflect", "symmetric"])
def test_np_pad_by_mode_gives_numpys_values(mode) -> None:
    def padded(u):
        return np.pad(u, ((1, 2), (2, 0)), mode=mode)

    jitted = bz.jit(padded)
    for shape in [(3, 4), (5, 3)]:
        u = np.random.default_rng(sum(shape)).random(shape)
        np.testing.assert_array_equal(jitted(u), padded(u))
    with pytest.raises(bz.Error, match="mode="):  # wider than the axis allows (NumPy wraps again, or fails)
        jitted(np.ones((0, 1) if mode == "edge" else (1, 1)))


def test_a_step_written_into_empty_like_with_shifts_from_a_numpy_table() -> None:
    shifts = np.array([1, -1])  # a lattice's directions: NumPy integers

    def step(u):
        out = np.empty_like(u)
        out[1:-1] = np.roll(u, shifts[0])[1:-1] + np.roll(u, shifts[1])[1:-1]
        out[0], out[-1] = 0.0, 0.0
        return out

    u = np.random.default_rng(1).random(7)
    np.testing.assert_allclose(bz.jit(step)(u), step(u), rtol=1e-12)
