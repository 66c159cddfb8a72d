"""Simulation programs as a Taichi, Warp or Numba user writes them, in the Python spellings they reach
for first: a lattice Boltzmann step whose velocity table is a tuple of tuples (`E[q][0]`), XPBD
distance constraints with Jacobi averaging, a uniform-grid neighbour search (atomic counts, a serial
prefix sum, a scatter by the old value of an atomic), Morton codes, one tridiagonal (Thomas) solve per
thread, and the Python idioms of a kernel body: bools counted as ints, `x or default`, early returns
from nested branches of a @bz.func, a float64 constant held in a local and a periodic `%` wrap. Each is
checked against a NumPy or pure-Python float64 reference, on the CPU and on a GPU (the `where` fixture
of tests/programs/conftest.py places the arrays); on the CPU run the CUDA of each call is also compiled
with NVRTC where it is installed (the fixture of tests/programs/test_sim_programs.py)."""

import math

import numpy as np
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz

RNG = np.random.default_rng(2024)

# --- lattice Boltzmann, D2Q9, with bounce-back walls --------------------------------------------------
E = ((0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1))
W = (4 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 36, 1 / 36, 1 / 36, 1 / 36)
OPPOSITE = (0, 3, 4, 1, 2, 7, 8, 5, 6)


@bz.kernel
def lbm_collide_stream(f: bz.Array[bz.float64, 3], g: bz.Array[bz.float64, 3], solid: bz.Array[bz.uint8, 2],
                       omega: float):
    nx, ny, _ = f.shape
    for x, y in bz.ndrange(nx, ny):
        if solid[x, y]:
            continue
        rho = 0.0
        ux = 0.0
        uy = 0.0
        for q in range(9):  # a run-time loop over the tables
            rho += f[x, y, q]
            ux += E[q][0] * f[x, y, q]
            uy += E[q][1] * f[x, y, q]
        ux /= rho
        uy /= rho
        for q in range(9):
            eu = E[q][0] * ux + E[q][1] * uy
            feq = W[q] * rho * (1.0 + 3.0 * eu + 4.5 * eu * eu - 1.5 * (ux * ux + uy * uy))
            post = f[x, y, q] + omega * (feq - f[x, y, q])
            xn, yn = (x + E[q][0]) % nx, (y + E[q][1]) % ny
            if solid[xn, yn]:
                g[x, y, OPPOSITE[q]] = post
            else:
                g[xn, yn, q] = post


def lbm_reference(f, solid, omega):
    nx, ny, _ = f.shape
    g = np.full_like(f, np.nan)
    e, w = np.array(E), np.array(W)
    rho = f.sum(-1)
    u = (f[..., :, None] * e).sum(-2) / rho[..., None]
    for x in range(nx):
        for y in range(ny):
            if solid[x, y]:
                continue
            for q in range(9):
                eu = e[q] @ u[x, y]
                feq = w[q] * rho[x, y] * (1 + 3 * eu + 4.5 * eu**2 - 1.5 * (u[x, y] @ u[x, y]))
                post = f[x, y, q] + omega * (feq - f[x, y, q])
                xn, yn = (x + E[q][0]) % nx, (y + E[q][1]) % ny
                if solid[xn, yn]:
                    g[x, y, OPPOSITE[q]] = post
                else:
                    g[xn, yn, q] = post
    return g


def test_lattice_boltzmann_with_a_table_of_tuples(where):
    f = np.array(W) * (1 + 0.1 * RNG.random((9, 7, 9)))
    solid = np.zeros((9, 7), np.uint8)
    solid[3:5, 2:4] = 1
    g = where(np.full_like(f, np.nan))
    lbm_collide_stream(where(f), g, where(solid), 1.2)
    np.testing.assert_allclose(where.host(g), lbm_reference(f, solid, 1.2), rtol=1e-13, equal_nan=True)


# --- XPBD distance constraints, Jacobi ----------------------------------------------------------------
@bz.kernel
def xpbd_solve(p: bz.Array[bz.vec3d, 1], w: bz.Array[bz.float64, 1], edges: bz.Array[bz.int64, 2],
               rest: bz.Array[bz.float64, 1], lam: bz.Array[bz.float64, 1], dp: bz.Array[bz.vec3d, 1],
               count: bz.Array[bz.int32, 1], alpha: float):
    for c in range(edges.shape[0]):
        a, b = edges[c, 0], edges[c, 1]
        d = p[a] - p[b]
        length = bz.length(d)
        if w[a] + w[b] == 0.0 or length < 1e-12:
            continue
        dl = (rest[c] - length - alpha * lam[c]) / (w[a] + w[b] + alpha)
        lam[c] += dl
        dp[a] += d / length * (w[a] * dl)  # atomic: other constraints move the same particles
        dp[b] -= d / length * (w[b] * dl)
        bz.atomic_add(count[a], 1)
        bz.atomic_add(count[b], 1)


