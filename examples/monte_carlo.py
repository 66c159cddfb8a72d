"""Monte Carlo with random numbers drawn inside loop kernels (`bz.random`), checked against NumPy.

1. pi from points in the unit square: thread i draws its point from counters 2i and 2i + 1 and
   counts a hit atomically (`hits[0] += 1`).
2. Brownian motion: each particle takes a normal step per time step; the offset argument gives
   every step a stream of its own, so a step's numbers never repeat an earlier step's.

`bz.random.uniform(seed, counter, offset)` is a pure function of its arguments (Philox4x32-10, the
stream of `bz.ops.rand`): the CPU, the GPU and the NumPy form used below give the same numbers.
Run it with `python examples/monte_carlo.py`.
"""

import numpy as np

import braze as bz


@bz.kernel
def count_hits(hits: bz.Array[bz.int64, 1], samples: int, seed: int):
    for i in range(samples):
        x = bz.random.uniform(seed, 2 * i)
        y = bz.random.uniform(seed, 2 * i + 1)
        if x * x + y * y < 1.0:
            hits[0] += 1  # every thread updates one counter: atomic


@bz.kernel
def brownian(position: bz.Array[bz.vec2, 1], seed: int, step: int, scale: bz.float32):
    for i in range(position.shape[0]):
        kick = bz.vec2(bz.random.normal(seed, 2 * i, step), bz.random.normal(seed, 2 * i + 1, step))
        position[i] += kick * scale


def estimate_pi(samples: int, seed: int) -> float:
    hits = np.zeros(1, np.int64)
    count_hits(hits, samples, seed)
    # The same points, drawn by the NumPy form of bz.random
    xy = bz.random.uniform(seed, np.arange(2 * samples)).reshape(samples, 2)
    expected = np.count_nonzero(xy[:, 0] * xy[:, 0] + xy[:, 1] * xy[:, 1] < np.float32(1.0))
    assert hits[0] == expected, (hits[0], expected)
    return 4.0 * hits[0] / samples


def random_walk(particles: int, steps: int, seed: int) -> np.ndarray:
    position = np.zeros((particles, 2), np.float32)  # an array of vec2: (n, 2) float32
    expected = position.copy()
    scale = np.float32(0.1)
    counters = np.arange(2 * particles).reshape(particles, 2)
    for step in range(steps):
        brownian(position, seed, step, scale)
        expected += bz.random.normal(seed, counters, step) * scale
    np.testing.assert_array_equal(position, expected)
    return position


def main() -> None:
    samples = 1 << 20
    pi = estimate_pi(samples, seed=2024)
    print(f"pi ~ {pi:.4f} from {samples} points (error {abs(pi - np.pi):.1e}), the same count as NumPy's")
    assert abs(pi - np.pi) < 1e-2
    walk = random_walk(particles=10_000, steps=20, seed=7)
    spread = float(walk.var(axis=0).mean())
    print(f"random walk: variance per axis after 20 steps {spread:.4f} (theory {20 * 0.1**2:.4f}), as NumPy's")
    assert abs(spread - 0.2) < 0.02


if __name__ == "__main__":
    main()
