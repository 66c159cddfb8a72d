"""Simulation and numerical programs as Taichi and Warp users port them to loop kernels: a 2-D MLS-MPM
substep (clear the grid, particle-to-grid scatter with quadratic B-spline weights written `(1.5 - fx) ** 2`
and APIC affine matrices, a grid update with walls, grid-to-particle gather) in one kernel of four loops, a
Maxwell FDTD step on a staggered Yee grid, a pressure projection on a MAC grid (divergence, Jacobi sweeps
over two buffers swapped from Python, gradient subtraction) replayed from a graph, a Barnes-Hut traversal
with an explicit stack in a local array, Sobel and bilateral filters of a uint8 image clamped at its
borders and a Mandelbrot set by `while` and `break`, Metropolis sweeps of an Ising checkerboard drawing
from a hash written by hand in uint32, Kuramoto oscillators integrated by RK4 through `@bz.func` helpers
returning tuples, PageRank pulled over a CSR graph of torch tensors, and a tiled matrix product over
local arrays, Floyd-Warshall with a serial outer loop, a bitonic sort of stages launched from Python and
row minima with ties. Each is checked against NumPy or plain Python in float64, fused and unfused where
its loops merge, on the CPU and on a GPU (the `where` fixture of tests/programs/conftest.py); on the CPU
run the CUDA of each call is also compiled with NVRTC where it is installed."""

import math

import numpy as np
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz
from braze import config

RNG = np.random.default_rng(11)

# --- MLS-MPM: one substep, four loops ----------------------------------------------------------------
N_GRID, DT, GRAVITY, E_MODULUS = 12, 2e-4, 50.0, 400.0
DX = 1.0 / N_GRID
P_VOL = (DX * 0.5) ** 2
P_MASS = P_VOL


@bz.kernel
def mpm_substep(x: bz.Array[bz.vec2, 1], v: bz.Array[bz.vec2, 1], C: bz.Array[bz.mat22, 1],
                J: bz.Array[bz.float32, 1], grid_v: bz.Array[bz.vec2, 2], grid_m: bz.Array[bz.float32, 2]):
    for i, j in bz.ndrange(N_GRID, N_GRID):
        grid_v[i, j] = bz.vec2(0.0, 0.0)
        grid_m[i, j] = 0.0
    for p in range(x.shape[0]):
        base = bz.math.floor(x[p] * N_GRID - 0.5)
        fx = x[p] * N_GRID - base
        w = bz.local(bz.vec2, 3)
        w[0] = 0.5 * (1.5 - fx) ** 2
        w[1] = 0.75 - (fx - 1.0) ** 2
        w[2] = 0.5 * (fx - 0.5) ** 2
        stress = -DT * 4 * E_MODULUS * P_VOL * (J[p] - 1) * N_GRID * N_GRID
        affine = bz.mat22(stress, 0.0, 0.0, stress) + P_MASS * C[p]
        for a in bz.static(range(3)):
            for b in bz.static(range(3)):
                dpos = (bz.vec2(float(a), float(b)) - fx) * DX
                weight = w[a].x * w[b].y
                cell_i, cell_j = int(base.x) + a, int(base.y) + b
                grid_v[cell_i, cell_j] += weight * (P_MASS * v[p] + affine @ dpos)
                grid_m[cell_i, cell_j] += weight * P_MASS
    for i, j in bz.ndrange(N_GRID, N_GRID):
        if grid_m[i, j] > 0:
            gv = grid_v[i, j] / grid_m[i, j]
            gv.y -= DT * GRAVITY
            if (i < 3 and gv.x < 0) or (i > N_GRID - 3 and gv.x > 0):
                gv.x = 0.0
            if (j < 3 and gv.y < 0) or (j > N_GRID - 3 and gv.y > 0):
                gv.y = 0.0
            grid_v[i, j] = gv
    for p in range(x.shape[0]):
        base = bz.math.floor(x[p] * N_GRID - 0.5)
        fx = x[p] * N_GRID - base
        w = bz.local(bz.vec2, 3)
        w[0] = 0.5 * (1.5 - fx) ** 2
        w[1] = 0.75 - (fx - 1.0) ** 2
        w[2] = 0.5 * (fx - 0.5) ** 2
        new_v = bz.vec2(0.0, 0.0)
        new_c = bz.mat22(0.0, 0.0, 0.0, 0.0)
        for a in range(3):
            for b in range(3):
                g = grid_v[int(base.x) + a, int(base.y) + b]
                weight = w[a].x * w[b].y
                new_v += weight * g
                new_c += 4 * N_GRID * weight * bz.outer(g, bz.vec2(float(a), float(b)) - fx)
        v[p] = new_v
        x[p] += DT * new_v
        J[p] *= 1 + DT * (new_c[0, 0] + new_c[1, 1])
        C[p] = new_c


