"""Simulation programs written as a Taichi, Warp or Numba user new to braze would write them, from the
README and docs/ only: particles, n-body, SPH, springs, stencils, Jacobi, MPM transfers, histograms,
vectors and matrices, random numbers, integer arithmetic, control flow, @bz.func helpers, NumPy and
torch arguments, graphs. Each is checked against a NumPy or pure-Python float64 reference, on the CPU
and on a GPU (the `where` fixture of tests/programs/conftest.py places the arrays); the arrays a
program writes whole start as NaN or -1. On the CPU run, each kernel's CUDA for the arguments the
program gave it is also compiled with NVRTC where it is installed (no GPU needed)."""

import math

import numpy as np
import pytest
from engine.nvrtc_batches import compile_sources, renamed

import braze as bz
from braze.compile import nvrtc
from braze.frontend.kernel import KernelFunction


def argument_layout(value) -> tuple:
    """What a kernel's CUDA depends on in an argument: its type, dtype, rank and strides."""
    array = np.asarray(value)
    return type(value), array.dtype, array.strides


@pytest.fixture(autouse=True)
def cuda_compiles(where, monkeypatch, request):
    """On the CPU run, records each kernel the program calls with the layouts of its arguments (the
    module's kernels are wrapped for the test), then compiles the CUDA braze generates for each with
    NVRTC: one translation unit of PTX without optimization (`-G`), as tests/engine/nvrtc_batches.py
    compiles generated programs. The GPU run compiles them for real."""
    if where.name != "cpu" or not nvrtc.available():
        yield
        return
    calls: dict[tuple, tuple] = {}

    def recorded(kernel: KernelFunction):
        def call(*args, **kwargs):
            kernel(*args, **kwargs)  # first: a call that raises has no CUDA to compile
            layouts = (*map(argument_layout, args), *((k, argument_layout(v)) for k, v in sorted(kwargs.items())))
            calls.setdefault((kernel, *layouts), (kernel, args, kwargs))

        return call

    module = request.module  # this one, or a module that imports the fixture
    for name, value in vars(module).copy().items():
        if isinstance(value, KernelFunction):
            monkeypatch.setattr(module, name, recorded(value))
    yield
    sources = {}
    for kernel, args, kwargs in calls.values():
        source = kernel.cuda_source(*args, **kwargs)
        sources.setdefault(source.body, source)
    if sources:
        compile_sources([renamed(s.body, s.functions, f"call{i}") for i, s in enumerate(sources.values())])


# particle gravity/damping/bounce
@bz.kernel
def particle_step(x: bz.Array[bz.float32, 2], v: bz.Array[bz.float32, 2], dt: bz.float32, damping: bz.float32):
    for i in range(x.shape[0]):
        v[i, 1] -= 9.81 * dt
        for d in range(2):
            v[i, d] *= damping
            x[i, d] += v[i, d] * dt
            if x[i, d] < 0.0:
                x[i, d] = -x[i, d]
                v[i, d] = -v[i, d]
            elif x[i, d] > 1.0:
                x[i, d] = 2.0 - x[i, d]
                v[i, d] = -v[i, d]
            else:
                pass


def test_particle(where):
    rng = np.random.default_rng(0)
    x = rng.random((257, 2)).astype(np.float32)
    v = rng.standard_normal((257, 2)).astype(np.float32)
    xr, vr = x.astype(np.float64), v.astype(np.float64)
    x, v = where(x), where(v)
    for _ in range(20):
        particle_step(x, v, 0.01, 0.99)
        vr[:, 1] -= 9.81 * 0.01
        vr *= 0.99
        xr += vr * 0.01
        lo = xr < 0
        xr[lo] = -xr[lo]
        vr[lo] = -vr[lo]
        hi = xr > 1
        xr[hi] = 2 - xr[hi]
        vr[hi] = -vr[hi]
    np.testing.assert_allclose(where.host(x), xr, atol=1e-4)


# nbody
@bz.kernel
def nbody(pos: bz.Array[bz.float64, 2], mass: bz.Array[bz.float64, 1], acc: bz.Array[bz.float64, 2], eps: float):
    n = pos.shape[0]
    for i in range(n):
        ax = 0.0
        ay = 0.0
        az = 0.0
        for j in range(n):
            if j == i:
                continue
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz + eps * eps
            inv = mass[j] / (r2 * math.sqrt(r2))
            ax += dx * inv
            ay += dy * inv
            az += dz * inv
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az


def test_nbody(where):
    rng = np.random.default_rng(1)
    n = 100
    pos = rng.standard_normal((n, 3))
    m = rng.random(n)
    acc = where(np.full((n, 3), np.nan))
    nbody(where(pos), where(m), acc, 0.01)
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d**2).sum(-1) + 1e-4
    w = m[None, :] / (r2 * np.sqrt(r2))
    np.fill_diagonal(w, 0)
    ref = (d * w[..., None]).sum(1)
    np.testing.assert_allclose(where.host(acc), ref, rtol=1e-10)


# nbody vec3
@bz.kernel
def nbody_vec(pos: bz.Array[bz.vec3, 1], acc: bz.Array[bz.vec3, 1], soft: bz.float32):
    for i in range(pos.shape[0]):
        a = bz.vec3(0.0)
        pi = pos[i]
        for j in range(pos.shape[0]):
            d = pos[j] - pi
            r2 = bz.dot(d, d) + soft
            a += d / (r2 * bz.math.sqrt(r2))
        acc[i] = a


