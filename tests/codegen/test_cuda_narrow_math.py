"""A float32 that only a bfloat16 or float16 keeps computes exp and the logistic functions
approximately (cuda_rules, "narrow"): checked in the source (where the rule applies and where it must
not), and by running the generated CUDA on the CPU (tests/cuda_on_cpu.h models the intrinsics' error
sources) against NumPy in float64, over extreme values, within one rounding step of the narrow type.
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
    (bz.ops.exp, "__expf("), (lambda x: bz.ops.exp(x) * 2.0 + x, "__expf("),
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
        assert "_narrow(" not in body and "__expf(" not in body


@pytest.mark.parametrize("build", [
    lambda x: bz.ops.where(bz.ops.exp(x) > 2.0, x, x * 3.0),  # a comparison: a branch could flip
    lambda x: bz.ops.floor(bz.ops.exp(x)),  # a step
    lambda x: bz.ops.cast(bz.ops.cast(bz.ops.exp(x), bz.float64), bz.float32),  # computed in float64
], ids=["comparison", "floor", "float64"])
def test_operands_of_steps_and_comparisons_stay_exact(build):
    body = source(build)
    assert "__expf(" not in body and "expf(" in body


@pytest.mark.skipif(not available(), reason="needs g++")
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", narrow_math_cases.FUNCTIONS)
def test_narrow_results_match_numpy_within_one_rounding_step(name, out):
    x = narrow_math_cases.inputs()
    (got,), _ = run_on_cpu(narrow_math_cases.fusion(name, out), [x])
    narrow_math_cases.check(name, out, x, got)
