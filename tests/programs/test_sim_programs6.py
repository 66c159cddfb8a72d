"""Simulation solvers written for Taichi and Quadrants by people outside braze, ported to loop kernels with
the fewest changes the language needs: from the Genesis engine, an SPH step (a spatial hash built by atomic
counts, slot offsets taken from the old value of an atomic and a scatter into sorted order; density, viscosity,
surface tension and pressure over the 27 neighbouring cells, whose slots wrap by a negative `%`; advection against
a box), XPBD stretch, bending and volume constraints iterated inside one kernel by `bz.static` (each pass an
atomic scatter into `dpos`, then an update that clears it with `.fill(0)`), and a stable-fluid step (an RK3
back-trace through clamped trilinear interpolation, a divergence with solid walls, Jacobi sweeps over a swapped
pair and a gradient subtraction); from difftaichi, the mass-spring robot (a controller of two layers, spring
impulses scattered by atomics into the next time step, an advance with a time of impact), billiards (pairwise
impulses over two loops), the electric particle, the damped wave equation whose reads past the grid give 0
(`p[t, i, j] if 0 <= i < n and ... else 0`) and the smoke step (advection on a torus, Jacobi pressure). Each keeps
its authors' struct-of-arrays fields, batch axis and time-indexed arrays, runs a few steps from a Python time
loop on the CPU backend, and is checked against a NumPy float64 reference of the same step."""

import math

import numpy as np
import pytest

import braze as bz

RNG = np.random.default_rng(2026)


def CALL(kernel, *args):
    kernel(*args)

# --- Genesis SPH ---
SPH_H = 0.1
SPH_RES = 4
SPH_SLOTS = SPH_RES ** 3
SPH_VOL = 0.8 * (0.5 * SPH_H) ** 3
SPH_RHO0, SPH_STIFF, SPH_EXP, SPH_MU, SPH_GAMMA, SPH_SIZE = 1000.0, 50.0, 7.0, 0.01, 0.01, 0.05
SPH_MASS = SPH_RHO0 * SPH_VOL
SPH_LOWER, SPH_UPPER = np.full(3, 0.02), np.full(3, 0.38)


@bz.func
def cell_of(p: bz.vec3d):
    return int(bz.math.floor(p.x / SPH_H)), int(bz.math.floor(p.y / SPH_H)), int(bz.math.floor(p.z / SPH_H))


@bz.func
def slot_of(gx, gy, gz):
    return (gx * SPH_RES * SPH_RES + gy * SPH_RES + gz) % SPH_SLOTS


@bz.func
def cubic_kernel(r_norm):
    res = 0.0
    k = 8.0 / math.pi / SPH_H ** 3
    q = r_norm / SPH_H
    if q <= 1.0:
        if q <= 0.5:
            res = k * (6.0 * q ** 3 - 6.0 * q ** 2 + 1.0)
        else:
            res = 2 * k * (1.0 - q) ** 3
    return res


@bz.func
def cubic_kernel_derivative(r: bz.vec3d) -> bz.vec3d:
    res = bz.vec3d(0.0, 0.0, 0.0)
    r_norm = r.norm()
    k = 8.0 / math.pi / SPH_H ** 3
    q = r_norm / SPH_H
    if r_norm > 1e-5 and q <= 1.0:
        grad_q = r / (r_norm * SPH_H)
        if q <= 0.5:
            res = 6.0 * k * q * (3.0 * q - 2.0) * grad_q
        else:
            res = -6.0 * k * (1.0 - q) ** 2 * grad_q
    return res


@bz.kernel
def sph_reorder(pos: bz.Array[bz.vec3d, 2], vel: bz.Array[bz.vec3d, 2], active: bz.Array[bz.int32, 2],
                slot_size: bz.Array[bz.int32, 2], slot_start: bz.Array[bz.int32, 2], cur_cnt: bz.Array[bz.int32, 1],
                reordered_idx: bz.Array[bz.int32, 2], pos_r: bz.Array[bz.vec3d, 2], vel_r: bz.Array[bz.vec3d, 2],
                active_r: bz.Array[bz.int32, 2]):
    n, batch = active.shape
    for s, b in bz.ndrange(SPH_SLOTS, batch):
        slot_size[s, b] = 0
        slot_start[s, b] = 0
    for b in range(batch):
        cur_cnt[b] = 0
    for i, b in bz.ndrange(n, batch):
        if active[i, b]:
            gx, gy, gz = cell_of(pos[i, b])
            bz.atomic_add(slot_size[slot_of(gx, gy, gz), b], 1)
    for s in range(SPH_SLOTS):
        for b in range(batch):
            slot_start[s, b] = bz.atomic_add(cur_cnt[b], slot_size[s, b])
    for i, b in bz.ndrange(n, batch):
        if active[i, b]:
            gx, gy, gz = cell_of(pos[i, b])
            reordered_idx[i, b] = bz.atomic_add(slot_start[slot_of(gx, gy, gz), b], 1)
    for s, b in bz.ndrange(SPH_SLOTS, batch):
        slot_start[s, b] -= slot_size[s, b]
    for i, b in bz.ndrange(n, batch):
        active_r[i, b] = 0
    for i, b in bz.ndrange(n, batch):
        if active[i, b]:
            r = reordered_idx[i, b]
            pos_r[r, b] = pos[i, b]
            vel_r[r, b] = vel[i, b]
            active_r[r, b] = active[i, b]


@bz.kernel
def sph_density(pos_r: bz.Array[bz.vec3d, 2], active_r: bz.Array[bz.int32, 2], slot_size: bz.Array[bz.int32, 2],
                slot_start: bz.Array[bz.int32, 2], rho: bz.Array[bz.float64, 2]):
    for i, b in bz.ndrange(active_r.shape[0], active_r.shape[1]):
        if active_r[i, b]:
            rho[i, b] = SPH_VOL * cubic_kernel(0.0)
            den = 0.0
            gx, gy, gz = cell_of(pos_r[i, b])
            for ox, oy, oz in bz.static(bz.ndrange((-1, 2), (-1, 2), (-1, 2))):
                slot = slot_of(gx + ox, gy + oy, gz + oz)
                for j in range(slot_start[slot, b], slot_size[slot, b] + slot_start[slot, b]):
                    if i != j and (pos_r[i, b] - pos_r[j, b]).norm() < SPH_H:
                        den += SPH_VOL * cubic_kernel((pos_r[i, b] - pos_r[j, b]).norm())
            rho[i, b] += den
            rho[i, b] *= SPH_RHO0


@bz.kernel
def sph_forces(pos_r: bz.Array[bz.vec3d, 2], vel_r: bz.Array[bz.vec3d, 2], active_r: bz.Array[bz.int32, 2],
               slot_size: bz.Array[bz.int32, 2], slot_start: bz.Array[bz.int32, 2], rho: bz.Array[bz.float64, 2],
               p: bz.Array[bz.float64, 2], acc: bz.Array[bz.vec3d, 2], gravity: bz.Array[bz.vec3d, 1]):
    n, batch = active_r.shape
    for i, b in bz.ndrange(n, batch):
        if active_r[i, b]:
            a = gravity[b]
            gx, gy, gz = cell_of(pos_r[i, b])
            for ox, oy, oz in bz.static(bz.ndrange((-1, 2), (-1, 2), (-1, 2))):
                slot = slot_of(gx + ox, gy + oy, gz + oz)
                for j in range(slot_start[slot, b], slot_size[slot, b] + slot_start[slot, b]):
                    d_ij = pos_r[i, b] - pos_r[j, b]
                    dist = d_ij.norm()
                    if i != j and dist < SPH_H:
                        effective = dist if dist > SPH_SIZE else SPH_SIZE
                        a -= SPH_GAMMA / SPH_MASS * SPH_MASS * d_ij * cubic_kernel(effective)
                        v_ij = (vel_r[i, b] - vel_r[j, b]).dot(d_ij)
                        a += (10 * SPH_MU * (SPH_MASS / rho[j, b]) * v_ij / (dist ** 2 + 0.01 * SPH_H ** 2)
                              * cubic_kernel_derivative(d_ij))
            acc[i, b] = a
    for i, b in bz.ndrange(n, batch):
        if active_r[i, b]:
            rho[i, b] = max(rho[i, b], SPH_RHO0)
            p[i, b] = SPH_STIFF * (pow(rho[i, b] / SPH_RHO0, SPH_EXP) - 1.0)
    for i, b in bz.ndrange(n, batch):
        if active_r[i, b]:
            a = bz.vec3d(0.0, 0.0, 0.0)
            gx, gy, gz = cell_of(pos_r[i, b])
            for ox, oy, oz in bz.static(bz.ndrange((-1, 2), (-1, 2), (-1, 2))):
                slot = slot_of(gx + ox, gy + oy, gz + oz)
                for j in range(slot_start[slot, b], slot_size[slot, b] + slot_start[slot, b]):
                    if i != j and (pos_r[i, b] - pos_r[j, b]).norm() < SPH_H:
                        dp_i = p[i, b] / rho[i, b] ** 2
                        dp_j = p[j, b] / rho[j, b] ** 2
                        a += -SPH_RHO0 * SPH_VOL * (dp_i + dp_j) * cubic_kernel_derivative(pos_r[i, b] - pos_r[j, b])
            acc[i, b] += a