def mpm_reference(x, v, C, J, steps):
    x, v, C, J = (a.astype(np.float64) for a in (x, v, C, J))
    cells = np.arange(N_GRID)
    ci, cj = np.meshgrid(cells, cells, indexing="ij")
    for _ in range(steps):
        grid_v, grid_m = np.zeros((N_GRID, N_GRID, 2)), np.zeros((N_GRID, N_GRID))
        base = np.floor(x * N_GRID - 0.5)
        fx = x * N_GRID - base
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
        stress = -DT * 4 * E_MODULUS * P_VOL * (J - 1) * N_GRID * N_GRID
        affine = stress[:, None, None] * np.eye(2) + P_MASS * C
        b = base.astype(int)
        for a in range(3):
            for c in range(3):
                weight = w[a][:, 0] * w[c][:, 1]
                dpos = (np.array([a, c]) - fx) * DX
                np.add.at(grid_v, (b[:, 0] + a, b[:, 1] + c),
                          weight[:, None] * (P_MASS * v + np.einsum("pij,pj->pi", affine, dpos)))
                np.add.at(grid_m, (b[:, 0] + a, b[:, 1] + c), weight * P_MASS)
        filled = grid_m > 0
        grid_v[filled] /= grid_m[filled][:, None]
        grid_v[filled, 1] -= DT * GRAVITY
        gx, gy = grid_v[..., 0], grid_v[..., 1]
        gx[filled & (((ci < 3) & (gx < 0)) | ((ci > N_GRID - 3) & (gx > 0)))] = 0
        gy[filled & (((cj < 3) & (gy < 0)) | ((cj > N_GRID - 3) & (gy > 0)))] = 0
        new_v, new_c = np.zeros_like(v), np.zeros_like(C)
        for a in range(3):
            for c in range(3):
                g = grid_v[b[:, 0] + a, b[:, 1] + c]
                weight = (w[a][:, 0] * w[c][:, 1])[:, None]
                new_v += weight * g
                new_c += 4 * N_GRID * weight[..., None] * np.einsum("pi,pj->pij", g, np.array([a, c]) - fx)
        v, C = new_v, new_c
        x = x + DT * v
        J = J * (1 + DT * (C[:, 0, 0] + C[:, 1, 1]))
    return x, v, C, J


def test_mls_mpm_substep_with_apic_and_quadratic_weights(where):
    n, steps = 48, 6
    x0 = (RNG.random((n, 2)) * 0.4 + 0.3).astype(np.float32)
    v0 = np.tile(np.float32([0.5, -1.0]), (n, 1))
    c0 = (RNG.standard_normal((n, 2, 2)) * 0.5).astype(np.float32)
    j0 = np.ones(n, np.float32)
    want = mpm_reference(x0, v0, c0, j0, steps)
    for fuse in (True, False):
        state = [where(a.copy()) for a in (x0, v0, c0, j0)]
        grid_v, grid_m = where(np.full((N_GRID, N_GRID, 2), np.nan, np.float32)), where(np.full((N_GRID,) * 2, np.nan,
                                                                                                np.float32))
        with config.scope(fuse_tasks=fuse):
            for _ in range(steps):
                mpm_substep(*state, grid_v, grid_m)
        for got, expected, tol in zip(where.host(state), want, (1e-6, 1e-4, 2e-3, 1e-5)):
            np.testing.assert_allclose(got, expected, atol=tol, rtol=1e-4)


# --- Maxwell's equations on a Yee grid (TE mode) --------------------------------------------------------
@bz.kernel
def yee_step(ex: bz.Array[bz.float64, 2], ey: bz.Array[bz.float64, 2], hz: bz.Array[bz.float64, 2],
             courant: float, t: float, src_i: int, src_j: int):
    nx, ny = hz.shape
    for i, j in bz.ndrange(nx, ny):  # Hz at cell centres, from the curl of E on the edges around
        hz[i, j] -= courant * ((ey[i + 1, j] - ey[i, j]) - (ex[i, j + 1] - ex[i, j]))
    for i, j in bz.ndrange(nx, ny):  # reads Hz of the cell below and to the left: not fusable
        if j > 0:
            ex[i, j] += courant * (hz[i, j] - hz[i, j - 1])
        if i > 0:
            ey[i, j] -= courant * (hz[i, j] - hz[i - 1, j])
    hz[src_i, src_j] += math.sin(t)


