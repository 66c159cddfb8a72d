"""Simulation programs of an eighth kind, written as loop kernels the way Taichi, Warp and Numba users
write them: an adaptive time step whose top-level statements compute the step in several assignments,
each reading the one before (a serial task between two parallel loops); an implicit Euler step solved by
Newton's method whose `while ... else` marks the solves that did not converge, and a search for the first
obstacle along each particle's path by nested `for ... else` loops (a `continue` in the inner loop's else);
and, in NumPy under `bz.jit`, a lattice Boltzmann step whose bounce-back indexes the populations by a list of
opposite directions, a drift renormalized every step, whose np.roll rolls the roll of the step before, and
the CFL step of a particle set that may be empty (a max with `initial=`).

Each runs a few steps from a Python loop, on the CPU backend (whose CUDA is also compiled with NVRTC: the
fixture of tests/programs/test_sim_programs.py), through its generated CUDA run on the CPU
(tests/loop_cuda_on_cpu.py: a thread per CUDA thread) and on a GPU, and is checked against a NumPy or
pure-Python float64 reference; arrays a program writes whole start as NaN or -1."""

import numpy as np
import pytest
from programs.conftest import CUDA, Place
from programs.test_model_programs4 import call
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)
from programs.test_sim_programs7 import FAKE_GPU, launch, nans

import braze as bz

RNG = np.random.default_rng(808)


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), FAKE_GPU, CUDA])
def where(request) -> Place:
    return request.param


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


# --- implicit Euler by Newton's method, and the first obstacle along a path -------------------------------
@bz.kernel
def implicit_decay(y: bz.Array[bz.float64, 1], k: bz.Array[bz.float64, 1], status: bz.Array[bz.int32, 1],
                   dt: float, max_iterations: int):
    for i in range(y.shape[0]):
        # solve z + dt * k z^3 = y for the step's z; the loop's else marks a solve that did not converge
        z = y[i]
        iterations = 0
        while iterations < max_iterations:
            residual = z + dt * k[i] * z * z * z - y[i]
            z -= residual / (1.0 + 3.0 * dt * k[i] * z * z)
            iterations += 1
            if abs(residual) < 1e-12:
                break
        else:
            iterations = -1
        y[i] = z
        status[i] = iterations


@bz.kernel
def first_obstacle(x: bz.Array[bz.float64, 2], v: bz.Array[bz.float64, 2], centres: bz.Array[bz.float64, 2],
                   hit: bz.Array[bz.int32, 1], substeps: int, dt: float, radius: float):
    for p in range(x.shape[0]):
        hit[p] = -1  # never reached an obstacle within the substeps
        for s in range(substeps):
            px, py = x[p, 0] + s * dt * v[p, 0], x[p, 1] + s * dt * v[p, 1]
            for c in range(centres.shape[0]):
                if (px - centres[c, 0]) ** 2 + (py - centres[c, 1]) ** 2 < radius * radius:
                    break
            else:
                continue  # inside none: the next substep
            hit[p] = s * 100 + c
            break
        else:
            hit[p] = -2  # every substep ran: the particle got through


def test_loop_else_clauses_mark_unconverged_solves_and_particles_that_got_through(where):
    n = 40
    y0, k0 = RNG.random(n) * 4, RNG.random(n) * 50
    k0[::7] = 1e6  # stiff: Newton needs more iterations than allowed
    y, k, status = where(y0.copy()), where(k0), where(np.full(n, -9, np.int32))
    launch(where, implicit_decay, y, k, status, 0.1, 12)
    expected_y, expected_status = y0.copy(), np.zeros(n, np.int32)
    for i in range(n):
        z, iterations = y0[i], 0
        while iterations < 12:
            residual = z + 0.1 * k0[i] * z ** 3 - y0[i]
            z -= residual / (1 + 0.3 * k0[i] * z * z)
            iterations += 1
            if abs(residual) < 1e-12:
                break
        else:
            iterations = -1
        expected_y[i], expected_status[i] = z, iterations
    np.testing.assert_array_equal(where.host(status), expected_status)
    assert (expected_status == -1).any() and (expected_status > 0).any()
    np.testing.assert_allclose(where.host(y), expected_y, rtol=1e-12)

    x0, v0, centres = RNG.random((n, 2)), RNG.random((n, 2)) - 0.5, RNG.random((5, 2))
    hit = where(np.full(n, -9, np.int32))
    launch(where, first_obstacle, where(x0), where(v0), where(centres), hit, 8, 0.2, 0.12)
    expected = np.full(n, -2, np.int32)
    for p in range(n):
        for s in range(8):
            inside = np.flatnonzero(((x0[p] + s * 0.2 * v0[p] - centres) ** 2).sum(1) < 0.12 ** 2)
            if inside.size:
                expected[p] = s * 100 + inside[0]
                break
    np.testing.assert_array_equal(where.host(hit), expected)
    assert (expected == -2).any() and (expected >= 0).any()


