"""A row held in registers keeps the costly float32 values a later loop repeats (cuda_row_values):
a bfloat16 softmax's exponentials are computed once, by the loop that sums them, and the last loop
multiplies them by the sum's reciprocal (passes/hoist.py: scaled, no branch an element) and converts
the product to bfloat16 without a NaN test (an arithmetic result: cuda_rules, "cast"). Checked in
the source, in the PTX NVRTC makes of it (instructions of the masked softmax's warp function), and
by running the generated CUDA on the CPU (tests/cuda_on_cpu.py) against NumPy in float64.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import row_quotients
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import engine
from braze.cli.bench.cases import ATTENTION_SCALE, CASES
from braze.cli.bench.check import Prepared
from braze.compile import nvrtc

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++")
BF16 = ml_dtypes.bfloat16


def masked_softmax_source():
    prepared = Prepared(next(c for c in CASES if c.name == "scaled_masked_softmax"), "quick")
    return engine.cuda_source(prepared.fusion, prepared.inputs)


def function_text(body: str, name: str) -> str:
    start = body.index(f"\n{name}(")
    end = body.find('extern "C"', start)
    return body[start:end if end > 0 else len(body)]


def register_copy(function: str) -> str:
    """The register copy of a row's statements: from its register arrays to its `else`."""
    start = function.index("bz_rc0[")
    return function[start:function.index("\n    } else {", start)]


@pytest.fixture(scope="module")
def source():
    return masked_softmax_source()


def test_the_register_copy_computes_each_exponential_once(source):
    copy = register_copy(function_text(source.body, "scaled_masked_softmax_t0_T14_warp"))
    assert "float bz_rv0[32];" in copy  # 4 vectors of 8 a lane
    sum_loop, last_loop = copy.split("for (int r8_k")[1].split("for (int j4_k")
    # A bfloat16 result: the approximate exponential (cuda_narrow.py).
    assert sum_loop.count("bz_exp_narrow(") == 8 and sum_loop.count("bz_rv0[r8_k * 8 + ") == 16  # kept, then added
    assert "exp" not in last_loop and "bz_rc0" not in last_loop and "bz_rc1" not in last_loop
    assert last_loop.count("bz_mul(bz_mul(rcp2, rcp0), rcp1)") == 8 and "bz_truediv" not in last_loop


def test_the_block_function_keeps_them_too(source):
    copy = register_copy(function_text(source.body, "scaled_masked_softmax_t0_T14"))
    assert "float bz_rv0[8];" in copy and copy.split("for (int j4_k")[1].count("exp") == 0


@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
def test_the_warp_functions_ptx_takes_one_exponential_an_element_in_registers(source):
    ptx = nvrtc.compile_ptx(source.text, "masked_softmax", "sm_90").decode()
    entry = ptx[ptx.index(".entry scaled_masked_softmax_t0_T14_warp("):]
    entry = entry[:entry.index("\n}\n")]
    instructions = [line for line in entry.splitlines()
                    if re.match(r"\s+(@%p\d+ )?[a-z]", line) and not line.strip().startswith((".", "//"))]
    # 32 exponentials in the register copy (the general copy's loops have 8 each, unrolled by 4)
    # where there were 64; 2709 instructions where there were 3893, of which the register copy's
    # 2730 are now 1613, 50 an element (NVRTC 13, sm_90); no NaN test before a conversion to bfloat16.
    assert sum("ex2.approx" in line for line in instructions) <= 32 + 24
    assert len(instructions) < 2900
    assert not any("setp.nan" in line for line in instructions)


def cast_to_bfloat16(build) -> str:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(bz.ops.cast(build(x), bz.bfloat16))
    body = engine.cuda_source(f, [np.ones(8, np.float32)]).body
    return body[body.index("__global__"):]


@pytest.mark.parametrize("build, arithmetic", [
    (lambda x: x * 3.0, True), (lambda x: x + x, True), (lambda x: x - 2.0, True),
    (lambda x: x, False),  # a NaN loaded keeps its payload's top bits
    (lambda x: x * 1.0, False), (lambda x: x + 0.0, False),  # the compiler may fold them away
    (lambda x: x / 3.0, False), (lambda x: bz.ops.exp(x), False),
], ids=["mul", "add", "sub", "load", "times_one", "plus_zero", "div", "exp"])
def test_only_arithmetic_results_convert_to_bfloat16_without_a_nan_test(build, arithmetic):
    body = cast_to_bfloat16(build)
    assert ("bz_arith_float_to_bf16_bits(" in body) == arithmetic
    assert ("bz_float_to_bf16_bits(" in body) != arithmetic


def masked_softmax_reference(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        scores = np.where(mask, x.astype(np.float64) * ATTENTION_SCALE, -np.inf)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def masked_inputs(rows: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores [2, rows, length] and a causal mask [1, rows, length] whose row 1 is all masked."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, rows, length)) * 4).astype(BF16)
    mask = np.tril(np.ones((rows, length), bool), k=length - rows)
    mask[min(1, rows - 1)] = False
    return x, mask[None]


@needs_gxx
@pytest.mark.parametrize("length, function", [(1000, "_warp"), (1024, "_warp"), (500, "_warp2"), (2048, ""), (7, ""),
                                              (1, "")])
def test_masked_softmax_rows_in_registers_match_numpy_on_the_cpu(length, function):
    x, mask = masked_inputs(3, length)
    (out,), launches = run_on_cpu(Prepared(next(c for c in CASES if c.name == "scaled_masked_softmax"),
                                           "quick").fusion, [x, mask])
    assert launches[0][0] == "scaled_masked_softmax_t0_T14" + function
    want, got = masked_softmax_reference(x, mask), out.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # the masked row: 0/0
    assert np.isnan(want[:, 1]).all()
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-2, atol=2e-3)


@needs_gxx
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_plain_softmax_rows_match_numpy_on_the_cpu(dtype):
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.float32 if dtype == np.float32 else bz.bfloat16)
        f.add_output(bz.ops.softmax(x, -1))
    x = (np.random.default_rng(1).standard_normal((5, 1024)) * 3).astype(dtype)
    (out,), _ = run_on_cpu(f, [x])
    e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True))
    np.testing.assert_allclose(out.astype(np.float64), e / e.sum(-1, keepdims=True), rtol=1e-2, atol=1e-6)


@needs_gxx
def test_division_by_extreme_row_maxima_matches_numpy_on_the_cpu():
    """x / max(row): divisors with no normal reciprocal take the scaled reciprocal."""
    x = row_quotients.rows(64)
    (got,), _ = run_on_cpu(row_quotients.divided_by_row_maximum(), [x])
    row_quotients.check_quotients(x, got)