def yee_reference(ex, ey, hz, courant, steps, dt, source):
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    nx, ny = hz.shape
    for s in range(steps):
        hz -= courant * ((ey[1:, :ny] - ey[:nx, :ny]) - (ex[:nx, 1:] - ex[:nx, :ny]))
        ex[:nx, 1:ny] += courant * (hz[:, 1:] - hz[:, :-1])
        ey[1:nx, :ny] -= courant * (hz[1:] - hz[:-1])
        hz[source] += math.sin(s * dt)
    return ex, ey, hz


def test_fdtd_on_a_staggered_yee_grid(where):
    nx, ny, steps = 11, 9, 20
    fields = RNG.random((nx + 1, ny + 1)), RNG.random((nx + 1, ny + 1)), RNG.random((nx, ny))
    want = yee_reference(*fields, 0.4, steps, 0.1, (5, 4))
    for fuse in (True, False):
        args = [where(f.copy()) for f in fields]
        with config.scope(fuse_tasks=fuse):
            with bz.record() as rec:
                for s in range(steps):
                    yee_step(*args, 0.4, s * 0.1, 5, 4)
            assert len(rec.launches) == 3 * steps  # H, E and the source: the E loop reads H of other cells
        for got, expected in zip(where.host(args), want):
            np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)


# --- pressure projection on a MAC grid, replayed from a graph ------------------------------------------
@bz.kernel
def divergence(u: bz.Array[bz.float64, 2], v: bz.Array[bz.float64, 2], div: bz.Array[bz.float64, 2],
               p: bz.Array[bz.float64, 2], inv_dx: float):
    nx, ny = div.shape
    for i, j in bz.ndrange(nx, ny):
        div[i, j] = (u[i + 1, j] - u[i, j] + v[i, j + 1] - v[i, j]) * inv_dx
    for i, j in bz.ndrange(nx, ny):  # disjoint from the first: one launch
        p[i, j] = 0.0


@bz.kernel
def pressure_jacobi(p: bz.Array[bz.float64, 2], p_new: bz.Array[bz.float64, 2], div: bz.Array[bz.float64, 2],
                    dx2: float):
    nx, ny = p.shape
    for i, j in bz.ndrange(nx, ny):
        total = 0.0
        count = 0
        for di, dj in bz.static(((-1, 0), (1, 0), (0, -1), (0, 1))):
            if 0 <= i + di < nx and 0 <= j + dj < ny:  # a solid wall: no neighbour
                total += p[i + di, j + dj]
                count += 1
        p_new[i, j] = (total - dx2 * div[i, j]) / count


@bz.kernel
def subtract_gradient(u: bz.Array[bz.float64, 2], v: bz.Array[bz.float64, 2], p: bz.Array[bz.float64, 2],
                      inv_dx: float):
    nx, ny = p.shape
    for i, j in bz.ndrange((1, nx), ny):
        u[i, j] -= (p[i, j] - p[i - 1, j]) * inv_dx
    for i, j in bz.ndrange(nx, (1, ny)):
        v[i, j] -= (p[i, j] - p[i, j - 1]) * inv_dx


def projection_reference(u, v, dx, sweeps):
    u, v = u.copy(), v.copy()
    div = (u[1:] - u[:-1] + v[:, 1:] - v[:, :-1]) / dx
    p = np.zeros_like(div)
    for _ in range(sweeps):
        total, count = np.zeros_like(p), np.zeros_like(p)
        for axis in (0, 1):
            for shift, inside in ((1, np.s_[1:]), (-1, np.s_[:-1])):
                sel = (np.s_[:], inside)[::-1] if axis == 0 else (np.s_[:], inside)
                total[sel] += np.roll(p, shift, axis)[sel]
                count[sel] += 1
        p = (total - dx * dx * div) / count
    u[1:-1] -= (p[1:] - p[:-1]) / dx
    v[:, 1:-1] -= (p[:, 1:] - p[:, :-1]) / dx
    return u, v