def test_nbody_vec(where):
    rng = np.random.default_rng(2)
    pos = rng.standard_normal((64, 3)).astype(np.float32)
    acc = where(np.full_like(pos, np.nan))
    nbody_vec(where(pos), acc, 0.1)
    p = pos.astype(np.float64)
    d = p[None] - p[:, None]
    r2 = (d**2).sum(-1) + 0.1
    ref = (d / (r2 * np.sqrt(r2))[..., None]).sum(1)
    np.testing.assert_allclose(where.host(acc), ref, rtol=1e-4, atol=1e-4)


# SPH density
@bz.kernel
def sph_density(x: bz.Array[bz.float64, 2], rho: bz.Array[bz.float64, 1], h: float, mass: float):
    n = x.shape[0]
    for i in range(n):
        s = 0.0
        for j in range(n):
            dx = x[i, 0] - x[j, 0]
            dy = x[i, 1] - x[j, 1]
            r2 = dx * dx + dy * dy
            if r2 >= h * h:
                continue
            q = h * h - r2
            s += mass * 315.0 / (64.0 * math.pi * h**9) * q * q * q
        rho[i] = s


def test_sph(where):
    rng = np.random.default_rng(3)
    x = rng.random((200, 2))
    rho = where(np.full(200, np.nan))
    sph_density(where(x), rho, 0.1, 0.02)
    d = x[:, None] - x[None]
    r2 = (d**2).sum(-1)
    h = 0.1
    q = np.where(r2 < h * h, h * h - r2, 0)
    ref = (0.02 * 315 / (64 * np.pi * h**9) * q**3).sum(1)
    np.testing.assert_allclose(where.host(rho), ref, rtol=1e-10)


# cloth springs with atomics
@bz.kernel
def spring_forces(
    x: bz.Array[bz.vec3, 1],
    springs: bz.Array[bz.int32, 2],
    rest: bz.Array[bz.float32, 1],
    f: bz.Array[bz.vec3, 1],
    k: bz.float32,
):
    for s in range(springs.shape[0]):
        a = springs[s, 0]
        b = springs[s, 1]
        d = x[b] - x[a]
        length = bz.length(d)
        fs = d * (k * (length - rest[s]) / length)
        for c in range(3):
            bz.atomic_add(f[a, c], fs[c])
            bz.atomic_sub(f[b, c], fs[c])


def test_springs(where):
    rng = np.random.default_rng(4)
    n = 50
    x = rng.random((n, 3)).astype(np.float32)
    springs = np.stack([rng.integers(0, n, 300), rng.integers(0, n, 300)], 1).astype(np.int32)
    springs = springs[springs[:, 0] != springs[:, 1]]
    rest = rng.random(len(springs)).astype(np.float32)
    f = where(np.zeros_like(x))  # the forces accumulate from zero
    spring_forces(where(x), where(springs), where(rest), f, 10.0)
    xd = x.astype(np.float64)
    ref = np.zeros_like(xd)
    for (a, b), r in zip(springs, rest):
        d = xd[b] - xd[a]
        length = np.linalg.norm(d)
        fs = d * 10 * (length - r) / length
        ref[a] += fs
        ref[b] -= fs
    np.testing.assert_allclose(where.host(f), ref, rtol=1e-3, atol=1e-3)


# cloth springs with vec atomic on x[a] += (per docs, non-own element atomic)
@bz.kernel
def spring_forces_vec(
    x: bz.Array[bz.vec3, 1], springs: bz.Array[bz.int64, 2], f: bz.Array[bz.vec3, 1], k: bz.float32, rest: bz.float32
):
    for s in range(springs.shape[0]):
        a, b = springs[s, 0], springs[s, 1]
        d = x[b] - x[a]
        fs = bz.normalize(d) * (k * (bz.length(d) - rest))
        f[a] += fs
        f[b] -= fs


def test_springs_vec(where):
    rng = np.random.default_rng(5)
    n = 40
    x = rng.random((n, 3)).astype(np.float32)
    springs = np.stack([np.arange(n - 1), np.arange(1, n)], 1).astype(np.int64)
    springs = np.concatenate([springs, np.stack([np.zeros(n - 2, np.int64), np.arange(2, n)], 1)])
    f = where(np.zeros_like(x))  # the forces accumulate from zero
    spring_forces_vec(where(x), where(springs), f, 5.0, 0.1)
    xd = x.astype(np.float64)
    ref = np.zeros_like(xd)
    for a, b in springs:
        d = xd[b] - xd[a]
        length = np.linalg.norm(d)
        fs = d / length * 5 * (length - 0.1)
        ref[a] += fs
        ref[b] -= fs
    np.testing.assert_allclose(where.host(f), ref, rtol=1e-3, atol=1e-3)


# heat 2d pingpong
@bz.kernel
def heat_step(src: bz.Array[bz.float32, 2], dst: bz.Array[bz.float32, 2], alpha: bz.float32):
    for i, j in bz.ndrange((1, src.shape[0] - 1), (1, src.shape[1] - 1)):
        dst[i, j] = src[i, j] + alpha * (
            src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1] - 4.0 * src[i, j]
        )


