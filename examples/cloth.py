"""A mass-spring cloth with `bz.vec3`: a square sheet pinned at two corners falls under gravity.

Each particle sums the forces of the springs to its four grid neighbours (a gather: no two
threads write one element, so no atomics), then a second loop integrates velocities and
positions. Positions and velocities are (rows, cols, 3) float32 arrays, taken as arrays of vec3
without a copy. The same step written with NumPy over whole arrays (the vector functions
`bz.length` and friends work on NumPy arrays too, component by component) must agree.
Run it with `python examples/cloth.py`.
"""

import numpy as np

import braze as bz

NEIGHBOURS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # in this order, in the kernel and in NumPy


@bz.func
def spring(xi, xj, rest, stiffness):
    """The force on a particle at xi of a spring to xj."""
    d = xj - xi
    length = bz.length(d)
    return d * (stiffness * (length - rest) / length)


@bz.kernel
def cloth_step(x: bz.Array[bz.vec3, 2], v: bz.Array[bz.vec3, 2], f: bz.Array[bz.vec3, 2], rest: bz.float32,
               stiffness: bz.float32, damping: bz.float32, dt: bz.float32):
    rows, cols = x.shape
    for i, j in bz.ndrange(rows, cols):
        force = bz.vec3(0.0, -9.81, 0.0)  # unit masses
        for di, dj in bz.static(NEIGHBOURS):
            if 0 <= i + di < rows and 0 <= j + dj < cols:
                force += spring(x[i, j], x[i + di, j + dj], rest, stiffness)
        f[i, j] = force
    for i, j in bz.ndrange(rows, cols):
        if i == 0 and (j == 0 or j == cols - 1):
            v[i, j] = bz.vec3()  # pinned
        else:
            v[i, j] = (v[i, j] + f[i, j] * dt) * damping
            x[i, j] += v[i, j] * dt


def numpy_step(x, v, rest, stiffness, damping, dt):
    """The same step on whole arrays, in the kernel's order of operations."""
    rows, cols, _ = x.shape
    f = np.zeros_like(x)
    f[...] = bz.vec3(0.0, -9.81, 0.0)
    for di, dj in NEIGHBOURS:
        lo_i, hi_i, lo_j, hi_j = max(0, -di), rows - max(0, di), max(0, -dj), cols - max(0, dj)
        here = x[lo_i:hi_i, lo_j:hi_j]
        there = x[lo_i + di:hi_i + di, lo_j + dj:hi_j + dj]
        d = there - here
        length = bz.length(d)
        f[lo_i:hi_i, lo_j:hi_j] += d * (stiffness * (length - rest) / length)[..., None]
    v[...] = (v + f * dt) * damping
    v[0, 0] = v[0, -1] = 0
    x += v * dt


def make_cloth(n: int, spacing: float):
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    x = np.stack([j * spacing, np.zeros_like(i, float), i * spacing], axis=-1).astype(np.float32)
    return x, np.zeros_like(x)


def main() -> None:
    n, spacing, steps = 32, 0.05, 200
    params = [np.float32(p) for p in (spacing, 500.0, 0.999, 1e-3)]
    x, v = make_cloth(n, spacing)
    x_np, v_np = x.copy(), v.copy()
    f = np.zeros_like(x)
    for _ in range(steps):
        cloth_step(x, v, f, *params)
        numpy_step(x_np, v_np, *params)
    np.testing.assert_allclose(x, x_np, rtol=1e-5, atol=1e-5)
    sag = -float(x[:, :, 1].min())
    print(f"cloth {n}x{n}: after {steps} steps the lowest point sagged {sag:.3f} m; matches NumPy "
          f"(max difference {np.abs(x - x_np).max():.1e})")
    assert 0.0 < sag < n * spacing * 1.5
    assert np.all(x[0, 0] == make_cloth(n, spacing)[0][0, 0])  # pinned corners stay put


if __name__ == "__main__":
    main()