def test_pressure_projection_on_a_mac_grid_replayed_from_a_graph(where):
    nx, ny, dx, sweeps = 9, 11, 0.1, 30
    u0, v0 = RNG.standard_normal((nx + 1, ny)), RNG.standard_normal((nx, ny + 1))
    u0[[0, -1]] = 0.0
    v0[:, [0, -1]] = 0.0
    want_u, want_v = projection_reference(u0, v0, dx, sweeps)
    u, v = where(u0.copy()), where(v0.copy())
    div, p, q = (where(np.full((nx, ny), np.nan)) for _ in range(3))

    def project():
        divergence(u, v, div, p, 1 / dx)
        now, after = p, q
        for _ in range(sweeps):
            pressure_jacobi(now, after, div, dx * dx)
            now, after = after, now
        subtract_gradient(u, v, now, 1 / dx)

    project()  # compiles, and is the first step
    with bz.record() as rec:
        divergence(u, v, div, p, 1 / dx)  # again: the divergence of the projected field
    assert len(rec.launches) == 1  # its two loops share no array: one launch
    with bz.graph() as g:
        project()
    for _ in range(2):
        g.replay()
    for _ in range(3):
        want_u, want_v = projection_reference(want_u, want_v, dx, sweeps)
    np.testing.assert_allclose(where.host(u), want_u, atol=1e-12)
    np.testing.assert_allclose(where.host(v), want_v, atol=1e-12)


# --- Barnes-Hut: a quadtree walked with an explicit stack ---------------------------------------------
def build_quadtree(pos: np.ndarray, mass: np.ndarray):
    """Children (-1 where none), centres of mass, masses, half sizes and the body of each leaf (-1 in an
    inner node), every body alone in a leaf."""
    child, com, total, half, leaf = [], [], [], [], []

    def build(bodies, cx, cy, h):
        node = len(child)
        child.append([-1] * 4)
        total.append(mass[bodies].sum())
        com.append((pos[bodies] * mass[bodies, None]).sum(0) / total[node])
        half.append(h)
        leaf.append(bodies[0] if len(bodies) == 1 else -1)
        if len(bodies) > 1:
            for q in range(4):
                right, top = pos[bodies, 0] >= cx, pos[bodies, 1] >= cy
                inside = bodies[(right == bool(q & 1)) & (top == bool(q & 2))]
                if len(inside):
                    child[node][q] = build(inside, cx + h / 2 * (1 if q & 1 else -1), cy + h / 2 * (1 if q & 2 else -1),
                                           h / 2)
        return node

    build(np.arange(len(pos)), 0.5, 0.5, 0.5)
    return np.array(child, np.int32), np.array(com), np.array(total), np.array(half), np.array(leaf, np.int32)


@bz.kernel
def barnes_hut(pos: bz.Array[bz.float64, 2], child: bz.Array[bz.int32, 2], com: bz.Array[bz.float64, 2],
               mass: bz.Array[bz.float64, 1], half: bz.Array[bz.float64, 1], leaf: bz.Array[bz.int32, 1],
               acc: bz.Array[bz.float64, 2], visits: bz.Array[bz.int32, 1], theta: float, eps2: float):
    for p in range(pos.shape[0]):
        stack = bz.local(bz.int32, 64)
        stack[0] = 0
        top = 1
        ax = 0.0
        ay = 0.0
        seen = 0
        while top > 0:
            top -= 1
            node = stack[top]
            seen += 1
            if leaf[node] == p:
                continue
            dx = com[node, 0] - pos[p, 0]
            dy = com[node, 1] - pos[p, 1]
            r2 = dx * dx + dy * dy
            if leaf[node] >= 0 or 4.0 * half[node] ** 2 < theta * theta * r2:  # far enough: one body
                scale = mass[node] / ((r2 + eps2) * math.sqrt(r2 + eps2))
                ax += dx * scale
                ay += dy * scale
            else:
                for q in range(4):
                    if child[node, q] >= 0:
                        stack[top] = child[node, q]
                        top += 1
        acc[p, 0] = ax
        acc[p, 1] = ay
        visits[p] = seen


def barnes_hut_reference(pos, child, com, mass, half, leaf, theta, eps2):
    acc, visits = np.zeros_like(pos), np.zeros(len(pos), np.int32)
    for p in range(len(pos)):
        stack = [0]
        while stack:
            node = stack.pop()
            visits[p] += 1
            if leaf[node] == p:
                continue
            d = com[node] - pos[p]
            r2 = d @ d
            if leaf[node] >= 0 or 4.0 * half[node] ** 2 < theta * theta * r2:
                acc[p] += d * mass[node] / ((r2 + eps2) * math.sqrt(r2 + eps2))
            else:
                stack.extend(c for c in child[node] if c >= 0)
    return acc, visits


