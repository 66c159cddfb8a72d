"""Taichi's and Quadrants' grid idioms in `@bz.kernel`s: `bz.grouped` loops whose index is an integer
vector (`for I in bz.grouped(bz.ndrange(n, m))`, `bz.grouped(a)`, unrolled and serial neighbour loops),
integer and bool vectors (`p.cast(int)`, `bz.math.floor(p, int)`, comparisons with `.all()`/`.any()`),
`bz.cast`, `bz.vec3.zero()`, and module-level constant vectors; on the CPU against NumPy, once through
the generated CUDA run on the CPU, and the errors left."""

from __future__ import annotations

import loop_cuda_on_cpu
import numpy as np
import pytest

import braze as bz

UPPER = bz.vec3d(1.0, 2.0, 3.0)  # a module-level constant vector, as Genesis keeps its bounds
RNG = np.random.default_rng(5)


@bz.kernel
def blur(g: bz.Array[bz.float32, 2], unrolled: bz.Array[bz.float32, 2], looped: bz.Array[bz.float32, 2]):
    for cell in bz.grouped(bz.ndrange((1, g.shape[0] - 1), (1, g.shape[1] - 1))):
        s = 0.0
        for off in bz.static(bz.grouped(bz.ndrange((-1, 2), (-1, 2)))):
            s += g[cell + off]
        unrolled[cell] = s
    for cell in bz.grouped(looped):  # clamped to the edge: a serial neighbour loop with a run-time offset
        top = bz.vec2l(g.shape[0] - 1, g.shape[1] - 1)
        s = 0.0
        for off in bz.grouped(bz.ndrange((-1, 2), (-1, 2))):
            s += g[min(max(cell + off, 0), top)] * (1.0 if (off == 0).all() else 0.5)
        looped[cell[0], cell[1]] = s


def _blur_reference(g):
    padded = np.pad(g, 1, mode="edge")
    n, m = g.shape
    weights = {(a, b): 1.0 if a == b == 0 else 0.5 for a in (-1, 0, 1) for b in (-1, 0, 1)}
    looped = sum(w * padded[1 + a:1 + a + n, 1 + b:1 + b + m] for (a, b), w in weights.items())
    unrolled = np.zeros_like(g)
    unrolled[1:-1, 1:-1] = sum(g[1 + a:n - 1 + a, 1 + b:m - 1 + b] for a, b in weights)
    return unrolled, looped


