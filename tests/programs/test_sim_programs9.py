"""Simulation programs of a ninth kind, written as loop kernels the way Taichi, Warp and Numba users
write them: a root found per thread by bisection whose bounds start as float literals (`lo, hi = 0.0, 10.0`)
and whose midpoint meets a float64 array, helpers that return from inside their loops (the first column
above a threshold, a ray marched to a surface by a `while` loop, the pair of a row that sums to a target,
a helper that writes and returns early), and a particle step that classifies each particle through nested
helpers, counts the classes with integer atomics and allocates slots for the escaping ones with the old
value `bz.atomic_add` returns.

Each runs on the CPU backend (whose CUDA is also compiled with NVRTC: the fixture of
tests/programs/test_sim_programs.py), through its generated CUDA run on the CPU (tests/loop_cuda_on_cpu.py:
a thread per CUDA thread) and on a GPU, at 0, 1 and more elements, and is checked against a pure-Python
float64 reference; arrays a program writes whole start as NaN or -1."""

import math

import numpy as np
import pytest
from programs.conftest import CUDA, Place
from programs.test_sim_programs import cuda_compiles  # noqa: F401  (an autouse fixture: NVRTC on the CPU run)
from programs.test_sim_programs7 import FAKE_GPU, launch, nans

import braze as bz

RNG = np.random.default_rng(909)


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), FAKE_GPU, CUDA])
def where(request) -> Place:
    return request.param


# --- bisection from float literals ----------------------------------------------------------------------
@bz.kernel
def cube_roots(c: bz.Array[bz.float64, 1], root: bz.Array[bz.float64, 1], iterations: bz.Array[bz.int32, 1]):
    for i in range(c.shape[0]):
        lo, hi = 0.0, 10.0
        it = 0
        while True:
            it += 1
            mid = 0.5 * (lo + hi)  # a local of literals: a float64 in Python, as every value it meets here
            f = mid * mid * mid - c[i]
            if abs(f) < 1e-12 or it > 200:
                break
            if f > 0:
                hi = mid
                continue
            lo = mid
        root[i] = mid
        iterations[i] = it


def test_bisection_from_float_literal_bounds_keeps_float64(where):
    """`mid = 0.5 * (lo + hi)` of literal locals was a float32 local, so every midpoint was rounded to 7
    digits and the roots were off by 1e-7 (the bounds now widen to float64 where `mid` meets c[i])."""
    for n in (0, 1, 20):
        c = RNG.uniform(0, 100, n)
        root, iterations = where(nans(n, dtype=np.float64)), where(np.full(n, -1, np.int32))
        launch(where, cube_roots, where(c), root, iterations)
        np.testing.assert_allclose(where.host(root), np.cbrt(c), rtol=1e-11)
        assert (where.host(iterations) > 30).all()  # float32 midpoints stop changing after about 24 halvings


# --- helpers that return from inside their loops --------------------------------------------------------
@bz.func
def first_above(x: bz.Array[bz.float64, 2], i: int, threshold: float) -> int:
    for j in range(x.shape[1]):
        if x[i, j] > threshold:
            return j
    return -1


@bz.func
def march_to_slab(origin: float, direction: float) -> float:
    """Sphere tracing to the slab |x - 3| < 0.5: the distance marched, or -1 if it is not reached."""
    t = 0.0
    steps = 0
    while steps < 64:
        d = abs(origin + t * direction - 3.0) - 0.5
        if d < 1e-6:
            return t
        t += d
        steps += 1
    return -1.0


@bz.func
def pair_summing_to(a: bz.Array[bz.int32, 2], i: int, target: int):
    for p in range(a.shape[1]):
        for q in range(p + 1, a.shape[1]):
            if a[i, p] + a[i, q] == target:
                return p, q  # out of both loops
    return -1, -1


@bz.func
def write_first_square_above(o: bz.Array[bz.int32, 1], i: int, n: int):
    for s in range(n):
        if s * s > i:
            o[i] = s
            return
    o[i] = -5


@bz.kernel
def searches(x: bz.Array[bz.float64, 2], a: bz.Array[bz.int32, 2], hit: bz.Array[bz.int32, 1],
             t: bz.Array[bz.float64, 1], pair: bz.Array[bz.int32, 2], square: bz.Array[bz.int32, 1], threshold: float):
    for i in range(x.shape[0]):
        hit[i] = first_above(x, i, threshold)
        t[i] = march_to_slab(x[i, 0], 1.0 if x[i, 1] > -1.5 else -1.0)
        p, q = pair_summing_to(a, i, 10)
        pair[i, 0] = p
        pair[i, 1] = q
        write_first_square_above(square, i, 4)


