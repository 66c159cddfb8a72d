"""Simulation programs of a seventh kind, written as loop kernels the way Taichi, Warp and Numba users
write them: Gray-Scott reaction-diffusion on a torus, shallow water by Lax-Friedrichs with reflecting walls
set by a serial task, Sod's shock tube by Rusanov fluxes at faces (a task whose next task reads two of
its elements), molecular dynamics of a Lennard-Jones fluid with a Berendsen thermostat (a kinetic energy
reduced by atomics, a serial task computing the scale, a parallel rescale, all in one kernel), lattice
random walks from counter-based random bits with a histogram of end points, a radial distribution
function over all pairs, Smith-Waterman alignment by anti-diagonal wavefronts with an atomic maximum,
and a Hillis-Steele scan by passes followed by a stream compaction of flagged elements.

Each runs a few steps from a Python loop, on the CPU backend (whose CUDA is also compiled with NVRTC: the
fixture of tests/programs/test_sim_programs.py), through its generated CUDA run on the CPU
(tests/loop_cuda_on_cpu.py: a thread per CUDA thread) and on a GPU, and is checked against a NumPy or
pure-Python float64 reference; arrays a program writes whole start as NaN or -1."""

import math

import numpy as np
import pytest
from cuda_on_cpu import available
from loop_cuda_on_cpu import run_on_cpu
from programs.conftest import CUDA, Place
from programs.test_model_programs4 import CudaOnCpu
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz

RNG = np.random.default_rng(707)

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


# --- reaction-diffusion -------------------------------------------------------------------------------
@bz.kernel
def gray_scott(u: bz.Array[bz.float32, 2], v: bz.Array[bz.float32, 2], u_next: bz.Array[bz.float32, 2],
               v_next: bz.Array[bz.float32, 2], du: bz.float32, dv: bz.float32, feed: bz.float32, kill: bz.float32,
               dt: bz.float32):
    ny, nx = u.shape[0], u.shape[1]
    for j, i in bz.ndrange(ny, nx):
        up, down, left, right = (j - 1) % ny, (j + 1) % ny, (i - 1) % nx, (i + 1) % nx
        lap_u = u[up, i] + u[down, i] + u[j, left] + u[j, right] - 4 * u[j, i]
        lap_v = v[up, i] + v[down, i] + v[j, left] + v[j, right] - 4 * v[j, i]
        uvv = u[j, i] * v[j, i] * v[j, i]
        u_next[j, i] = u[j, i] + dt * (du * lap_u - uvv + feed * (1 - u[j, i]))
        v_next[j, i] = v[j, i] + dt * (dv * lap_v + uvv - (feed + kill) * v[j, i])


