"""Simulation programs of an eighth kind, written as loop kernels the way Taichi, Warp and Numba users
write them: an adaptive time step whose top-level statements compute the step in several assignments,
each reading the one before (a serial task between two parallel loops).

Each runs a few steps from a Python loop, on the CPU backend (whose CUDA is also compiled with NVRTC: the
fixture of tests/programs/test_sim_programs.py), through its generated CUDA run on the CPU
(tests/loop_cuda_on_cpu.py: a thread per CUDA thread) and on a GPU, and is checked against a NumPy or
pure-Python float64 reference; arrays a program writes whole start as NaN or -1."""

import numpy as np
import pytest
from cuda_on_cpu import available
from loop_cuda_on_cpu import run_on_cpu
from programs.conftest import CUDA, Place
from programs.test_model_programs4 import CudaOnCpu
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz

RNG = np.random.default_rng(808)

FAKE_GPU = pytest.param(CudaOnCpu("cuda_on_cpu"), id="cuda_on_cpu",
                        marks=pytest.mark.skipif(not available(), reason="needs g++"))


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), FAKE_GPU, CUDA])
def where(request) -> Place:
    return request.param


def launch(where: Place, kernel, *args) -> None:
    """`kernel(*args)`, or on the fake GPU its CUDA run on the CPU (the arrays updated in place)."""
    if isinstance(where, CudaOnCpu):
        run_on_cpu(kernel, *args)
    else:
        kernel(*args)


def nans(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype)


# --- adaptive time step ---------------------------------------------------------------------------------
@bz.kernel
def cfl_advance(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], vmax: bz.Array[bz.float64, 1],
                dts: bz.Array[bz.float64, 1], h: float, dt_max: float, step: int):
    vmax[0] = 0.0
    for i in range(x.shape[0]):
        bz.atomic_max(vmax[0], abs(v[i]))
    # the step in several assignments, each reading the one before, as a CFL condition is written
    dt = 0.5 * h / vmax[0]
    dt = min(dt, dt_max)
    half = 0.5 * dt
    dts[step] = half + half
    for i in range(x.shape[0]):
        x[i] += v[i] * dts[step]
        if x[i] < 0.0 or x[i] > 1.0:  # reflect off the walls of the unit interval
            x[i] = -x[i] if x[i] < 0.0 else 2.0 - x[i]
            v[i] = -v[i]


def test_adaptive_time_step_computed_by_top_level_statements(where):
    n, steps, h, dt_max = 50, 6, 0.02, 0.004
    x0, v0 = RNG.random(n), (RNG.random(n) - 0.5) * 4
    x, v = where(x0.copy()), where(v0.copy())
    vmax, dts = where(nans(1, dtype=np.float64)), where(nans(steps, dtype=np.float64))
    for step in range(steps):
        launch(where, cfl_advance, x, v, vmax, dts, h, dt_max, step)
    xr, vr, dtr = x0.copy(), v0.copy(), []
    for _ in range(steps):
        dt = min(0.5 * h / np.abs(vr).max(), dt_max)
        dtr.append(dt)
        xr += vr * dt
        out = (xr < 0) | (xr > 1)
        xr[out] = np.where(xr[out] < 0, -xr[out], 2 - xr[out])
        vr[out] = -vr[out]
    np.testing.assert_allclose(where.host(dts), dtr, rtol=1e-14)
    np.testing.assert_allclose(where.host(x), xr, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(where.host(v), vr)
