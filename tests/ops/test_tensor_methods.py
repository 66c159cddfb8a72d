"""The torch-style methods on TensorView (`braze/ops/torch_methods.py`) against NumPy in float64:
one fusion computes every method's result, so the whole table costs one compile."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _logsumexp(a: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    top = a.max(axis, keepdims=True)
    shift = np.where(np.isinf(top), 0.0, top)
    with np.errstate(divide="ignore"):  # log(0) of a row of -inf is -inf
        out = np.log(np.exp(a - shift).sum(axis, keepdims=True)) + shift
    return out if keepdims else out.squeeze(axis)


# (name, braze method call on (x, m), NumPy on (x, m)); x is (3, 4) float64, m a (3, 4) bool mask.
CASES = [
    ("expand", lambda x, m: x[:, :1].expand(3, 4), lambda x, m: np.broadcast_to(x[:, :1], (3, 4))),
    ("expand_tuple_keep", lambda x, m: x[:1].expand((-1, 4)), lambda x, m: x[:1]),
    ("expand_leading", lambda x, m: x[:1].expand(2, 3, -1), lambda x, m: np.broadcast_to(x[:1], (2, 3, 4))),
    ("view", lambda x, m: x.view(4, 3), lambda x, m: x.reshape(4, 3)),
    ("view_infer", lambda x, m: x.view(-1), lambda x, m: x.reshape(-1)),
    ("permute", lambda x, m: x.unsqueeze(0).permute(2, 0, 1), lambda x, m: x[None].transpose(2, 0, 1)),
    ("unsqueeze_squeeze", lambda x, m: x.unsqueeze(-1).squeeze(-1), lambda x, m: x),
    ("flatten", lambda x, m: x.flatten(), lambda x, m: x.reshape(-1)),
    ("new_zeros", lambda x, m: x.new_zeros(x.shape) + x, lambda x, m: x),
    ("new_ones_ints", lambda x, m: x * x.new_ones(3, 1), lambda x, m: x),
    ("new_empty_dtype", lambda x, m: x.new_empty((4,), dtype=bz.int32) + x, lambda x, m: x),
    ("new_full", lambda x, m: x.new_full((x.shape[-1],), 2.5) - x, lambda x, m: 2.5 - x),
    ("new_full_bool", lambda x, m: m.new_full((3, 4), True) & m, lambda x, m: m),
    ("flatten_range", lambda x, m: x[None, :, :, None].flatten(1, 2), lambda x, m: x.reshape(1, 12, 1)),
    ("mean_dim", lambda x, m: x.mean(dim=-1, keepdim=True), lambda x, m: x.mean(-1, keepdims=True)),
    ("sum_dim", lambda x, m: x.sum(dim=0), lambda x, m: x.sum(0)),
    ("var_axis_numpy", lambda x, m: x.var(1), lambda x, m: x.var(1)),
    ("var_dim_torch", lambda x, m: x.var(dim=1), lambda x, m: x.var(1, ddof=1)),
    ("std_dim_torch_keepdim", lambda x, m: x.std(dim=0, keepdim=True), lambda x, m: x.std(0, ddof=1, keepdims=True)),
    ("var_dim_unbiased_false", lambda x, m: x.var(dim=1, unbiased=False), lambda x, m: x.var(1)),
    ("softmax", lambda x, m: x.softmax(-1), lambda x, m: _softmax(x, -1)),
    ("softmax_dim", lambda x, m: x.softmax(dim=0), lambda x, m: _softmax(x, 0)),
    ("log_softmax", lambda x, m: x.log_softmax(dim=1), lambda x, m: np.log(_softmax(x, 1))),
    ("clamp", lambda x, m: x.clamp(-1.0, 2.5), lambda x, m: np.clip(x, -1.0, 2.5)),
    ("clamp_min", lambda x, m: x.clamp(min=0.5), lambda x, m: np.maximum(x, 0.5)),
    ("clamp_max", lambda x, m: x.clamp(max=0.5), lambda x, m: np.minimum(x, 0.5)),
    ("clip_tensor", lambda x, m: x.clip(x[:1], None), lambda x, m: np.maximum(x, x[:1])),
    ("pow", lambda x, m: x.pow(3), lambda x, m: x**3),
    ("abs", lambda x, m: x.abs(), lambda x, m: np.abs(x)),
    ("exp", lambda x, m: x.exp(), lambda x, m: np.exp(x)),
    ("sqrt", lambda x, m: (x.abs() + 1).sqrt(), lambda x, m: np.sqrt(np.abs(x) + 1)),
    ("rsqrt", lambda x, m: (x.abs() + 1).rsqrt(), lambda x, m: 1 / np.sqrt(np.abs(x) + 1)),
    ("tanh_neg", lambda x, m: x.tanh().neg(), lambda x, m: -np.tanh(x)),
    ("div_maximum", lambda x, m: x.div(4).maximum(x), lambda x, m: np.maximum(x / 4, x)),
    ("masked_fill", lambda x, m: x.masked_fill(m, -7.0), lambda x, m: np.where(m, -7.0, x)),
    ("where", lambda x, m: x.where(m, x * 10), lambda x, m: np.where(m, x, x * 10)),
    ("to_dtype", lambda x, m: x.to(bz.float32), lambda x, m: x),
    ("to_tensor", lambda x, m: x.to(m), lambda x, m: x != 0),
    ("float", lambda x, m: x.float(), lambda x, m: x),
    ("double_of_long", lambda x, m: (x * 10).long().double(), lambda x, m: np.trunc(x * 10)),
    ("type_as", lambda x, m: m.type_as(x), lambda x, m: m.astype(np.float64)),
    ("contiguous_view", lambda x, m: x.T.contiguous().clone().detach().view(12), lambda x, m: x.T.reshape(12)),
    ("var_unbiased", lambda x, m: x.var(-1, unbiased=True), lambda x, m: x.var(-1, ddof=1)),
    ("std_biased", lambda x, m: x.std(dim=0, unbiased=False, keepdim=True), lambda x, m: x.std(0, keepdims=True)),
    ("lerp", lambda x, m: x.lerp(x * 3, 0.25), lambda x, m: x + 0.25 * (x * 3 - x)),
    ("fma", lambda x, m: x.fma(x, 1.5), lambda x, m: x * x + 1.5),
    ("amax", lambda x, m: x.amax(-1), lambda x, m: x.max(-1)),
    ("amin_keepdim", lambda x, m: x.amin(dim=0, keepdim=True), lambda x, m: x.min(0, keepdims=True)),
    ("norm", lambda x, m: x.norm(dim=-1, keepdim=True), lambda x, m: np.linalg.norm(x, axis=-1, keepdims=True)),
    ("norm_all", lambda x, m: x.norm(), lambda x, m: np.linalg.norm(x)),
    ("norm_1", lambda x, m: x.norm(1, dim=0), lambda x, m: np.abs(x).sum(0)),
    ("norm_3", lambda x, m: x.norm(p=3, dim=1), lambda x, m: (np.abs(x) ** 3).sum(1) ** (1 / 3)),
    ("norm_inf", lambda x, m: x.norm(float("inf"), dim=1), lambda x, m: np.abs(x).max(1)),
    ("norm_0", lambda x, m: x.norm(0, dim=1), lambda x, m: (x != 0).sum(1).astype(np.float64)),
    ("logsumexp", lambda x, m: (x * 300).logsumexp(-1), lambda x, m: _logsumexp(x * 300, -1)),
    ("logsumexp_masked", lambda x, m: x.masked_fill(m, float("-inf")).logsumexp(dim=1, keepdim=True),
     lambda x, m: _logsumexp(np.where(m, -np.inf, x), 1, keepdims=True)),
    ("square", lambda x, m: x.square(), lambda x, m: x * x),
    ("t", lambda x, m: x.t(), lambda x, m: x.T),
    ("clamp_min_method", lambda x, m: x.clamp_min(0.5), lambda x, m: np.maximum(x, 0.5)),
    ("clamp_max_method", lambda x, m: x.clamp_max(x[:1]), lambda x, m: np.minimum(x, x[:1])),
    ("swapaxes", lambda x, m: x.swapaxes(0, 1), lambda x, m: x.T),
    ("add_alpha", lambda x, m: x.add(x * x, alpha=-0.5), lambda x, m: x - 0.5 * x * x),
    ("sub_alpha", lambda x, m: x.sub(1.5, alpha=2), lambda x, m: x - 3.0),
    ("div_floor", lambda x, m: x.div(0.7, rounding_mode="floor"), lambda x, m: np.floor_divide(x, 0.7)),
    ("div_trunc", lambda x, m: x.div(x[:1] + 4, rounding_mode="trunc"), lambda x, m: np.trunc(x / (x[:1] + 4))),
    ("true_divide", lambda x, m: x.true_divide(4), lambda x, m: x / 4),
    ("floor_divide", lambda x, m: x.floor_divide(-0.3), lambda x, m: np.floor_divide(x, -0.3)),
    ("type", lambda x, m: m.type(bz.float64) * x, lambda x, m: np.where(m, x, 0.0)),
    ("max_of_two", lambda x, m: x.max(x[:1] * 0.5), lambda x, m: np.maximum(x, x[:1] * 0.5)),
    ("min_of_two", lambda x, m: x.min(-x), lambda x, m: np.minimum(x, -x)),
]
_DTYPES = {"to_dtype": np.float32, "float": np.float32, "to_tensor": np.bool_, "new_full_bool": np.bool_}


@bz.jit
def _every_method(x, m):
    return tuple(method(x, m) for _, method, _ in CASES)


def test_torch_style_methods_match_numpy():
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, (3, 4))
    x[0, 0] = 0.0
    m = rng.uniform(size=(3, 4)) > 0.5
    m[2] = True  # a row masked whole: logsumexp gives -inf there
    for (name, _, reference), got in zip(CASES, _every_method(x, m), strict=True):
        expected = reference(x, m)
        assert got.dtype == _DTYPES.get(name, np.float64), name
        tolerance = 1e-6 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance, err_msg=name)


def test_integer_division_methods_round_as_torchs():
    a, b = np.array([7, -7, 7, -7, 6, 0], np.int64), np.array([2, 2, -2, -2, -3, 5], np.int64)
    trunc, floor, true = bz.jit(lambda a, b: (a.div(b, rounding_mode="trunc"), a.div(b, rounding_mode="floor"),
                                              a.div(b)))(a, b)
    np.testing.assert_array_equal(trunc, [3, -3, -3, 3, -2, 0])
    np.testing.assert_array_equal(floor, [3, -4, -4, 3, -2, 0])
    # a trace of NumPy arrays makes floats of integers as NumPy does: true division is float64
    assert trunc.dtype == floor.dtype == np.int64 and true.dtype == np.float64


def test_a_reductions_dtype_is_the_results():
    """`x.sum(dim, dtype=torch.int32)` is int32 in torch, though integers accumulate in int64."""
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    sums, running, products = bz.jit(lambda x: (x.sum(-1, dtype=bz.int32), x.cumsum(-1, dtype=bz.int32),
                                                 (x > 2).prod(0, dtype=bz.int8)))(x)
    assert (sums.dtype, running.dtype, products.dtype) == (np.int32, np.int32, np.int8)
    np.testing.assert_array_equal(sums, [6, 15])
    np.testing.assert_array_equal(running, np.cumsum(x, -1))
    np.testing.assert_array_equal(products, [0, 0, 1])


def test_size_and_dim_read_the_shape():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 5), dtype=bz.float32)
        assert x.dim() == 2 and x.size(-1) == 5 and x.size() == x.shape
        f.add_output(x)


@pytest.mark.parametrize("call, message", [
    (lambda x: x.clamp(), "clamp: expected min or max"),
    (lambda x: x.expand(4), "expand: .* has 2 dimensions, expected a shape of at least that many"),
    (lambda x: x.flatten(1, 0), "flatten: expected start_dim <= end_dim"),
    (lambda x: x.unflatten(1, 2), "unflatten: sizes: expected a non-empty list or tuple of sizes, got 2"),
    (lambda x: x.unflatten(2, (2, 2)), "unflatten dim"),
    (lambda x: x.to(), "to: expected one dtype or tensor"),
    (lambda x: x.var(1, correction=1, unbiased=True), "var: expected one of correction=, unbiased=, got both"),
    (lambda x: x.std(1, unbiased=1), "std: unbiased: expected a bool, got int 1"),
    (lambda x: x.norm(p="nuc"), "norm: p: expected a number, 'fro', inf or -inf, got 'nuc'"),
    (lambda x: x[None].t(), "t: expected a tensor of at most 2 dimensions"),
    (lambda x: x.mul(x, alpha=2), r"mul: unexpected keyword argument 'alpha' \(keywords it takes: none\)"),
    (lambda x: x.div(2, rounding_mode="round"), "div: rounding_mode: expected None, 'floor' or 'trunc'"),
    (lambda x: x.add_(1.0), r"add_\(\.\.\.\): a tensor of a fusion is a value.*x = x.add\(\.\.\.\)"),
    (lambda x: x.masked_fill_(x > 0, 0.0), r"masked_fill_.*x = x.masked_fill\(\.\.\.\)"),
    (lambda x: x.zero_(), r"zero_.*x = bz.ops.zeros_like\(x\)"),
])
def test_torch_style_methods_reject_bad_arguments(call, message):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 4), dtype=bz.float32)
        with pytest.raises(bz.Error, match=message):
            call(x)


@pytest.mark.parametrize("name, why", [
    ("index_add", "indexing by a tensor"), ("topk", "sorting and selection"),
    ("sort", "sorting and selection"), ("nonzero", "sorting and selection"), ("matmul", "matrix products"),
    ("bmm", "matrix products"),
])
def test_torch_methods_without_a_braze_op_say_so(name, why):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 4), dtype=bz.float32)
        with pytest.raises(bz.UnsupportedError, match=rf"{name}: .*\.{name}\(\) has no braze op: {why}"):
            getattr(x, name)(-1)


def test_logsumexp_over_an_empty_axis_is_minus_infinity():
    logsumexp = bz.jit(lambda x: x.logsumexp(-1))
    np.testing.assert_array_equal(logsumexp(np.zeros((3, 0), np.float32)), np.full(3, -np.inf, np.float32))
    with bz.config.scope(disable="logsumexp_pad"):  # its max over nothing then has no value
        with pytest.raises(bz.InputError, match=r"logsumexp \(its max\): .* empty dimension"):
            bz.jit(lambda x: x.logsumexp(-1))(np.zeros((3, 0), np.float32))


# --- torch's squeeze: a dimension whose extent is not 1 stays ------------------------------------------
def test_squeeze_of_a_dimension_that_is_not_1_leaves_it_as_torch_does():
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    squeezed = bz.jit(lambda x: (x.squeeze(0), x.squeeze((0, 1)), x[:, :1].squeeze(1), x[None].squeeze(dim=(0, 2)),
                                 x.unsqueeze(1).squeeze(-2)))(x)
    for got, expected in zip(squeezed, [x, x, x[:, 0], x, x], strict=True):
        np.testing.assert_array_equal(got, expected)
    row = x[:1]  # extent 1 traces a signature of its own, where squeeze(0) drops it
    np.testing.assert_array_equal(bz.jit(lambda x: x.squeeze(0))(row), row[0])


def test_squeeze_of_a_symbolic_extent_outside_jit_is_a_definition_error():
    """A Fusion's -1 extent may be 1 or not at run time, and the result's rank depends on it."""
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 4, 1))
        assert x.squeeze(1) is x and x.squeeze(2).ndim == 2
        with pytest.raises(bz.FusionDefinitionError, match=r"squeeze: dimension 0 .* symbolic extent .*bz.ops.squeeze"):
            x.squeeze(0)
        f.add_output(bz.ops.squeeze(x, 0))  # NumPy's squeeze: required to be 1, checked at run time
    with pytest.raises(bz.InputError, match="squeeze"):
        f.execute([np.zeros((3, 4, 1), np.float32)])


# --- fmod, select, diff, logcumsumexp against torch eager ---------------------------------------------
METHODS_VS_TORCH = [
    ("fmod_number", lambda x: x.fmod(1.3)),
    ("fmod_negative_number", lambda x: x.fmod(-0.7)),
    ("fmod_tensor", lambda x: x.fmod(x[:1] * 0.5 - 1.0)),
    ("fmod_by_zero", lambda x: x.fmod(0.0)),
    ("select", lambda x: x.select(1, -2)),
    ("select_dim_keyword", lambda x: x.select(dim=0, index=2)),
    ("diff", lambda x: x.diff()),
    ("diff_dim", lambda x: x.diff(dim=0)),
    ("diff_twice_prepend", lambda x: x.diff(2, 0, prepend=x[:1], append=x[-1:] * 2)),
    ("diff_bool", lambda x: (x > 0).diff()),
    ("logcumsumexp", lambda x: (x * 100).logcumsumexp(1)),
    ("logcumsumexp_dim_keyword", lambda x: x.logcumsumexp(dim=0)),
]


def test_fmod_select_diff_and_logcumsumexp_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.uniform(-9, 9, (4, 6))
    x[0, :3] = [0.0, -0.0, 2.6]
    results = bz.jit(lambda x: tuple(method(x) for _, method in METHODS_VS_TORCH))(x)
    for (name, method), got in zip(METHODS_VS_TORCH, results, strict=True):
        expected = method(torch.from_numpy(x)).numpy()
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0, err_msg=name)
        numbers = ~np.isnan(expected)  # fmod keeps x's sign, zeros too
        np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]), err_msg=name)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float16], ids=str)
def test_fmod_rounds_toward_zero_in_every_dtype(dtype):
    a = np.array([7, 7, 6, 0, 5, 1], dtype)
    b = np.array([2, 3, 3, 5, 4, 7], dtype)
    signed = np.dtype(dtype).kind != "u"
    if signed:
        a, b = a * np.array([-1, 1, -1, 1, -1, 1], dtype), b * np.array([1, -1, -1, 1, 1, -1], dtype)
    got, by_number = bz.jit(lambda a, b: (a.fmod(b), bz.ops.fmod(a, 3)))(a, b)
    assert got.dtype == dtype and by_number.dtype == dtype
    np.testing.assert_array_equal(got, np.fmod(a, b))
    np.testing.assert_array_equal(by_number, np.fmod(a, dtype(3)))


def test_select_outside_a_symbolic_extent_fails_at_run_time():
    with pytest.raises(bz.InputError, match="index 5"):
        bz.jit(lambda x: x.select(0, 5))(np.zeros((3, 2), np.float32))


def test_var_with_a_bool_after_the_axis_is_refused_as_ambiguous():
    # torch's x.var(1, True) is unbiased=True; braze's method would read keepdim=True
    with bz.Fusion() as f:
        x = f.define_tensor((3, 4))
        with pytest.raises(bz.FusionDefinitionError, match="ambiguous.*unbiased=True or keepdim=True"):
            x.var(1, True)
        with pytest.raises(bz.FusionDefinitionError, match="ambiguous"):
            x.std(0, False)
