"""The compiled backend's inline float32 math (braze/codegen/llvm_math.py): accurate over the whole
float32 range, special values as the C library gives them, and vector code where it is used."""

from __future__ import annotations

import math

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.codegen.llvm_math import reduction_table_row, two_over_pi_bits

rng = np.random.default_rng(7)
REFERENCE = {"sin": np.sin, "cos": np.cos, "tanh": np.tanh, "log": np.log, "exp": np.exp,
             "erf": np.vectorize(math.erf, otypes=[np.float64]), "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
             "expm1": np.expm1, "log1p": np.log1p}
# The C library's float32 functions are within 1 ulp, NumPy's SIMD ones within 4.
MAX_ULPS = {"erf": 3.0, "log1p": 3.0}  # erf's polynomial rounds seven times; log1p rounds 1 + x, then corrects
MAX_ULPS["erfc"] = 5.0  # the rounding of 1/x, the inline exp and the polynomial's add up in the tail
DEFAULT_MAX_ULPS = 2.0


def compiled(op: str, x: np.ndarray) -> np.ndarray:
    with bz.Fusion() as f:
        f.add_output(getattr(bz.ops, op)(f.define_tensor((-1,))))
    (out,) = f.execute([x], backend="llvm")
    return out


def every_exponent(size: int) -> np.ndarray:
    """Finite float32 values with uniformly random bits: every exponent, both signs."""
    bits = rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return bits[np.isfinite(bits)]


def near_multiples_of_half_pi(size: int) -> np.ndarray:
    """The float32 values nearest to k * pi/2 for k up to 2**100: sin or cos of them is tiny, so
    any error of the reduction shows as a large relative error."""
    nearest = (np.floor(2.0 ** rng.uniform(0, 100, size)) * (math.pi / 2)).astype(np.float32)
    above = (nearest.view(np.uint32) + 1).view(np.float32)
    return np.concatenate([nearest, above, -nearest])


def assert_within_ulps(op: str, x: np.ndarray) -> None:
    got = compiled(op, x).astype(np.float64)
    with np.errstate(all="ignore"):
        want = REFERENCE[op](x.astype(np.float64))
    finite = np.isfinite(want) & (np.abs(want) < np.finfo(np.float32).max)
    ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    ulps = np.abs(got[finite] - want[finite]) / ulp
    worst = int(np.argmax(ulps)) if ulps.size else 0
    x, got, want = x[finite], got[finite], want[finite]
    assert ulps.size == 0 or ulps[worst] <= MAX_ULPS.get(op, DEFAULT_MAX_ULPS), \
        f"{op}({x[worst]!r}) = {got[worst]!r}, expected {want[worst]!r} ({ulps[worst]:.2f} ulps)"


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sin_and_cos_reduce_any_argument_exactly(op):
    assert_within_ulps(op, every_exponent(200_000))
    assert_within_ulps(op, near_multiples_of_half_pi(20_000))
    assert_within_ulps(op, rng.uniform(-10, 10, 100_000).astype(np.float32))


@pytest.mark.parametrize("op", ["tanh", "exp", "erf", "erfc", "expm1"])
def test_tanh_exp_erf_erfc_and_expm1_are_accurate_everywhere(op):
    assert_within_ulps(op, every_exponent(200_000))
    assert_within_ulps(op, rng.uniform(-12, 12, 100_000).astype(np.float32))


def test_log1p_is_accurate_near_zero_and_far_from_it():
    assert_within_ulps("log1p", np.abs(every_exponent(200_000)))
    assert_within_ulps("log1p", rng.uniform(-0.999, 2, 200_000).astype(np.float32))


def test_log_is_accurate_everywhere_subnormals_included():
    assert_within_ulps("log", np.abs(every_exponent(200_000)))
    assert_within_ulps("log", rng.uniform(0.5, 2, 100_000).astype(np.float32))  # results near 0 around 1
    assert_within_ulps("log", np.float32(1) + np.arange(1, 1000, dtype=np.float32) * np.finfo(np.float32).eps)
    assert_within_ulps("log", np.arange(1, 2**23, 4099, dtype=np.uint32).view(np.float32))  # subnormals


SPECIALS = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, -1e-45, 2.0**-12, -(2.0**-13),
                     3.4e38, -3.4e38, 1.0, -1.0, 0.625, -0.625], np.float32)