def _searched(x: np.ndarray, a: np.ndarray, threshold: float) -> tuple:
    def march(origin, direction):
        t, steps = 0.0, 0
        while steps < 64:
            d = abs(origin + t * direction - 3.0) - 0.5
            if d < 1e-6:
                return t
            t, steps = t + d, steps + 1
        return -1.0

    def pair(row):
        return next(((p, q) for p in range(len(row)) for q in range(p + 1, len(row)) if row[p] + row[q] == 10),
                    (-1, -1))

    n = len(x)
    return (np.array([next((j for j, v in enumerate(row) if v > threshold), -1) for row in x]),
            np.array([march(r[0], 1.0 if r[1] > -1.5 else -1.0) for r in x]),
            np.array([pair(row) for row in a]).reshape(n, 2),
            np.array([next((s for s in range(4) if s * s > i), -5) for i in range(n)]))


def test_helpers_return_from_inside_their_loops(where):
    """A return in a @bz.func's loop was refused ('set a local and break'); it now leaves the loops it is in
    (both, from the inner loop of a pair search) and the helper, as Python does."""
    for n in (0, 1, 23):
        x, a = RNG.uniform(-2, 2, (n, 5)), RNG.integers(0, 10, (n, 4)).astype(np.int32)
        outputs = [where(np.full(n, -7, np.int32)), where(nans(n, dtype=np.float64)),
                   where(np.full((n, 2), -7, np.int32)), where(np.full(n, -7, np.int32))]
        launch(where, searches, where(x), where(a), *outputs, 1.5)
        for got, want in zip(outputs, _searched(x, a, 1.5), strict=True):
            np.testing.assert_allclose(where.host(got), want, rtol=1e-12)


@bz.func
def band_or_half(x: bz.Array[bz.float64, 1], i: int):
    for band in range(3):
        if x[i] > band:
            return band  # an int from this loop
    for depth in range(3):
        if x[i] < -depth:
            return x[i] * 0.5  # a float from this one
    return 0.25


@bz.func
def band_or_half_in_one_loop(x: bz.Array[bz.float64, 1], i: int):
    for band in range(3):
        if x[i] > band:
            return band
        if x[i] < -band:
            return x[i] * 0.5  # an int and a float from one loop
    return 0.25


@bz.kernel
def bands(x: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 2]):
    for i in range(x.shape[0]):
        out[i, 0] = band_or_half(x, i)
        out[i, 1] = band_or_half_in_one_loop(x, i)


def test_a_helper_whose_loops_return_values_of_two_types(where):
    def band_or_half_ref(v):
        return next((b for b in range(3) if v > b), next((v * 0.5 for d in range(3) if v < -d), 0.25))

    def in_one_loop_ref(v):
        return next((b if v > b else v * 0.5 for b in range(3) if v > b or v < -b), 0.25)

    x = np.array([2.5, -1.5, 0.0, -0.2, 1.5])
    out = where(nans(5, 2, dtype=np.float64))
    launch(where, bands, where(x), out)
    np.testing.assert_array_equal(where.host(out), [[band_or_half_ref(v), in_one_loop_ref(v)] for v in x])


@bz.func
def position_of(g: bz.Array[bz.int32, 2], v: int):
    i = 0
    while i < g.shape[0]:
        j = 0
        while j < g.shape[1]:
            if g[i, j] == v:
                return i * 100 + j  # out of both while loops
            j += 1
        i += 1
    return -1


@bz.kernel
def positions(g: bz.Array[bz.int32, 2], queries: bz.Array[bz.int32, 1], out: bz.Array[bz.int32, 1]):
    for t in range(queries.shape[0]):
        out[t] = position_of(g, queries[t])


def test_a_helper_returns_from_nested_while_loops(where):
    g, queries = np.array([[1, 2, 3], [4, 2, 6]], np.int32), np.array([2, 6, 9, 4, 1], np.int32)
    out = where(np.full(5, -7, np.int32))
    launch(where, positions, where(g), where(queries), out)
    np.testing.assert_array_equal(where.host(out), [1, 102, -1, 100, 0])


