"""Extents used as values (`x.sum(1) / x.shape[1]`, `reciprocal(x.shape[1])`): a weak int64
scalar of the fusion, read from the input extents, on the reference and CPU backends, and in CUDA
that NVRTC compiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.compile import nvrtc
from braze.errors import FusionDefinitionError
from braze.ir.scalar import symbol

BACKENDS = ["reference", "llvm"]


def fusion(build, *dtypes: bz.DType, static: tuple[int, ...] | None = None) -> bz.Fusion:
    with bz.Fusion() as f:
        shape = static or [-1, -1]
        outs = build(*[f.define_tensor(shape, dtype=d) for d in dtypes])
        for out in outs if isinstance(outs, list) else [outs]:
            f.add_output(out)
    return f


def layer_norm_backward_by_extent(x: bz.TensorView, g: bz.TensorView) -> bz.TensorView:
    """dx of layer_norm as nvFuser writes it: (rstd / N) * (N * g - sum(g) - xhat * sum(g * xhat))."""
    n = x.shape[1]
    inverse_n = bz.ops.reciprocal(n)
    mean = x.sum(1, keepdim=True) * inverse_n
    centered = x - mean
    rstd = bz.ops.rsqrt((centered * centered).sum(1, keepdim=True) / n + 1e-5)
    xhat = centered * rstd
    return rstd * inverse_n * (g * n - g.sum(1, keepdim=True) - xhat * (g * xhat).sum(1, keepdim=True))


def layer_norm_backward_reference(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    x, g = x.astype(np.float64), g.astype(np.float64)
    rstd = 1 / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    xhat = (x - x.mean(1, keepdims=True)) * rstd
    return rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sum_divided_by_its_extent_is_the_mean(backend: str) -> None:
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    (out,) = fusion(lambda t: t.sum(1) / t.shape[1], bz.float32).execute([x], backend=backend)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x.astype(np.float64).mean(1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_backward_with_the_reciprocal_of_an_extent(backend: str) -> None:
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((6, 33)).astype(np.float32) for _ in range(2))
    (dx,) = fusion(layer_norm_backward_by_extent, bz.float32, bz.float32).execute([x, g], backend=backend)
    np.testing.assert_allclose(dx, layer_norm_backward_reference(x, g), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_extents_are_weak_int64_scalars(backend: str) -> None:
    """An extent never widens a tensor: int32 + extent is int32, bfloat16 / extent bfloat16; an
    integer tensor divided by an extent is float32, and the reciprocal of one a Python float: float64."""
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    halves = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    f = fusion(lambda i, h: [i + i.shape[1], h / h.shape[0], i / i.shape[1], bz.ops.reciprocal(h.shape[1]),
                             i * (i.shape[0] * i.shape[1] - 2)], bz.int32, bz.bfloat16)
    added, scaled, divided, inverse, product = f.execute([ints, halves.astype(bz.bfloat16.numpy)], backend=backend)
    assert (added.dtype, scaled.dtype, divided.dtype, inverse.dtype, product.dtype) == (
        np.int32, bz.bfloat16.numpy, np.float32, np.float64, np.int32)
    np.testing.assert_array_equal(added, ints + 4)
    np.testing.assert_allclose(scaled.astype(np.float32), halves.astype(bz.bfloat16.numpy).astype(np.float32) / 3,
                               rtol=8e-3)
    np.testing.assert_allclose(divided, ints / 4, rtol=1e-7)
    assert inverse == 0.25
    np.testing.assert_array_equal(product, ints * 10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_extents_are_literals(backend: str) -> None:
    x = np.ones((2, 8), np.float32)
    f = fusion(lambda t: t.sum(1) / t.shape[1], bz.float32, static=(2, 8))
    np.testing.assert_array_equal(f.execute([x], backend=backend)[0], [1.0, 1.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_extents_in_float_arithmetic(backend: str) -> None:
    """`1.0 / n`, `n * 0.5`, `2.5 - n` and `n0 / n1` are values; with ints extents stay symbolic."""
    x = np.full((2, 4), 2.0, np.float32)
    f = fusion(lambda t: [t * (1.0 / t.shape[-1]), t.shape[1] * 0.5 + t, 2.5 - t.shape[0], t.shape[0] / t.shape[1],
                          t.reshape(t.shape[0] * t.shape[1] - 0) * 1.0], bz.float32)
    scaled, shifted, difference, ratio, flat = f.execute([x], backend=backend)
    np.testing.assert_array_equal(scaled, np.full((2, 4), 0.5))
    np.testing.assert_array_equal(shifted, np.full((2, 4), 4.0))
    assert (difference, ratio, flat.shape) == (np.float32(0.5), np.float32(0.5), (8,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_numbers_and_extents_alone_compute_in_python_s_double_precision(backend: str) -> None:
    """`1.0 / n` and `t / n`, with t a runtime float, are Python floats: a float64 program scaled by one
    gives NumPy's value to the last bit (float32 arithmetic gave 1/3 as 0.3333333432674408), and a
    float32 tensor times one stays float32."""
    def program(x, t):
        return (1.0 / x.shape[0]) * x, np.sqrt(t / x.shape[1]) * x, x.astype(np.float32) * (1.0 / x.shape[0])

    x = np.ones((3, 3))
    for got, want in zip(bz.jit(program, backend=backend)(x, 1.0), program(x, 1.0), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_an_extent_of_no_input_is_refused() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        with pytest.raises(FusionDefinitionError, match=r"add: operand 1: expected an extent of this fusion's "
                                                        r"tensors, got elsewhere_s0 \+ 1"):
            x + (symbol("elsewhere_s0") + 1)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(0, 4), cols=st.integers(0, 5), axis=st.sampled_from([0, 1]), offset=st.integers(-3, 3),
       backend=st.sampled_from(BACKENDS))
def test_expressions_of_extents_on_any_shape(rows: int, cols: int, axis: int, offset: int, backend: str) -> None:
    """x * (shape[axis] * 3 + offset) - shape[1 - axis] // 2, empty and unit extents included."""
    x = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    f = fusion(lambda t: t * (t.shape[axis] * 3 + offset) - t.shape[1 - axis] // 2, bz.float64)
    (out,) = f.execute([x], backend=backend)
    np.testing.assert_array_equal(out, x * (x.shape[axis] * 3 + offset) - x.shape[1 - axis] // 2)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=str)
def test_extents_as_values_compile_for_cuda(dtype: bz.DType) -> None:
    x = np.ones((4, 8), dtype.numpy)
    mean_and_scale = lambda t, g: [t.sum(1) / t.shape[1], g * bz.ops.reciprocal(g.shape[0])]
    for build in (layer_norm_backward_by_extent, mean_and_scale):
        src = engine.cuda_source(fusion(build, dtype, dtype), [x, x])
        assert "T0_s1" in src.body and nvrtc.compile_ptx(src.text, "extents", "sm_90", ("-G",))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_extent_raised_to_a_power_is_attention_scale(backend: str) -> None:
    """`q * q.shape[-1] ** -0.5` (attention's scale), `n ** -1` a float as in Python, `2 ** n`."""
    x = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    f = fusion(lambda t: [t * t.shape[-1] ** -0.5, t + t.shape[0] ** -1, t / 2 ** t.shape[0]], bz.float32)
    scaled, shifted, halved = f.execute([x], backend=backend)
    np.testing.assert_allclose(scaled, x / 4.0, rtol=1e-6)
    np.testing.assert_allclose(shifted, x + 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(halved, x / 8.0, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [bz.float16, bz.bfloat16], ids=str)
def test_numbers_computed_from_extents_stay_weak(backend: str, dtype: bz.DType) -> None:
    """torch's sizes are Python ints, so `x.shape[-1] ** -0.5` is a Python float there: a half `x`
    times it stays half, as it does times a literal."""
    x = np.random.default_rng(4).standard_normal((3, 16)).astype(dtype.numpy)
    f = fusion(lambda t: [t * t.shape[-1] ** -0.5, t / (t.shape[0] * 0.5), t * bz.ops.sqrt(t.shape[-1]),
                          t * 0.25], dtype)
    outs = f.execute([x], backend=backend)
    assert [o.dtype for o in outs] == [dtype.numpy] * 4
    x64 = x.astype(np.float64)
    for out, expected in zip(outs, [x64 / 4, x64 / 1.5, x64 * 4, x64 / 4]):
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-2)


def test_float_of_a_symbolic_extent_says_what_to_write() -> None:
    import math

    with bz.Fusion() as f:
        x = f.define_tensor([-1, 4])
        assert math.sqrt(x.shape[1]) == 2.0  # a static extent is its number
        with pytest.raises(bz.TracerBoolConversionError, match=r"float\(extent .*\*\* -0.5"):
            math.sqrt(x.shape[0])
        f.add_output(x)


def test_abs_and_divmod_of_an_extent_are_extents() -> None:
    """`abs(x.shape[0] - 5)` and `divmod(x.shape[0], 2)` in a trace raised Python's TypeError (a Scalar had
    neither); they are the extent expressions they stand for, one trace serving every size."""
    def program(x):
        half, odd = divmod(x.shape[0], 2)
        return x * abs(x.shape[0] - 5) + half - odd * divmod(7, x.shape[1])[1]

    jitted = bz.jit(program)
    for n in (2, 3, 8):
        x = np.ones((n, 3), np.float32)
        np.testing.assert_array_equal(jitted(x), program(x))
    assert sum(len(traces) for traces in jitted.fusions.values()) == 1


def test_a_numpy_array_divided_by_an_extent_is_an_input_divided_in_the_fusion() -> None:
    """`np.arange(n) / n` went through object arrays, each element a value of its own, and adding the array
    of them to a tensor was refused as a traced tensor turned into an array."""
    def ramp(x):
        return x + np.arange(x.shape[-1]) / x.shape[-1], x * (x.shape[0] * np.arange(x.shape[-1]))

    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    for got, want in zip(bz.jit(ramp)(x), ramp(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