# --- lattice Boltzmann in NumPy, under bz.jit ---------------------------------------------------------------
D2Q9_E = np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1], [1, 1], [-1, 1], [-1, -1], [1, -1]])
D2Q9_W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4)
D2Q9_OPPOSITE = [0, 3, 4, 1, 2, 7, 8, 5, 6]


def lbm_collide(f, solid, tau):
    """A BGK collision, with full-way bounce-back in solid cells: the populations swapped with their
    opposite directions by a list index, as NumPy codes write it."""
    rho = f.sum(axis=0)
    ux = (f * D2Q9_E[:, 0, None, None]).sum(axis=0) / rho
    uy = (f * D2Q9_E[:, 1, None, None]).sum(axis=0) / rho
    eu = D2Q9_E[:, 0, None, None] * ux + D2Q9_E[:, 1, None, None] * uy
    feq = D2Q9_W[:, None, None] * rho * (1 + 3 * eu + 4.5 * eu ** 2 - 1.5 * (ux ** 2 + uy ** 2))
    return np.where(solid, f[D2Q9_OPPOSITE], f - (f - feq) / tau), rho


def lbm_stream(f):
    """Each population moved one cell along its direction, on a torus."""
    return np.stack([np.roll(np.roll(f[q], D2Q9_E[q, 1], axis=0), D2Q9_E[q, 0], axis=1) for q in range(9)])


def lbm_step(f, solid, tau):
    collided, rho = lbm_collide(f, solid, tau)
    return lbm_stream(collided), rho


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_lattice_boltzmann_bounce_back_by_a_list_of_opposite_directions(backend):
    ny, nx = 6, 9
    solid = np.zeros((ny, nx), bool)
    solid[2:4, 3:5] = True
    f0 = D2Q9_W[:, None, None] * (1 + 0.1 * RNG.random((9, ny, nx)))
    step = bz.jit(lbm_step, backend=backend)
    f, expected = f0, f0
    with bz.record() as recording:
        for _ in range(4):
            f, rho = step(f, solid, 0.8)
            expected, expected_rho = lbm_step(expected, solid, 0.8)
    np.testing.assert_allclose(f, expected, rtol=1e-12)
    np.testing.assert_allclose(rho, expected_rho, rtol=1e-12)
    np.testing.assert_allclose(f.sum(), f0.sum(), rtol=1e-12)  # collision, bounce-back and streaming keep the mass
    if backend == "llvm":
        # The collided populations, which the stream reads through 9 populations' rolls at 4 shifts
        # each, are written once by a task of their own (lower/values.py, ELEMENTWISE_PER_TENSOR), not
        # computed again, momentum sums and all, at each of the 36 shifts: the kernel stays small and
        # compiles in seconds (each sum reduced at every shift, LLVM took a minute over it).
        (written,) = recording.segments
        assert len(written) == 3, written  # the density, the collided populations and the streamed ones


LIST_INDICES = [lambda f: f[[2, 0, 1, 1]], lambda f: f[:, [3, -1]], lambda f: f[..., [4, 0]], lambda f: f[1, [0, 2]],
                lambda f: f[[1, 0], :, 2], lambda f: f[:, [1, 2], 0], lambda f: f[None, [0, 2], 1:3],
                lambda f: f[np.array([2, 1])], lambda f: f[[1, 2], ..., None], lambda f: f[..., [1, 2], :]]