def test_barnes_hut_traversal_with_an_explicit_stack(where):
    pos, mass = RNG.random((40, 2)), RNG.random(40) + 0.5
    tree = build_quadtree(pos, mass)
    for theta in (0.6, 0.0):  # theta 0 opens every node: the direct sum
        acc, visits = where(np.full((40, 2), np.nan)), where(np.full(40, -1, np.int32))
        barnes_hut(where(pos), *map(where, tree), acc, visits, theta, 1e-4)
        want_acc, want_visits = barnes_hut_reference(pos, *tree, theta, 1e-4)
        np.testing.assert_allclose(where.host(acc), want_acc, rtol=1e-12)
        np.testing.assert_array_equal(where.host(visits), want_visits)
    d = pos[None] - pos[:, None]
    r2 = (d ** 2).sum(-1) + 1e-4
    np.testing.assert_allclose(where.host(acc), (d * (mass[None, :, None] / r2[..., None] ** 1.5)).sum(1), rtol=1e-10)


# --- images: Sobel and bilateral filters of uint8 pixels, a Mandelbrot set -------------------------------
@bz.kernel
def sobel(img: bz.Array[bz.uint8, 2], out: bz.Array[bz.float32, 2]):
    h, w = img.shape
    for i, j in bz.ndrange(h, w):
        gx = 0.0
        gy = 0.0
        for di in range(-1, 2):
            for dj in range(-1, 2):
                pixel = img[min(max(i + di, 0), h - 1), min(max(j + dj, 0), w - 1)]  # clamped at the borders
                gx += dj * (2 - abs(di)) * pixel
                gy += di * (2 - abs(dj)) * pixel
        out[i, j] = math.sqrt(gx * gx + gy * gy)


@bz.kernel
def bilateral(img: bz.Array[bz.uint8, 2], out: bz.Array[bz.float32, 2], radius: int, sigma_s: bz.float32,
              sigma_r: bz.float32):
    h, w = img.shape
    for i, j in bz.ndrange(h, w):
        centre = bz.float32(img[i, j])
        num = 0.0
        den = 0.0
        for di in range(-radius, radius + 1):
            for dj in range(-radius, radius + 1):
                value = bz.float32(img[min(max(i + di, 0), h - 1), min(max(j + dj, 0), w - 1)])
                spatial, tonal = (di * di + dj * dj) / (2 * sigma_s ** 2), (value - centre) ** 2 / (2 * sigma_r ** 2)
                weight = bz.math.exp(-spatial - tonal)
                num += weight * value
                den += weight
        out[i, j] = num / den


@bz.kernel
def mandelbrot(escape: bz.Array[bz.int32, 2], x0: float, y0: float, step: float, max_iter: int):
    for i, j in bz.ndrange(escape.shape[0], escape.shape[1]):
        cr, ci = x0 + j * step, y0 + i * step
        zr = 0.0
        zi = 0.0
        n = 0
        while n < max_iter:
            if zr * zr + zi * zi > 4.0:
                break
            zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
            n += 1
        escape[i, j] = n


def test_image_filters_of_uint8_pixels_and_a_mandelbrot_set(where):
    img = RNG.integers(0, 256, (13, 17), dtype=np.uint8)
    pad = np.pad(img.astype(np.float64), 2, mode="edge")
    h, w = img.shape

    def shifted(di, dj):
        return pad[2 + di:2 + di + h, 2 + dj:2 + dj + w]

    gx = sum(dj * (2 - abs(di)) * shifted(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1))
    gy = sum(di * (2 - abs(dj)) * shifted(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1))
    out = where(np.full((h, w), np.nan, np.float32))
    sobel(where(img), out)
    np.testing.assert_allclose(where.host(out), np.hypot(gx, gy), rtol=1e-6)

    weights = [np.exp(-(di * di + dj * dj) / (2 * 1.5 ** 2) - (shifted(di, dj) - img) ** 2 / (2 * 40.0 ** 2))
               for di in range(-2, 3) for dj in range(-2, 3)]
    values = [shifted(di, dj) for di in range(-2, 3) for dj in range(-2, 3)]
    bilateral(where(img), out, 2, 1.5, 40.0)
    want = sum(wt * val for wt, val in zip(weights, values)) / sum(weights)
    np.testing.assert_allclose(where.host(out), want, rtol=2e-6)

    escape = where(np.full((15, 24), -1, np.int32))
    mandelbrot(escape, -2.0, -1.05, 0.14, 40)
    want = np.zeros((15, 24), np.int32)
    for i in range(15):
        for j in range(24):
            cr, ci, zr, zi = -2.0 + j * 0.14, -1.05 + i * 0.14, 0.0, 0.0
            while want[i, j] < 40 and zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                want[i, j] += 1
    np.testing.assert_array_equal(where.host(escape), want)


