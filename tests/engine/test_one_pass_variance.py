"""The one-pass variance of the CUDA backend (braze/codegen/cuda_variance.py) over random programs,
no GPU needed: the Kernel IR planned for a GPU, every task rewritten as the CUDA code generator
rewrites it, compiled for the CPU and checked against the reference backend within the generator's
error bounds. The rewrite moves statements and loops around; this checks that what they compute
stays the same, over the programs tests/engine/random_fusions.py builds (variances among several
reductions, layer_norm, keepdim, views)."""

from __future__ import annotations

import dataclasses

import numpy as np
from fuzz_values import check_output
from hypothesis import given
from hypothesis import strategies as st
from random_fusions import RandomFusion
from test_fuzz_fusions import fuzz, listing_of

import braze as bz
from braze import config, engine
from braze import dtypes as dt
from braze.codegen.cuda_variance import one_pass_task

rewritten = {"tasks": 0}  # tasks the rewrite changed, over the whole run


class VarianceHeavyFusion(RandomFusion):
    """Random programs whose reductions are mostly variances and means (over any axes, of any
    node), so most programs hold a variance the rewrite takes."""

    def reduction(self):
        name = self.choice(["var", "var", "mean", "sum"])
        x = self.pick(lambda n: n.tv.ndim > 0)
        return None if x is None else self.reduce(name, x, *self.axes(x))


def run_one_pass(f: bz.Fusion, inputs: list) -> list:
    bound = engine.bind_inputs(f, inputs)
    key = engine.signature(f, bound)
    lowered = engine.lower_fusion(f, key, device_index=0)
    tasks = [one_pass_task(t) or t for t in lowered.kernel.tasks]
    rewritten["tasks"] += sum(new is not old for new, old in zip(tasks, lowered.kernel.tasks))
    kernel = dataclasses.replace(lowered.kernel, tasks=tuple(tasks))
    with config.scope(enable="poison_outputs"):
        return engine.compile_fusion(f, key, dataclasses.replace(lowered, kernel=kernel)).run(bound)


@fuzz(60)
@given(st.data())
def _one_pass_on_llvm(data):
    dtypes = data.draw(st.lists(st.sampled_from(dt.FLOAT_DTYPES), min_size=1, max_size=2, unique=True))
    with bz.Fusion() as f:
        program = VarianceHeavyFusion(data, f, dtypes)
        program.build(data.draw(st.integers(3, 8)), max_reductions=4, reduction_odds=0.45)
    inputs = [r.make(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))) for r in program.recipes]
    try:
        want = f.execute(inputs, backend="reference")
    except bz.InputError:  # a max of nothing: not this test's business
        return
    try:
        for i, (node, got, expected) in enumerate(zip(program.outputs, run_one_pass(f, inputs), want)):
            check_output(node, got, expected, f"output {i} ({node.name})")
    except Exception as error:
        error.add_note(listing_of(program, inputs))
        raise


def test_one_pass_variances_of_random_programs_match_the_reference():
    _one_pass_on_llvm()
    assert rewritten["tasks"] > 0  # the programs held variances the rewrite took


def _variance_errors(x: np.ndarray) -> tuple[float, float]:
    """The largest relative error of the rows' variances, against float64, of the one-pass rewrite
    and of the two float32 passes it replaces (both compiled for the CPU)."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.var(f.define_tensor([-1, -1]), [1]))
    want, before = x.astype(np.float64).var(1), rewritten["tasks"]
    one_pass = run_one_pass(f, [x])[0].astype(np.float64)
    assert rewritten["tasks"] == before + 1  # the variance did take one pass
    two_passes = np.asarray(f.execute([x])[0], np.float64)
    return float(np.max(np.abs(one_pass - want) / want)), float(np.max(np.abs(two_passes - want) / want))


def test_a_first_element_1000_standard_deviations_out_is_as_accurate_as_two_float32_passes():
    # Shifting by the row's first element multiplies the sums' error by about (k - m)^2 / var,
    # here 10^6: the float64 sums leave room for it (cuda_variance's module docstring).
    x = np.random.default_rng(6).standard_normal((4, 100003)).astype(np.float32)
    x[:, 0] = 1000.0
    one_pass, two_passes = _variance_errors(x)
    assert one_pass <= max(two_passes, 1e-6)


def test_rows_far_from_zero_are_as_accurate_as_two_float32_passes():
    x = (np.random.default_rng(7).standard_normal((4, 100003)) + 1000.0).astype(np.float32)
    one_pass, two_passes = _variance_errors(x)
    assert one_pass <= max(two_passes, 1e-6)