@pytest.mark.parametrize("index", range(len(LIST_INDICES)))
def test_a_list_index_places_its_axis_where_numpy_does(index):
    """The list's axis stays in its place when the index's ints stand next to it, and comes first when
    a slice stands between them (`f[[1, 0], :, 2]`)."""
    f = RNG.random((3, 4, 5))
    got = bz.jit(LIST_INDICES[index], backend="reference")(f)
    assert got.shape == LIST_INDICES[index](f).shape
    np.testing.assert_array_equal(got, LIST_INDICES[index](f))


def test_two_list_indices_pick_one_element_each():
    f = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(bz.jit(lambda f: f[[0, 1], [1, 2]])(f), f[[0, 1], [1, 2]])
    with pytest.raises(bz.UnsupportedError, match=r"indices 1 and 2 are integer arrays beside an int or None"):
        bz.jit(lambda f: f[0, [0, 1], [1, 2]])(np.ones((2, 3, 4)))


# --- several steps of np.roll traced in one function --------------------------------------------------------
def drift_and_renormalize(p, c, steps):
    """Upwind advection of a probability on a ring (one per row), each step renormalized to sum 1: every
    step rolls the result of the one before."""
    for _ in range(steps):
        p = (1 - c) * p + c * np.roll(p, 1, axis=1)
        p = p / np.sum(p, axis=1, keepdims=True)
    return p


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_renormalized_drift_rolls_the_roll_of_each_step(backend):
    p0 = RNG.random((5, 13))
    got = bz.jit(drift_and_renormalize, backend=backend, static_argnames="steps")(p0, 0.3, 6)
    np.testing.assert_allclose(got, drift_and_renormalize(p0, 0.3, 6), rtol=1e-12)


def test_a_roll_keeps_the_extent_it_rolls():
    """A roll is a cat of x[c:] and x[:c]: its extent is x's, not the expression of their sum, which would
    nest in each roll of a roll, and every index read through them with it (five renormalized steps of the
    drift above compiled in two minutes)."""
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float64, name="x")
        rolled = bz.ops.roll(bz.ops.roll(x, 1, 1), -3, 1)
        halves = bz.ops.cat([x[:, :2], x[:, 2:]], 1)
        f.add_output(rolled)
        f.add_output(halves)
    assert rolled.shape[1].same_as(x.shape[1]) and halves.shape[1].same_as(x.shape[1])
    for n in (0, 1, 2, 7):
        a = RNG.random((3, n))
        got_rolled, got_halves = f.execute([a])
        np.testing.assert_array_equal(got_rolled, np.roll(np.roll(a, 1, 1), -3, 1))
        np.testing.assert_array_equal(got_halves, a)


# --- a CFL step of a particle set that may be empty, in NumPy under bz.jit ------------------------------------
def cfl_time_step(v, active, h, dt_max):
    """The largest speed among the active particles (`initial=` for when there are none, the method's spelling
    too) and the bounds of the velocities, as NumPy codes guard an empty set."""
    speed = np.sqrt((v * v).sum(axis=1))
    fastest = np.max(speed, where=active, initial=0.0)
    dt = np.minimum(dt_max, 0.4 * h / np.maximum(fastest, 1e-12))
    return dt, v.max(axis=0, initial=-np.inf), np.min(v, axis=0, initial=np.inf), speed.max(initial=0.0)


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_cfl_time_step_of_a_particle_set_that_may_be_empty(backend):
    step = bz.jit(cfl_time_step, backend=backend)
    for n in (0, 1, 17):
        v = RNG.random((n, 3)) - 0.5
        active = RNG.random(n) > 0.3
        got, expected = step(v, active, 0.05, 0.01), cfl_time_step(v, active, 0.05, 0.01)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-14)


def test_lattice_boltzmann_step_on_each_backend(where):
    """The step above as the GPU runs it too (on the fake GPU, the fusion's CUDA run on the CPU)."""
    solid = np.zeros((5, 7), bool)
    solid[1:3, 2] = True
    f0 = D2Q9_W[:, None, None] * (1 + 0.1 * RNG.random((9, 5, 7)))
    step = bz.jit(lbm_step)
    f, expected = f0, f0
    for _ in range(2):  # the second step reads what the first wrote
        f, rho = call(where, step, f, solid, 0.8)
        expected, expected_rho = lbm_step(expected, solid, 0.8)
    np.testing.assert_allclose(f, expected, rtol=1e-12)
    np.testing.assert_allclose(rho, expected_rho, rtol=1e-12)
