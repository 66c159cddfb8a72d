"""Random fusions (tests/engine/random_fusions.py) through their generated CUDA run on the CPU
(tests/cuda_on_cpu.py: g++, a thread per CUDA thread), launched as the executor plans them for a
random small fake GPU (SMs, resident blocks, block size), against the reference backend within the
generator's error bounds. A few examples a run (BRAZE_FUZZ_SCALE, tests/fuzz_scale.py, draws more): the
harness builds each program with g++."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from fuzz_values import check_output
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_fusions import RandomFusion

import braze as bz
from braze import dtypes as dt

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_float_fusions_on_a_fake_gpu_match_the_reference(data):
    dtypes = data.draw(st.lists(st.sampled_from(dt.FLOAT_DTYPES), min_size=1, max_size=2, unique=True))
    gpu = {"sm_count": data.draw(st.integers(1, 4)), "resident": data.draw(st.integers(1, 4)),
           "block_size": data.draw(st.sampled_from([128, 256, 512]))}
    with bz.Fusion() as f:
        program = RandomFusion(data, f, dtypes)
        program.build(data.draw(st.integers(3, 8)), max_reductions=3, reduction_odds=0.35)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    inputs = [recipe.make(rng) for recipe in program.recipes]
    try:
        want = f.execute(inputs, backend="reference")
    except bz.InputError:  # a max of nothing: no values to compare
        return
    got, _ = run_on_cpu(f, inputs, **gpu)
    for i, (node, g, w) in enumerate(zip(program.outputs, got, want)):
        check_output(node, g, w, f"output {i} ({node.name}) on {gpu}:\n" + "\n".join(program.lines))
