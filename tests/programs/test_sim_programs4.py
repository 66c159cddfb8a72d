"""Simulation programs as a solver or engine writer ports them to loop kernels: a conjugate-gradient
iteration over a CSR matrix in one kernel (sparse products, dot products as atomic sums, replayed from a
graph), linear triangle elements assembled by atomic scatter, a 27-point stencil with multigrid
restriction and prolongation, breadth-first search by frontiers, connected components by label
propagation, stream compaction through a serial prefix sum, sphere tracing a signed distance field,
rigid bodies integrated with quaternions, and a damped chain of springs whose step is four loops (one
with a `continue`), run fused and unfused and with buffers swapped every step. Each is checked against a
NumPy or pure-Python float64 reference, on the CPU and on a GPU (the `where` fixture of
tests/programs/conftest.py places the arrays); on the CPU run the CUDA of each call is also compiled with
NVRTC where it is installed (the fixture of tests/programs/test_sim_programs.py)."""

from collections import deque

import numpy as np
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)

import braze as bz
from braze import config

RNG = np.random.default_rng(7)


def csr(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, cols = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(dense)))]).astype(np.int32)
    return indptr, cols.astype(np.int32), dense[rows, cols]


# --- conjugate gradients over a CSR matrix, one kernel an iteration ---------------------------------
@bz.kernel
def cg_iteration(indptr: bz.Array[bz.int32, 1], indices: bz.Array[bz.int32, 1], data: bz.Array[bz.float64, 1],
                 x: bz.Array[bz.float64, 1], r: bz.Array[bz.float64, 1], p: bz.Array[bz.float64, 1],
                 ap: bz.Array[bz.float64, 1], dots: bz.Array[bz.float64, 1]):
    # dots: [r.r of the last iteration, p.Ap, r.r of this one]
    n = x.shape[0]
    dots[1] = 0.0
    dots[2] = 0.0
    for i in range(n):
        acc = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            acc += data[j] * p[indices[j]]
        ap[i] = acc
        dots[1] += p[i] * acc  # not the thread's own element: atomic
    for i in range(n):
        alpha = dots[0] / dots[1] if dots[1] != 0.0 else 0.0
        x[i] += alpha * p[i]
        r[i] -= alpha * ap[i]
        dots[2] += r[i] * r[i]
    for i in range(n):
        p[i] = r[i] + (dots[2] / dots[0] if dots[0] != 0.0 else 0.0) * p[i]
    dots[0] = dots[2]


def test_conjugate_gradients_over_a_csr_matrix_replayed_from_a_graph(where):
    n = 40
    a = 4.0 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1) - 0.5 * (np.eye(n, k=5) + np.eye(n, k=-5))
    b = RNG.random(n)
    results = []
    for fuse, graph in ((True, True), (False, False)):
        args = [where(v) for v in (*csr(a), np.zeros(n), b.copy(), b.copy(), np.zeros(n), np.array([b @ b, 0.0, 0.0]))]
        with config.scope(fuse_tasks=fuse):
            if graph:
                with bz.graph() as g:
                    cg_iteration(*args)
                for _ in range(24):
                    g.replay()
            else:
                for _ in range(25):
                    cg_iteration(*args)
        results.append(where.host(args[3]))
    np.testing.assert_allclose(results[0], np.linalg.solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)  # the atomic sums' order may differ


# --- linear triangle elements, assembled by atomic scatter ---------------------------------------------
@bz.kernel
def assemble_poisson(nodes: bz.Array[bz.float64, 2], triangles: bz.Array[bz.int32, 2],
                     stiffness: bz.Array[bz.float64, 2], load: bz.Array[bz.float64, 1], source: float):
    for e in range(triangles.shape[0]):
        corner = bz.local(bz.int32, 3)
        bx = bz.local(bz.float64, 3)
        by = bz.local(bz.float64, 3)
        for c in range(3):
            corner[c] = triangles[e, c]
        for c in range(3):
            a, b = corner[(c + 1) % 3], corner[(c + 2) % 3]
            bx[c] = nodes[a, 1] - nodes[b, 1]
            by[c] = nodes[b, 0] - nodes[a, 0]
        area = 0.5 * abs(bx[0] * by[1] - bx[1] * by[0])
        for c in range(3):
            load[corner[c]] += source * area / 3.0
            for d in range(3):
                stiffness[corner[c], corner[d]] += (bx[c] * bx[d] + by[c] * by[d]) / (4.0 * area)