def test_heat(where):
    rng = np.random.default_rng(6)
    a = rng.random((33, 47)).astype(np.float32)
    ra = a.astype(np.float64)
    rb = ra.copy()
    a, b = where(a), where(a.copy())
    for _ in range(10):
        heat_step(a, b, 0.2)
        a, b = b, a
        rb[1:-1, 1:-1] = ra[1:-1, 1:-1] + 0.2 * (
            ra[:-2, 1:-1] + ra[2:, 1:-1] + ra[1:-1, :-2] + ra[1:-1, 2:] - 4 * ra[1:-1, 1:-1]
        )
        ra, rb = rb, ra
    np.testing.assert_allclose(where.host(a), ra, atol=1e-5)


# wave equation 3 arrays
@bz.kernel
def wave_step(prev: bz.Array[bz.float64, 2], cur: bz.Array[bz.float64, 2], nxt: bz.Array[bz.float64, 2], c2: float):
    nx, ny = cur.shape[0], cur.shape[1]
    for i, j in bz.ndrange(nx, ny):
        if i == 0 or j == 0 or i == nx - 1 or j == ny - 1:
            nxt[i, j] = 0.0
        else:
            lap = cur[i + 1, j] + cur[i - 1, j] + cur[i, j + 1] + cur[i, j - 1] - 4 * cur[i, j]
            nxt[i, j] = 2 * cur[i, j] - prev[i, j] + c2 * lap


def test_wave(where):
    n = 30
    u0 = np.zeros((n, n))
    u0[n // 2, n // 2] = 1.0
    bufs = [where(u0.copy()), where(u0.copy()), where(np.full((n, n), np.nan))]
    ref = [u0.copy(), u0.copy(), np.zeros((n, n))]
    for _ in range(15):
        wave_step(bufs[0], bufs[1], bufs[2], 0.25)
        p, c = ref[0], ref[1]
        nx = np.zeros_like(c)
        nx[1:-1, 1:-1] = (
            2 * c[1:-1, 1:-1]
            - p[1:-1, 1:-1]
            + 0.25 * (c[2:, 1:-1] + c[:-2, 1:-1] + c[1:-1, 2:] + c[1:-1, :-2] - 4 * c[1:-1, 1:-1])
        )
        ref = [c, nx, p]
        bufs = [bufs[1], bufs[2], bufs[0]]
    np.testing.assert_allclose(where.host(bufs[1]), ref[1], atol=1e-12)


# jacobi with residual via atomic
@bz.kernel
def jacobi(
    u: bz.Array[bz.float64, 2],
    unew: bz.Array[bz.float64, 2],
    f: bz.Array[bz.float64, 2],
    h2: float,
    res: bz.Array[bz.float64, 1],
):
    for i, j in bz.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - h2 * f[i, j])
        d = unew[i, j] - u[i, j]
        bz.atomic_add(res[0], d * d)


