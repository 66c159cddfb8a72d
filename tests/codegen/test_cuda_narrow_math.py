"""A float32 that only a bfloat16 or float16 keeps computes exp and the logistic functions
approximately (cuda_narrow.py, cuda_rules "narrow"): checked in the source (where the rule applies
and where it must not), and by running the generated CUDA on the CPU (the prelude's C-library
stand-ins for the approximate instructions, flushing alike) against NumPy in float64, over extreme
values, within one rounding step of the narrow type. The exact math calls (isnan, expm1, atan2, ...)
run on the CPU too, against the reference.
"""

from __future__ import annotations

import narrow_math_cases
import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu

import braze as bz
from braze import config, engine

NARROW_TYPES = narrow_math_cases.NARROW_TYPES


def source(build, out_dtype=bz.bfloat16) -> str:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(bz.ops.cast(build(x), out_dtype))
    body = engine.cuda_source(f, [np.ones(8, np.float32)]).body
    return body[body.index("__global__"):]


silu, gelu = narrow_math_cases.FUNCTIONS["silu"], narrow_math_cases.FUNCTIONS["gelu_tanh"]


@pytest.mark.parametrize("build, narrow_call", [
    (silu, "bz_sigmoid_narrow("), (bz.ops.sigmoid, "bz_sigmoid_narrow("), (gelu, "bz_gelu_tanh_narrow("),
    (bz.ops.exp, "bz_exp_narrow("), (lambda x: bz.ops.exp(x) * 2.0 + x, "bz_exp_narrow("),
], ids=["silu", "sigmoid", "gelu_tanh", "exp", "exp_in_arithmetic"])
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
def test_a_result_rounded_to_two_bytes_computes_approximately(build, narrow_call, out):
    assert narrow_call in source(build, NARROW_TYPES[out][0])


@pytest.mark.parametrize("build", [silu, gelu, bz.ops.exp], ids=["silu", "gelu_tanh", "exp"])
def test_a_float32_result_and_the_knob_keep_it_exact(build):
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(build(x))
    exact = engine.cuda_source(f, [np.ones(8, np.float32)]).body
    with config.scope(disable="narrow_math"):
        knob = source(build)
    for body in (exact, knob):
        assert "_narrow(" not in body and "bz_exp_narrow(" not in body


@pytest.mark.parametrize("build", [
    lambda x: bz.ops.where(bz.ops.exp(x) > 2.0, x, x * 3.0),  # a comparison: a branch could flip
    lambda x: bz.ops.floor(bz.ops.exp(x)),  # a step
    lambda x: bz.ops.cast(bz.ops.cast(bz.ops.exp(x), bz.float64), bz.float32),  # computed in float64
], ids=["comparison", "floor", "float64"])
def test_operands_of_steps_and_comparisons_stay_exact(build):
    body = source(build)
    assert "bz_exp_narrow(" not in body and "expf(" in body


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", narrow_math_cases.FUNCTIONS)
def test_narrow_results_match_numpy_within_one_rounding_step(name, out):
    x = narrow_math_cases.inputs()
    (got,), _ = run_on_cpu(narrow_math_cases.fusion(name, out), [x])
    narrow_math_cases.check(name, out, x, got)


def softmax_source(dtype, build=lambda x: bz.ops.softmax(x, -1)) -> str:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=dtype)
        outs = build(x)
        for out in outs if isinstance(outs, list) else [outs]:
            f.add_output(out)
    dtype = np.float32 if dtype == bz.float32 else narrow_math_cases.NARROW_TYPES["bfloat16"][1]
    return engine.cuda_source(f, [np.ones((4, 1024), dtype)]).body


def test_a_bfloat16_softmax_sums_narrow_exponentials_and_a_float32_one_exact():
    narrow = softmax_source(bz.bfloat16)
    assert "bz_exp_narrow(" in narrow and " expf(" not in narrow and "(expf(" not in narrow
    exact = softmax_source(bz.float32)
    assert "bz_exp_narrow(" not in exact and "expf(" in exact


def test_a_sum_that_also_reaches_a_float32_output_stays_exact():
    body = softmax_source(bz.bfloat16,
                          lambda x: [bz.ops.softmax(x, -1), bz.ops.exp(bz.ops.cast(x, bz.float32)).sum(-1)])
    # The softmax's exponentials may be narrow; the float32 sum of exponentials is an output: exact.
    assert "expf(" in body.replace("bz_exp_narrow(", "")


@pytest.mark.skipif(not available(), reason="needs g++")
def test_a_narrow_bfloat16_softmax_matches_numpy_on_the_cpu():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.bfloat16)
        f.add_output(bz.ops.softmax(x, -1))
    x = (np.random.default_rng(3).standard_normal((6, 1000)) * 8).astype(narrow_math_cases.NARROW_TYPES["bfloat16"][1])
    (got,), _ = run_on_cpu(f, [x])
    e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True))
    np.testing.assert_allclose(got.astype(np.float64), e / e.sum(-1, keepdims=True), rtol=2 ** -7, atol=1e-30)


EXACT_UNARY = ["isnan", "isinf", "isfinite", "exp2", "expm1", "log2", "log1p", "sin", "cos", "tan", "ceil",
               "round", "trunc"]


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_math_call_of_the_cuda_rules_builds_and_matches_the_reference_on_the_cpu(dtype):
    """The CUDA of each math op (C++ overloads g++ finds only in std:: for float) run on the CPU, an
    argmax over halves (isnan) among them."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=getattr(bz, dtype))
        for name in EXACT_UNARY:
            f.add_output(getattr(bz.ops, name)(x))
        f.add_output(bz.ops.atan2(x, x + 1.0))
        f.add_output(bz.ops.argmax(x, axes=[0]))
    x = np.array([0.25, -1.5, 2.75, np.inf, -0.5, np.nan, 1.0], dtype=dtype)
    got, _ = run_on_cpu(f, [x])
    for name, g, w in zip([*EXACT_UNARY, "atan2", "argmax"], got, f.execute([x], backend="reference")):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3, err_msg=name)
