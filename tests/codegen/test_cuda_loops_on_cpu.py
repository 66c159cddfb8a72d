"""Loop kernels' generated CUDA run on the CPU (tests/loop_cuda_on_cpu.py) against the CPU backend:
atomics of every width, local arrays and a while loop, vectors, merged loops, and a spring chain whose
updates of a neighbour's element must be atomic. NVRTC only compiles this code; here it runs, each
CUDA thread an OS thread, so a wrong index or an update that is not atomic shows without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import all_cases, poison
from loop_cuda_on_cpu import available, run_on_cpu
from programs.test_sim_programs4 import chain_reference, chain_step

import braze as bz
from braze.frontend import kernel_ast

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")
CASES = {c.name: c for c in all_cases()}


@pytest.mark.parametrize("name", ["atomics", "local_arrays", "vectors", "particle_step"])
def test_case_matches_the_cpu(name):
    case = CASES[name]
    host = case.args(np.random.default_rng(0))
    for position in case.outputs:
        poison(host[position])
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in host]
    case.kernel(*expected)
    launches = run_on_cpu(case.kernel, *host)
    if name == "particle_step":
        assert len(launches) == 1  # its six loops merged into one function
    if case.compare is not None:
        case.compare(host, expected)
        return
    for n, (got, want) in enumerate(zip(host, expected)):
        if isinstance(want, np.ndarray):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"argument {n}")


def chain(kernel, n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """One step of the spring chain through the harness, and what it should give."""
    x = -0.1 * np.arange(n) + 0.01 * np.random.default_rng(7).standard_normal(n)
    pinned = (np.arange(n) == 0).astype(np.uint8)
    v, force, x_next = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
    want_x, want_v = chain_reference(x, v, pinned, 80.0, 0.5, 0.1, 1e-3, 1)
    run_on_cpu(kernel, x, v, force, x_next, pinned, 80.0, 0.5, 0.1, 1e-3)
    return np.concatenate([x_next, v]), np.concatenate([want_x, want_v])


def test_a_spring_chain_updates_its_neighbours_atomically():
    got, want = chain(chain_step)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_harness_loses_updates_that_are_not_atomic(monkeypatch):
    """The chain's `force[i] += s; force[i + 1] -= s` taken for the thread's own elements (plain
    read-modify-writes, as before kernel_ast.disjoint_places): threads i and i + 1 race for
    force[i + 1], and the harness interleaves them (every run of 200 lost updates)."""
    monkeypatch.setattr(kernel_ast, "disjoint_places", lambda places, coordinates: True)
    got, want = chain(bz.kernel(chain_step.fn))
    assert not np.allclose(got, want, rtol=1e-12, atol=1e-12)