def test_grouped_loops_index_with_an_integer_vector():
    g = RNG.uniform(-1, 1, (5, 7)).astype(np.float32)
    unrolled, looped = np.zeros_like(g), np.zeros_like(g)
    blur(g, unrolled, looped)
    expected_unrolled, expected_looped = _blur_reference(g)
    np.testing.assert_allclose(unrolled, expected_unrolled, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(looped, expected_looped, rtol=1e-6, atol=1e-6)
    ir = blur.kernel_ir()
    assert ir.count("range_for") == 2 and "serial" not in ir.split("range_for", 1)[0]  # both tasks parallel


@bz.kernel
def particle_to_grid(x: bz.Array[bz.vec2, 1], v: bz.Array[bz.vec2, 1], C: bz.Array[bz.mat22, 1],
                     grid_v: bz.Array[bz.vec2, 2], grid_m: bz.Array[bz.float32, 2], inv_dx: bz.float32, dx: bz.float32):
    for cell in bz.grouped(grid_m):
        grid_v[cell] = bz.vec2.zero()
        grid_m[cell] = 0.0
    for p in range(x.shape[0]):  # mpm88's P2G, as Taichi writes it
        base = (x[p] * inv_dx - 0.5).cast(int)
        fx = x[p] * inv_dx - base.cast(bz.float32)
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
        for offset in bz.static(bz.grouped(bz.ndrange(3, 3))):
            dpos = (offset.cast(bz.float32) - fx) * dx
            weight = w[offset[0]][0] * w[offset[1]][1]
            grid_v[base + offset] += weight * (v[p] + C[p] @ dpos)
            grid_m[base + offset] += weight


def test_a_particle_to_grid_step_with_integer_vector_offsets():
    n, size = 20, 8
    dx = 1.0 / size
    x = RNG.uniform(0.2, 0.8, (n, 2)).astype(np.float32)
    v, affine = RNG.normal(size=(n, 2)).astype(np.float32), RNG.normal(size=(n, 2, 2)).astype(np.float32)
    grid_v, grid_m = np.ones((size, size, 2), np.float32), np.ones((size, size), np.float32)
    particle_to_grid(x, v, affine, grid_v, grid_m, 1.0 / dx, dx)
    expected_v, expected_m = np.zeros((size, size, 2)), np.zeros((size, size))
    for p in range(n):
        base = (x[p] / dx - 0.5).astype(int)
        fx = x[p].astype(np.float64) / dx - base
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
        for i, j in np.ndindex(3, 3):
            weight = w[i][0] * w[j][1]
            expected_v[tuple(base + (i, j))] += weight * (v[p] + affine[p] @ (((i, j) - fx) * dx))
            expected_m[tuple(base + (i, j))] += weight
    np.testing.assert_allclose(grid_v, expected_v, atol=1e-5)
    np.testing.assert_allclose(grid_m, expected_m, atol=1e-5)
    assert abs(grid_m.sum() - n) < 1e-4


@bz.kernel
def cells(x: bz.Array[bz.vec3, 1], inv_dx: bz.float32, shift: bz.vec3i, base: bz.Array[bz.vec3i, 1],
          frac: bz.Array[bz.vec3, 1], flags: bz.Array[bz.int32, 2]):
    for i in bz.grouped(x):  # over a 1-D array: a 1-vector index
        p = x[i] * inv_dx
        b = bz.math.floor(p, int)  # Taichi's ti.floor(p, int): an integer vector
        base[i] = b + shift
        frac[i] = p - b  # a float vector with an integer one: the float's type
        c = (p - 0.5).cast(int)
        inside = (b >= 0) & (b < 4)
        flags[i, 0] = 1 if inside.all() else 0
        flags[i, 1] = 1 if (c < 0).any() else 0
        flags[i, 2] = bz.cast(p.x * 2.0, bz.int32) + bz.math.max(b, c).sum() - min(b, bz.vec3i(1, 1, 1)).z
        flags[i, 3] = (b // 2 + b % 2 * 10).y + bz.cast(b * 0.5, int).x + abs(-b).max()
        flags[i, 4] = (b.cast(bz.int32) if p.x > 2.0 else c).z  # int32 or int64: an int64 vector


def test_integer_vectors_floor_cast_compare_and_combine():
    n = 16
    x = RNG.uniform(-1.0, 5.0, (n, 3)).astype(np.float32)
    base, frac, flags = np.zeros((n, 3), np.int32), np.zeros((n, 3), np.float32), np.zeros((n, 5), np.int32)
    cells(x, 1.0, (1, -2, 3), base, frac, flags)  # an integer vector parameter takes a tuple of ints
    p = x.astype(np.float32)
    b, c = np.floor(p).astype(np.int32), np.trunc(p - np.float32(0.5)).astype(np.int32)
    np.testing.assert_array_equal(base, b + [1, -2, 3])
    np.testing.assert_array_equal(frac, p - b.astype(np.float32))
    np.testing.assert_array_equal(flags[:, 0], ((b >= 0) & (b < 4)).all(1))
    np.testing.assert_array_equal(flags[:, 1], (c < 0).any(1))
    np.testing.assert_array_equal(flags[:, 2], np.trunc(p[:, 0] * 2).astype(int) + np.maximum(b, c).sum(1)
                                  - np.minimum(b, 1)[:, 2])
    np.testing.assert_array_equal(flags[:, 3], (b // 2 + b % 2 * 10)[:, 1] + np.trunc(b * 0.5)[:, 0].astype(int)
                                  + np.abs(b).max(1))
    np.testing.assert_array_equal(flags[:, 4], np.where(p[:, 0] > 2.0, b[:, 2], c[:, 2]))
    assert flags[:, 0].any() and not flags[:, 0].all() and flags[:, 1].any()  # both outcomes of each test


@bz.kernel
def clamp_to_box(pos: bz.Array[bz.vec3, 1], out: bz.Array[bz.vec3d, 1], gap: bz.Array[bz.float64, 1]):
    for i in range(pos.shape[0]):
        lower = -UPPER  # folded at compile time: a constant vector too
        q = bz.math.min(bz.math.max(pos[i], lower), UPPER)
        out[i] = q + bz.vec3d.zero() + bz.mat33.zero() @ q
        gap[i] = (pos[i] - UPPER).norm() + UPPER.x + bz.math.min(UPPER, pos[i].x).y + bz.mat22.identity()[1, 1]


def test_a_module_level_constant_vector_is_a_vector_in_kernels():
    pos = RNG.uniform(-4, 4, (9, 3)).astype(np.float32)
    out, gap = np.zeros((9, 3)), np.zeros(9)
    clamp_to_box(pos, out, gap)
    p = pos.astype(np.float64)
    np.testing.assert_array_equal(out, np.clip(p, -UPPER, UPPER))
    np.testing.assert_allclose(gap, np.linalg.norm(p - UPPER, axis=1) + 1.0 + np.minimum(2.0, p[:, 0]) + 1.0,
                               rtol=1e-12)


@bz.kernel
def weighted_stencil(g: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 2]):
    for cell in bz.grouped(g):
        top = bz.vec2l(g.shape[0] - 1, g.shape[1] - 1)
        s = UPPER.sum() + (1.0 if (UPPER > 2.5).any() else 0.0) + (2.0 if (UPPER > 1.5).all() else 0.0)
        for off in bz.static(bz.grouped(bz.ndrange((-1, 2), (-1, 2)))):
            s += g[min(max(cell + off, 0), top)] * (1.0 if (off == 0).all() else 0.5)
        out[cell] = s


def test_methods_of_constant_vectors_fold_an_unrolled_offset_s_all_and_a_module_vector_s_sum():
    """`(off == 0).all()` of a bz.static loop's offset, and `UPPER.sum()`, were calls to unknown functions."""
    g = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    out = np.zeros_like(g)
    weighted_stencil(g, out)
    padded = np.pad(g.astype(np.float64), 1, mode="edge")
    expected = 7.0 + 0.5 * sum(padded[1 + a:4 + a, 1 + b:5 + b] for a in (-1, 0, 1) for b in (-1, 0, 1)) + 0.5 * g
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_the_python_side_of_grouped_cast_and_zero():
    assert [cell.tolist() for cell in bz.grouped(bz.ndrange(2, (1, 3)))] == [[0, 1], [0, 2], [1, 1], [1, 2]]
    assert [cell.tolist() for cell in bz.grouped(np.zeros((1, 2)))] == [[0, 0], [0, 1]]
    assert bz.cast(np.array([1.7, -1.7]), int).tolist() == [1, -1]
    assert bz.math.floor(np.array([1.7, -1.7]), bz.int32).tolist() == [1, -2]
    assert bz.vec3.zero().tolist() == [0, 0, 0] and bz.mat22d.zero().dtype == np.float64
    assert bz.ivec3 is bz.vec3i and bz.vec3i(1, 2, 3).dtype == np.int32 and bz.vec2l(1, 2).dtype == np.int64


@bz.kernel
def grid_features(x: bz.Array[bz.vec2, 1], grid: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 2]):
    for cell in bz.grouped(grid):
        grid[cell] = bz.cast(cell.sum(), bz.float32)
    for i in range(x.shape[0]):
        b = bz.math.floor(x[i], int)
        s = 0.0
        for off in bz.static(bz.grouped(bz.ndrange(2, 2))):
            s += grid[b + off] * (x[i] - (b + off)).norm()
        out[i, 0] = s + (1.0 if (b >= 0).all() else 0.0) + bz.vec2.zero().x


def test_the_features_through_the_cuda_code_on_the_cpu():
    if not loop_cuda_on_cpu.available():
        pytest.skip("no C++ compiler")
    x = RNG.uniform(0.0, 2.9, (6, 2)).astype(np.float32)
    grid, out = np.zeros((4, 4), np.float32), np.zeros((6, 1), np.float32)
    loop_cuda_on_cpu.run_on_cpu(grid_features, x, grid, out)
    expected_grid, expected = np.zeros_like(grid), np.zeros_like(out)
    grid_features(x, expected_grid, expected)
    np.testing.assert_array_equal(grid, expected_grid)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(grid, np.add.outer(np.arange(4), np.arange(4)))


def _compile_error(body: str, tmp_path, loop: str = "for i in range(x.shape[0]):") -> str:
    path = tmp_path / f"k{abs(hash(body + loop))}.py"
    path.write_text("import braze as bz\n\n@bz.kernel\ndef kern(x: bz.Array[bz.vec3, 1], s: bz.Array[bz.float32, 2]):\n"
                    f"    {loop}\n        {body}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(bz.KernelError) as error:
        namespace["kern"](np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32))
    return str(error.value)


@pytest.mark.parametrize("loop, body, message", [
    ("for i, j in bz.grouped(s):", "s[i, j] = 1.0", "bz.grouped: the loop takes one name, its index vector"),
    ("for I in bz.grouped(3):", "s[I] = 1.0", "bz.grouped: expected one bz.ndrange(...), range(...) or array"),
    ("for I in bz.grouped(s):", "s[I] = 1.0 if I > 0 else 0.0", "combine the components with .all() or .any()"),
    ("for i in range(x.shape[0]):", "s[x[i]] = 1.0", "convert a float vector first, a[p.cast(int)]"),
    ("for i in range(x.shape[0]):", "s[i, 0] = bz.math.floor(x[i], 2).x", "the second argument is a dtype"),
    ("for i in range(x.shape[0]):", "s[i, 0] = bz.cast(x[i])", "bz.cast: expected (value, dtype)"),
    ("for i in range(x.shape[0]):", "G = bz.grouped(s)", "bz.grouped(...) is iterated by a loop"),
    ("for i in range(x.shape[0]):", "s[i, 0] = x[i].cast(bz.uint8)[0]", "no vector or matrix type of shape (3,) and "
                                                                       "uint8"),
])
def test_misused_grouped_loops_and_casts_say_what_to_write(loop, body, message, tmp_path):
    assert message in _compile_error(body, tmp_path, loop)