@bz.func
def impose_pos_vel(pos: bz.vec3d, vel: bz.vec3d):
    for d in bz.static(range(3)):
        if pos[d] >= SPH_UPPER[d] and vel[d] >= 0:
            vel[d] *= -0.5
        elif pos[d] <= SPH_LOWER[d] and vel[d] <= 0:
            vel[d] *= -0.5
    pos = max(min(pos, bz.vec3d(0.38, 0.38, 0.38)), bz.vec3d(0.02, 0.02, 0.02))
    return pos, vel


@bz.kernel
def sph_advect(pos_r: bz.Array[bz.vec3d, 2], vel_r: bz.Array[bz.vec3d, 2], acc: bz.Array[bz.vec3d, 2],
               active_r: bz.Array[bz.int32, 2], reordered_idx: bz.Array[bz.int32, 2], pos: bz.Array[bz.vec3d, 2],
               vel: bz.Array[bz.vec3d, 2], active: bz.Array[bz.int32, 2], dt: float):
    n, batch = active_r.shape
    for i, b in bz.ndrange(n, batch):
        if active_r[i, b]:
            vel_r[i, b] += dt * acc[i, b]
    for i, b in bz.ndrange(n, batch):
        if active_r[i, b]:
            new_pos, new_vel = impose_pos_vel(pos_r[i, b] + dt * vel_r[i, b], vel_r[i, b])
            vel_r[i, b] = new_vel
            pos_r[i, b] = new_pos
    for i, b in bz.ndrange(n, batch):
        if active[i, b]:
            pos[i, b] = pos_r[reordered_idx[i, b], b]
            vel[i, b] = vel_r[reordered_idx[i, b], b]


def np_cubic(r):
    k = 8.0 / math.pi / SPH_H ** 3
    q = r / SPH_H
    return np.where(q <= 0.5, k * (6 * q ** 3 - 6 * q ** 2 + 1), np.where(q <= 1, 2 * k * (1 - q) ** 3, 0.0))


def np_cubic_grad(r):
    norm = np.linalg.norm(r, axis=-1)
    k = 8.0 / math.pi / SPH_H ** 3
    q = norm / SPH_H
    grad_q = r / np.maximum(norm * SPH_H, 1e-300)[..., None]
    scale = np.where(q <= 0.5, 6 * k * q * (3 * q - 2), -6 * k * (1 - q) ** 2)
    return np.where(((norm > 1e-5) & (q <= 1))[..., None], scale[..., None] * grad_q, 0.0)


def sph_reference(pos, vel, active, gravity, dt, steps):
    pos, vel = pos.copy(), vel.copy()
    for _ in range(steps):
        for b in range(pos.shape[1]):
            on = active[:, b].astype(bool)
            x, v = pos[on, b], vel[on, b]
            d = x[:, None] - x[None]
            dist = np.linalg.norm(d, axis=-1)
            near = (dist < SPH_H) & ~np.eye(len(x), dtype=bool)
            rho = SPH_RHO0 * (SPH_VOL * np_cubic(0.0) + (near * SPH_VOL * np_cubic(dist)).sum(1))
            effective = np.maximum(dist, SPH_SIZE)
            acc = gravity[b] - SPH_GAMMA * (near[..., None] * d * np_cubic(effective)[..., None]).sum(1)
            v_ij = np.einsum("ijk,ijk->ij", v[:, None] - v[None], d)
            grad = np_cubic_grad(d)
            visc = 10 * SPH_MU * (SPH_MASS / rho[None]) * v_ij / (dist ** 2 + 0.01 * SPH_H ** 2)
            acc = acc + (near * visc)[..., None].__mul__(grad).sum(1)
            rho = np.maximum(rho, SPH_RHO0)
            p = SPH_STIFF * ((rho / SPH_RHO0) ** SPH_EXP - 1)
            dp = p / rho ** 2
            acc = acc + (near[..., None] * (-SPH_RHO0 * SPH_VOL * (dp[:, None] + dp[None]))[..., None] * grad).sum(1)
            v = v + dt * acc
            new = x + dt * v
            lower, upper = np.asarray(SPH_LOWER), np.asarray(SPH_UPPER)
            v = np.where(((new >= upper) & (v >= 0)) | ((new <= lower) & (v <= 0)), -0.5 * v, v)
            pos[on, b], vel[on, b] = np.clip(new, lower, upper), v
    return pos, vel


def run_sph(call=CALL, steps=3):
    n, batch = SPH_SLOTS, 2  # as many particles as slots: the count loop and the slot loops share bounds
    pos0 = 0.12 + 0.16 * RNG.random((n, batch, 3))
    vel0 = 0.1 * RNG.standard_normal((n, batch, 3))
    active = (RNG.random((n, batch)) < 0.9).astype(np.int32)
    gravity = np.array([[0, 0, -9.8], [0, -9.8, 0]], np.float64)
    dt = 1e-3
    want = sph_reference(pos0, vel0, active, gravity, dt, steps)
    pos, vel = pos0.copy(), vel0.copy()
    slot_size, slot_start = np.full((SPH_SLOTS, batch), -1, np.int32), np.full((SPH_SLOTS, batch), -1, np.int32)
    cur_cnt, reordered = np.full(batch, -1, np.int32), np.full((n, batch), -1, np.int32)
    pos_r, vel_r, acc = (np.full((n, batch, 3), np.nan) for _ in range(3))
    active_r = np.full((n, batch), -1, np.int32)
    rho, p = np.full((n, batch), np.nan), np.full((n, batch), np.nan)
    for _ in range(steps):
        call(sph_reorder, pos, vel, active, slot_size, slot_start, cur_cnt, reordered, pos_r, vel_r, active_r)
        call(sph_density, pos_r, active_r, slot_size, slot_start, rho)
        call(sph_forces, pos_r, vel_r, active_r, slot_size, slot_start, rho, p, acc, gravity)
        call(sph_advect, pos_r, vel_r, acc, active_r, reordered, pos, vel, active, dt)
    on = active.astype(bool)
    on = active.astype(bool)[..., None]
    return (np.where(on, pos, 0), np.where(on, vel, 0)), (np.where(on, want[0], 0), np.where(on, want[1], 0))


# --- Genesis PBD: XPBD stretch, bending and volume constraints, each iterated in one kernel -------------------
PBD_DT, PBD_ITERS, PBD_EPS = 1e-2, 3, 1e-12