@bz.kernel
def xpbd_apply(p: bz.Array[bz.vec3d, 1], dp: bz.Array[bz.vec3d, 1], count: bz.Array[bz.int32, 1], omega: float):
    for i in range(p.shape[0]):
        if count[i] > 0:
            p[i] += dp[i] * (omega / count[i])
        dp[i] = bz.vec3d()
        count[i] = 0


def xpbd_reference(p, w, edges, rest, alpha, omega, iterations):
    lam = np.zeros(len(edges))
    for _ in range(iterations):
        dp, count = np.zeros_like(p), np.zeros(len(p))
        for c, (a, b) in enumerate(edges):
            d = p[a] - p[b]
            length = np.linalg.norm(d)
            dl = (rest[c] - length - alpha * lam[c]) / (w[a] + w[b] + alpha)
            lam[c] += dl
            dp[a] += d / length * w[a] * dl
            dp[b] -= d / length * w[b] * dl
            count[[a, b]] += 1
        moved = count > 0
        p[moved] += dp[moved] * (omega / count[moved])[:, None]
    return p


def test_xpbd_distance_constraints_with_jacobi_averaging(where):
    n = 12
    p = np.stack([np.arange(n) * 0.12, 0.01 * RNG.standard_normal(n), np.zeros(n)], 1)
    w = np.ones(n)
    w[0] = 0.0  # pinned
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1).astype(np.int64)
    rest = np.full(n - 1, 0.1)
    want = xpbd_reference(p.copy(), w, edges, rest, 1e-4, 1.5, 6)
    args = [where(a) for a in (p, w, edges, rest, np.zeros(n - 1), np.zeros_like(p), np.zeros(n, np.int32))]
    for _ in range(6):
        xpbd_solve(*args, 1e-4)
        xpbd_apply(args[0], args[5], args[6], 1.5)
    np.testing.assert_allclose(where.host(args[0]), want, rtol=1e-10, atol=1e-12)


# --- a uniform-grid neighbour search ------------------------------------------------------------------
@bz.kernel
def bin_particles(x: bz.Array[bz.float32, 2], cell: bz.Array[bz.int32, 1], count: bz.Array[bz.int32, 1],
                  start: bz.Array[bz.int32, 1], fill: bz.Array[bz.int32, 1], order: bz.Array[bz.int32, 1], res: int):
    for c in range(count.shape[0]):
        count[c] = 0
        fill[c] = 0
    for p in range(x.shape[0]):
        cx = min(max(int(x[p, 0] * res), 0), res - 1)
        cy = min(max(int(x[p, 1] * res), 0), res - 1)
        cell[p] = cx * res + cy
        bz.atomic_add(count[cell[p]], 1)
    total = 0
    for c in bz.serial(range(count.shape[0])):
        start[c] = total
        total += count[c]
    for p in range(x.shape[0]):
        order[start[cell[p]] + bz.atomic_add(fill[cell[p]], 1)] = p


@bz.kernel
def count_neighbours(x: bz.Array[bz.float32, 2], start: bz.Array[bz.int32, 1], count: bz.Array[bz.int32, 1],
                     order: bz.Array[bz.int32, 1], found: bz.Array[bz.int32, 1], h: bz.float32, res: int):
    for p in range(x.shape[0]):
        cx = min(max(int(x[p, 0] / h), 0), res - 1)
        cy = min(max(int(x[p, 1] / h), 0), res - 1)
        k = 0
        for qx in range(max(cx - 1, 0), min(cx + 2, res)):
            for qy in range(max(cy - 1, 0), min(cy + 2, res)):
                c = qx * res + qy
                for s in range(start[c], start[c] + count[c]):
                    q = order[s]
                    dx, dy = x[q, 0] - x[p, 0], x[q, 1] - x[p, 1]
                    k += q != p and dx * dx + dy * dy < h * h  # a bool counted as 0 or 1
        found[p] = k


def test_grid_neighbour_search_by_counting_sort(where):
    n, res = 400, 8
    h = np.float32(1.0 / res)
    x = RNG.random((n, 2)).astype(np.float32)
    count, start, fill = (where(np.full(res * res, -1, np.int32)) for _ in range(3))
    order, cell, found = (where(np.full(n, -1, np.int32)) for _ in range(3))
    xd = where(x)
    bin_particles(xd, cell, count, start, fill, order, res)
    count_neighbours(xd, start, count, order, found, h, res)
    assert sorted(where.host(order).tolist()) == list(range(n))
    d = x[:, None, :] - x[None, :, :]
    want = ((d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) < h * h).sum(1) - 1
    np.testing.assert_array_equal(where.host(found), want)


