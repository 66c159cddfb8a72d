"""An SPH-like fluid step in 2-D with `bz.vec2d` (float64 vectors): a density pass, a pressure and
viscosity force pass, and an integration pass with walls, over all pairs of particles.

Positions and velocities are (n, 2) float64 arrays, taken as arrays of vec2d without a copy. The
passes read every particle's neighbours, so each is a loop of its own (task fusion keeps them
apart: a pass reads what the one before wrote for other particles). NumPy computes the same step
over an (n, n) matrix of pairs; the sums are taken in another order, so the two agree to rounding.
Run it with `python examples/sph.py`.
"""

import math

import numpy as np

import braze as bz

H = 0.08  # smoothing length
MASS, REST_DENSITY, STIFFNESS, VISCOSITY = 0.02, 40.0, 3.0, 0.5
POLY6 = 4.0 / (math.pi * H**8)
SPIKY = -10.0 / (math.pi * H**5)
LAPLACIAN = 40.0 / (math.pi * H**5)


@bz.kernel
def sph_step(x: bz.Array[bz.vec2d, 1], v: bz.Array[bz.vec2d, 1], density: bz.Array[bz.float64, 1],
             pressure: bz.Array[bz.float64, 1], force: bz.Array[bz.vec2d, 1], dt: float):
    n = x.shape[0]
    for i in range(n):
        rho = 0.0
        for j in range(n):
            r2 = bz.length_sq(x[i] - x[j])
            if r2 < H * H:
                rho += MASS * POLY6 * (H * H - r2) ** 3
        density[i] = rho
        pressure[i] = STIFFNESS * (rho - REST_DENSITY)
    for i in range(n):
        f = bz.vec2d(0.0, -9.81 * density[i])
        for j in range(n):
            d = x[i] - x[j]
            r = bz.length(d)
            if j != i and r < H:
                shared = MASS * (pressure[i] + pressure[j]) / (2.0 * density[j])
                f -= bz.normalize(d) * (shared * SPIKY * (H - r) ** 2)
                f += (v[j] - v[i]) * (VISCOSITY * MASS / density[j] * LAPLACIAN * (H - r))
        force[i] = f
    for i in range(n):
        v[i] += force[i] * (dt / density[i])
        x[i] += v[i] * dt
        for axis in bz.static(range(2)):  # walls of a unit box, with some loss
            if x[i][axis] < 0.0:
                x[i][axis] = -x[i][axis]
                v[i][axis] *= -0.5
            if x[i][axis] > 1.0:
                x[i][axis] = 2.0 - x[i][axis]
                v[i][axis] *= -0.5


def numpy_step(x, v, dt):
    d = x[:, None, :] - x[None, :, :]
    r2 = bz.length_sq(d)
    rho = np.where(r2 < H * H, MASS * POLY6 * (H * H - r2) ** 3, 0.0).sum(axis=1)
    p = STIFFNESS * (rho - REST_DENSITY)
    r = np.sqrt(r2)
    near = (r < H) & ~np.eye(len(x), dtype=bool)
    shared = MASS * (p[:, None] + p[None, :]) / (2.0 * rho[None, :])
    pressure_term = -bz.normalize(d) * np.where(near, shared * SPIKY * (H - r) ** 2, 0.0)[..., None]
    viscous = (v[None, :, :] - v[:, None, :]) * np.where(near, VISCOSITY * MASS / rho[None, :] * LAPLACIAN * (H - r),
                                                         0.0)[..., None]
    f = (pressure_term + viscous).sum(axis=1)
    f[:, 1] -= 9.81 * rho
    v += f * (dt / rho)[:, None]
    x += v * dt
    low = x < 0.0
    x[low], v[low] = -x[low], v[low] * -0.5
    high = x > 1.0
    x[high], v[high] = 2.0 - x[high], v[high] * -0.5
    return rho


def main() -> None:
    side = 20  # a block of side x side particles
    i, j = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    x = np.stack([0.3 + 0.02 * i, 0.1 + 0.02 * j], axis=-1).reshape(-1, 2).astype(np.float64)
    x += np.random.default_rng(0).uniform(-1e-3, 1e-3, x.shape)
    v = np.zeros_like(x)
    x_np, v_np = x.copy(), v.copy()
    n = len(x)
    density, pressure, force = np.zeros(n), np.zeros(n), np.zeros((n, 2))
    for _ in range(20):
        sph_step(x, v, density, pressure, force, 1e-4)
        rho = numpy_step(x_np, v_np, 1e-4)
    np.testing.assert_allclose(density, rho, rtol=1e-9)
    np.testing.assert_allclose(x, x_np, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(v, v_np, rtol=1e-6, atol=1e-9)
    print(f"SPH: {n} particles, 20 steps; mean density {density.mean():.1f}, mean speed "
          f"{np.linalg.norm(v, axis=1).mean():.4f}; matches NumPy (max position difference "
          f"{np.abs(x - x_np).max():.1e})")


if __name__ == "__main__":
    main()
