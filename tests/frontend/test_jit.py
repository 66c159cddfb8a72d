"""`@bz.jit`: one trace per input signature, results, and errors."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import braze as bz


class Counted:
    """A jitted function that counts how often its Python body runs (once per trace)."""

    def __init__(self, body, **jit_kwargs) -> None:
        self.traces = 0

        def fn(*args):
            self.traces += 1
            return body(*args)

        fn.__name__ = body.__name__
        fn.__signature__ = inspect.signature(body)
        self.jitted = bz.jit(**jit_kwargs)(fn) if jit_kwargs else bz.jit(fn)

    def __call__(self, *args):
        return self.jitted(*args)


def axpb(x, k, b):
    return x * k + b


def f32(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def test_traced_once_per_signature() -> None:
    g = Counted(axpb)
    for _ in range(3):
        y = g(f32(3, 4), 2.0, f32(4))
        np.testing.assert_array_equal(y, f32(3, 4) * 2 + f32(4))
    assert g.traces == 1


def test_no_retrace_on_a_different_extent() -> None:
    g = Counted(axpb)
    for m, n in [(3, 4), (5, 7), (2, 2), (9, 3)]:
        y = g(f32(m, n), 2.0, f32(n))
        np.testing.assert_array_equal(y, f32(m, n) * 2 + f32(n))
    assert g.traces == 1


def test_no_retrace_on_different_values() -> None:
    g = Counted(axpb)
    x = f32(2, 3)
    g(x, 2.0, f32(3))
    y = g(x + 1, 2.0, f32(3) - 1)
    np.testing.assert_array_equal(y, (x + 1) * 2 + f32(3) - 1)
    assert g.traces == 1


def test_a_cached_call_describes_its_arguments_once() -> None:
    # The fusion's cached calls are asked with the description @bz.jit made (the same key), not made to
    # read every array's dtype, shape and strides again.
    @bz.jit
    def axpy(x, y, a):
        return a * x + y

    x, y = np.arange(6.0, dtype=np.float32), np.ones(6, np.float32)
    axpy(x, y, 2.0)
    ((fusion, *_), fast), = axpy.described.values()
    assert fast is fusion._fast_calls
    described = []
    fast.key = lambda inputs, key=fast.key: described.append(inputs) or key(inputs)
    for a in (2.0, 3.0):
        np.testing.assert_array_equal(axpy(x, y, a), a * x + y)
    assert described == []


def test_retrace_on_dtype_change() -> None:
    g = Counted(axpb)
    g(f32(2, 3), 2, f32(3))
    y = g(f32(2, 3).astype(np.float64), 2, f32(3))
    assert y.dtype == np.float64
    assert g.traces == 2
    y = g(f32(2, 3).astype(np.int32), 2, np.arange(3, dtype=np.int32))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.arange(6).reshape(2, 3) * 2 + np.arange(3))
    assert g.traces == 3


def test_retrace_on_rank_change() -> None:
    g = Counted(axpb)
    g(f32(2, 3), 2.0, f32(3))
    y = g(f32(4, 2, 3), 2.0, f32(3))
    assert y.shape == (4, 2, 3)
    np.testing.assert_array_equal(y, f32(4, 2, 3) * 2 + f32(3))
    assert g.traces == 2


def test_retrace_when_a_dim_becomes_size_1() -> None:
    """A size-1 dimension broadcasts; the trace defines it static 1, so (3, 4) + (1, 4) is a new signature."""
    def add(x, y):
        return x + y

    g = Counted(add)
    g(f32(3, 4), f32(3, 4))
    y = g(f32(3, 4), f32(1, 4))
    np.testing.assert_array_equal(y, f32(3, 4) + f32(1, 4))
    assert g.traces == 2
    g(f32(5, 4), f32(1, 4))  # the same pattern of ones: no retrace
    assert g.traces == 2
    y = g(f32(3, 1), f32(1, 4))
    assert y.shape == (3, 4)
    np.testing.assert_array_equal(y, f32(3, 1) + f32(1, 4))
    assert g.traces == 3


def test_no_retrace_on_a_different_python_number() -> None:
    g = Counted(axpb)
    x, b = f32(2, 3), f32(3)
    np.testing.assert_array_equal(g(x, 2.0, b), x * 2 + b)
    np.testing.assert_array_equal(g(x, 3.0, b), x * 3 + b)
    np.testing.assert_array_equal(g(x, 2.0, b), x * 2 + b)
    assert g.traces == 1


def test_retrace_on_a_different_static_number() -> None:
    g = Counted(axpb, static_argnames=("k",))
    x, b = f32(2, 3), f32(3)
    np.testing.assert_array_equal(g(x, 2.0, b), x * 2 + b)
    np.testing.assert_array_equal(g(x, 3.0, b), x * 3 + b)
    np.testing.assert_array_equal(g(x, 2.0, b), x * 2 + b)
    assert g.traces == 2


def test_scalar_type_is_part_of_the_key() -> None:
    def scale(x, k):
        return x * k

    g = Counted(scale)
    i8 = np.arange(4, dtype=np.int8)
    assert g(i8, 2).dtype == np.int8
    assert g(i8, 2.0).dtype == np.float64  # 2 == 2.0, but the float raises the category (to NumPy's float64)
    assert g(i8, True).dtype == np.int8
    assert g.traces == 3


def test_numpy_scalars_are_weak_constants() -> None:
    def scale(x, k):
        return x * k

    g = Counted(scale)
    h16 = np.ones(3, np.float16)
    y = g(h16, np.float64(2.5))
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.full(3, 2.5, np.float16))
    g(h16, 2.5)
    assert g.traces == 1


def test_negative_zero_constant_is_not_confused_with_zero() -> None:
    @bz.jit(static_argnums=1)
    def div(x, k):
        return x / k

    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(div(x, 0.0), np.full(2, np.inf, np.float32))
    np.testing.assert_array_equal(div(x, -0.0), np.full(2, -np.inf, np.float32))


def test_nan_constant_is_traced_once() -> None:
    g = Counted(axpb, static_argnums=(1,))
    for _ in range(3):
        y = g(f32(2), float("nan"), f32(2))
        assert np.isnan(y).all()
    assert g.traces == 1
    assert len(g.jitted.fusions) == 1


def test_retrace_on_stride_order() -> None:
    def double(x):
        return x * 2

    g = Counted(double)
    a = f32(3, 4)
    g(a)
    y = g(a.T)  # column-major: a new signature with stride_order (0, 1)
    np.testing.assert_array_equal(y, a.T * 2)
    assert g.traces == 2
    g(f32(5, 2).T)
    assert g.traces == 2


def test_returns_tuple_for_tuple_results() -> None:
    @bz.jit
    def two(x):
        return x + 1, bz.ops.sum(x, axes=[0])

    result = two(f32(2, 3))
    assert isinstance(result, tuple) and len(result) == 2
    np.testing.assert_array_equal(result[0], f32(2, 3) + 1)
    np.testing.assert_array_equal(result[1], f32(2, 3).sum(0))


def test_returns_tuple_for_list_and_one_element_tuple() -> None:
    @bz.jit
    def as_list(x):
        return [x * 2]

    @bz.jit
    def single(x):
        return (x * 3,)

    @bz.jit
    def bare(x):
        return x * 4

    out = as_list(f32(2))
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0], f32(2) * 2)
    out = single(f32(2))
    assert isinstance(out, tuple) and len(out) == 1
    out = bare(f32(2))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, f32(2) * 4)


@pytest.mark.parametrize("body, position, kind", [
    (lambda x: None, "0", "NoneType"),
    (lambda x: [x, "y"], "1", "str"),
    (lambda x: (x, {"a": [x, slice(1)]}), r"1\['a'\]\[1\]", "slice"),
])
def test_non_tensor_result(body, position: str, kind: str) -> None:
    def bad(x):
        return body(x)

    g = bz.jit(bad)
    with pytest.raises(bz.FusionDefinitionError, match=rf"^bad: result {position}: expected a TensorView \(or a "
                                                       rf"tuple, list or dict of them\), got {kind}$"):
        g(f32(2))


def test_dicts_and_nested_results_keep_their_structure() -> None:
    """A dict of metrics, and tuples inside tuples, come back as the function wrote them (lists as
    tuples), from the first call and the cached ones (a dict was refused as "result 0")."""
    def body(x):
        return {"mean": x.mean(), "rows": (x.max(1), [x.min(1)]), "x": x * 2}

    metrics, x = Counted(body), f32(3, 4)
    for _ in range(2):
        out = metrics(x)
        assert list(out) == ["mean", "rows", "x"] and isinstance(out["rows"], tuple)
        np.testing.assert_allclose(out["mean"], x.mean(), rtol=1e-6)
        np.testing.assert_array_equal(out["rows"][0], x.max(1))
        np.testing.assert_array_equal(out["rows"][1][0], x.min(1))
        np.testing.assert_array_equal(out["x"], x * 2)
    assert metrics.traces == 1


@pytest.mark.parametrize("args", [(), (f32(2),), (f32(2), 1.0, f32(2), 3)])
def test_wrong_number_of_arguments(args: tuple) -> None:
    g = bz.jit(axpb)
    with pytest.raises(bz.InputError, match=rf"^axpb: expected 3 arguments, got {len(args)}$"):
        g(*args)


def test_non_array_argument() -> None:
    g = bz.jit(axpb)
    with pytest.raises(bz.InputError, match=r"^argument 'b': expected an array .*got list$"):
        g(f32(2), 1.0, [1.0, 2.0])


@pytest.mark.parametrize("value, kind", [("abc", "str"), (None, "NoneType")])
def test_an_option_where_data_is_needed_is_named(value: object, kind: str) -> None:
    g = bz.jit(axpb)
    with pytest.raises(bz.FusionDefinitionError, match=rf"add: operand 1: expected a TensorView .*got {kind}") as e:
        g(f32(2), 1.0, value)
    if hasattr(e.value, "add_note"):  # notes are Python 3.11+
        assert f"axpb: 'b' ({value!r}) baked in as options" in "\n".join(e.value.__notes__)


def test_jit_with_backend_argument() -> None:
    @bz.jit(backend="reference")
    def gelu_bias(x, b):
        return bz.ops.gelu(x + b)

    assert gelu_bias.backend == "reference"
    assert gelu_bias.__name__ == "gelu_bias"
    x = np.linspace(-2, 2, 12, dtype=np.float64).reshape(3, 4)
    b = np.linspace(0, 1, 4)
    y = gelu_bias(x, b)
    from math import erf, sqrt

    z = x + b
    expected = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))(z)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-15)


def test_jit_with_an_unknown_backend() -> None:
    @bz.jit(backend="nope")
    def double(x):
        return x * 2

    with pytest.raises(bz.UnsupportedError,
                       match=r"backend: expected one of \['cuda', 'llvm', 'reference'\], got 'nope'"):
        double(f32(2))


def test_jit_identity_returns_a_view_of_the_input() -> None:
    @bz.jit
    def transpose(x):
        return x.T

    a = f32(2, 3)
    y = transpose(a)
    assert np.shares_memory(y, a)
    np.testing.assert_array_equal(y, a.T)


def test_jit_zero_dim_and_zero_size() -> None:
    g = Counted(axpb)
    y = g(np.array(2.0, np.float32), 3.0, np.array(1.0, np.float32))
    assert y.shape == () and float(y) == 7.0
    y = g(np.zeros((0, 3), np.float32), 3.0, f32(3))
    assert y.shape == (0, 3)
    assert g.traces == 2


def test_python_control_flow_on_an_extent_specializes_the_trace_on_its_size():
    # as torch.compile does: the size a branch reads is the call's, and the trace serves that size only
    @bz.jit
    def wide_or_narrow(x):
        return x.sum(0) if x.shape[0] > 4 else x.sum(1)

    @bz.jit
    def four_wide(x):
        return x * 2 if x.shape[-1] == 4 else x

    for shape in [(3, 4), (6, 4), (3, 5), (3, 4), (6, 4)]:
        x = np.random.default_rng(len(shape)).random(shape, np.float32)
        np.testing.assert_allclose(wide_or_narrow(x), x.sum(0) if shape[0] > 4 else x.sum(1), rtol=1e-6)
        np.testing.assert_array_equal(four_wide(x), x * 2 if shape[1] == 4 else x)
    assert [len(traces) for traces in wide_or_narrow.fusions.values()] == [2]  # rows 3 and 6
    assert [len(traces) for traces in four_wide.fusions.values()] == [2]  # columns 4 and 5
    ((trace, _),) = wide_or_narrow.fusions.values()
    assert trace.guard == ((0, 0, 3),)  # argument 0, axis 0, size 3


def test_a_symbolic_extent_in_python_control_flow_of_a_fusion_definition_raises():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        with pytest.raises(bz.TracerBoolConversionError, match=r"T0_s0 > 0: extents are symbolic.*a static size"):
            bool(x.shape[0] > 0)
        with pytest.raises(bz.TracerBoolConversionError, match=r"T0_s1 == 4: extents are symbolic"):
            bool(x.shape[-1] == 4)


def test_a_constant_extent_compares_as_an_int():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, 1), dtype=bz.float32)
        assert x.shape[1] == 1 and x.shape[1] != 2
        f.add_output(x * 2 if x.shape[1] == 1 else x)
    (y,) = f.execute([np.ones((3, 1), np.float32)])
    np.testing.assert_array_equal(y, np.full((3, 1), 2, np.float32))


def test_options_are_baked_in_as_arguments_and_as_defaults():
    """`reduction="mean"`, `weight=None`, `axes=(1,)`, `dtype=bz.float64`: options, never data, so
    they key a trace of their own (as bools do) instead of failing as arrays."""

    @bz.jit
    def loss(logits, target, reduction="mean", weight=None, axes=(0,), dtype=bz.float32):
        out = bz.ops.cross_entropy(logits, target, reduction=reduction)
        out = out if weight is None else out * weight
        return out.astype(dtype), logits.sum(axes)

    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    target = np.array([0, 1, 2, 3])
    per_row = np.log(np.exp(x.astype(np.float64)).sum(-1)) - x[np.arange(4), target]
    with bz.record() as rec:
        for _ in range(2):
            mean, columns = loss(x, target)
            total, _ = loss(x, target, "sum")
            rows, by_row = loss(x, target, "none", 2.0, (1,), bz.float64)
    assert len(rec.compiles) == 3  # one trace per set of options, reused on the second round
    np.testing.assert_allclose([mean, total], [per_row.mean(), per_row.sum()], rtol=1e-5)
    assert rows.dtype == np.float64
    np.testing.assert_allclose(rows, 2 * per_row, rtol=1e-5)
    np.testing.assert_allclose(columns, x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(by_row, x.sum(1), rtol=1e-5)


def test_numbers_left_at_their_defaults_are_baked_in():
    """A default (GroupNorm's `groups=2`, used as a shape) is a constant of the function, as in JAX;
    the same number passed by the caller is a runtime value, one trace for every value (an int sizes a
    shape as a symbolic extent)."""

    @bz.jit
    def group_norm(x, groups=2, eps=1e-5):
        h = x.reshape(x.shape[0], groups, -1)
        y = (h - h.mean(-1, keepdim=True)) * (h.var(-1, keepdim=True) + eps).rsqrt()
        return y.reshape(x.shape)

    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    h = x.astype(np.float64).reshape(2, 2, 6)
    for eps in (1e-5, 0.5):
        expected = ((h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps)).reshape(x.shape)
        out = group_norm(x) if eps == 1e-5 else group_norm(x, eps=eps)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    # passed: a runtime value, an int sizing the reshape at every call
    np.testing.assert_allclose(group_norm(x, 2), group_norm(x), rtol=1e-6)
    h = x.astype(np.float64).reshape(2, 4, 3)
    expected = ((h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(group_norm(x, 4), expected, rtol=1e-5, atol=1e-5)


def test_a_function_of_star_args_is_refused_when_wrapped():
    with pytest.raises(bz.FusionDefinitionError, match=r"named parameters.*\*xs"):
        bz.jit(lambda *xs: xs[0])


def test_keyword_only_parameters_are_passed_by_name():
    @bz.jit
    def scaled(x, *, scale=2.0, shift):
        return x * scale + shift

    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(scaled(x, shift=1.0), x * 2 + 1)
    np.testing.assert_array_equal(scaled(x, scale=3.0, shift=0.5), x * 3 + 0.5)


@pytest.mark.parametrize("fn, named", [
    (lambda x, n: x.reshape(n * 1.0, -1), r"reshape: shape\[0\]: expected an int or an extent"),
    (lambda x, n: x + bz.ops.arange(n / 2), r"arange: stop: expected an int or an extent, got tensor T\d+ of "
                                            r"type float64"),
    (lambda x, n: x.reshape(2.0 * n, -1), r"reshape: shape\[0\]: expected an int or an extent"),
], ids=["reshape", "arange", "reshape_value"])
def test_a_runtime_number_as_a_size_is_named(fn, named: str) -> None:
    """A runtime number is a value of the fusion: an int sizes a shape as a symbolic extent
    (tests/frontend/test_nvfuser_dynamic_sizes.py), a number computed from it in the fusion sizes nothing:
    a braze error naming the argument (not a TypeError from deep inside), with the note on static_argnames."""
    with pytest.raises(bz.FusionDefinitionError, match=named) as caught:
        bz.jit(fn)(np.arange(6.0, dtype=np.float32), 2)
    assert "static_argnames" in "".join(getattr(caught.value, "__notes__", []))


class _RMSNorm:
    def __init__(self, eps: float) -> None:
        self.eps = eps

    @bz.jit(static_argnames="self")
    def forward(self, x):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps)

    @bz.jit
    def unbaked(self, x):
        return x * self.eps


def test_a_jitted_method_takes_its_instance_as_a_baked_argument():
    """`model.forward(x)` binds the instance as functions do; it is baked in (one trace per instance),
    and left unbaked it is refused by name rather than as a missing argument."""
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for eps in (1e-5, 10.0):
        expected = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)
        np.testing.assert_allclose(_RMSNorm(eps).forward(x), expected, rtol=1e-6)
    np.testing.assert_allclose(_RMSNorm.forward(_RMSNorm(1e-5), x), _RMSNorm(1e-5).forward(x))
    with pytest.raises(bz.InputError, match=r"unbaked: argument 'self': expected an array, got the method's instance "
                                            r"\(_RMSNorm\); bz.jit\(static_argnames='self'\)"):
        _RMSNorm(1.0).unbaked(x)


def test_a_call_leaving_parameters_to_their_defaults_takes_the_cached_path(monkeypatch):
    # The defaults are baked in; the arguments given describe the call, as a call giving every one does.
    scaled = bz.jit(lambda x, scale=2.0, axis=-1: bz.ops.argmax(x, axis) * scale)
    x = np.random.default_rng(0).standard_normal((9, 33)).astype(np.float32)
    np.testing.assert_array_equal(scaled(x), np.argmax(x, -1) * 2.0)
    np.testing.assert_array_equal(scaled(x, 3.0), np.argmax(x, -1) * 3.0)
    monkeypatch.setattr(type(scaled), "_bind", lambda *a: pytest.fail("a cached call bound its arguments again"))
    np.testing.assert_array_equal(scaled(x), np.argmax(x, -1) * 2.0)
    np.testing.assert_array_equal(scaled(x, 4.0), np.argmax(x, -1) * 4.0)