# --- Morton codes ---------------------------------------------------------------------------------------
@bz.func
def spread_bits(v):
    v = v & 0x3FF
    v = (v | (v << 16)) & 0x030000FF
    v = (v | (v << 8)) & 0x0300F00F
    v = (v | (v << 4)) & 0x030C30C3
    return (v | (v << 2)) & 0x09249249


@bz.kernel
def morton_codes(x: bz.Array[bz.float32, 2], code: bz.Array[bz.uint32, 1]):
    for i in range(x.shape[0]):
        q = bz.local(bz.uint32, 3)
        for d in range(3):
            q[d] = bz.uint32(min(max(x[i, d] * 1024.0, 0.0), 1023.0))
        code[i] = (spread_bits(q[0]) << 2) | (spread_bits(q[1]) << 1) | spread_bits(q[2])


def test_morton_codes(where):
    x = (RNG.random((300, 3)) * 1.2 - 0.1).astype(np.float32)
    code = where(np.zeros(300, np.uint32))
    morton_codes(where(x), code)
    q = np.clip(x * np.float32(1024), 0, 1023).astype(np.int64)
    want = (spread_bits(q[:, 0]) << 2) | (spread_bits(q[:, 1]) << 1) | spread_bits(q[:, 2])  # NumPy runs the helper
    np.testing.assert_array_equal(where.host(code), want.astype(np.uint32))


# --- one tridiagonal system per thread ------------------------------------------------------------------
@bz.kernel
def thomas(a: bz.Array[bz.float64, 2], b: bz.Array[bz.float64, 2], c: bz.Array[bz.float64, 2],
           d: bz.Array[bz.float64, 2], scratch: bz.Array[bz.float64, 2], x: bz.Array[bz.float64, 2]):
    systems, n = d.shape
    for s in range(systems):
        scratch[s, 0] = c[s, 0] / b[s, 0]
        x[s, 0] = d[s, 0] / b[s, 0]
        for i in range(1, n):
            den = b[s, i] - a[s, i] * scratch[s, i - 1]
            scratch[s, i] = c[s, i] / den
            x[s, i] = (d[s, i] - a[s, i] * x[s, i - 1]) / den
        for i in range(n - 2, -1, -1):
            x[s, i] -= scratch[s, i] * x[s, i + 1]


def test_thomas_solves_one_tridiagonal_system_per_thread(where):
    systems, n = 5, 11
    a, c, d = RNG.random((3, systems, n))
    b = 3.0 + RNG.random((systems, n))
    x = where(np.full((systems, n), np.nan))
    thomas(*(where(v) for v in (a, b, c, d)), where(np.zeros((systems, n))), x)
    for s in range(systems):
        matrix = np.diag(b[s]) + np.diag(a[s, 1:], -1) + np.diag(c[s, :-1], 1)
        np.testing.assert_allclose(where.host(x)[s], np.linalg.solve(matrix, d[s]), rtol=1e-12)


# --- the Python idioms of a kernel body -----------------------------------------------------------------
@bz.func
def bounce(x, v, wall):
    if x > wall:
        if v > 0.0:
            return 2.0 * wall - x, -v  # an early return from a nested branch that goes on
        x = wall
    return x, v


@bz.kernel
def idioms(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], mass: bz.Array[bz.float64, 1],
           out: bz.Array[bz.float64, 2], box: float):
    for i in range(x.shape[0]):
        g = 9.80665  # a float64 constant held in a local
        out[i, 0] = (v[i] > 0) - (v[i] < 0)  # the sign idiom: bools are 0 and 1
        out[i, 1] = mass[i] or 1.0  # a default where the mass is 0
        out[i, 2], out[i, 3] = bounce(x[i], v[i], 1.0)
        out[i, 4] = (x[i] + v[i]) % box  # periodic wrap: the divisor's sign, 0.0 not -0.0
        out[i, 5] = g * (mass[i] or 1.0) * x[i] + math.sqrt(2) * v[i]


def test_python_idioms_of_a_kernel_body(where):
    x = np.array([0.5, 1.5, 1.2, -0.3, 2.0, -1.0])
    v = np.array([0.2, 0.4, -0.1, 0.0, 1.0, 1.0])
    mass = np.array([1.0, 0.0, 2.5, 0.0, 1.0, 3.0])
    out = where(np.full((6, 6), np.nan))
    idioms(where(x), where(v), where(mass), out, 1.0)
    want = [[(b > 0) - (b < 0), m or 1.0, *bounce(a, b, 1.0), (a + b) % 1.0,
             9.80665 * (m or 1.0) * a + math.sqrt(2) * b] for a, b, m in zip(x.tolist(), v.tolist(), mass.tolist())]
    got = where.host(out)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_array_equal(np.signbit(got[:, 4]), np.signbit(np.array(want)[:, 4]))