# --- Metropolis sweeps with a hash written by hand in uint32 -------------------------------------------
@bz.func
def wang_hash(s: bz.uint32) -> bz.uint32:
    s = (s ^ 61) ^ (s >> 16)
    s *= 9
    s = s ^ (s >> 4)
    s *= 0x27D4EB2D  # wraps around, as C's unsigned arithmetic does
    return s ^ (s >> 15)


@bz.func
def xorshift(s: bz.uint32) -> bz.uint32:
    s ^= s << 13
    s ^= s >> 17
    s ^= s << 5
    return s


@bz.kernel
def metropolis(spin: bz.Array[bz.int32, 2], beta: float, seed: bz.uint32, color: int, flips: bz.Array[bz.int64, 1]):
    n, m = spin.shape
    for i, j in bz.ndrange(n, m):
        if (i + j) % 2 == color:
            field = spin[(i + 1) % n, j] + spin[(i - 1) % n, j] + spin[i, (j + 1) % m] + spin[i, (j - 1) % m]
            d_energy = 2 * spin[i, j] * field
            r = bz.float64(xorshift(wang_hash(bz.uint32(i * m + j) ^ seed))) / 4294967296.0
            if d_energy <= 0 or r < math.exp(-beta * d_energy):
                spin[i, j] = -spin[i, j]
                flips[0] += 1


def python_hash(s: int) -> int:
    mask = 0xFFFFFFFF
    s = (s ^ 61) ^ (s >> 16)
    s = (s * 9) & mask
    s ^= s >> 4
    s = (s * 0x27D4EB2D) & mask
    s ^= s >> 15
    s ^= (s << 13) & mask
    s ^= s >> 17
    return s ^ ((s << 5) & mask)


def metropolis_reference(spin, beta, seeds):
    spin, flips = spin.copy(), 0
    n, m = spin.shape
    for seed in seeds:
        for color in (0, 1):
            for i in range(n):
                for j in range(m):
                    if (i + j) % 2 != color:
                        continue
                    field = spin[(i + 1) % n, j] + spin[i - 1, j] + spin[i, (j + 1) % m] + spin[i, j - 1]
                    d_energy = 2 * spin[i, j] * field
                    if d_energy <= 0 or python_hash((i * m + j) ^ seed) / 4294967296.0 < math.exp(-beta * d_energy):
                        spin[i, j] *= -1
                        flips += 1
    return spin, flips


def test_metropolis_checkerboard_with_a_hand_written_uint32_hash(where):
    spin0 = RNG.choice(np.int32([-1, 1]), (8, 10))
    seeds = [int(s) for s in RNG.integers(0, 2**32, 6)]
    want_spin, want_flips = metropolis_reference(spin0, 0.4, seeds)
    spin, flips = where(spin0.copy()), where(np.zeros(1, np.int64))
    for seed in seeds:
        for color in (0, 1):
            metropolis(spin, 0.4, seed, color, flips)
    np.testing.assert_array_equal(where.host(spin), want_spin)
    assert where.host(flips)[0] == want_flips


# --- Kuramoto oscillators: RK4 through helpers returning tuples, a coupling changed every call -----------
@bz.func
def phase_velocity(theta, omega, mean_sin, mean_cos, coupling):
    return omega + coupling * (mean_sin * math.cos(theta) - mean_cos * math.sin(theta)), coupling


@bz.func
def rk4(theta, omega, mean_sin, mean_cos, coupling, dt):
    k1, _ = phase_velocity(theta, omega, mean_sin, mean_cos, coupling)
    k2, _ = phase_velocity(theta + 0.5 * dt * k1, omega, mean_sin, mean_cos, coupling)
    k3, _ = phase_velocity(theta + 0.5 * dt * k2, omega, mean_sin, mean_cos, coupling)
    k4, used = phase_velocity(theta + dt * k3, omega, mean_sin, mean_cos, coupling)
    return theta + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4), used


