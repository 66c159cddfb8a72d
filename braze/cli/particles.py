"""The loop-kernel demo: a particle step of six small loops, fused by task fusion into one launch.

Used by `braze demo` and `benchmarks/sim_step.py`. Each loop alone is a launch; task fusion proves
they touch only row i of each array and merges them. Results are checked against NumPy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import braze as bz

Vec3 = bz.Array[bz.float32, 2]  # (particles, 3)
GRAVITY = 9.81
DAMPING = 0.999
RESTITUTION = 0.5


@bz.kernel
def particle_step(x: Vec3, v: Vec3, f: Vec3, mass: bz.Array[bz.float32, 1], dt: bz.float32):
    """One explicit Euler step: six loops, as a simulation would write them."""
    for i in range(x.shape[0]):  # zero forces
        for d in bz.static(range(3)):
            f[i, d] = 0.0
    for i in range(x.shape[0]):  # add gravity
        f[i, 1] -= GRAVITY * mass[i]
    for i in range(x.shape[0]):  # integrate velocity
        for d in bz.static(range(3)):
            v[i, d] += f[i, d] / mass[i] * dt
    for i in range(x.shape[0]):  # damp
        for d in bz.static(range(3)):
            v[i, d] *= DAMPING
    for i in range(x.shape[0]):  # integrate position
        for d in bz.static(range(3)):
            x[i, d] += v[i, d] * dt
    for i in range(x.shape[0]):  # floor contact
        if x[i, 1] < 0.0:
            x[i, 1] = -x[i, 1] * RESTITUTION
            v[i, 1] = -v[i, 1] * RESTITUTION


particle_step_unfused = bz.kernel(fuse_tasks=False)(particle_step.fn)


def numpy_step(x: np.ndarray, v: np.ndarray, f: np.ndarray, mass: np.ndarray, dt: np.float32) -> None:
    """The same step in NumPy, one array operation per loop (rounding as the kernel does)."""
    f[:] = 0
    f[:, 1] -= np.float32(GRAVITY) * mass
    v += f / mass[:, None] * dt
    v *= np.float32(DAMPING)
    x += v * dt
    below = x[:, 1] < 0
    x[below, 1] = -x[below, 1] * np.float32(RESTITUTION)
    v[below, 1] = -v[below, 1] * np.float32(RESTITUTION)


DRAG = 0.1
SPRING = 0.5
MAX_SPEED = 3.0
WALL = 1.0


@bz.kernel
def particle_step_12(x: Vec3, v: Vec3, f: Vec3, mass: bz.Array[bz.float32, 1], age: bz.Array[bz.int32, 1],
                     dt: bz.float32):
    """A longer step of twelve loops: more forces, a speed limit, walls and an age counter."""
    for i in range(x.shape[0]):  # zero forces
        for d in bz.static(range(3)):
            f[i, d] = 0.0
    for i in range(x.shape[0]):  # gravity
        f[i, 1] -= GRAVITY * mass[i]
    for i in range(x.shape[0]):  # drag
        for d in bz.static(range(3)):
            f[i, d] -= DRAG * v[i, d]
    for i in range(x.shape[0]):  # a spring to the origin
        for d in bz.static(range(3)):
            f[i, d] -= SPRING * x[i, d]
    for i in range(x.shape[0]):  # integrate velocity
        for d in bz.static(range(3)):
            v[i, d] += f[i, d] / mass[i] * dt
    for i in range(x.shape[0]):  # damp
        for d in bz.static(range(3)):
            v[i, d] *= DAMPING
    for i in range(x.shape[0]):  # speed limit
        for d in bz.static(range(3)):
            v[i, d] = min(max(v[i, d], -MAX_SPEED), MAX_SPEED)
    for i in range(x.shape[0]):  # integrate position
        for d in bz.static(range(3)):
            x[i, d] += v[i, d] * dt
    for i in range(x.shape[0]):  # floor contact
        if x[i, 1] < 0.0:
            x[i, 1] = -x[i, 1] * RESTITUTION
            v[i, 1] = -v[i, 1] * RESTITUTION
    for i in range(x.shape[0]):  # the wall at -x
        if x[i, 0] < -WALL:
            x[i, 0] = -WALL
            v[i, 0] = -v[i, 0] * RESTITUTION
    for i in range(x.shape[0]):  # the wall at +z
        if x[i, 2] > WALL:
            x[i, 2] = WALL
            v[i, 2] = -v[i, 2] * RESTITUTION
    for i in range(x.shape[0]):  # age
        age[i] += 1


particle_step_12_unfused = bz.kernel(fuse_tasks=False)(particle_step_12.fn)


def numpy_step_12(x, v, f, mass, age, dt) -> None:
    """The twelve-loop step in NumPy."""
    r = np.float32(RESTITUTION)
    f[:] = 0
    f[:, 1] -= np.float32(GRAVITY) * mass
    f -= np.float32(DRAG) * v
    f -= np.float32(SPRING) * x
    v += f / mass[:, None] * dt
    v *= np.float32(DAMPING)
    np.minimum(np.maximum(v, np.float32(-MAX_SPEED)), np.float32(MAX_SPEED), out=v)
    x += v * dt
    below = x[:, 1] < 0
    x[below, 1] = -x[below, 1] * r
    v[below, 1] = -v[below, 1] * r
    left = x[:, 0] < -WALL
    x[left, 0] = -WALL
    v[left, 0] = -v[left, 0] * r
    far = x[:, 2] > WALL
    x[far, 2] = WALL
    v[far, 2] = -v[far, 2] * r
    age += 1


def particles_12(n: int, seed: int = 0) -> list[np.ndarray]:
    return particles(n, seed) + [np.zeros(n, np.int32)]


@dataclass(frozen=True)
class StepCase:
    """A particle step as a fused kernel, the same kernel unfused, NumPy, and its arrays."""

    name: str
    fused: Callable
    unfused: Callable
    numpy: Callable
    arrays: Callable[[int], list[np.ndarray]]


def particles(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 3)).astype(np.float32)
    v = rng.standard_normal((n, 3)).astype(np.float32)
    return [x, v, np.zeros((n, 3), np.float32), rng.uniform(0.5, 2, n).astype(np.float32)]


@dataclass
class StepRow:
    step: str
    particles: int
    launches_fused: int
    launches_unfused: int
    us_fused: float
    us_unfused: float
    us_numpy: float
    max_error: float  # max |braze - NumPy| over x and v after `steps` steps


def _us_per_step(step: Callable[[], None], seconds: float) -> float:
    """The best of five timed batches, in microseconds per step."""
    step()
    count = max(1, int(seconds / 5 / _one(step)))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(count):
            step()
        best = min(best, (time.perf_counter() - start) / count)
    return best * 1e6


def _one(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return max(time.perf_counter() - start, 1e-7)


SIX_LOOPS = StepCase("6 loops", particle_step, particle_step_unfused, numpy_step, particles)
TWELVE_LOOPS = StepCase("12 loops", particle_step_12, particle_step_12_unfused, numpy_step_12, particles_12)


def run_particle_step(n: int = 8192, steps: int = 20, seconds: float = 0.5, case: StepCase = SIX_LOOPS) -> StepRow:
    """Launch counts, µs per step (fused, unfused, NumPy) and the error against NumPy."""
    dt = np.float32(1e-3)
    fused, unfused, reference = case.arrays(n), case.arrays(n), case.arrays(n)
    with bz.record() as rec_fused:
        case.fused(*fused, dt)
    with bz.record() as rec_unfused:
        case.unfused(*unfused, dt)
    case.numpy(*reference, dt)
    for _ in range(steps - 1):
        case.fused(*fused, dt)
        case.numpy(*reference, dt)
    error = max(float(np.max(np.abs(a - b))) for a, b in zip(fused[:2], reference[:2]))
    return StepRow(case.name, n, len(rec_fused.launches), len(rec_unfused.launches),
                   _us_per_step(lambda: case.fused(*fused, dt), seconds),
                   _us_per_step(lambda: case.unfused(*unfused, dt), seconds),
                   _us_per_step(lambda: case.numpy(*reference, dt), seconds), error)
