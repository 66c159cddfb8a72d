"""`@bz.jit` and Python numbers: runtime values (one compile for every value) unless declared static."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config


def sgd(w, g, lr):
    return w - lr * g


def test_one_compile_serves_a_hundred_floats() -> None:
    step = bz.jit(sgd)
    w, g = np.linspace(-1, 1, 64, dtype=np.float32), np.linspace(2, 3, 64, dtype=np.float32)
    step(w, g, 0.5)  # the first call traces and compiles
    with bz.record() as rec:
        for lr in np.linspace(1e-4, 1.0, 100).tolist():
            out = step(w, g, lr)
            np.testing.assert_allclose(out, w - np.float32(lr) * g, rtol=1e-6, atol=1e-7)
    assert rec.compiles == []
    assert len(step.fusions) == 1


def test_a_static_float_compiles_once_per_value(tmp_path) -> None:
    step = bz.jit(sgd, static_argnames="lr")
    w, g = np.ones(8, np.float32), np.ones(8, np.float32)
    with config.scope(cache_dir=tmp_path), bz.record() as rec:  # an empty disk cache: every kernel compiles
        for lr in (0.25, 0.5, 0.25):
            np.testing.assert_array_equal(step(w, g, lr), w - lr * g)
    assert len(step.fusions) == 2 and len(rec.compiles) == 2


def test_static_argnums_and_argnames_are_the_same_choice() -> None:
    by_number, by_negative = bz.jit(sgd, static_argnums=2), bz.jit(sgd, static_argnums=(-1,))
    by_name = bz.jit(sgd, static_argnames=["lr"])
    assert by_number.static == by_negative.static == by_name.static == frozenset({2})


@pytest.mark.parametrize("options, message", [
    ({"static_argnums": 3}, r"jit: static_argnums: expected positions of sgd's 3 parameters, got 3"),
    ({"static_argnames": "rate"}, r"jit: static_argnames: expected parameters of sgd \(w, g, lr\), got 'rate'"),
])
def test_static_arguments_must_name_parameters(options: dict, message: str) -> None:
    with pytest.raises(bz.FusionDefinitionError, match=f"^{message}$"):
        bz.jit(sgd, **options)


def test_a_static_argument_must_be_hashable() -> None:
    @bz.jit(static_argnames="axes")
    def total(x, axes):
        return x.sum(axes)

    with pytest.raises(bz.InputError, match=r"^argument 'axes': a static argument must be hashable, got list$"):
        total(np.ones((2, 3), np.float32), [0])
    np.testing.assert_array_equal(total(np.ones((2, 3), np.float32), (0,)), np.full(3, 2, np.float32))


def test_an_int_used_as_an_axis_must_be_static() -> None:
    def total(x, axis):
        return x.sum(axis)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises((TypeError, bz.Error)) as error:
        bz.jit(total)(x, 1)
    if sys.version_info >= (3, 11):
        assert "static_argnames" in "\n".join(error.value.__notes__)
    np.testing.assert_array_equal(bz.jit(total, static_argnames="axis")(x, 1), x.sum(1))


def test_bools_stay_static() -> None:
    traces = []

    @bz.jit
    def maybe_relu(x, clip):
        traces.append(clip)
        return bz.ops.relu(x) if clip else x * 1

    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(maybe_relu(x, True), [0, 2])
    np.testing.assert_array_equal(maybe_relu(x, False), [-1, 2])
    maybe_relu(x, True)
    assert traces == [True, False]


def test_negative_zero_passed_at_run_time() -> None:
    div = bz.jit(lambda x, k: x / k)
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(div(x, 0.0), [np.inf, np.inf])
    np.testing.assert_array_equal(div(x, -0.0), [-np.inf, -np.inf])
    assert len(div.fusions) == 1


def test_arithmetic_on_numbers_alone_never_widens_a_tensor() -> None:
    """`(1 - beta)` is as weak as `beta`: a float16 moment stays float16, as with a baked constant."""
    @bz.jit
    def ema(m, g, beta):
        return m * beta + (1 - beta) * g

    m, g = np.full(4, 0.5, np.float16), np.full(4, 2.0, np.float16)
    out = ema(m, g, 0.9)
    assert out.dtype == np.float16
    expected = m * np.float16(0.9) + np.float16(1 - 0.9) * g
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=1e-3)


def test_a_float64_tensor_sees_the_float_exactly() -> None:
    scale = bz.jit(lambda x, k: x * k)
    x = np.linspace(1, 2, 16)
    np.testing.assert_array_equal(scale(x, 0.1), x * 0.1)


def test_an_int_beside_an_int8_tensor_wraps_as_a_baked_one_does() -> None:
    add = bz.jit(lambda x, k: x + k)
    x = np.array([1, 100, -100], np.int8)
    assert add(x, 3).dtype == np.int8
    np.testing.assert_array_equal(add(x, 30), x + np.int8(30))


def test_an_int_that_does_not_fit_the_integer_type_it_meets_is_refused() -> None:
    """As NumPy 2 and torch refuse it, and braze refuses the int written in the function: converted, it
    would wrap (2**40 as an int32 is 0). One trace still serves every int that fits."""
    add, twice = bz.jit(lambda a, k: a + k), bz.jit(lambda a, k: a * (k * 2))
    a = np.ones(3, np.int32)
    np.testing.assert_array_equal(add(a, 5), a + 5)  # described: the next call takes the cached path
    message = (r"^<lambda>: argument 'k': expected a Python int in \[-2147483648, 2147483647\] \(the range of int32, "
               r"which add computes in\), got 1099511627776;")
    with pytest.raises(bz.InputError, match=message):
        add(a, 2**40)
    with pytest.raises(bz.InputError, match=r"argument 'k': expected a Python int in \[0, 255\] .* got -1;"):
        add(np.ones(3, np.uint8), -1)  # on its first call
    np.testing.assert_array_equal(add(a, 2**31 - 1), a + np.int32(2**31 - 1))  # wraps in the tensor's arithmetic
    np.testing.assert_array_equal(add(np.ones(3, np.int64), 2**40), np.full(3, 2**40 + 1))
    with pytest.raises(bz.InputError, match=r"a number computed from argument 'k': .* int32, which mul .* 4294967294;"):
        twice(a, 2**31 - 1)
    np.testing.assert_array_equal(twice(a, 7), a * 14)
    assert len(add.fusions) == 3  # int32, uint8 and int64 tensors


def test_numpy_numbers_are_runtime_values_too() -> None:
    scale = bz.jit(lambda x, k: x * k)
    x = np.ones(3, np.float16)
    assert scale(x, np.float64(2.5)).dtype == np.float16
    np.testing.assert_array_equal(scale(x, np.float32(3.0)), np.full(3, 3, np.float16))
    assert len(scale.fusions) == 1


_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
           "int32": np.int32}
_RUNTIME = {name: bz.jit(lambda x, s: x * s + (1 - s) / 4) for name in _DTYPES}
_BAKED = {name: bz.jit(lambda x, s: x * s + (1 - s) / 4, static_argnames="s", backend="reference")
          for name in _DTYPES}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_DTYPES)),
       st.one_of(st.floats(-1e4, 1e4, allow_subnormal=False), st.integers(-1000, 1000)))
def test_a_runtime_number_computes_what_the_baked_one_does(dtype: str, value: float | int) -> None:
    """Passed at run time (compiled once) or baked in (the reference backend), the result is the same."""
    x = (np.arange(-3, 5) * 1.25).astype(_DTYPES[dtype])
    runtime, baked = _RUNTIME[dtype](x, value), _BAKED[dtype](x, value)
    assert runtime.dtype == baked.dtype
    np.testing.assert_allclose(runtime.astype(np.float64), baked.astype(np.float64), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_a_new_number_takes_the_prepared_call(library: str) -> None:
    """After the first call, another learning rate builds nothing: no trace, compile or prepared call."""
    make = np.ones if library == "numpy" else pytest.importorskip("torch").ones
    step = bz.jit(sgd)
    w, g = make(16), make(16)
    step(w, g, 0.1)
    with bz.record() as rec:
        out = step(w, g, 0.25)
    assert rec.compiles == [] and rec.entries == [] and len(rec.launches) == 1
    assert type(out) is type(w)
    np.testing.assert_allclose(np.asarray(out), np.full(16, 0.75))


@pytest.mark.cuda
def test_numbers_are_runtime_values_on_the_gpu() -> None:
    from braze.compile import cuda_driver

    torch = pytest.importorskip("torch")
    if cuda_driver.device_count() == 0 or not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU and torch with CUDA")
    ema = bz.jit(lambda m, g, beta: m * beta + (1 - beta) * g)
    m, g = torch.rand(4096, device="cuda"), torch.rand(4096, device="cuda")
    ema(m, g, 0.5)
    with bz.record() as rec:
        for beta in np.linspace(0.1, 0.99, 20).tolist():
            out = ema(m, g, beta)
            torch.testing.assert_close(out, m * beta + (1 - beta) * g)
    assert rec.compiles == [] and out.device.type == "cuda" and len(ema.fusions) == 1
    half = ema(m.half(), g.half(), 0.9)
    assert half.dtype == torch.float16


def test_a_zero_dim_torch_tensor_promotes_as_in_torch():
    # torch: a tensor with dimensions decides the dtype over a 0-d one of the same kind (NumPy 2 lets
    # the 0-d array widen it); a 0-d tensor of a higher kind still raises it.
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 3).to(torch.bfloat16)
    programs = [
        (lambda x, s: x * s + 1, (x, torch.tensor(2.0))),
        (lambda x, y: x * y.sum(), (x, torch.randn(5))),
        (lambda i, s: i * s, (torch.arange(4), torch.tensor(2.5))),
        (lambda s, t: s * t + 0.5, (torch.tensor(2.0), torch.tensor(3.0, dtype=torch.float64))),
        # a 0-d tensor that raises the kind brings its own dtype, where a Python float gives float32
        (lambda i, s: i * s, (torch.arange(4), torch.tensor(2.5, dtype=torch.float64))),
        (lambda i, s, t: i * s + t, (torch.arange(4, dtype=torch.int32), torch.tensor(2.5, dtype=torch.float16),
                                     torch.tensor(0.5, dtype=torch.float64))),
        (lambda b, s: b * s + 1.5, (torch.tensor([True, False]), torch.tensor(3, dtype=torch.int16))),
    ]
    for fn, args in programs:
        want = fn(*args)
        got = bz.jit(fn)(*args)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-2, atol=1e-2)
    # NumPy 2 keeps its own rule: a float64 0-d array widens a float32 array.
    assert bz.jit(lambda x, y: x * y.sum())(np.ones(3, np.float32), np.ones(3)).dtype == np.float64