@bz.kernel
def kuramoto_step(theta: bz.Array[bz.float64, 1], omega: bz.Array[bz.float64, 1], order: bz.Array[bz.float64, 1],
                  coupling: float, dt: float):
    n = theta.shape[0]
    order[0] = 0.0
    order[1] = 0.0
    for i in range(n):
        order[0] += math.sin(theta[i]) / n
        order[1] += math.cos(theta[i]) / n
    for i in range(n):
        theta[i], order[2] = rk4(theta[i], omega[i], order[0], order[1], coupling, dt)


def test_kuramoto_oscillators_by_rk4_through_helpers_returning_tuples(where):
    theta0, omega = RNG.random(33) * 2 * np.pi, RNG.standard_normal(33)
    want = theta0.copy()
    for s in range(30):
        coupling = 1.5 + 0.02 * s
        mean_sin, mean_cos = np.sin(want).mean(), np.cos(want).mean()

        def f(th, coupling=coupling, mean_sin=mean_sin, mean_cos=mean_cos):
            return omega + coupling * (mean_sin * np.cos(th) - mean_cos * np.sin(th))

        k1 = f(want)
        k2 = f(want + 0.025 * k1)
        k3 = f(want + 0.025 * k2)
        k4 = f(want + 0.05 * k3)
        want = want + 0.05 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    for fuse in (True, False):
        theta, order = where(theta0.copy()), where(np.zeros(3))
        with config.scope(fuse_tasks=fuse):
            for s in range(30):
                kuramoto_step(theta, where(omega), order, 1.5 + 0.02 * s, 0.05)
        np.testing.assert_allclose(where.host(theta), want, rtol=1e-12, atol=1e-12)
        assert where.host(order)[2] == 1.5 + 0.02 * 29


# --- PageRank pulled over the in-edges of a CSR graph, on torch tensors ----------------------------------
@bz.kernel
def pagerank_pull(indptr: bz.Array[bz.int64, 1], sources: bz.Array[bz.int64, 1], out_degree: bz.Array[bz.int32, 1],
                  rank: bz.Array[bz.float32, 1], new_rank: bz.Array[bz.float32, 1], damping: bz.float32,
                  sums: bz.Array[bz.float32, 1]):
    n = rank.shape[0]
    sums[0] = 0.0
    sums[1] = 0.0
    for v in range(n):
        if out_degree[v] == 0:  # a dangling page gives its rank to every page
            sums[0] += rank[v]
    for v in range(n):
        pulled = 0.0
        for e in range(indptr[v], indptr[v + 1]):
            pulled += rank[sources[e]] / out_degree[sources[e]]
        new_rank[v] = (1 - damping) / n + damping * (pulled + sums[0] / n)
        sums[1] += abs(new_rank[v] - rank[v])
    for v in range(n):
        rank[v] = new_rank[v]


def test_pagerank_pulled_over_a_csr_graph_of_torch_tensors(where):
    torch = where.torch()
    n = 30
    adjacency = RNG.random((n, n)) < 0.12
    np.fill_diagonal(adjacency, False)
    adjacency[3] = False  # a dangling page
    out_degree = adjacency.sum(1)
    targets, sources = np.nonzero(adjacency.T)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(targets, minlength=n))])

    def tensor(a, dtype):
        return torch.tensor(a, dtype=dtype, device=where.torch_device)

    graph = tensor(indptr, torch.int64), tensor(sources, torch.int64), tensor(out_degree, torch.int32)
    rank = tensor(np.full(n, 1 / n), torch.float32)
    new_rank, sums = torch.zeros_like(rank), torch.zeros(2, device=where.torch_device)
    want = np.full(n, 1 / n)
    transition = np.where(adjacency, 1 / np.maximum(out_degree, 1)[:, None], 0.0)
    for _ in range(25):
        pagerank_pull(*graph, rank, new_rank, 0.85, sums)
        previous, want = want, 0.15 / n + 0.85 * (transition.T @ want + want[out_degree == 0].sum() / n)
    np.testing.assert_allclose(where.host(rank), want, atol=2e-7)
    np.testing.assert_allclose(where.host(sums)[1], np.abs(want - previous).sum(), atol=1e-6)


# --- a tiled matrix product, Floyd-Warshall, a bitonic sort, row minima with ties -------------------------
TILE = 4