def test_gray_scott_reaction_diffusion_on_a_torus(where):
    ny, nx = 17, 33
    u0 = np.ones((ny, nx), np.float32)
    v0 = np.zeros((ny, nx), np.float32)
    u0[6:11, 12:20], v0[6:11, 12:20] = 0.5, 0.25
    v0 += RNG.random((ny, nx)).astype(np.float32) * 0.01
    u, v = where(u0.copy()), where(v0.copy())
    u_next, v_next = where(nans(ny, nx)), where(nans(ny, nx))
    for _ in range(20):
        launch(where, gray_scott, u, v, u_next, v_next, 0.16, 0.08, 0.035, 0.065, 1.0)
        u, v, u_next, v_next = u_next, v_next, u, v

    def lap(a):
        return np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1) - 4 * a

    ur, vr = u0.astype(np.float64), v0.astype(np.float64)
    for _ in range(20):
        uvv = ur * vr * vr
        ur, vr = ur + 0.16 * lap(ur) - uvv + 0.035 * (1 - ur), vr + 0.08 * lap(vr) + uvv - 0.1 * vr
    np.testing.assert_allclose(where.host(u), ur, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(where.host(v), vr, rtol=1e-4, atol=1e-5)


# --- shallow water --------------------------------------------------------------------------------------
@bz.kernel
def shallow_water(h: bz.Array[bz.float64, 1], hu: bz.Array[bz.float64, 1], h_next: bz.Array[bz.float64, 1],
                  hu_next: bz.Array[bz.float64, 1], g: float, dt_dx: float):
    n = h.shape[0] - 2  # cells 1..n, ghosts 0 and n + 1
    # reflecting walls: the ghost mirrors its neighbour, with the momentum reversed
    h[0] = h[1]
    hu[0] = -hu[1]
    h[n + 1] = h[n]
    hu[n + 1] = -hu[n]
    for i in range(1, n + 1):
        fl_h, fr_h = hu[i - 1], hu[i + 1]
        fl_hu = hu[i - 1] * hu[i - 1] / h[i - 1] + 0.5 * g * h[i - 1] * h[i - 1]
        fr_hu = hu[i + 1] * hu[i + 1] / h[i + 1] + 0.5 * g * h[i + 1] * h[i + 1]
        h_next[i] = 0.5 * (h[i - 1] + h[i + 1]) - 0.5 * dt_dx * (fr_h - fl_h)
        hu_next[i] = 0.5 * (hu[i - 1] + hu[i + 1]) - 0.5 * dt_dx * (fr_hu - fl_hu)


def test_shallow_water_dam_break_between_reflecting_walls(where):
    for n in (1, 200):
        h0 = np.where(np.arange(n + 2) < (n + 2) // 2, 2.0, 1.0)
        hu0 = np.zeros(n + 2)
        h, hu = where(h0.copy()), where(hu0.copy())
        h_next, hu_next = where(nans(n + 2, dtype=np.float64)), where(nans(n + 2, dtype=np.float64))
        dt_dx = 0.4 / math.sqrt(9.81 * 2.0)
        for _ in range(30):
            launch(where, shallow_water, h, hu, h_next, hu_next, 9.81, dt_dx)
            h, hu, h_next, hu_next = h_next, hu_next, h, hu
        hr, hur = h0.copy(), hu0.copy()
        for _ in range(30):
            hr[0], hur[0], hr[-1], hur[-1] = hr[1], -hur[1], hr[-2], -hur[-2]
            flux = hur**2 / hr + 0.5 * 9.81 * hr**2
            hr[1:-1], hur[1:-1] = (0.5 * (hr[:-2] + hr[2:]) - 0.5 * dt_dx * (hur[2:] - hur[:-2]),
                                   0.5 * (hur[:-2] + hur[2:]) - 0.5 * dt_dx * (flux[2:] - flux[:-2]))
        # the ghosts of the arrays written last step are not rewritten: compare the cells
        np.testing.assert_allclose(where.host(h)[1:-1], hr[1:-1], rtol=1e-12)
        np.testing.assert_allclose(where.host(hu)[1:-1], hur[1:-1], rtol=1e-12, atol=1e-12)
        assert abs(where.host(h)[1:-1].sum() - h0[1:-1].sum()) < 1e-9 * n  # walls conserve the mass


# --- Euler equations ------------------------------------------------------------------------------------
GAMMA = 1.4


@bz.func
def euler_flux(rho, mom, energy):
    u = mom / rho
    p = (GAMMA - 1) * (energy - 0.5 * rho * u * u)
    return mom, mom * u + p, (energy + p) * u, abs(u) + math.sqrt(GAMMA * p / rho)


@bz.kernel
def rusanov_step(q: bz.Array[bz.float64, 2], flux: bz.Array[bz.float64, 2], dt_dx: float):
    n = q.shape[0]
    for f in range(n + 1):  # face f between cells f - 1 and f; the outer faces copy their cell (transmissive)
        left = max(f - 1, 0)
        right = min(f, n - 1)
        fl0, fl1, fl2, sl = euler_flux(q[left, 0], q[left, 1], q[left, 2])
        fr0, fr1, fr2, sr = euler_flux(q[right, 0], q[right, 1], q[right, 2])
        s = max(sl, sr)
        flux[f, 0] = 0.5 * (fl0 + fr0) - 0.5 * s * (q[right, 0] - q[left, 0])
        flux[f, 1] = 0.5 * (fl1 + fr1) - 0.5 * s * (q[right, 1] - q[left, 1])
        flux[f, 2] = 0.5 * (fl2 + fr2) - 0.5 * s * (q[right, 2] - q[left, 2])
    for i in range(n):
        for c in range(3):
            q[i, c] -= dt_dx * (flux[i + 1, c] - flux[i, c])


def rusanov_reference(q: np.ndarray, dt_dx: float) -> np.ndarray:
    padded = np.concatenate([q[:1], q, q[-1:]])
    rho, mom, energy = padded.T
    u = mom / rho
    p = (GAMMA - 1) * (energy - 0.5 * rho * u * u)
    f = np.stack([mom, mom * u + p, (energy + p) * u], 1)
    speed = np.abs(u) + np.sqrt(GAMMA * p / rho)
    s = np.maximum(speed[:-1], speed[1:])[:, None]
    face = 0.5 * (f[:-1] + f[1:]) - 0.5 * s * (padded[1:] - padded[:-1])
    return q - dt_dx * (face[1:] - face[:-1])


def test_sod_shock_tube_by_rusanov_fluxes_at_faces(where):
    n = 101
    x = (np.arange(n) + 0.5) / n
    rho, p = np.where(x < 0.5, 1.0, 0.125), np.where(x < 0.5, 1.0, 0.1)
    q0 = np.stack([rho, np.zeros(n), p / (GAMMA - 1)], 1)
    q, flux = where(q0.copy()), where(nans(n + 1, 3, dtype=np.float64))
    dt_dx = 0.4 / math.sqrt(GAMMA)
    expected = q0
    for _ in range(40):
        launch(where, rusanov_step, q, flux, dt_dx)
        expected = rusanov_reference(expected, dt_dx)
    got = where.host(q)
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-12)
    assert got[:, 0].min() > 0.1 and np.isfinite(where.host(flux)).all()


# --- molecular dynamics ---------------------------------------------------------------------------------
@bz.func
def minimum_image(d: bz.vec3d, box: float) -> bz.vec3d:
    return d - box * bz.math.floor(d / box + 0.5)


@bz.kernel
def md_step(x: bz.Array[bz.vec3d, 1], v: bz.Array[bz.vec3d, 1], f: bz.Array[bz.vec3d, 1],
            kinetic: bz.Array[bz.float64, 1], scale: bz.Array[bz.float64, 1], box: float, cutoff: float, dt: float,
            target: float, tau: float):
    n = x.shape[0]
    for i in range(n):  # half kick and drift
        v[i] += 0.5 * dt * f[i]
        x[i] = x[i] + dt * v[i]
        x[i] = x[i] - box * bz.math.floor(x[i] / box)
    for i in range(n):  # Lennard-Jones forces under the minimum image, with a cutoff
        acc = bz.vec3d()
        for j in range(n):
            if j != i:
                d = minimum_image(x[i] - x[j], box)
                r2 = bz.dot(d, d)
                if r2 < cutoff * cutoff:
                    inv6 = 1.0 / (r2 * r2 * r2)
                    acc += d * (24.0 * inv6 * (2.0 * inv6 - 1.0) / r2)
        f[i] = acc
    kinetic[0] = 0.0
    for i in range(n):  # second half kick, and the kinetic energy
        v[i] += 0.5 * dt * f[i]
        bz.atomic_add(kinetic[0], 0.5 * bz.dot(v[i], v[i]))
    temperature = 2.0 * kinetic[0] / (3.0 * n)
    scale[0] = math.sqrt(1.0 + dt / tau * (target / temperature - 1.0))
    for i in range(n):  # Berendsen: rescale towards the target temperature
        v[i] *= scale[0]


def md_reference(x, v, f, box, cutoff, dt, target, tau, steps):
    n = len(x)
    for _ in range(steps):
        v = v + 0.5 * dt * f
        x = x + dt * v
        x = x - box * np.floor(x / box)
        d = x[:, None] - x[None, :]
        d = d - box * np.floor(d / box + 0.5)
        r2 = (d**2).sum(-1)
        np.fill_diagonal(r2, np.inf)
        with np.errstate(divide="ignore"):
            inv6 = np.where(r2 < cutoff**2, 1 / r2**3, 0.0)
        f = (d * (24 * inv6 * (2 * inv6 - 1) / r2)[..., None]).sum(1)
        v = v + 0.5 * dt * f
        kinetic = 0.5 * (v**2).sum()
        scale = math.sqrt(1 + dt / tau * (target / (2 * kinetic / (3 * n)) - 1))
        v = v * scale
    return x, v, f, kinetic, scale


def test_lennard_jones_fluid_with_a_berendsen_thermostat(where):
    side, box = 4, 4 * 1.5
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    x0 = (grid + 0.5) * 1.5 + RNG.standard_normal((side**3, 3)) * 0.05
    x0 = x0[:61]  # an odd count
    v0 = RNG.standard_normal((61, 3)) * 0.5
    f0 = np.zeros_like(x0)
    x, v, f = where(x0.copy()), where(v0.copy()), where(f0.copy())
    kinetic, scale = where(nans(1, dtype=np.float64)), where(nans(1, dtype=np.float64))
    for _ in range(5):
        launch(where, md_step, x, v, f, kinetic, scale, box, 2.5, 0.002, 1.2, 0.1)
    xr, vr, fr, kr, sr = md_reference(x0, v0, f0, box, 2.5, 0.002, 1.2, 0.1, 5)
    np.testing.assert_allclose(where.host(x), xr, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(where.host(v), vr, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(where.host(f), fr, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(where.host(kinetic), [kr], rtol=1e-10)
    np.testing.assert_allclose(where.host(scale), [sr], rtol=1e-10)


# --- random walks ---------------------------------------------------------------------------------------
@bz.kernel
def lattice_walks(seed: int, steps: int, end: bz.Array[bz.int32, 2], counts: bz.Array[bz.int32, 1],
                  msd: bz.Array[bz.float64, 1]):
    half = counts.shape[0] // 2
    for w in range(end.shape[0]):
        px = 0
        py = 0
        for s in range(steps):
            bits = bz.random.bits(seed, w * steps + s)
            direction = bz.int32(bits & 3)  # 0: +x, 1: -x, 2: +y, 3: -y
            if direction < 2:
                px += 1 - 2 * direction
            else:
                py += 1 - 2 * (direction - 2)
        end[w, 0] = px
        end[w, 1] = py
        b = min(max(px + half, 0), counts.shape[0] - 1)
        bz.atomic_add(counts[b], 1)
        bz.atomic_add(msd[0], bz.float64(px * px + py * py) / end.shape[0])


def test_lattice_random_walks_from_counter_based_bits(where):
    walkers, steps, bins = 1000, 50, 21
    end, counts = where(np.full((walkers, 2), -1, np.int32)), where(np.zeros(bins, np.int32))
    msd = where(np.zeros(1))
    launch(where, lattice_walks, 12345, steps, end, counts, msd)
    bits = bz.random.bits(12345, np.arange(walkers * steps)).reshape(walkers, steps) & 3
    dx = np.where(bits == 0, 1, np.where(bits == 1, -1, 0)).sum(1)
    dy = np.where(bits == 2, 1, np.where(bits == 3, -1, 0)).sum(1)
    np.testing.assert_array_equal(where.host(end), np.stack([dx, dy], 1))
    np.testing.assert_array_equal(where.host(counts), np.bincount(np.clip(dx + 10, 0, 20), minlength=bins))
    np.testing.assert_allclose(where.host(msd), [(dx**2 + dy**2).mean()], rtol=1e-12)
    assert abs((dx**2 + dy**2).mean() - steps) < 10  # a walk's mean squared displacement grows as its steps


# --- structure ------------------------------------------------------------------------------------------
@bz.kernel
def radial_distribution(x: bz.Array[bz.float64, 2], box: float, dr: float, counts: bz.Array[bz.int64, 1]):
    n = x.shape[0]
    bins = counts.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            r2 = 0.0
            for c in range(3):
                d = x[i, c] - x[j, c]
                d -= box * bz.math.floor(d / box + 0.5)
                r2 += d * d
            b = int(math.sqrt(r2) / dr)
            if b < bins:
                bz.atomic_add(counts[b], 1)


def test_radial_distribution_function_over_all_pairs(where):
    n, box, dr, bins = 300, 5.0, 0.1, 25
    x = RNG.random((n, 3)) * box
    # columns of a larger array: rows 4 apart, as a struct of arrays with a padding field
    wide = np.concatenate([x, RNG.random((n, 1))], 1)
    counts = where(np.zeros(bins, np.int64))
    launch(where, radial_distribution, where.view(wide, lambda a: a[:, :3]), box, dr, counts)
    d = x[:, None] - x[None, :]
    d -= box * np.floor(d / box + 0.5)
    r = np.sqrt((d**2).sum(-1))[np.triu_indices(n, 1)]
    b = (r / dr).astype(np.int64)
    expected = np.bincount(b[b < bins], minlength=bins)
    got = where.host(counts)
    np.testing.assert_array_equal(got, expected)
    # an ideal gas: g(r) = counts / (pairs per volume * shell volume) stays near 1 past the first bins
    shells = 4 / 3 * np.pi * ((np.arange(bins) + 1) ** 3 - np.arange(bins) ** 3) * dr**3
    g = got / (n * (n - 1) / 2 / box**3 * shells)
    assert np.abs(g[10:].mean() - 1) < 0.1


# --- sequence alignment ---------------------------------------------------------------------------------
@bz.kernel
def smith_waterman_diagonal(a: bz.Array[bz.uint8, 1], b: bz.Array[bz.uint8, 1], h: bz.Array[bz.int32, 2],
                            best: bz.Array[bz.int32, 1], d: int, match: int, mismatch: int, gap: int):
    n, m = a.shape[0], b.shape[0]
    for i in range(max(1, d - m), min(n, d - 1) + 1):  # the cells (i, d - i) of anti-diagonal d
        j = d - i
        score = match if a[i - 1] == b[j - 1] else mismatch
        value = max(0, h[i - 1, j - 1] + score, h[i - 1, j] - gap, h[i, j - 1] - gap)
        h[i, j] = value
        bz.atomic_max(best[0], value)


def test_smith_waterman_by_anti_diagonal_wavefronts(where):
    for n, m in ((1, 1), (17, 40), (64, 9)):
        a, b = RNG.integers(0, 4, n).astype(np.uint8), RNG.integers(0, 4, m).astype(np.uint8)
        b[3:3 + min(n, m - 3, 8)] = a[:min(n, m - 3, 8)] if m > 3 else b[3:]  # a shared stretch
        init = np.full((n + 1, m + 1), -1, np.int32)
        init[0, :], init[:, 0] = 0, 0
        h, best = where(init), where(np.zeros(1, np.int32))
        a_, b_ = where(a), where(b)
        for d in range(2, n + m + 1):
            launch(where, smith_waterman_diagonal, a_, b_, h, best, d, 2, -1, 2)
        expected = np.zeros((n + 1, m + 1), np.int64)
        for i in range(1, n + 1):
            for j in range(1, m + 1):
                s = 2 if a[i - 1] == b[j - 1] else -1
                expected[i, j] = max(0, expected[i - 1, j - 1] + s, expected[i - 1, j] - 2, expected[i, j - 1] - 2)
        np.testing.assert_array_equal(where.host(h), expected)
        assert where.host(best)[0] == expected.max()


# --- scans ----------------------------------------------------------------------------------------------
@bz.kernel
def scan_pass(src: bz.Array[bz.int64, 1], dst: bz.Array[bz.int64, 1], offset: int):
    for i in range(src.shape[0]):
        dst[i] = src[i] + src[i - offset] if i >= offset else src[i]


@bz.kernel
def flags_of(values: bz.Array[bz.float32, 1], threshold: bz.float32, flags: bz.Array[bz.int64, 1]):
    for i in range(values.shape[0]):
        flags[i] = 1 if values[i] > threshold else 0


@bz.kernel
def compact(values: bz.Array[bz.float32, 1], flags: bz.Array[bz.int64, 1], positions: bz.Array[bz.int64, 1],
            out: bz.Array[bz.float32, 1], index: bz.Array[bz.int64, 1], kept: bz.Array[bz.int64, 1]):
    n = values.shape[0]
    for i in range(n):
        if flags[i]:
            slot = positions[i] - 1  # the inclusive scan counts this element
            out[slot] = values[i]
            index[slot] = i
    kept[0] = positions[n - 1] if n > 0 else 0


def test_hillis_steele_scan_then_stream_compaction(where):
    for n in (1, 17, 1000):
        values = (RNG.standard_normal(n) * 2).astype(np.float32)
        flags = where(np.full(n, -1, np.int64))
        launch(where, flags_of, where(values), 0.5, flags)
        # log2(n) passes from the flags, which the compaction reads again, through two buffers in turn
        buffers = [where(np.full(n, -1, np.int64)) for _ in range(2)]
        src, offset = flags, 1
        while offset < n:
            dst = buffers[0] if src is not buffers[0] else buffers[1]
            launch(where, scan_pass, src, dst, offset)
            src, offset = dst, offset * 2
        keep = values > 0.5
        np.testing.assert_array_equal(where.host(src), np.cumsum(keep))
        out, index = where(nans(n)), where(np.full(n, -1, np.int64))
        kept = where(np.full(1, -1, np.int64))
        launch(where, compact, where(values), flags, src, out, index, kept)
        k = int(keep.sum())
        assert where.host(kept)[0] == k
        np.testing.assert_array_equal(where.host(index)[:k], np.nonzero(keep)[0])
        np.testing.assert_array_equal(where.host(out)[:k], values[keep])
        assert np.isnan(where.host(out)[k:]).all()  # nothing past the kept elements is written