# --- particles classified by nested helpers, counted and allocated by integer atomics -------------------
@bz.func
def signed_distance(x: float, y: float) -> float:
    return math.sqrt(x * x + y * y) - 1.0


@bz.func
def classify(x: float, y: float) -> int:
    d = signed_distance(x, y)
    if d < -0.5:
        return 0  # core
    if d < 0.0:
        return 1  # shell
    for band in range(3):
        if x > band:
            return 2 + band  # outside, by the band of x it passed
    return 5


@bz.kernel
def sort_particles(p: bz.Array[bz.float64, 2], kind: bz.Array[bz.int32, 1], counts: bz.Array[bz.int32, 1],
                   escaped: bz.Array[bz.int64, 1], n_escaped: bz.Array[bz.int64, 1], box: bz.Array[bz.int32, 1]):
    for i in range(p.shape[0]):
        c = classify(p[i, 0], p[i, 1])
        kind[i] = c
        bz.atomic_add(counts[c], 1)
        if c >= 2:
            escaped[bz.atomic_add(n_escaped[0], 1)] = i  # the old count is this particle's slot
            cell = int(math.floor(p[i, 0] * 4.0))
            bz.atomic_min(box[0], cell)
            bz.atomic_max(box[1], cell)


def test_particles_classified_by_nested_helpers_and_counted_by_atomics(where):
    def classify_ref(x, y):
        d = math.hypot(x, y) - 1.0
        if d < -0.5:
            return 0
        if d < 0.0:
            return 1
        return next((2 + band for band in range(3) if x > band), 5)

    for n in (0, 1, 200):
        p = RNG.uniform(-3, 3, (n, 2))
        kind, counts = where(np.full(n, -1, np.int32)), where(np.zeros(6, np.int32))
        escaped, n_escaped = where(np.full(n, -1, np.int64)), where(np.zeros(1, np.int64))
        box = where(np.array([2**31 - 1, -2**31], np.int32))
        launch(where, sort_particles, where(p), kind, counts, escaped, n_escaped, box)
        want = np.array([classify_ref(x, y) for x, y in p], np.int32)
        out = want >= 2
        np.testing.assert_array_equal(where.host(kind), want)
        np.testing.assert_array_equal(where.host(counts), np.bincount(want, minlength=6))
        count = int(where.host(n_escaped)[0])
        assert count == out.sum()
        assert sorted(where.host(escaped)[:count].tolist()) == np.flatnonzero(out).tolist()
        cells = np.floor(p[out, 0] * 4.0).astype(np.int32)
        if count:
            assert where.host(box).tolist() == [cells.min(), cells.max()]


# --- a time step computed by NumPy, torch or a @bz.jit reduction, given to a kernel -----------------------
@bz.kernel
def advect(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], dt: float, steps: bz.int32, reflect: bool):
    for i in range(x.shape[0]):
        for _ in range(steps):
            x[i] += v[i] * dt
            if reflect and (x[i] < 0.0 or x[i] > 1.0):
                x[i] = -x[i] if x[i] < 0.0 else 2.0 - x[i]
                v[i] = -v[i]


@bz.jit
def cfl_step(v, h):
    return 0.5 * h / np.max(np.abs(v))


def test_a_time_step_given_as_a_zero_dimensional_array():
    """A 0-d array for a scalar parameter (a @bz.jit reduction's result, np.array(2), torch's v.abs().max())
    was refused ("expected a float64 scalar, got ndarray"); it is its number."""
    import torch

    x0, v0 = RNG.random(40), RNG.random(40) - 0.5
    for dt, steps, reflect in ((cfl_step(v0, 0.02), np.array(3), np.array(True)),
                               (torch.tensor(v0).abs().max() * 0.01, torch.tensor(2), True), (0.01, 3, False)):
        x, v = x0.copy(), v0.copy()
        for _ in range(2):  # the second call takes the prepared call of the first
            advect(x, v, dt, steps, reflect)
        xr, vr = x0.copy(), v0.copy()
        for _ in range(2 * int(steps)):
            xr += vr * float(dt)
            if bool(reflect):
                out = (xr < 0) | (xr > 1)
                xr[out], vr[out] = np.where(xr[out] < 0, -xr[out], 2 - xr[out]), -vr[out]
        np.testing.assert_allclose(x, xr, rtol=1e-12)
        np.testing.assert_allclose(v, vr, rtol=1e-12)