def test_jacobi(where):
    n = 20
    rng = np.random.default_rng(7)
    f = rng.random((n, n))
    u, un, fd = where(np.zeros((n, n))), where(np.zeros((n, n))), where(f)
    ru = np.zeros((n, n))
    for _ in range(30):
        res = where(np.zeros(1))  # the residual accumulates from zero
        jacobi(u, un, fd, 0.01, res)
        rn = ru.copy()
        rn[1:-1, 1:-1] = 0.25 * (ru[:-2, 1:-1] + ru[2:, 1:-1] + ru[1:-1, :-2] + ru[1:-1, 2:] - 0.01 * f[1:-1, 1:-1])
        rres = ((rn - ru) ** 2).sum()
        ru = rn
        u, un = un, u
    np.testing.assert_allclose(where.host(u), ru, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(where.host(res)[0], rres, rtol=1e-9)


# histogram
@bz.kernel
def hist(vals: bz.Array[bz.float64, 1], counts: bz.Array[bz.int64, 1], lo: float, hi: float):
    nb = counts.shape[0]
    for i in range(vals.shape[0]):
        b = bz.int64((vals[i] - lo) / (hi - lo) * nb)
        if b < 0 or b >= nb:
            continue
        bz.atomic_add(counts[b], 1)


def test_hist(where):
    v = np.random.default_rng(8).standard_normal(5000)
    c = where(np.zeros(16, np.int64))  # the counts accumulate from zero
    hist(where(v), c, -2.0, 2.0)
    ref = np.zeros(16, np.int64)
    for x in v:
        b = int((x + 2) / 4 * 16)
        if 0 <= b < 16:
            ref[b] += 1
    np.testing.assert_array_equal(where.host(c), ref)


# reduction into 1-element array
@bz.kernel
def total_energy(v: bz.Array[bz.float32, 2], m: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
    for i in range(v.shape[0]):
        e = 0.5 * m[i] * (v[i, 0] ** 2 + v[i, 1] ** 2 + v[i, 2] ** 2)
        bz.atomic_add(out[0], e)


def test_energy(where):
    rng = np.random.default_rng(9)
    v = rng.standard_normal((1000, 3)).astype(np.float32)
    m = rng.random(1000).astype(np.float32)
    out = where(np.zeros(1, np.float32))  # the energy accumulates from zero
    total_energy(where(v), where(m), out)
    ref = (0.5 * m.astype(np.float64) * (v.astype(np.float64) ** 2).sum(1)).sum()
    np.testing.assert_allclose(where.host(out)[0], ref, rtol=1e-4)


# atomic_max / min
@bz.kernel
def bounds(x: bz.Array[bz.int32, 1], out: bz.Array[bz.int32, 1]):
    for i in range(x.shape[0]):
        bz.atomic_min(out[0], x[i])
        bz.atomic_max(out[1], x[i])


def test_bounds(where):
    x = np.random.default_rng(10).integers(-1000, 1000, 777).astype(np.int32)
    out = where(np.array([2**31 - 1, -(2**31)], np.int32))
    bounds(where(x), out)
    assert where.host(out).tolist() == [x.min(), x.max()], out


@bz.kernel
def fbounds(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        bz.atomic_min(out[0], x[i])
        bz.atomic_max(out[1], x[i])


def test_fbounds(where):
    x = np.random.default_rng(11).standard_normal(777).astype(np.float32)
    out = where(np.array([np.inf, -np.inf], np.float32))
    fbounds(where(x), out)
    assert where.host(out).tolist() == [x.min(), x.max()], out


# vec/mat math
@bz.kernel
def matmath(
    a: bz.Array[bz.vec3, 1],
    b: bz.Array[bz.vec3, 1],
    m: bz.Array[bz.mat33, 1],
    cr: bz.Array[bz.vec3, 1],
    dt: bz.Array[bz.float32, 1],
    nrm: bz.Array[bz.vec3, 1],
    out: bz.Array[bz.mat33, 1],
    det: bz.Array[bz.float32, 1],
    inv: bz.Array[bz.mat33, 1],
):
    for i in range(a.shape[0]):
        cr[i] = bz.cross(a[i], b[i])
        dt[i] = bz.dot(a[i], b[i])
        nrm[i] = bz.normalize(a[i])
        out[i] = bz.outer(a[i], b[i]) + bz.transpose(m[i])
        det[i] = bz.determinant(m[i])
        inv[i] = bz.inverse(m[i])


def test_matmath(where):
    rng = np.random.default_rng(12)
    n = 33
    a = rng.standard_normal((n, 3)).astype(np.float32)
    b = rng.standard_normal((n, 3)).astype(np.float32)
    m = (rng.standard_normal((n, 3, 3)) + 3 * np.eye(3)).astype(np.float32)
    cr, nrm = where(np.full_like(a, np.nan)), where(np.full_like(a, np.nan))
    dt = where(np.full(n, np.nan, np.float32))
    out, inv = where(np.full_like(m, np.nan)), where(np.full_like(m, np.nan))
    det = where(np.full(n, np.nan, np.float32))
    matmath(where(a), where(b), where(m), cr, dt, nrm, out, det, inv)
    cr, dt, nrm, out, det, inv = map(where.host, (cr, dt, nrm, out, det, inv))
    A, B, M = a.astype(float), b.astype(float), m.astype(float)
    np.testing.assert_allclose(cr, np.cross(A, B), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dt, (A * B).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nrm, A / np.linalg.norm(A, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, A[:, :, None] * B[:, None, :] + M.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(det, np.linalg.det(M), rtol=1e-4)
    np.testing.assert_allclose(inv, np.linalg.inv(M), rtol=1e-3, atol=1e-4)


# float64 vec, matvec, unpack, components
@bz.kernel
def rigid(x: bz.Array[bz.vec3d, 1], r: bz.mat33d, t: bz.vec3d, out: bz.Array[bz.float64, 2]):
    for i in range(x.shape[0]):
        y = r @ x[i] + t
        px, py, pz = y
        out[i, 0] = px
        out[i, 1] = y.y
        out[i, 2] = y[2]
        out[i, 3] = bz.length_sq(y)


def test_rigid(where):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((20, 3))
    th = 0.3
    R = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1]])
    t = (1.0, 2.0, 3.0)
    out = where(np.full((20, 4), np.nan))
    rigid(where(x), R, t, out)  # R and t are values (a mat33d and a vec3d), not arrays
    out = where.host(out)
    y = x @ R.T + np.array(t)
    np.testing.assert_allclose(out[:, :3], y, rtol=1e-12)
    np.testing.assert_allclose(out[:, 3], (y**2).sum(1), rtol=1e-12)


# random numbers
@bz.kernel
def rand_fill(
    u: bz.Array[bz.float32, 1], g: bz.Array[bz.float64, 1], bits: bz.Array[bz.int64, 1], seed: int, step: int
):
    for i in range(u.shape[0]):
        u[i] = bz.random.uniform(seed, i, step)
        g[i] = bz.random.normal(seed, i, step, dtype=bz.float64)
        bits[i] = bz.random.bits(seed, i, step)


def test_random(where):
    n = 1000
    u = where(np.full(n, np.nan, np.float32))
    g = where(np.full(n, np.nan))
    b = where(np.full(n, -1, np.int64))
    rand_fill(u, g, b, 1234, 3)
    u, g, b = map(where.host, (u, g, b))
    np.testing.assert_array_equal(u, bz.random.uniform(1234, np.arange(n), 3))
    # float64 normals: NumPy's log and cos are not the kernel's, so within a few ulps
    np.testing.assert_allclose(g, bz.random.normal(1234, np.arange(n), 3, dtype=bz.float64), rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(b, bz.random.bits(1234, np.arange(n), 3))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.05 and abs(g.std() - 1) < 0.1


# integer arithmetic
@bz.kernel
def intops(a: bz.Array[bz.int32, 1], b: bz.Array[bz.int32, 1], out: bz.Array[bz.int32, 2]):
    for i in range(a.shape[0]):
        out[i, 0] = a[i] // b[i]
        out[i, 1] = a[i] % b[i]
        out[i, 2] = a[i] & b[i]
        out[i, 3] = a[i] | b[i]
        out[i, 4] = a[i] ^ b[i]
        out[i, 5] = a[i] >> 2
        out[i, 6] = a[i] << 3
        out[i, 7] = ~a[i]
        out[i, 8] = -a[i] // 7
        out[i, 9] = a[i] % -5


def test_intops(where):
    rng = np.random.default_rng(14)
    a = rng.integers(-100, 100, 200).astype(np.int32)
    b = rng.integers(-9, 10, 200).astype(np.int32)
    b[b == 0] = 3
    out = where(np.full((200, 10), -1, np.int32))
    intops(where(a), where(b), out)
    A = [int(x) for x in a]
    B = [int(x) for x in b]
    ref = np.array([[x // y, x % y, x & y, x | y, x ^ y, x >> 2, x << 3, ~x, -x // 7, x % -5] for x, y in zip(A, B)])
    np.testing.assert_array_equal(where.host(out), ref)


# int64 with python int literals
@bz.kernel
def int64ops(a: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1], k: int):
    for i in range(a.shape[0]):
        h = a[i] * 2654435761 % 4294967296
        out[i] = (h ^ (h >> 16)) // k + (a[i] % k)


def test_int64(where):
    a = np.arange(-50, 50, dtype=np.int64) * 123457
    out = where(np.full_like(a, -1))
    int64ops(where(a), out, -7)
    ref = []
    for x in a.tolist():
        h = x * 2654435761 % 4294967296
        ref.append((h ^ (h >> 16)) // -7 + x % -7)
    np.testing.assert_array_equal(where.host(out), ref)


# float floor div / mod
@bz.kernel
def fmods(a: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 2]):
    for i in range(a.shape[0]):
        out[i, 0] = a[i] // 0.7
        out[i, 1] = a[i] % 0.7
        out[i, 2] = a[i] % -1.5
        out[i, 3] = math.floor(a[i])
        out[i, 4] = math.fmod(a[i], 0.7)


def test_fmods(where):
    a = np.linspace(-5, 5, 41)
    out = where(np.full((41, 5), np.nan))
    fmods(where(a), out)
    ref = np.array([[x // 0.7, x % 0.7, x % -1.5, math.floor(x), math.fmod(x, 0.7)] for x in a])
    np.testing.assert_allclose(where.host(out), ref, atol=1e-12)


# break/continue/while
@bz.kernel
def first_above(x: bz.Array[bz.float32, 2], thr: bz.float32, idx: bz.Array[bz.int32, 1], cnt: bz.Array[bz.int32, 1]):
    for i in range(x.shape[0]):
        idx[i] = -1
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                idx[i] = j
                break
        c = 0
        j = 0
        while j < x.shape[1]:
            j += 1
            if x[i, j - 1] < 0:
                continue
            c += 1
        cnt[i] = c


def test_break(where):
    x = np.random.default_rng(15).standard_normal((50, 20)).astype(np.float32)
    idx = where(np.full(50, -2, np.int32))
    cnt = where(np.full(50, -1, np.int32))
    first_above(where(x), 1.5, idx, cnt)
    ref = [next((j for j in range(20) if x[i, j] > 1.5), -1) for i in range(50)]
    np.testing.assert_array_equal(where.host(idx), ref)
    np.testing.assert_array_equal(where.host(cnt), (x >= 0).sum(1))


# collatz while
@bz.kernel
def collatz(n0: bz.Array[bz.int64, 1], steps: bz.Array[bz.int32, 1]):
    for i in range(n0.shape[0]):
        n = n0[i]
        s = 0
        while n != 1:
            if n % 2 == 0:
                n = n // 2
            else:
                n = 3 * n + 1
            s += 1
        steps[i] = s


def test_collatz(where):
    n0 = np.arange(1, 300, dtype=np.int64)
    steps = where(np.full(299, -1, np.int32))
    collatz(where(n0), steps)

    def c(n):
        s = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            s += 1
        return s

    np.testing.assert_array_equal(where.host(steps), [c(n) for n in range(1, 300)])


# func with tuple returns, nested funcs
@bz.func
def polar(x, y):
    return math.sqrt(x * x + y * y), math.atan2(y, x)


@bz.func
def rotate(x, y, a):
    r, t = polar(x, y)
    return r * math.cos(t + a), r * math.sin(t + a)


@bz.kernel
def rot(p: bz.Array[bz.float64, 2], a: float):
    for i in range(p.shape[0]):
        p[i, 0], p[i, 1] = rotate(p[i, 0], p[i, 1], a)


def test_func_tuple(where):
    r = np.random.default_rng(16).standard_normal((30, 2))
    p = where(r.copy())
    rot(p, 0.5)
    c, s = np.cos(0.5), np.sin(0.5)
    expected = np.stack([c * r[:, 0] - s * r[:, 1], s * r[:, 0] + c * r[:, 1]], 1)
    np.testing.assert_allclose(where.host(p), expected, atol=1e-12)


# func with early return and typed
@bz.func
def sign_sq(v: bz.float32) -> bz.float32:
    if v < 0:
        return -v * v
    elif v == 0:
        return 0.0
    return v * v


@bz.kernel
def apply_sign_sq(x: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        x[i] = sign_sq(x[i])


def test_func_early(where):
    x = np.linspace(-2, 2, 9).astype(np.float32)
    r = np.sign(x) * x * x
    x = where(x)
    apply_sign_sq(x)
    np.testing.assert_allclose(where.host(x), r)


# f32/f64 mix
@bz.kernel
def mix(
    a: bz.Array[bz.float32, 1],
    b: bz.Array[bz.float64, 1],
    out32: bz.Array[bz.float32, 1],
    out64: bz.Array[bz.float64, 1],
    s: bz.float32,
):
    for i in range(a.shape[0]):
        t = a[i] * b[i] + s
        out64[i] = t
        out32[i] = t / 3


def test_mix(where):
    rng = np.random.default_rng(17)
    a = rng.random(100).astype(np.float32)
    b = rng.random(100)
    o32 = where(np.full(100, np.nan, np.float32))
    o64 = where(np.full(100, np.nan))
    mix(where(a), where(b), o32, o64, np.float32(0.1))
    t = a.astype(np.float64) * b + np.float64(np.float32(0.1))
    np.testing.assert_allclose(where.host(o64), t, rtol=1e-12)
    np.testing.assert_allclose(where.host(o32), t / 3, rtol=1e-6)


# 3D arrays, ndrange 3d
@bz.kernel
def lap3d(u: bz.Array[bz.float32, 3], out: bz.Array[bz.float32, 3]):
    for i, j, k in bz.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1), (1, u.shape[2] - 1)):
        out[i, j, k] = (
            u[i - 1, j, k]
            + u[i + 1, j, k]
            + u[i, j - 1, k]
            + u[i, j + 1, k]
            + u[i, j, k - 1]
            + u[i, j, k + 1]
            - 6 * u[i, j, k]
        )


def test_lap3d(where):
    u = np.random.default_rng(18).random((9, 10, 11)).astype(np.float32)
    out = where(np.zeros_like(u))  # the kernel writes the interior only
    lap3d(where(u), out)
    U = u.astype(float)
    ref = np.zeros_like(U)
    ref[1:-1, 1:-1, 1:-1] = (
        U[:-2, 1:-1, 1:-1]
        + U[2:, 1:-1, 1:-1]
        + U[1:-1, :-2, 1:-1]
        + U[1:-1, 2:, 1:-1]
        + U[1:-1, 1:-1, :-2]
        + U[1:-1, 1:-1, 2:]
        - 6 * U[1:-1, 1:-1, 1:-1]
    )
    np.testing.assert_allclose(where.host(out), ref, atol=1e-5)


# torch tensors
@bz.kernel
def saxpy(y: bz.Array[bz.float32, 1], x: bz.Array[bz.float32, 1], a: bz.float32):
    for i in range(y.shape[0]):
        y[i] = a * x[i] + y[i]


def test_torch(where):
    torch = where.torch()
    x = torch.arange(10, dtype=torch.float32, device=where.torch_device)
    y = torch.ones(10, device=where.torch_device)
    saxpy(y, x, 2)
    saxpy(y, x, np.float32(0.5))
    saxpy(y, x, 1.5)
    assert torch.allclose(y, 1 + 4 * x), y
    # strided torch view: the elements between stay as they were
    base = torch.zeros(20, device=where.torch_device)
    saxpy(base[::2], x, 3.0)
    assert torch.allclose(base[::2], 3 * x) and not base[1::2].any(), base


# numpy scalar types for int params
@bz.kernel
def fill_idx(a: bz.Array[bz.int64, 1], off: int, scale: bz.int32):
    for i in range(a.shape[0]):
        a[i] = i * scale + off


def test_npscalars(where):
    a = where(np.full(5, -1, np.int64))
    fill_idx(a, np.int64(10), np.int32(3))
    assert where.host(a).tolist() == [10, 13, 16, 19, 22]
    fill_idx(a, np.int32(-1), 2)
    assert where.host(a).tolist() == [-1, 1, 3, 5, 7]
    fill_idx(a, 7, np.int64(1))
    assert where.host(a).tolist() == [7, 8, 9, 10, 11]


# many calls loop
def test_many_calls(where):
    xs = where(np.full((100, 2), 0.5, np.float32))
    vs = where(np.zeros((100, 2), np.float32))
    for _ in range(500):
        particle_step(xs, vs, 0.001, 1.0)
    # 500 steps of 1 ms: the particles fall, bounce off the floor, and stay in the box
    xs = where.host(xs)
    assert np.all((xs >= 0) & (xs <= 1)), xs.min()


# MPM-like P2G and G2P with atomics (1D quadratic B-spline on a 2D grid)
@bz.kernel
def p2g(
    x: bz.Array[bz.vec2, 1],
    v: bz.Array[bz.vec2, 1],
    grid_v: bz.Array[bz.float32, 3],
    grid_m: bz.Array[bz.float32, 2],
    inv_dx: bz.float32,
):
    for p in range(x.shape[0]):
        Xp = x[p] * inv_dx
        base = bz.vec2(bz.math.floor(Xp.x - 0.5), bz.math.floor(Xp.y - 0.5))
        fx = Xp - base
        w0 = 0.5 * (1.5 - fx) * (1.5 - fx)
        w1 = 0.75 - (fx - 1.0) * (fx - 1.0)
        w2 = 0.5 * (fx - 0.5) * (fx - 0.5)
        for i in bz.static(range(3)):
            for j in bz.static(range(3)):
                wi = w0.x if i == 0 else (w1.x if i == 1 else w2.x)
                wj = w0.y if j == 0 else (w1.y if j == 1 else w2.y)
                w = wi * wj
                gi = bz.int32(base.x) + i
                gj = bz.int32(base.y) + j
                bz.atomic_add(grid_m[gi, gj], w)
                bz.atomic_add(grid_v[gi, gj, 0], w * v[p].x)
                bz.atomic_add(grid_v[gi, gj, 1], w * v[p].y)


def np_weights(fx):
    return [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]


def test_p2g(where):
    rng = np.random.default_rng(20)
    n = 300
    G = 16
    x = (rng.random((n, 2)) * 0.8 + 0.1).astype(np.float32)
    v = rng.standard_normal((n, 2)).astype(np.float32)
    gv = where(np.zeros((G, G, 2), np.float32))  # the grid accumulates from zero
    gm = where(np.zeros((G, G), np.float32))
    p2g(where(x), where(v), gv, gm, float(G))
    rv = np.zeros((G, G, 2))
    rm = np.zeros((G, G))
    for p in range(n):
        X = x[p].astype(np.float64) * G
        base = np.floor(X - 0.5)
        fx = X - base
        w = np_weights(fx)
        for i in range(3):
            for j in range(3):
                ww = w[i][0] * w[j][1]
                gi, gj = int(base[0]) + i, int(base[1]) + j
                rm[gi, gj] += ww
                rv[gi, gj] += ww * v[p]
    np.testing.assert_allclose(where.host(gm), rm, atol=1e-4)
    np.testing.assert_allclose(where.host(gv), rv, atol=1e-4)


@bz.kernel
def g2p(x: bz.Array[bz.float32, 2], grid_v: bz.Array[bz.float32, 3], v: bz.Array[bz.float32, 2], inv_dx: bz.float32):
    for p in range(x.shape[0]):
        bx = bz.int32(x[p, 0] * inv_dx - 0.5)
        by = bz.int32(x[p, 1] * inv_dx - 0.5)
        fx = x[p, 0] * inv_dx - bx
        fy = x[p, 1] * inv_dx - by
        wx = bz.local(bz.float32, 3)
        wy = bz.local(bz.float32, 3)
        wx[0] = 0.5 * (1.5 - fx) ** 2
        wx[1] = 0.75 - (fx - 1.0) ** 2
        wx[2] = 0.5 * (fx - 0.5) ** 2
        wy[0] = 0.5 * (1.5 - fy) ** 2
        wy[1] = 0.75 - (fy - 1.0) ** 2
        wy[2] = 0.5 * (fy - 0.5) ** 2
        nv0 = 0.0
        nv1 = 0.0
        for i in range(3):
            for j in range(3):
                w = wx[i] * wy[j]
                nv0 += w * grid_v[bx + i, by + j, 0]
                nv1 += w * grid_v[bx + i, by + j, 1]
        v[p, 0] = nv0
        v[p, 1] = nv1


def test_g2p(where):
    rng = np.random.default_rng(21)
    n = 200
    G = 12
    x = (rng.random((n, 2)) * 0.7 + 0.1).astype(np.float32)
    gv = rng.standard_normal((G, G, 2)).astype(np.float32)
    v = where(np.full((n, 2), np.nan, np.float32))
    g2p(where(x), where(gv), v, float(G))
    ref = np.zeros((n, 2))
    for p in range(n):
        X = x[p].astype(np.float64) * G
        base = np.floor(X - 0.5).astype(int)
        fx = X - base
        w = np_weights(fx)
        for i in range(3):
            for j in range(3):
                ref[p] += w[i][0] * w[j][1] * gv[base[0] + i, base[1] + j]
    np.testing.assert_allclose(where.host(v), ref, atol=1e-4)


# top-level scalar derived values
@bz.kernel
def leapfrog(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], dt: float, k: float):
    half = 0.5 * dt
    w2 = k
    for i in range(x.shape[0]):
        v[i] -= half * w2 * x[i]
        x[i] += dt * v[i]
        v[i] -= half * w2 * x[i]


def test_toplevel_float(where):
    rx, rv = np.linspace(-1, 1, 11), np.zeros(11)
    x, v = where(rx.copy()), where(rv.copy())
    for _ in range(10):
        leapfrog(x, v, 0.1, 4.0)
        rv -= 0.05 * 4 * rx
        rx += 0.1 * rv
        rv -= 0.05 * 4 * rx
    np.testing.assert_allclose(where.host(x), rx, rtol=1e-12)


# graph replay
@bz.kernel
def decay(u: bz.Array[bz.float32, 1], rate: bz.float32):
    for i in range(u.shape[0]):
        u[i] *= rate


def test_graph(where):
    u = where(np.ones(64, np.float32))
    with bz.graph() as g:
        decay(u, 0.5)
        decay(u, 0.5)
    for _ in range(3):
        g.replay()
    np.testing.assert_allclose(where.host(u), 0.5**8)


def test_record(where):
    u = where(np.ones(64, np.float32))
    decay(u, 1.0)
    with bz.record() as r:
        for _ in range(5):
            decay(u, 1.0)
    assert len(r.launches) == 5 and not r.compiles, (r.launches, r.compiles)


# int32 index arrays, gather/scatter
@bz.kernel
def gather_scatter(src: bz.Array[bz.float32, 1], idx: bz.Array[bz.int32, 1], dst: bz.Array[bz.float32, 1]):
    for i in range(idx.shape[0]):
        dst[i] = src[idx[i]] * 2
        bz.atomic_add(src[idx[i]], 0.0)


def test_gather(where):
    src = np.arange(10, dtype=np.float32)
    idx = np.array([9, 0, 3, 3, 7], np.int32)
    dst = where(np.full(5, np.nan, np.float32))
    gather_scatter(where(src), where(idx), dst)
    np.testing.assert_array_equal(where.host(dst), src[idx] * 2)


# int loop variable into float array, ternaries, bool params
@bz.kernel
def ramp(a: bz.Array[bz.float32, 1], flip: bool, s: bz.float64):
    n = a.shape[0]
    for i in range(n):
        a[i] = (n - 1 - i) * s if flip else i * s


def test_ramp(where):
    a = where(np.full(7, np.nan, np.float32))
    ramp(a, True, 0.5)
    np.testing.assert_allclose(where.host(a), np.arange(6, -1, -1) * 0.5)
    ramp(a, False, 0.25)
    np.testing.assert_allclose(where.host(a), np.arange(7) * 0.25)


# 2D ndrange with vec arrays (cloth grid, positions 2d)
@bz.kernel
def grid_init(x: bz.Array[bz.vec3, 2], spacing: bz.float32):
    for i, j in bz.ndrange(x.shape[0], x.shape[1]):
        x[i, j] = bz.vec3(j * spacing, 0.0, i * spacing)


def test_grid_init(where):
    x = where(np.full((4, 5, 3), np.nan, np.float32))
    grid_init(x, 0.1)
    i, j = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    np.testing.assert_allclose(where.host(x), np.stack([j * 0.1, 0 * i, i * 0.1], -1), rtol=1e-6)


# reduction by rows 2d -> serial inner loop + x.shape[1]
@bz.kernel
def row_norms(a: bz.Array[bz.float64, 2], out: bz.Array[bz.float64, 1]):
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j] ** 2
        out[i] = math.sqrt(s)


def test_row_norms(where):
    torch = where.torch()
    a = np.random.default_rng(22).standard_normal((13, 17))
    out = where(np.full(13, np.nan))
    row_norms(where(a), out)
    np.testing.assert_allclose(where.host(out), np.linalg.norm(a, axis=1), rtol=1e-13)
    at = torch.from_numpy(a.T.copy()).to(where.torch_device).T  # torch non-contiguous
    out_t = torch.full((13,), torch.nan, dtype=torch.float64, device=where.torch_device)
    row_norms(at, out_t)
    np.testing.assert_allclose(where.host(out_t), np.linalg.norm(a, axis=1), rtol=1e-13)


# mat33 per particle deformation gradient update
@bz.kernel
def deform(F: bz.Array[bz.mat33, 1], C: bz.Array[bz.mat33, 1], dt: bz.float32, J: bz.Array[bz.float32, 1]):
    for p in range(F.shape[0]):
        F[p] = (bz.mat33.identity() + C[p] * dt) @ F[p]
        J[p] = bz.determinant(F[p])


def test_deform(where):
    rng = np.random.default_rng(23)
    F = np.tile(np.eye(3, dtype=np.float32), (10, 1, 1))
    C = rng.standard_normal((10, 3, 3)).astype(np.float32)
    J = where(np.full(10, np.nan, np.float32))
    rF = F.astype(np.float64)
    F, Cd = where(F), where(C)
    for _ in range(5):
        deform(F, Cd, 0.01, J)
        rF = (np.eye(3) + C.astype(np.float64) * 0.01) @ rF
    np.testing.assert_allclose(where.host(F), rF, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(where.host(J), np.linalg.det(rF), rtol=1e-5)


# serial task at top level (counter reset) then parallel
@bz.kernel
def count_positive(a: bz.Array[bz.float32, 1], cnt: bz.Array[bz.int32, 1]):
    cnt[0] = 0
    for i in range(a.shape[0]):
        if a[i] > 0:
            bz.atomic_add(cnt[0], 1)


def test_count(where):
    a = np.random.default_rng(24).standard_normal(1001).astype(np.float32)
    cnt = where(np.array([99], np.int32))
    count_positive(where(a), cnt)
    assert where.host(cnt)[0] == (a > 0).sum()
    count_positive(where(a), cnt)
    assert where.host(cnt)[0] == (a > 0).sum()


# stepped range, reversed-range serial loop, range with negative step inner
@bz.kernel
def odd_even(a: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1]):
    for i in range(1, a.shape[0], 2):
        s = 0
        for j in range(i, -1, -1):
            s += a[j]
        out[i] = s


def test_odd_even(where):
    a = np.arange(10, dtype=np.int64)
    out = where(np.zeros(10, np.int64))  # the kernel writes the odd elements only
    odd_even(where(a), out)
    ref = np.zeros(10, np.int64)
    ref[1::2] = np.cumsum(a)[1::2]
    np.testing.assert_array_equal(where.host(out), ref)


# python scalars float into int param? error expected
def test_bad_dtype(where):
    try:
        decay(where(np.ones(4)), 0.5)
    except bz.Error as e:
        assert "float" in str(e), e
    else:
        raise AssertionError("no error")


# min/max/abs builtin on mixed types; math.pi; ** with int exponent
@bz.kernel
def clampers(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1], lo: bz.float32, hi: bz.float32):
    for i in range(a.shape[0]):
        out[i] = min(max(a[i], lo), hi) + abs(a[i]) ** 3 + math.pi * 0


def test_clamp(where):
    a = np.linspace(-2, 2, 9).astype(np.float32)
    out = where(np.full_like(a, np.nan))
    clampers(where(a), out, -1, 1)
    np.testing.assert_allclose(where.host(out), np.clip(a, -1, 1) + np.abs(a) ** 3, rtol=1e-6)


# kernel with 0-length array
def test_empty(where):
    u = where(np.ones(0, np.float32))
    decay(u, 0.5)
    assert where.host(u).shape == (0,)