@bz.kernel
def tiled_matmul(a: bz.Array[bz.float32, 2], b: bz.Array[bz.float32, 2], c: bz.Array[bz.float32, 2]):
    m, depth = a.shape
    n = b.shape[1]
    for ti, tj in bz.ndrange((m + TILE - 1) // TILE, (n + TILE - 1) // TILE):
        acc = bz.local(bz.float32, TILE * TILE)
        for k0 in range(0, depth, TILE):
            a_tile = bz.local(bz.float32, TILE * TILE)
            b_tile = bz.local(bz.float32, TILE * TILE)
            for u in bz.static(range(TILE)):
                for w in bz.static(range(TILE)):
                    row, col = ti * TILE + u, k0 + w
                    a_tile[u * TILE + w] = a[row, col] if row < m and col < depth else 0.0
                    row, col = k0 + u, tj * TILE + w
                    b_tile[u * TILE + w] = b[row, col] if row < depth and col < n else 0.0
            for u in range(TILE):
                for w in range(TILE):
                    for q in range(TILE):
                        acc[u * TILE + w] += a_tile[u * TILE + q] * b_tile[q * TILE + w]
        for u in range(TILE):
            for w in range(TILE):
                if ti * TILE + u < m and tj * TILE + w < n:
                    c[ti * TILE + u, tj * TILE + w] = acc[u * TILE + w]


@bz.kernel
def relax_through(d: bz.Array[bz.float64, 2], k: int):
    n = d.shape[0]
    for i, j in bz.ndrange(n, n):  # row and column k do not change in step k: no race
        d[i, j] = min(d[i, j], d[i, k] + d[k, j])


@bz.kernel
def floyd_warshall_serial(d: bz.Array[bz.float64, 2]):
    n = d.shape[0]
    for k in bz.serial(range(n)):
        for i in range(n):
            for j in range(n):
                d[i, j] = min(d[i, j], d[i, k] + d[k, j])


@bz.kernel
def bitonic_stage(a: bz.Array[bz.float32, 1], j: int, k: int):
    for i in range(a.shape[0]):
        partner = i ^ j
        if partner > i and (a[i] > a[partner]) == ((i & k) == 0):
            a[i], a[partner] = a[partner], a[i]


@bz.kernel
def row_minima(a: bz.Array[bz.float32, 2], first: bz.Array[bz.int32, 1], low: bz.Array[bz.float32, 1],
               overall: bz.Array[bz.float32, 1]):
    for i in range(a.shape[0]):
        best, at = a[i, 0], 0
        for j in range(1, a.shape[1]):
            if a[i, j] < best:  # strict: the first of equal minima wins, as np.argmin's
                best, at = a[i, j], j
        first[i], low[i] = at, best
        bz.atomic_min(overall[0], best)


def test_tiled_matmul_floyd_warshall_bitonic_sort_and_row_minima(where):
    a, b = RNG.random((9, 7), np.float32), RNG.random((7, 10), np.float32)
    c = where(np.full((9, 10), np.nan, np.float32))
    tiled_matmul(where(a), where(b), c)
    np.testing.assert_allclose(where.host(c), a.astype(np.float64) @ b, rtol=1e-5)

    n = 10
    weights = np.where(RNG.random((n, n)) < 0.4, RNG.random((n, n)) * 10, np.inf)
    np.fill_diagonal(weights, 0.0)
    want = weights.copy()
    for k in range(n):
        want = np.minimum(want, want[:, k:k + 1] + want[k:k + 1])
    d = where(weights.copy())
    for k in range(n):
        relax_through(d, k)
    np.testing.assert_array_equal(where.host(d), want)
    d = where(weights.copy())
    floyd_warshall_serial(d)
    np.testing.assert_array_equal(where.host(d), want)

    values = RNG.random(64).astype(np.float32)
    keys = where(values.copy())
    for k in (2 ** e for e in range(1, 7)):
        j = k // 2
        while j:
            bitonic_stage(keys, j, k)
            j //= 2
    np.testing.assert_array_equal(where.host(keys), np.sort(values))

    ties = RNG.integers(0, 3, (12, 7)).astype(np.float32)
    first, low, overall = where(np.full(12, -1, np.int32)), where(np.zeros(12, np.float32)), where(np.float32([9.0]))
    row_minima(where(ties), first, low, overall)
    np.testing.assert_array_equal(where.host(first), ties.argmin(1))
    np.testing.assert_array_equal(where.host(low), ties.min(1))
    assert where.host(overall)[0] == ties.min()