def test_linear_triangle_elements_assembled_by_atomic_scatter(where):
    m = 5
    xs, ys = np.meshgrid(np.linspace(0, 1, m), np.linspace(0, 1, m), indexing="ij")
    nodes = np.stack([xs.ravel(), ys.ravel()], 1) + 0.02 * RNG.standard_normal((m * m, 2))
    corners = [[0, m, 1], [1, m, m + 1]]  # two triangles a square of the grid
    triangles = np.array([[c + i * m + j for c in t] for i in range(m - 1) for j in range(m - 1) for t in corners],
                         np.int32)
    stiffness, load = where(np.zeros((m * m, m * m))), where(np.zeros(m * m))
    assemble_poisson(where(nodes), where(triangles), stiffness, load, 2.0)
    want_k, want_f = np.zeros((m * m, m * m)), np.zeros(m * m)
    for t in triangles:
        p = nodes[t]
        bx, by = p[[1, 2, 0], 1] - p[[2, 0, 1], 1], p[[2, 0, 1], 0] - p[[1, 2, 0], 0]
        area = 0.5 * abs(bx[0] * by[1] - bx[1] * by[0])
        want_k[np.ix_(t, t)] += (np.outer(bx, bx) + np.outer(by, by)) / (4 * area)
        want_f[t] += 2.0 * area / 3
    np.testing.assert_allclose(where.host(stiffness), want_k, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(where.host(load), want_f, rtol=1e-12)
    np.testing.assert_allclose(where.host(stiffness).sum(1), 0.0, atol=1e-12)  # constants lie in the null space


# --- a 27-point stencil, multigrid restriction and prolongation -----------------------------------------
@bz.kernel
def smooth27(u: bz.Array[bz.float32, 3], out: bz.Array[bz.float32, 3]):
    nx, ny, nz = u.shape
    for i, j, k in bz.ndrange((1, nx - 1), (1, ny - 1), (1, nz - 1)):
        s = 0.0
        for di in range(-1, 2):
            for dj in bz.static(range(-1, 2)):
                for dk in range(-1, 2):
                    s += u[i + di, j + dj, k + dk] / (1 + abs(di) + abs(dj) + abs(dk))
        out[i, j, k] = s


@bz.kernel
def restrict_full_weighting(fine: bz.Array[bz.float64, 2], coarse: bz.Array[bz.float64, 2]):
    for ci, cj in bz.ndrange((1, coarse.shape[0] - 1), (1, coarse.shape[1] - 1)):
        i, j = 2 * ci, 2 * cj
        edges = fine[i - 1, j] + fine[i + 1, j] + fine[i, j - 1] + fine[i, j + 1]
        corners = fine[i - 1, j - 1] + fine[i - 1, j + 1] + fine[i + 1, j - 1] + fine[i + 1, j + 1]
        coarse[ci, cj] = (4 * fine[i, j] + 2 * edges + corners) / 16


@bz.kernel
def prolong_bilinear(coarse: bz.Array[bz.float64, 2], fine: bz.Array[bz.float64, 2]):
    for i, j in bz.ndrange(fine.shape[0], fine.shape[1]):
        ci, cj, odd_i, odd_j = i // 2, j // 2, i % 2, j % 2
        fine[i, j] += 0.25 * (coarse[ci, cj] + coarse[ci + odd_i, cj] + coarse[ci, cj + odd_j]
                              + coarse[ci + odd_i, cj + odd_j])


def test_27_point_stencil_and_multigrid_transfers(where):
    u = RNG.random((6, 7, 8)).astype(np.float32)
    out = where(np.zeros_like(u))
    smooth27(where(u), out)
    want = np.zeros(u.shape)
    for d in np.ndindex(3, 3, 3):
        shifted = u[d[0]:u.shape[0] - 2 + d[0], d[1]:u.shape[1] - 2 + d[1], d[2]:u.shape[2] - 2 + d[2]]
        want[1:-1, 1:-1, 1:-1] += shifted / (1 + sum(abs(x - 1) for x in d))
    np.testing.assert_allclose(where.host(out), want, rtol=1e-6)

    fine = RNG.random((9, 9))
    coarse = where(np.zeros((5, 5)))
    restrict_full_weighting(where(fine), coarse)
    weights = np.outer([1, 2, 1], [1, 2, 1]) / 16
    want = np.zeros((5, 5))
    for ci in range(1, 4):
        for cj in range(1, 4):
            want[ci, cj] = (weights * fine[2 * ci - 1:2 * ci + 2, 2 * cj - 1:2 * cj + 2]).sum()
    np.testing.assert_allclose(where.host(coarse), want, rtol=1e-14)

    c = RNG.random((5, 5))
    grown = where(np.ones((9, 9)))
    prolong_bilinear(where(c), grown)
    want = np.ones((9, 9))
    want[::2, ::2] += c
    want[1::2, ::2] += 0.5 * (c[:-1] + c[1:])
    want[::2, 1::2] += 0.5 * (c[:, :-1] + c[:, 1:])
    want[1::2, 1::2] += 0.25 * (c[:-1, :-1] + c[1:, :-1] + c[:-1, 1:] + c[1:, 1:])
    np.testing.assert_allclose(where.host(grown), want, rtol=1e-14)


# --- breadth-first search by frontiers, and connected components by label propagation ---------------------
@bz.kernel
def expand_frontier(indptr: bz.Array[bz.int32, 1], indices: bz.Array[bz.int32, 1], depth: bz.Array[bz.int32, 1],
                    frontier: bz.Array[bz.int32, 1], size: int, following: bz.Array[bz.int32, 1],
                    count: bz.Array[bz.int32, 1], level: int):
    for t in range(size):
        v = frontier[t]
        for e in range(indptr[v], indptr[v + 1]):
            w = indices[e]
            if bz.atomic_min(depth[w], level + 1) > level + 1:  # the one thread that lowered it queues w
                following[bz.atomic_add(count[0], 1)] = w


@bz.kernel
def propagate_labels(edges: bz.Array[bz.int64, 2], label: bz.Array[bz.int64, 1], changed: bz.Array[bz.int32, 1]):
    for e in range(edges.shape[0]):
        a, b = edges[e, 0], edges[e, 1]
        low = min(label[a], label[b])
        if bz.atomic_min(label[a], low) > low or bz.atomic_min(label[b], low) > low:
            changed[0] = 1


def test_breadth_first_search_by_frontiers_and_components_by_labels(where):
    n = 120
    indices = RNG.integers(0, n, 2 * n).astype(np.int32)  # two edges out of each vertex
    indptr = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
    unreached = np.iinfo(np.int32).max
    depth = where(np.where(np.arange(n) == 0, 0, unreached).astype(np.int32))
    frontier, size, level = where(np.zeros(n, np.int32)), 1, 0
    graph = where(indptr), where(indices)
    while size:
        following, count = where(np.full(n, -1, np.int32)), where(np.zeros(1, np.int32))
        expand_frontier(*graph, depth, frontier, size, following, count, level)
        frontier, size, level = following, int(where.host(count)[0]), level + 1
    want = np.full(n, unreached)
    want[0] = 0
    queue = deque([0])
    while queue:
        v = queue.popleft()
        for w in indices[indptr[v]:indptr[v + 1]]:
            if want[w] == unreached:
                want[w] = want[v] + 1
                queue.append(w)
    np.testing.assert_array_equal(where.host(depth), want)

    edges = RNG.integers(0, n, (70, 2)).astype(np.int64)
    label, changed = where(np.arange(n, dtype=np.int64)), where(np.ones(1, np.int32))
    while where.host(changed)[0]:
        changed = where(np.zeros(1, np.int32))
        propagate_labels(where(edges), label, changed)
    root = list(range(n))

    def find(v):
        while root[v] != v:
            v = root[v]
        return v

    for a, b in edges:
        ra, rb = find(a), find(b)
        root[max(ra, rb)] = min(ra, rb)
    np.testing.assert_array_equal(where.host(label), [find(v) for v in range(n)])


# --- stream compaction through a serial prefix sum ----------------------------------------------------------
@bz.kernel
def compact(x: bz.Array[bz.float32, 1], keep: bz.Array[bz.int32, 1], at: bz.Array[bz.int32, 1],
            out: bz.Array[bz.float32, 1], kept: bz.Array[bz.int32, 1], threshold: bz.float32):
    for i in range(x.shape[0]):
        keep[i] = x[i] > threshold
    total = 0
    for i in bz.serial(range(x.shape[0])):
        at[i] = total
        total += keep[i]
    kept[0] = total
    for i in range(x.shape[0]):
        if keep[i]:
            out[at[i]] = x[i]


def test_stream_compaction_keeps_the_order(where):
    x = RNG.standard_normal(301).astype(np.float32)
    keep, at = where(np.full(301, -1, np.int32)), where(np.full(301, -1, np.int32))
    out = where(np.full(301, np.nan, np.float32))
    kept = where(np.zeros(1, np.int32))
    compact(where(x), keep, at, out, kept, 0.25)
    want = x[x > np.float32(0.25)]
    assert where.host(kept)[0] == len(want)
    np.testing.assert_array_equal(where.host(out)[:len(want)], want)


# --- sphere tracing a signed distance field -------------------------------------------------------------------
@bz.func
def scene(p: bz.vec3) -> bz.float32:
    sphere = bz.length(p - bz.vec3(0.0, 0.0, 3.0)) - 1.0
    q = abs(p - bz.vec3(1.5, 0.0, 4.0)) - bz.vec3(0.5, 0.5, 0.5)
    box = bz.length(max(q, 0.0)) + min(max(q.x, max(q.y, q.z)), 0.0)
    return min(sphere, box)


@bz.kernel
def sphere_trace(depth: bz.Array[bz.float32, 2], fov: bz.float32, max_steps: int):
    h, w = depth.shape
    for y, x in bz.ndrange(h, w):
        ray = bz.normalize(bz.vec3((2.0 * (x + 0.5) / w - 1.0) * fov, (2.0 * (y + 0.5) / h - 1.0) * fov, 1.0))
        t = 0.0
        hit = False
        steps = 0
        while steps < max_steps and not hit and t < 20.0:
            d = scene(ray * t)
            hit = d < 1e-3
            if not hit:
                t += d
            steps += 1
        depth[y, x] = t if hit else -1.0


def test_sphere_tracing_a_signed_distance_field(where):
    h, w = 12, 16
    depth = where(np.full((h, w), np.nan, np.float32))
    sphere_trace(depth, 0.6, 64)
    want = np.full((h, w), -1.0)
    for y, x in np.ndindex(h, w):
        ray = np.array([(2 * (x + 0.5) / w - 1) * 0.6, (2 * (y + 0.5) / h - 1) * 0.6, 1.0])
        ray /= np.linalg.norm(ray)
        t = 0.0
        for _ in range(64):
            p = ray * t
            q = np.abs(p - [1.5, 0, 4.0]) - 0.5
            d = min(np.linalg.norm(p - [0, 0, 3.0]) - 1, np.linalg.norm(np.maximum(q, 0)) + min(q.max(), 0))
            if d < 1e-3:
                want[y, x] = t
                break
            t += d
            if t >= 20:
                break
    got = where.host(depth)
    assert (got > 0).sum() > 20
    np.testing.assert_allclose(got, want, atol=1e-4)


# --- rigid bodies with quaternions ----------------------------------------------------------------------------
@bz.func
def quaternion_product(a: bz.vec4, b: bz.vec4) -> bz.vec4:
    return bz.vec4(a.w * b.x + a.x * b.w + a.y * b.z - a.z * b.y, a.w * b.y - a.x * b.z + a.y * b.w + a.z * b.x,
                   a.w * b.z + a.x * b.y - a.y * b.x + a.z * b.w, a.w * b.w - a.x * b.x - a.y * b.y - a.z * b.z)


@bz.func
def rotated(q: bz.vec4, v: bz.vec3) -> bz.vec3:
    u = bz.vec3(q.x, q.y, q.z)
    return v + 2.0 * bz.cross(u, bz.cross(u, v) + q.w * v)


@bz.kernel
def rigid_step(q: bz.Array[bz.vec4, 1], omega: bz.Array[bz.vec3, 1], pos: bz.Array[bz.vec3, 1],
               vel: bz.Array[bz.vec3, 1], anchor: bz.Array[bz.vec3, 1], world: bz.Array[bz.vec3, 1], dt: bz.float32):
    for i in range(q.shape[0]):
        spin = bz.vec4(omega[i].x, omega[i].y, omega[i].z, 0.0)
        turned = q[i] + 0.5 * dt * quaternion_product(spin, q[i])
        q[i] = turned / bz.length(turned)
        pos[i] += dt * vel[i]
    for i in range(q.shape[0]):
        world[i] = pos[i] + rotated(q[i], anchor[i])  # thread i reads what it wrote: fused


def test_rigid_bodies_integrated_with_quaternions(where):
    n = 10
    q = RNG.standard_normal((n, 4)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    omega, pos, vel, anchor = (RNG.standard_normal((n, 3)).astype(np.float32) for _ in range(4))
    args = [where(a.copy()) for a in (q, omega, pos, vel, anchor, np.full((n, 3), np.nan, np.float32))]
    with bz.record() as rec:
        for _ in range(40):
            rigid_step(*args, 0.01)
    assert len(rec.launches) == 40  # the two loops fused
    want_q, want_pos = q.astype(np.float64), pos.astype(np.float64)
    for _ in range(40):
        x, y, z, w = want_q.T
        ox, oy, oz = omega.T
        spin = np.stack([w * ox + oy * z - oz * y, w * oy - ox * z + oz * x, w * oz + ox * y - oy * x,
                         -ox * x - oy * y - oz * z], 1)
        want_q = want_q + 0.005 * spin
        want_q /= np.linalg.norm(want_q, axis=1, keepdims=True)
        want_pos = want_pos + 0.01 * vel
    u = want_q[:, :3]
    want_world = want_pos + anchor + 2 * np.cross(u, np.cross(u, anchor) + want_q[:, 3:] * anchor)
    np.testing.assert_allclose(where.host(args[0]), want_q, atol=2e-6)
    np.testing.assert_allclose(where.host(args[5]), want_world, atol=2e-5)


# --- a damped chain of springs: four loops a step, buffers swapped every step -----------------------------
@bz.kernel
def chain_step(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], force: bz.Array[bz.float64, 1],
               x_next: bz.Array[bz.float64, 1], pinned: bz.Array[bz.uint8, 1], k: float, c: float, rest: float,
               dt: float):
    n = x.shape[0]
    for i in range(n):
        force[i] = -9.81
    for i in range(n - 1):
        stretch = k * (x[i + 1] - x[i] - rest) + c * (v[i + 1] - v[i])
        force[i] += stretch  # a neighbour's element too: atomic
        force[i + 1] -= stretch
    for i in range(n):
        if pinned[i]:
            x_next[i] = x[i]
            continue
        v[i] += dt * force[i]
    for i in range(n):
        if not pinned[i]:
            x_next[i] = x[i] + dt * v[i]


def chain_reference(x, v, pinned, k, c, rest, dt, steps):
    for _ in range(steps):
        force = np.full_like(x, -9.81)
        stretch = k * (x[1:] - x[:-1] - rest) + c * (v[1:] - v[:-1])
        force[:-1] += stretch
        force[1:] -= stretch
        free = pinned == 0
        v = np.where(free, v + dt * force, v)
        x = np.where(free, x + dt * v, x)
    return x, v


def test_damped_chain_of_springs_fused_unfused_and_swapping_buffers(where):
    n, steps = 24, 60
    x0 = -0.1 * np.arange(n) + 0.01 * RNG.standard_normal(n)
    pinned = (np.arange(n) == 0).astype(np.uint8)
    want_x, want_v = chain_reference(x0, np.zeros(n), pinned, 80.0, 0.5, 0.1, 1e-3, steps)
    for fuse in (True, False):
        x, x_next, v, force = (where(a) for a in (x0.copy(), np.full(n, np.nan), np.zeros(n), np.full(n, np.nan)))
        with config.scope(fuse_tasks=fuse), bz.record() as rec:
            for _ in range(steps):
                chain_step(x, v, force, x_next, where(pinned), 80.0, 0.5, 0.1, 1e-3)
                x, x_next = x_next, x
        assert len(rec.launches) == steps * (3 if fuse else 4)  # the last two loops merge, over a continue
        np.testing.assert_allclose(where.host(x), want_x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(where.host(v), want_v, rtol=1e-10, atol=1e-12)