@bz.kernel
def pbd_solve_stretch(pos: bz.Array[bz.vec3d, 2], dpos: bz.Array[bz.vec3d, 2], free: bz.Array[bz.int32, 2],
                      mass: bz.Array[bz.float64, 1], edges: bz.Array[bz.int32, 2], rest: bz.Array[bz.float64, 2]):
    n, batch = free.shape
    for _ in bz.static(range(PBD_ITERS)):
        for i_e, i_b in bz.ndrange(edges.shape[0], batch):
            v1 = edges[i_e, 0]
            v2 = edges[i_e, 1]
            w1 = free[v1, i_b] / mass[v1]
            w2 = free[v2, i_b] / mass[v2]
            d = pos[v1, i_b] - pos[v2, i_b]
            C = d.norm() - rest[i_e, 0]
            alpha = rest[i_e, 1] / PBD_DT ** 2
            dp = -C / (w1 + w2 + alpha) * d / d.norm(PBD_EPS) * rest[i_e, 2]
            dpos[v1, i_b] += dp * w1
            dpos[v2, i_b] -= dp * w2
        for i_p, i_b in bz.ndrange(n, batch):
            if free[i_p, i_b]:
                pos[i_p, i_b] = pos[i_p, i_b] + dpos[i_p, i_b]
                dpos[i_p, i_b].fill(0)


@bz.kernel
def pbd_solve_bending(pos: bz.Array[bz.vec3d, 2], dpos: bz.Array[bz.vec3d, 2], free: bz.Array[bz.int32, 2],
                      mass: bz.Array[bz.float64, 1], quads: bz.Array[bz.int32, 2], compliance: float,
                      relaxation: float):
    n, batch = free.shape
    for _ in bz.static(range(PBD_ITERS)):
        for i_ie, i_b in bz.ndrange(quads.shape[0], batch):
            v1, v2, v3, v4 = quads[i_ie, 0], quads[i_ie, 1], quads[i_ie, 2], quads[i_ie, 3]
            w1 = free[v1, i_b] / mass[v1]
            w2 = free[v2, i_b] / mass[v2]
            w3 = free[v3, i_b] / mass[v3]
            w4 = free[v4, i_b] / mass[v4]
            if w1 + w2 + w3 + w4 > 0.0:
                p2 = pos[v2, i_b] - pos[v1, i_b]
                p3 = pos[v3, i_b] - pos[v1, i_b]
                p4 = pos[v4, i_b] - pos[v1, i_b]
                l23 = p2.cross(p3).norm()
                l24 = p2.cross(p4).norm()
                n1 = p2.cross(p3) / l23
                n2 = p2.cross(p4) / l24
                d = bz.math.clamp(n1.dot(n2), -1.0, 1.0)
                q3 = (p2.cross(n2) + n1.cross(p2) * d) / l23
                q4 = (p2.cross(n1) + n2.cross(p2) * d) / l24
                q2 = -(p3.cross(n2) + n1.cross(p3) * d) / l23 - (p4.cross(n1) + n2.cross(p4) * d) / l24
                q1 = -q2 - q3 - q4
                sum_wq = w1 * q1.norm_sqr() + w2 * q2.norm_sqr() + w3 * q3.norm_sqr() + w4 * q4.norm_sqr()
                constraint = bz.math.acos(d) - bz.math.acos(-1.0)
                alpha = compliance / PBD_DT ** 2
                constraint = -bz.math.sqrt(1 - d ** 2) * constraint / (sum_wq + alpha) * relaxation
                dpos[v1, i_b] += w1 * constraint * q1
                dpos[v2, i_b] += w2 * constraint * q2
                dpos[v3, i_b] += w3 * constraint * q3
                dpos[v4, i_b] += w4 * constraint * q4
        for i_p, i_b in bz.ndrange(n, batch):
            if free[i_p, i_b]:
                pos[i_p, i_b] = pos[i_p, i_b] + dpos[i_p, i_b]
                dpos[i_p, i_b].fill(0)


@bz.func
def tet_vol(p1: bz.vec3d, p2: bz.vec3d, p3: bz.vec3d, p4: bz.vec3d):
    return (p2 - p1).cross(p3 - p1).dot(p4 - p1) / 6.0


@bz.kernel
def pbd_solve_volume(pos: bz.Array[bz.vec3d, 2], dpos: bz.Array[bz.vec3d, 2], free: bz.Array[bz.int32, 2],
                     mass: bz.Array[bz.float64, 1], tets: bz.Array[bz.int32, 2], vol_rest: bz.Array[bz.float64, 1],
                     compliance: float, relaxation: float):
    n, batch = free.shape
    for _ in bz.static(range(PBD_ITERS)):
        for i_el, i_b in bz.ndrange(tets.shape[0], batch):
            v1, v2, v3, v4 = tets[i_el, 0], tets[i_el, 1], tets[i_el, 2], tets[i_el, 3]
            p1, p2, p3, p4 = pos[v1, i_b], pos[v2, i_b], pos[v3, i_b], pos[v4, i_b]
            grad1 = (p4 - p2).cross(p3 - p2) / 6.0
            grad2 = (p3 - p1).cross(p4 - p1) / 6.0
            grad3 = (p4 - p1).cross(p2 - p1) / 6.0
            grad4 = (p2 - p1).cross(p3 - p1) / 6.0
            w1 = free[v1, i_b] / mass[v1] * grad1.norm_sqr()
            w2 = free[v2, i_b] / mass[v2] * grad2.norm_sqr()
            w3 = free[v3, i_b] / mass[v3] * grad3.norm_sqr()
            w4 = free[v4, i_b] / mass[v4] * grad4.norm_sqr()
            if w1 + w2 + w3 + w4 > 0.0:
                C = tet_vol(p1, p2, p3, p4) - vol_rest[i_el]
                s = -C / (w1 + w2 + w3 + w4 + compliance / PBD_DT ** 2) * relaxation
                dpos[v1, i_b] += s * w1 * grad1
                dpos[v2, i_b] += s * w2 * grad2
                dpos[v3, i_b] += s * w3 * grad3
                dpos[v4, i_b] += s * w4 * grad4
        for i_p, i_b in bz.ndrange(n, batch):
            if free[i_p, i_b]:
                pos[i_p, i_b] = pos[i_p, i_b] + dpos[i_p, i_b]
                dpos[i_p, i_b].fill(0)


def pbd_reference(pos, free, mass, edges, rest, quads, tets, vol_rest, compliance, relaxation):
    pos = pos.copy()
    w = free / mass[:, None]
    cross, norm = np.cross, np.linalg.norm
    for _ in range(PBD_ITERS):
        dpos = np.zeros_like(pos)
        for e, (a, b) in enumerate(edges):
            d = pos[a] - pos[b]
            length = norm(d, axis=-1, keepdims=True)
            dp = (-(length - rest[e, 0]) / (w[a] + w[b] + rest[e, 1] / PBD_DT ** 2)[:, None] * d
                  / np.sqrt(length ** 2 + PBD_EPS) * rest[e, 2])
            dpos[a] += dp * w[a][:, None]
            dpos[b] -= dp * w[b][:, None]
        pos += dpos * free[..., None]
    for _ in range(PBD_ITERS):
        dpos = np.zeros_like(pos)
        for v1, v2, v3, v4 in quads:
            p2, p3, p4 = pos[v2] - pos[v1], pos[v3] - pos[v1], pos[v4] - pos[v1]
            l23, l24 = norm(cross(p2, p3), axis=-1, keepdims=True), norm(cross(p2, p4), axis=-1, keepdims=True)
            n1, n2 = cross(p2, p3) / l23, cross(p2, p4) / l24
            d = np.clip(np.sum(n1 * n2, -1, keepdims=True), -1, 1)
            q3 = (cross(p2, n2) + cross(n1, p2) * d) / l23
            q4 = (cross(p2, n1) + cross(n2, p2) * d) / l24
            q2 = -(cross(p3, n2) + cross(n1, p3) * d) / l23 - (cross(p4, n1) + cross(n2, p4) * d) / l24
            q1 = -q2 - q3 - q4
            qs, ws = (q1, q2, q3, q4), (w[v1], w[v2], w[v3], w[v4])
            sum_wq = sum(wi[:, None] * np.sum(q * q, -1, keepdims=True) for wi, q in zip(ws, qs))
            c = -np.sqrt(1 - d ** 2) * (np.arccos(d) - np.pi) / (sum_wq + compliance / PBD_DT ** 2) * relaxation
            for v, wi, q in zip((v1, v2, v3, v4), ws, qs):
                dpos[v] += wi[:, None] * c * q
        pos += dpos * free[..., None]
    for _ in range(PBD_ITERS):
        dpos = np.zeros_like(pos)
        for el, (v1, v2, v3, v4) in enumerate(tets):
            p1, p2, p3, p4 = pos[v1], pos[v2], pos[v3], pos[v4]
            grads = (cross(p4 - p2, p3 - p2) / 6, cross(p3 - p1, p4 - p1) / 6, cross(p4 - p1, p2 - p1) / 6,
                     cross(p2 - p1, p3 - p1) / 6)
            ws = [w[v] * np.sum(g * g, -1) for v, g in zip((v1, v2, v3, v4), grads)]
            vol = np.sum(cross(p2 - p1, p3 - p1) * (p4 - p1), -1) / 6
            s = -(vol - vol_rest[el]) / (sum(ws) + compliance / PBD_DT ** 2) * relaxation
            for v, wi, g in zip((v1, v2, v3, v4), ws, grads):
                dpos[v] += (s * wi)[:, None] * g
        pos += dpos * free[..., None]
    return pos