@pytest.mark.parametrize("op", ["sin", "cos", "tanh", "log", "exp", "erf", "erfc", "expm1", "log1p"])
def test_special_values_match_the_c_library(op):
    got = compiled(op, SPECIALS)
    with np.errstate(all="ignore"):
        want = REFERENCE[op](SPECIALS.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    exact = ~np.isnan(want) & ((np.abs(want) == np.inf) | (want == 0) | (np.abs(SPECIALS) < 2.0**-12))
    np.testing.assert_array_equal(got[exact], want[exact])
    np.testing.assert_array_equal(np.signbit(got[exact]), np.signbit(want[exact]))  # -0.0 stays -0.0


def test_reduction_table_holds_the_bits_of_two_over_pi():
    assert two_over_pi_bits(128) == 0xA2F9836E4E441529FC2757D1F534DDC0  # 2/pi = 0.A2F9836E4E441529FC2757D1F534DDC0...
    # Exponent 127 (|x| in [1, 2)): 2/pi * 2**-23 * 2**94, so the window starts at the 71st bit.
    assert reduction_table_row(127) == ((two_over_pi_bits(71) >> 64) & 0xFFFFFFFF,
                                        (two_over_pi_bits(71) >> 32) & 0xFFFFFFFF, two_over_pi_bits(71) & 0xFFFFFFFF)
    assert reduction_table_row(255) == (0, 0, 0) and reduction_table_row(0) == (0, 0, 0)  # inf/NaN, subnormals


def test_nested_inline_math_calls_the_c_library_and_stays_correct():
    x = rng.uniform(-3, 3, 1000).astype(np.float32)
    with bz.Fusion() as f:
        t = f.define_tensor((-1,))
        f.add_output(bz.ops.sin(bz.ops.tanh(bz.ops.exp(t))))
    (out,) = f.execute([x], backend="llvm")
    want = np.sin(np.tanh(np.exp(x.astype(np.float64))))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


EXPRESSIONS = {
    "sin": lambda a, b: bz.ops.sin(a), "cos": lambda a, b: bz.ops.cos(a), "tanh": lambda a, b: bz.ops.tanh(a),
    "log": lambda a, b: bz.ops.log(a), "exp": lambda a, b: bz.ops.exp(a), "erf": lambda a, b: bz.ops.erf(a),
    "erfc": lambda a, b: bz.ops.erfc(a),
    "expm1": lambda a, b: bz.ops.expm1(a), "log1p": lambda a, b: bz.ops.log1p(a),
    "gelu(a)": lambda a, b: bz.ops.gelu(a),
    "a*b - sin(a)": lambda a, b: a * b - bz.ops.sin(a),
    "gelu_tanh(a + b)": lambda a, b: bz.ops.gelu(a + b, approximate="tanh"),
}


@pytest.mark.parametrize("name", EXPRESSIONS)
def test_loops_with_inline_math_are_vectorized(name, capsys, tmp_path):
    with config.scope(dump="llvm_ir", cache_dir=tmp_path):
        with bz.Fusion() as f:
            a, b = f.define_tensor((-1,)), f.define_tensor((-1,))
            f.add_output(EXPRESSIONS[name](a, b))
        x = np.full(64, 0.5, np.float32)
        f.execute([x, x], backend="llvm")
    ir_text = capsys.readouterr().err
    assert "x float>" in ir_text  # LLVM turned the loop into vector instructions
    for libm in ("@sinf", "@cosf", "@tanhf", "@logf", "@expf", "@erff", "@erfcf", "@expm1f", "@log1pf", "@llvm.sin.",
                 "@llvm.cos.", "@llvm.log.", "@llvm.exp."):
        assert libm not in ir_text, f"{name}: the loop still calls {libm}"


ERFC_SWEEP = np.concatenate([np.linspace(-10, 10, 801), [0.0, -0.0, math.inf, -math.inf, math.nan, 26.5, 27.5]])


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_float64_erfc_matches_math_erfc_to_the_last_bits(backend):
    with bz.Fusion() as f:
        f.add_output(bz.ops.erfc(f.define_tensor((-1,), dtype=bz.float64)))
    (got,) = f.execute([ERFC_SWEEP], backend=backend)
    want = np.array([math.erfc(v) for v in ERFC_SWEEP])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.all(np.abs(got[finite] - want[finite]) <= 4 * np.spacing(want[finite]))  # 0 at 27.5 included


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("dtype", [bz.float32, bz.float64])
def test_exact_gelu_keeps_its_relative_accuracy_in_the_left_tail(backend, dtype):
    """1 + erf(x / sqrt 2) cancels for x < -3: float32 gelu(-5) was 4% off, float64 gelu(-10) was -0."""
    x = np.array([-10.0, -7.0, -5.0, -3.0, -1.0, 0.0, 1.0, 5.0], dtype.numpy)
    with bz.Fusion() as f:
        f.add_output(bz.ops.gelu(f.define_tensor((-1,), dtype=dtype)))
    (got,) = f.execute([x], backend=backend)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == bz.float32 else 1e-14, atol=0)