def run_pbd(call=CALL):
    # a strip of 2 x 4 nodes (a cloth), batch of 2 scenes
    grid = np.array([[i % 4, i // 4, 0.0] for i in range(8)], np.float64) * 0.1
    n, batch = 8, 2
    pos0 = grid[:, None, :] + 0.02 * RNG.standard_normal((n, batch, 3))
    free = np.ones((n, batch), np.int32)
    free[0, :] = 0
    mass = 0.5 + RNG.random(n)
    edges = np.array([[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7], [0, 4], [1, 5]], np.int32)  # 8 edges, 8 particles
    rest = np.stack([np.full(8, 0.1), np.full(8, 1e-6), np.full(8, 0.9)], 1)
    quads = np.array([[1, 5, 0, 6], [2, 6, 1, 7]], np.int32)
    tets = np.array([[0, 1, 4, 2], [1, 5, 6, 3]], np.int32)
    vol_rest = np.array([1e-4, -2e-4])
    want = pbd_reference(pos0, free, mass, edges, rest, quads, tets, vol_rest, 1e-6, 0.5)
    pos, dpos = pos0.copy(), np.zeros((n, batch, 3))
    call(pbd_solve_stretch, pos, dpos, free, mass, edges, rest)
    call(pbd_solve_bending, pos, dpos, free, mass, quads, 1e-6, 0.5)
    call(pbd_solve_volume, pos, dpos, free, mass, tets, vol_rest, 1e-6, 0.5)
    return (pos,), (want,)


# --- Genesis stable fluid: RK3 back-trace, trilinear interpolation clamped at walls, divergence with solid walls,
# --- Jacobi pressure over a swapped pair, gradient subtraction ------------------------------------------------
SF_N = 6


@bz.func
def compute_location(u, v, w, du, dv, dw):
    return (min(max(u + du, 0), SF_N - 1), min(max(v + dv, 0), SF_N - 1), min(max(w + dw, 0), SF_N - 1))


@bz.func
def is_free(u, v, w, du, dv, dw):
    a, b, c = u + du, v + dv, w + dw
    return 0 <= a < SF_N and 0 <= b < SF_N and 0 <= c < SF_N


@bz.func
def trilerp(qf: bz.Array[bz.vec3d, 3], p: bz.vec3d) -> bz.vec3d:
    base = bz.math.floor(p - 0.5)
    p_i = p - 0.5
    q = bz.vec3d(0.0, 0.0, 0.0)
    w_total = 0.0
    for ox, oy, oz in bz.static(bz.ndrange(2, 2, 2)):
        grid = base + bz.vec3d(ox, oy, oz)
        w_xyz = 1 - abs(p_i - grid)
        w = w_xyz[0] * w_xyz[1] * w_xyz[2]
        cell = compute_location(int(grid[0]), int(grid[1]), int(grid[2]), 0, 0, 0)
        q += w * qf[cell]
        w_total += w
    return q / w_total


@bz.func
def backtrace(vf: bz.Array[bz.vec3d, 3], p: bz.vec3d, dt: float) -> bz.vec3d:
    v1 = trilerp(vf, p)
    p1 = p - 0.5 * dt * v1
    v2 = trilerp(vf, p1)
    p2 = p - 0.75 * dt * v2
    v3 = trilerp(vf, p2)
    return p - dt * ((2 / 9) * v1 + (1 / 3) * v2 + (4 / 9) * v3)


@bz.kernel
def sf_advect(v: bz.Array[bz.vec3d, 3], v_tmp: bz.Array[bz.vec3d, 3], dt: float):
    for i, j, k in bz.ndrange(SF_N, SF_N, SF_N):
        p = bz.vec3d(i, j, k) + 0.5
        p = backtrace(v, p, dt)
        v_tmp[i, j, k] = trilerp(v, p)


@bz.kernel
def sf_divergence(v_tmp: bz.Array[bz.vec3d, 3], div: bz.Array[bz.float64, 3]):
    for u, v, w in bz.ndrange(SF_N, SF_N, SF_N):
        vl = v_tmp[compute_location(u, v, w, -1, 0, 0)]
        vr = v_tmp[compute_location(u, v, w, 1, 0, 0)]
        vb = v_tmp[compute_location(u, v, w, 0, -1, 0)]
        vt = v_tmp[compute_location(u, v, w, 0, 1, 0)]
        vp = v_tmp[compute_location(u, v, w, 0, 0, -1)]
        vq = v_tmp[compute_location(u, v, w, 0, 0, 1)]
        vc = v_tmp[compute_location(u, v, w, 0, 0, 0)]
        if not is_free(u, v, w, -1, 0, 0):
            vl.x = -vc.x
        if not is_free(u, v, w, 1, 0, 0):
            vr.x = -vc.x
        if not is_free(u, v, w, 0, -1, 0):
            vb.y = -vc.y
        if not is_free(u, v, w, 0, 1, 0):
            vt.y = -vc.y
        if not is_free(u, v, w, 0, 0, -1):
            vp.z = -vc.z
        if not is_free(u, v, w, 0, 0, 1):
            vq.z = -vc.z
        div[u, v, w] = 0.5 * (vr.x - vl.x + vt.y - vb.y + vq.z - vp.z)


@bz.kernel
def sf_pressure_jacobi(pf: bz.Array[bz.float64, 3], new_pf: bz.Array[bz.float64, 3], div: bz.Array[bz.float64, 3]):
    for u, v, w in bz.ndrange(SF_N, SF_N, SF_N):
        pl = pf[compute_location(u, v, w, -1, 0, 0)]
        pr = pf[compute_location(u, v, w, 1, 0, 0)]
        pb = pf[compute_location(u, v, w, 0, -1, 0)]
        pt = pf[compute_location(u, v, w, 0, 1, 0)]
        pp = pf[compute_location(u, v, w, 0, 0, -1)]
        pq = pf[compute_location(u, v, w, 0, 0, 1)]
        new_pf[u, v, w] = (pl + pr + pb + pt + pp + pq - div[u, v, w]) / 6.0


@bz.kernel
def sf_subtract_gradient(v: bz.Array[bz.vec3d, 3], v_tmp: bz.Array[bz.vec3d, 3], p: bz.Array[bz.float64, 3]):
    for u, w_, w in bz.ndrange(SF_N, SF_N, SF_N):
        pl = p[compute_location(u, w_, w, -1, 0, 0)]
        pr = p[compute_location(u, w_, w, 1, 0, 0)]
        pb = p[compute_location(u, w_, w, 0, -1, 0)]
        pt = p[compute_location(u, w_, w, 0, 1, 0)]
        pp = p[compute_location(u, w_, w, 0, 0, -1)]
        pq = p[compute_location(u, w_, w, 0, 0, 1)]
        v[u, w_, w] = v_tmp[u, w_, w] - 0.5 * bz.vec3d(pr - pl, pt - pb, pq - pp)


def np_trilerp(field, p):
    base = np.floor(p - 0.5)
    out, total = np.zeros(p.shape[:-1] + field.shape[3:]), np.zeros(p.shape[:-1])
    for o in np.ndindex(2, 2, 2):
        grid = base + np.array(o)
        w = np.prod(1 - np.abs(p - 0.5 - grid), -1)
        cell = np.clip(grid.astype(int), 0, SF_N - 1)
        out += w[..., None] * field[cell[..., 0], cell[..., 1], cell[..., 2]]
        total += w
    return out / total[..., None]


def stable_fluid_reference(v, dt, iters):
    p = np.stack(np.meshgrid(*[np.arange(SF_N)] * 3, indexing="ij"), -1) + 0.5
    v1 = np_trilerp(v, p)
    v2 = np_trilerp(v, p - 0.5 * dt * v1)
    v3 = np_trilerp(v, p - 0.75 * dt * v2)
    v_tmp = np_trilerp(v, p - dt * (2 / 9 * v1 + 1 / 3 * v2 + 4 / 9 * v3))
    padded = np.pad(v_tmp, ((1, 1), (1, 1), (1, 1), (0, 0)), mode="edge")
    div = np.zeros((SF_N,) * 3)
    for axis in range(3):
        lo = [slice(1, -1)] * 3
        hi = [slice(1, -1)] * 3
        lo[axis], hi[axis] = slice(0, -2), slice(2, None)
        left, right = padded[tuple(lo)][..., axis].copy(), padded[tuple(hi)][..., axis].copy()
        first, last = [slice(None)] * 3, [slice(None)] * 3
        first[axis], last[axis] = 0, -1
        left[tuple(first)] = -v_tmp[tuple(first)][..., axis]
        right[tuple(last)] = -v_tmp[tuple(last)][..., axis]
        div += 0.5 * (right - left)
    pressure = np.zeros((SF_N,) * 3)
    for _ in range(iters):
        q = np.pad(pressure, 1, mode="edge")
        pressure = (q[:-2, 1:-1, 1:-1] + q[2:, 1:-1, 1:-1] + q[1:-1, :-2, 1:-1] + q[1:-1, 2:, 1:-1]
                    + q[1:-1, 1:-1, :-2] + q[1:-1, 1:-1, 2:] - div) / 6
    q = np.pad(pressure, 1, mode="edge")
    grad = np.stack([q[2:, 1:-1, 1:-1] - q[:-2, 1:-1, 1:-1], q[1:-1, 2:, 1:-1] - q[1:-1, :-2, 1:-1],
                     q[1:-1, 1:-1, 2:] - q[1:-1, 1:-1, :-2]], -1)
    return v_tmp - 0.5 * grad


def run_stable_fluid(call=CALL, iters=5, dt=0.4):
    v = RNG.standard_normal((SF_N, SF_N, SF_N, 3))
    want = stable_fluid_reference(v.copy(), dt, iters)
    v_tmp, div = np.full_like(v, np.nan), np.full((SF_N,) * 3, np.nan)
    cur, nxt = np.zeros((SF_N,) * 3), np.zeros((SF_N,) * 3)
    call(sf_advect, v, v_tmp, dt)
    call(sf_divergence, v_tmp, div)
    for _ in range(iters):
        call(sf_pressure_jacobi, cur, nxt, div)
        cur, nxt = nxt, cur
    call(sf_subtract_gradient, v, v_tmp, cur)
    return (v,), (want,)


# --- difftaichi mass_spring: centre, two-layer controller, spring impulses, advance with time of impact ---
MS_OBJECTS, MS_SPRINGS, MS_SIN, MS_HIDDEN = 5, 7, 4, 8
MS_INPUTS = MS_SIN + 4 * MS_OBJECTS + 2
MS_DT, MS_DAMPING, MS_GRAVITY, MS_GROUND, MS_OMEGA = 4e-3, 15.0, -4.8, 0.1, 10.0


@bz.kernel
def ms_compute_center(x: bz.Array[bz.vec2d, 2], center: bz.Array[bz.vec2d, 1], t: int):
    for _ in range(1):
        c = bz.vec2d(0.0, 0.0)
        for i in bz.static(range(MS_OBJECTS)):
            c += x[t, i]
        center[t] = (1.0 / MS_OBJECTS) * c


@bz.kernel
def ms_nn1(x: bz.Array[bz.vec2d, 2], v: bz.Array[bz.vec2d, 2], center: bz.Array[bz.vec2d, 1],
           weights1: bz.Array[bz.float64, 2], bias1: bz.Array[bz.float64, 1], hidden: bz.Array[bz.float64, 2],
           goal: bz.vec2d, t: int):
    for i in range(MS_HIDDEN):
        actuation = 0.0
        for j in bz.static(range(MS_SIN)):
            actuation += weights1[i, j] * bz.math.sin(MS_OMEGA * float(t) * MS_DT + 2 * math.pi / MS_SIN * j)
        for j in bz.static(range(MS_OBJECTS)):
            offset = x[t, j] - center[t]
            actuation += weights1[i, j * 4 + MS_SIN] * offset[0] * 0.05
            actuation += weights1[i, j * 4 + MS_SIN + 1] * offset[1] * 0.05
            actuation += weights1[i, j * 4 + MS_SIN + 2] * v[t, j][0] * 0.05
            actuation += weights1[i, j * 4 + MS_SIN + 3] * v[t, j][1] * 0.05
        actuation += weights1[i, MS_OBJECTS * 4 + MS_SIN] * (goal[0] - center[t][0])
        actuation += weights1[i, MS_OBJECTS * 4 + MS_SIN + 1] * (goal[1] - center[t][1])
        actuation += bias1[i]
        hidden[t, i] = bz.math.tanh(actuation)


@bz.kernel
def ms_nn2(hidden: bz.Array[bz.float64, 2], weights2: bz.Array[bz.float64, 2], bias2: bz.Array[bz.float64, 1],
           act: bz.Array[bz.float64, 2], t: int):
    for i in range(MS_SPRINGS):
        actuation = 0.0
        for j in bz.static(range(MS_HIDDEN)):
            actuation += weights2[i, j] * hidden[t, j]
        actuation += bias2[i]
        act[t, i] = bz.math.tanh(actuation)


@bz.kernel
def ms_apply_spring_force(x: bz.Array[bz.vec2d, 2], v_inc: bz.Array[bz.vec2d, 2], act: bz.Array[bz.float64, 2],
                          anchor_a: bz.Array[bz.int32, 1], anchor_b: bz.Array[bz.int32, 1],
                          spring: bz.Array[bz.float64, 2], t: int):
    for i in range(MS_SPRINGS):
        a = anchor_a[i]
        b = anchor_b[i]
        dist = x[t, a] - x[t, b]
        length = dist.norm() + 1e-4
        target_length = spring[i, 0] * (1.0 + spring[i, 2] * act[t, i])
        impulse = MS_DT * (length - target_length) * spring[i, 1] / length * dist
        bz.atomic_add(v_inc[t + 1, a], -impulse)
        bz.atomic_add(v_inc[t + 1, b], impulse)


@bz.kernel
def ms_advance_toi(x: bz.Array[bz.vec2d, 2], v: bz.Array[bz.vec2d, 2], v_inc: bz.Array[bz.vec2d, 2], t: int):
    for i in range(MS_OBJECTS):
        s = math.exp(-MS_DT * MS_DAMPING)
        old_v = s * v[t - 1, i] + MS_DT * MS_GRAVITY * bz.vec2d(0.0, 1.0) + v_inc[t, i]
        old_x = x[t - 1, i]
        new_x = old_x + MS_DT * old_v
        toi = 0.0
        new_v = old_v
        if new_x[1] < MS_GROUND and old_v[1] < -1e-4:
            toi = -(old_x[1] - MS_GROUND) / old_v[1]
            new_v = bz.vec2d(0.0, 0.0)
        new_x = old_x + toi * old_v + (MS_DT - toi) * new_v
        v[t, i] = new_v
        x[t, i] = new_x


def mass_spring_reference(x0, v0, w1, b1, w2, b2, anchors, spring, goal, steps):
    x, v = [x0.copy()], [v0.copy()]
    v_inc = np.zeros((steps + 1, MS_OBJECTS, 2))
    for t in range(1, steps):
        xt, vt = x[t - 1], v[t - 1]
        center = xt.mean(0)
        inputs = [np.sin(MS_OMEGA * (t - 1) * MS_DT + 2 * math.pi / MS_SIN * j) for j in range(MS_SIN)]
        for j in range(MS_OBJECTS):
            inputs += list((xt[j] - center) * 0.05) + list(vt[j] * 0.05)
        inputs += list(goal - center)
        hidden = np.tanh(w1 @ np.array(inputs) + b1)
        act = np.tanh(w2 @ hidden + b2)
        for i, (a, b) in enumerate(anchors):
            dist = xt[a] - xt[b]
            length = np.linalg.norm(dist) + 1e-4
            target = spring[i, 0] * (1 + spring[i, 2] * act[i])
            impulse = MS_DT * (length - target) * spring[i, 1] / length * dist
            v_inc[t, a] -= impulse
            v_inc[t, b] += impulse
        old_v = math.exp(-MS_DT * MS_DAMPING) * vt + MS_DT * MS_GRAVITY * np.array([0, 1.0]) + v_inc[t]
        new_x = xt + MS_DT * old_v
        hit = (new_x[:, 1] < MS_GROUND) & (old_v[:, 1] < -1e-4)
        toi = np.where(hit, -(xt[:, 1] - MS_GROUND) / np.where(hit, old_v[:, 1], 1), 0.0)
        new_v = np.where(hit[:, None], 0.0, old_v)
        x.append(xt + toi[:, None] * old_v + (MS_DT - toi[:, None]) * new_v)
        v.append(new_v)
    return np.array(x), np.array(v)


def run_mass_spring(call=CALL, steps=40):
    x = np.full((steps, MS_OBJECTS, 2), np.nan)
    v = np.full((steps, MS_OBJECTS, 2), np.nan)
    x[0] = [[0.1, 0.2], [0.2, 0.2], [0.3, 0.2], [0.1, 0.3], [0.2, 0.3]]
    v[0] = 0.0
    anchors = np.array([[0, 1], [1, 2], [0, 3], [1, 4], [3, 4], [0, 4], [1, 3]], np.int32)
    spring = np.stack([np.linalg.norm(x[0][anchors[:, 0]] - x[0][anchors[:, 1]], axis=1), np.full(7, 1e4),
                       np.full(7, 0.1)], 1)
    w1, b1 = RNG.standard_normal((MS_HIDDEN, MS_INPUTS)) * 0.3, RNG.standard_normal(MS_HIDDEN) * 0.1
    w2, b2 = RNG.standard_normal((MS_SPRINGS, MS_HIDDEN)) * 0.3, RNG.standard_normal(MS_SPRINGS) * 0.1
    goal = np.array([0.8, 0.2])
    want = mass_spring_reference(x[0], v[0], w1, b1, w2, b2, anchors, spring, goal, steps)
    center, hidden = np.full((steps, 2), np.nan), np.full((steps, MS_HIDDEN), np.nan)
    act = np.full((steps, MS_SPRINGS), np.nan)
    v_inc = np.zeros((steps + 1, MS_OBJECTS, 2))
    for t in range(1, steps):
        call(ms_compute_center, x, center, t - 1)
        call(ms_nn1, x, v, center, w1, b1, hidden, goal, t - 1)
        call(ms_nn2, hidden, w2, b2, act, t - 1)
        call(ms_apply_spring_force, x, v_inc, act, anchors[:, 0].copy(), anchors[:, 1].copy(), spring, t - 1)
        call(ms_advance_toi, x, v, v_inc, t)
    return (x, v), want


# --- difftaichi billiards: pairwise collisions with time of impact, then advance ------------------------------
BI_RADIUS, BI_ELASTICITY, BI_DT = 0.03, 0.8, 3e-3


@bz.func
def collide_pair(x: bz.Array[bz.vec2d, 2], v: bz.Array[bz.vec2d, 2], x_inc: bz.Array[bz.vec2d, 2],
                 impulse: bz.Array[bz.vec2d, 2], t, i, j):
    imp = bz.vec2d(0.0, 0.0)
    x_inc_contrib = bz.vec2d(0.0, 0.0)
    if i != j:
        dist = (x[t, i] + BI_DT * v[t, i]) - (x[t, j] + BI_DT * v[t, j])
        dist_norm = dist.norm()
        rela_v = v[t, i] - v[t, j]
        if dist_norm < 2 * BI_RADIUS:
            direction = bz.math.normalized(dist, 1e-6)
            projected_v = direction.dot(rela_v)
            if projected_v < 0:
                imp = -(1 + BI_ELASTICITY) * 0.5 * projected_v * direction
                toi = (dist_norm - 2 * BI_RADIUS) / min(-1e-3, projected_v)
                x_inc_contrib = min(toi - BI_DT, 0) * imp
    x_inc[t + 1, i] += x_inc_contrib
    impulse[t + 1, i] += imp


@bz.kernel
def bi_collide(x: bz.Array[bz.vec2d, 2], v: bz.Array[bz.vec2d, 2], x_inc: bz.Array[bz.vec2d, 2],
               impulse: bz.Array[bz.vec2d, 2], t: int):
    n = x.shape[1]
    for i in range(n):
        for j in range(i):
            collide_pair(x, v, x_inc, impulse, t, i, j)
    for i in range(n):
        for j in range(i + 1, n):
            collide_pair(x, v, x_inc, impulse, t, i, j)


@bz.kernel
def bi_advance(x: bz.Array[bz.vec2d, 2], v: bz.Array[bz.vec2d, 2], x_inc: bz.Array[bz.vec2d, 2],
               impulse: bz.Array[bz.vec2d, 2], t: int):
    for i in range(x.shape[1]):
        v[t, i] = v[t - 1, i] + impulse[t, i]
        x[t, i] = x[t - 1, i] + BI_DT * v[t, i] + x_inc[t, i]


def billiards_reference(x0, v0, steps):
    n = len(x0)
    x, v = [x0], [v0]
    x_inc, impulse = np.zeros((steps, n, 2)), np.zeros((steps, n, 2))
    for t in range(1, steps):
        xt, vt = x[t - 1], v[t - 1]
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                dist = (xt[i] + BI_DT * vt[i]) - (xt[j] + BI_DT * vt[j])
                norm = np.linalg.norm(dist)
                if norm < 2 * BI_RADIUS:
                    direction = dist / (norm + 1e-6)
                    projected = direction @ (vt[i] - vt[j])
                    if projected < 0:
                        imp = -(1 + BI_ELASTICITY) * 0.5 * projected * direction
                        toi = (norm - 2 * BI_RADIUS) / min(-1e-3, projected)
                        x_inc[t, i] += min(toi - BI_DT, 0) * imp
                        impulse[t, i] += imp
        v.append(vt + impulse[t])
        x.append(xt + BI_DT * v[t] + x_inc[t])
    return np.array(x), np.array(v)


def run_billiards(call=CALL, steps=60):
    rows = [(r, c) for r in range(4) for c in range(r + 1)]
    x0 = np.array([[0.5 + 0.061 * r, 0.5 + 0.061 * (c - r / 2)] for r, c in rows] + [[0.2, 0.5]])
    v0 = np.zeros_like(x0)
    v0[-1] = [1.5, 0.02]
    want = billiards_reference(x0, v0, steps)
    n = len(x0)
    x, v = np.full((steps, n, 2), np.nan), np.full((steps, n, 2), np.nan)
    x[0], v[0] = x0, v0
    x_inc, impulse = np.zeros((steps + 1, n, 2)), np.zeros((steps + 1, n, 2))
    for t in range(1, steps):
        call(bi_collide, x, v, x_inc, impulse, t - 1)
        call(bi_advance, x, v, x_inc, impulse, t)
    return (x, v), want


# --- difftaichi electric: a controller and a particle pulled by charged plates -----------------------------------
EL_HIDDEN, EL_PLATES, EL_K, EL_DT, EL_DAMPING = 6, 4, 1e-3, 0.03, 0.2
EL_PLATE_POS = [[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]


@bz.kernel
def el_nn1(x: bz.Array[bz.vec2d, 1], v: bz.Array[bz.vec2d, 1], goal: bz.Array[bz.vec2d, 1],
           weight1: bz.Array[bz.float64, 2], bias1: bz.Array[bz.float64, 1], hidden: bz.Array[bz.float64, 2], t: int):
    for i in range(EL_HIDDEN):
        act = 0.0
        act += (x[t][0] - 0.5) * weight1[0, i]
        act += (x[t][1] - 0.5) * weight1[1, i]
        act += v[t][0] * weight1[2, i]
        act += v[t][1] * weight1[3, i]
        act += (goal[t][0] - 0.5) * weight1[4, i]
        act += (goal[t][1] - 0.5) * weight1[5, i]
        act += bias1[i]
        hidden[i, t] = bz.math.tanh(act)


@bz.kernel
def el_nn2(hidden: bz.Array[bz.float64, 2], weight2: bz.Array[bz.float64, 2], bias2: bz.Array[bz.float64, 1],
           gravitation: bz.Array[bz.float64, 2], t: int):
    for i in range(EL_PLATES):
        act = 0.0
        for j in bz.static(range(EL_HIDDEN)):
            act += hidden[j, t] * weight2[j, i]
        act += bias2[i]
        gravitation[i, t] = bz.math.tanh(act)


@bz.kernel
def el_advance(x: bz.Array[bz.vec2d, 1], v: bz.Array[bz.vec2d, 1], gravitation: bz.Array[bz.float64, 2], t: int):
    for _ in range(1):
        force = bz.vec2d(0.0, 0.0)
        for i in bz.static(range(EL_PLATES)):
            r = x[t - 1] - bz.vec2d(EL_PLATE_POS[i][0], EL_PLATE_POS[i][1])
            len_r = max(r.norm(), 1e-1)
            force += EL_K * gravitation[i, t] / (len_r * len_r * len_r) * r
        v[t] = v[t - 1] * math.exp(-EL_DT * EL_DAMPING) + EL_DT * force
        x[t] = x[t - 1] + EL_DT * v[t]


@bz.kernel
def el_loss(x: bz.Array[bz.vec2d, 1], goal: bz.Array[bz.vec2d, 1], loss: bz.Array[bz.float64, 1], t: int):
    for _ in range(1):
        bz.atomic_add(loss[0], EL_DT * (x[t] - goal[t]).norm_sqr())


def electric_reference(x0, v0, goal, w1, b1, w2, b2, steps):
    x, v, loss = [x0], [v0], 0.0
    plates = np.array(EL_PLATE_POS)
    for t in range(1, steps):
        # nn1(t) reads x[t] and v[t] before advance(t) writes them: the zeros they start as
        inputs = np.concatenate([np.zeros(2) - 0.5, np.zeros(2), goal[t] - 0.5])
        hidden = np.tanh(inputs @ w1 + b1)
        grav = np.tanh(hidden @ w2 + b2)
        r = x[t - 1] - plates
        len_r = np.maximum(np.linalg.norm(r, axis=1), 0.1)
        force = (EL_K * grav[:, None] / len_r[:, None] ** 3 * r).sum(0)
        v.append(v[t - 1] * math.exp(-EL_DT * EL_DAMPING) + EL_DT * force)
        x.append(x[t - 1] + EL_DT * v[t])
        loss += EL_DT * np.sum((x[t] - goal[t]) ** 2)
    return np.array(x), np.array(v), np.array([loss])


def run_electric(call=CALL, steps=30):
    goal = 0.2 + 0.6 * RNG.random((steps, 2))
    w1, b1 = RNG.standard_normal((6, EL_HIDDEN)), RNG.standard_normal(EL_HIDDEN) * 0.1
    w2, b2 = RNG.standard_normal((EL_HIDDEN, EL_PLATES)), RNG.standard_normal(EL_PLATES) * 0.1
    x, v = np.zeros((steps, 2)), np.zeros((steps, 2))
    x[0] = [0.4, 0.6]
    want = electric_reference(x[0].copy(), v[0].copy(), goal, w1, b1, w2, b2, steps)
    hidden, grav, loss = np.full((EL_HIDDEN, steps), np.nan), np.full((EL_PLATES, steps), np.nan), np.zeros(1)
    for t in range(1, steps):
        call(el_nn1, x, v, goal, w1, b1, hidden, t)
        call(el_nn2, hidden, w2, b2, grav, t)
        call(el_advance, x, v, grav, t)
        call(el_loss, x, goal, loss, t)
    return (x, v, loss), want


# --- difftaichi wave: a damped wave equation whose reads beyond the grid give 0 ----------------------------------
WV_C, WV_ALPHA, WV_DT, WV_DX = 340.0, 0.0, 1e-4 * 0.5, 1.0 / 16


@bz.func
def get_p(p: bz.Array[bz.float64, 3], t, i, j):
    n = p.shape[1]
    return p[t, i, j] if 0 <= i < n and 0 <= j < n else 0.0


@bz.func
def laplacian(p: bz.Array[bz.float64, 3], t, i, j):
    return (1 / WV_DX ** 2) * (-4 * get_p(p, t, i, j) + get_p(p, t, i, j - 1) + get_p(p, t, i, j + 1)
                               + get_p(p, t, i + 1, j) + get_p(p, t, i - 1, j))


@bz.kernel
def wv_fdtd(p: bz.Array[bz.float64, 3], t: int):
    n = p.shape[1]
    for i in range(n):
        for j in range(n):
            laplacian_p = laplacian(p, t - 2, i, j)
            laplacian_q = laplacian(p, t - 1, i, j)
            p[t, i, j] = (2 * p[t - 1, i, j] + (WV_C * WV_C * WV_DT * WV_DT + WV_C * WV_ALPHA * WV_DT) * laplacian_q
                          - p[t - 2, i, j] - WV_C * WV_ALPHA * WV_DT * laplacian_p)


@bz.kernel
def wv_loss(p: bz.Array[bz.float64, 3], target: bz.Array[bz.float64, 2], loss: bz.Array[bz.float64, 1], t: int):
    n = p.shape[1]
    for i in range(n):
        for j in range(n):
            loss[0] += WV_DX * WV_DX * (target[i, j] - p[t, i, j]) ** 2


def wave_reference(initial, target, steps):
    p = [initial, initial]
    for t in range(2, steps):
        def lap(q):
            padded = np.pad(q, 1)
            return (padded[1:-1, :-2] + padded[1:-1, 2:] + padded[:-2, 1:-1] + padded[2:, 1:-1] - 4 * q) / WV_DX ** 2
        p.append(2 * p[t - 1] + WV_C ** 2 * WV_DT ** 2 * lap(p[t - 1]) - p[t - 2])
    return np.array(p), np.array([WV_DX ** 2 * np.sum((target - p[-1]) ** 2)])


def run_wave(call=CALL, steps=12, n=10):
    initial = np.exp(-((np.arange(n)[:, None] - 4.0) ** 2 + (np.arange(n)[None] - 5.0) ** 2) / 4.0)
    target = RNG.random((n, n))
    p = np.full((steps, n, n), np.nan)
    p[0] = p[1] = initial
    loss = np.zeros(1)
    for t in range(2, steps):
        call(wv_fdtd, p, t)
    call(wv_loss, p, target, loss, steps - 1)
    return (p, loss), wave_reference(initial, target, steps)


# --- difftaichi smoke: semi-Lagrangian advection on a torus and a Jacobi pressure projection ---------------------
SM_ITERS = 6


@bz.func
def imod(n, divisor):
    ret = n % divisor
    if ret < 0:
        ret += divisor
    return ret


@bz.func
def dec_index(index, n):
    new_index = index - 1
    if new_index < 0:
        new_index = n - 1
    return new_index


@bz.func
def inc_index(index, n):
    new_index = index + 1
    if new_index >= n:
        new_index = 0
    return new_index


@bz.kernel
def sm_compute_div(v_updated: bz.Array[bz.vec2d, 3], div: bz.Array[bz.float64, 3], t: int, dx: float):
    n = div.shape[1]
    for y, x in bz.ndrange(n, n):
        div[t, y, x] = -0.5 * dx * (v_updated[t, inc_index(y, n), x][0] - v_updated[t, dec_index(y, n), x][0]
                                    + v_updated[t, y, inc_index(x, n)][1] - v_updated[t, y, dec_index(x, n)][1])


@bz.kernel
def sm_compute_p(div: bz.Array[bz.float64, 3], p: bz.Array[bz.float64, 3], t: int, k: int):
    n = div.shape[1]
    for y, x in bz.ndrange(n, n):
        a = k + t * SM_ITERS
        p[a + 1, y, x] = (div[t, y, x] + p[a, dec_index(y, n), x] + p[a, inc_index(y, n), x]
                          + p[a, y, dec_index(x, n)] + p[a, y, inc_index(x, n)]) / 4.0


@bz.kernel
def sm_update_v(v: bz.Array[bz.vec2d, 3], v_updated: bz.Array[bz.vec2d, 3], p: bz.Array[bz.float64, 3], t: int,
                dx: float):
    n = p.shape[1]
    for y in range(n):
        for x in range(n):
            a = SM_ITERS * t - 1
            v[t, y, x][0] = v_updated[t, y, x][0] - 0.5 * (p[a, inc_index(y, n), x] - p[a, dec_index(y, n), x]) / dx
            v[t, y, x][1] = v_updated[t, y, x][1] - 0.5 * (p[a, y, inc_index(x, n)] - p[a, y, dec_index(x, n)]) / dx


@bz.func
def sm_bilerp(field, v, t_offset: int, t: int, y: int, x: int, n: int):
    """field[t - 1] at (y, x) traced back along v, bilinear, wrapping at the edges (a scalar or a vector field)."""
    center_x = y - v[t + t_offset, y, x][0]
    center_y = x - v[t + t_offset, y, x][1]
    left_ix = int(bz.math.floor(center_x))
    top_ix = int(bz.math.floor(center_y))
    rw = center_x - left_ix
    bw = center_y - top_ix
    left_ix = imod(left_ix, n)
    right_ix = inc_index(left_ix, n)
    top_ix = imod(top_ix, n)
    bot_ix = inc_index(top_ix, n)
    return ((1 - rw) * ((1 - bw) * field[t - 1, left_ix, top_ix] + bw * field[t - 1, left_ix, bot_ix])
            + rw * ((1 - bw) * field[t - 1, right_ix, top_ix] + bw * field[t - 1, right_ix, bot_ix]))


@bz.kernel
def sm_advect(field: bz.Array[bz.float64, 3], field_out: bz.Array[bz.float64, 3], v: bz.Array[bz.vec2d, 3],
              t_offset: int, t: int):
    n = field.shape[1]
    for y in range(n):
        for x in range(n):
            field_out[t, y, x] = sm_bilerp(field, v, t_offset, t, y, x, n)


@bz.kernel
def sm_advect_vec(field: bz.Array[bz.vec2d, 3], field_out: bz.Array[bz.vec2d, 3], v: bz.Array[bz.vec2d, 3],
                  t_offset: int, t: int):
    n = field.shape[1]
    for y in range(n):
        for x in range(n):
            field_out[t, y, x] = sm_bilerp(field, v, t_offset, t, y, x, n)


def np_advect(field, vel):
    n = field.shape[0]
    yy, xx = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    cx, cy = yy - vel[..., 0], xx - vel[..., 1]
    left, top = np.floor(cx).astype(int), np.floor(cy).astype(int)
    rw, bw = cx - left, cy - top
    left, top = left % n, top % n
    right, bot = (left + 1) % n, (top + 1) % n
    if field.ndim == 3:
        rw, bw = rw[..., None], bw[..., None]
    return (1 - rw) * ((1 - bw) * field[left, top] + bw * field[left, bot]) + rw * ((1 - bw) * field[right, top]
                                                                                  + bw * field[right, bot])


def smoke_reference(smoke0, v0, steps, dx):
    smoke, v, p = [smoke0], [v0], np.zeros((steps * SM_ITERS, *smoke0.shape))
    roll = np.roll
    for t in range(1, steps):
        v_upd = np_advect(v[t - 1], v[t - 1])
        smoke.append(np_advect(smoke[t - 1], v[t - 1]))
        div = -0.5 * dx * (roll(v_upd[..., 0], -1, 0) - roll(v_upd[..., 0], 1, 0) + roll(v_upd[..., 1], -1, 1)
                           - roll(v_upd[..., 1], 1, 1))
        for k in range(SM_ITERS - 1):
            a = k + t * SM_ITERS
            q = p[a]
            p[a + 1] = (div + roll(q, 1, 0) + roll(q, -1, 0) + roll(q, 1, 1) + roll(q, -1, 1)) / 4
        q = p[SM_ITERS * t - 1]
        new_v = v_upd.copy()
        new_v[..., 0] -= 0.5 * (roll(q, -1, 0) - roll(q, 1, 0)) / dx
        new_v[..., 1] -= 0.5 * (roll(q, -1, 1) - roll(q, 1, 1)) / dx
        v.append(new_v)
    return np.array(smoke), np.array(v)


def run_smoke(call=CALL, steps=4, n=8):
    dx = 1.0 / n
    smoke = np.full((steps, n, n), np.nan)
    v = np.full((steps, n, n, 2), np.nan)
    smoke[0] = RNG.random((n, n))
    v[0] = RNG.standard_normal((n, n, 2)) * 0.8
    v_updated = np.full((steps, n, n, 2), np.nan)
    div = np.full((steps, n, n), np.nan)
    p = np.zeros((steps * SM_ITERS, n, n))
    want = smoke_reference(smoke[0].copy(), v[0].copy(), steps, dx)
    for t in range(1, steps):
        call(sm_advect_vec, v, v_updated, v, -1, t)
        call(sm_advect, smoke, smoke, v, -1, t)
        call(sm_compute_div, v_updated, div, t, dx)
        for k in range(SM_ITERS - 1):
            call(sm_compute_p, div, p, t, k)
        call(sm_update_v, v, v_updated, p, t, dx)
    return (smoke, v), want


PROGRAMS = [run_sph, run_pbd, run_stable_fluid, run_mass_spring, run_billiards, run_electric, run_wave, run_smoke]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.__name__.removeprefix("run_"))
def test_matches_the_float64_reference(program):
    got, want = program()
    for n, (value, expected) in enumerate(zip(got, want)):
        assert not np.isnan(value).any(), f"result {n} holds elements no kernel wrote"
        np.testing.assert_allclose(value, expected, rtol=1e-9, atol=1e-9, err_msg=f"result {n}")
