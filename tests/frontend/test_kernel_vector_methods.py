"""Methods of vectors and matrices in `@bz.kernel`s, under Taichi's names (`v.norm()`, `v.dot(w)`,
`m.trace()`, `v.fill(x)`, ...), the same functions as `bz.math.<name>` (Warp's names: `bz.math.skew`,
`bz.math.diag`), Python's max, min, sum, any and all of one vector, and arrays indexed by a tuple of
integers (`a[I]`): on the CPU against the functions called on NumPy arrays (bit for bit) and float64
NumPy, a few through the generated CUDA run on the CPU, and errors for misuse."""

from __future__ import annotations

import loop_cuda_on_cpu
import numpy as np
import pytest

import braze as bz

RNG = np.random.default_rng(11)


def floats(*shape):
    return RNG.uniform(-2.0, 2.0, shape).astype(np.float32)


@bz.kernel
def scalar_methods(a: bz.Array[bz.vec3, 1], b: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1],
                   out: bz.Array[bz.float32, 2]):
    for i in range(a.shape[0]):
        v = a[i]
        out[i, 0] = v.norm()
        out[i, 1] = a[i].norm_sqr()
        out[i, 2] = v.dot(b[i])
        out[i, 3] = m[i].trace()
        out[i, 4] = m[i].determinant()
        out[i, 5] = (v - b[i]).sum()
        out[i, 6] = v.max()
        out[i, 7] = v.min()
        out[i, 8] = max(v) - min(v) + sum(v)  # Python's builtins on one vector: its components
        out[i, 9] = bz.math.max(v) + bz.math.min(v, b[i]).x  # Warp's wp.max(v); of two vectors elementwise
        out[i, 10] = 1.0 if (v * 0.0).any() else (2.0 if v.all() and any(v) and all(v) else 3.0)


def test_scalar_methods_match_the_functions_on_numpy():
    n = 33
    a, b, m = floats(n, 3), floats(n, 3), floats(n, 3, 3)
    a[0, 1] = 0.0  # v.all() is false there
    out = np.zeros((n, 11), np.float32)
    scalar_methods(a, b, m, out)
    expected = [bz.norm(a), bz.math.norm_sqr(a), bz.dot(a, b), bz.trace(m), bz.determinant(m),
                bz.math.sum(a - b), bz.math.max(a), bz.math.min(a),
                bz.math.max(a) - bz.math.min(a) + bz.math.sum(a), bz.math.max(a) + np.minimum(a, b)[:, 0],
                np.where(bz.math.all(a), 2.0, 3.0)]
    for column, want in enumerate(expected):
        np.testing.assert_array_equal(out[:, column], np.float32(want), err_msg=f"column {column}")
    # ... and those NumPy functions are what NumPy's linear algebra says
    a64, m64 = a.astype(np.float64), m.astype(np.float64)
    np.testing.assert_allclose(out[:, 0], np.linalg.norm(a64, axis=1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 3], np.trace(m64, axis1=1, axis2=2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 4], np.linalg.det(m64), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[:, 6:8], np.stack([a.max(1), a.min(1)], 1))
    assert out[0, 10] == 3.0 and (out[1:, 10] == 2.0).all()


@bz.kernel
def vector_methods(a: bz.Array[bz.vec3, 1], b: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1],
                   vo: bz.Array[bz.vec3, 2], mo: bz.Array[bz.mat33, 2]):
    for i in range(a.shape[0]):
        v = a[i]
        vo[i, 0] = v.cross(b[i])
        vo[i, 1] = (v - b[i]).normalized()
        vo[i, 2] = bz.math.skew(v) @ b[i]
        w = bz.vec3(1.0)
        w.fill(v.y)  # Taichi's fill assigns every component
        vo[i, 3] = w
        mo[i, 0] = v.outer_product(b[i])
        mo[i, 1] = m[i].transpose()
        mo[i, 2] = m[i].inverse()
        mo[i, 3] = bz.diag(v)
        mo[i, 4] = m[i]
        mo[i, 4].fill(2)  # an element of an array too


def test_vector_methods_match_the_functions_on_numpy():
    n = 17
    a, b, m = floats(n, 3), floats(n, 3), floats(n, 3, 3)
    b[0] = a[0]  # normalized() of the zero vector is the zero vector
    vo, mo = np.zeros((n, 4, 3), np.float32), np.zeros((n, 5, 3, 3), np.float32)
    vector_methods(a, b, m, vo, mo)
    for column, want in enumerate([bz.cross(a, b), bz.normalize(a - b), bz.cross(a, b),
                                   np.repeat(a[:, 1:2], 3, 1)]):
        np.testing.assert_array_equal(vo[:, column], want, err_msg=f"vector column {column}")
    np.testing.assert_array_equal(vo[0, 1], 0.0)
    for column, want in enumerate([bz.outer(a, b), bz.transpose(m), bz.inverse(m), bz.diag(a),
                                   np.full((n, 3, 3), 2.0)]):
        np.testing.assert_array_equal(mo[:, column], want, err_msg=f"matrix column {column}")
    np.testing.assert_allclose(mo[:, 0], np.einsum("ni,nj->nij", a, b), rtol=1e-6)
    np.testing.assert_allclose(mo[:, 2] @ m, np.broadcast_to(np.eye(3), (n, 3, 3)), atol=2e-3)
    np.testing.assert_array_equal(np.diagonal(mo[:, 3], axis1=1, axis2=2), a)


@bz.kernel
def grid_stencil(g: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 2], counts: bz.Array[bz.int32, 2]):
    for i, j in bz.ndrange(g.shape[0] - 1, g.shape[1] - 1):
        cell = (i, j)
        out[cell] = g[cell] + g[i + 1, j + 1]
        bz.atomic_add(counts[cell], 1)


def test_an_array_indexed_by_a_tuple_of_integers():
    g = floats(5, 4)
    out, counts = np.zeros_like(g), np.zeros((5, 4), np.int32)
    grid_stencil(g, out, counts)
    np.testing.assert_array_equal(out[:-1, :-1], g[:-1, :-1] + g[1:, 1:])
    assert counts[:-1, :-1].all() and counts.sum() == 12


@bz.kernel
def few_methods(a: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1], out: bz.Array[bz.float32, 2]):
    for i in range(a.shape[0]):
        v = a[i]
        v.fill(v.max() + m[i].trace())
        cell = (i, 0)
        out[cell] = v.norm() + (1.0 if v.any() else 0.0)


def test_methods_through_the_cuda_code_on_the_cpu():
    if not loop_cuda_on_cpu.available():
        pytest.skip("no C++ compiler")
    n = 9
    a, m = floats(n, 3), floats(n, 3, 3)
    a[0] = 0.0
    m[0] = 0.0  # v.any() is false there
    out, expected = np.zeros((n, 1), np.float32), np.zeros((n, 1), np.float32)
    loop_cuda_on_cpu.run_on_cpu(few_methods, a, m, out)
    few_methods(a, m, expected)
    np.testing.assert_array_equal(out, expected)
    filled = np.repeat((bz.math.max(a) + bz.trace(m))[:, None], 3, 1)
    np.testing.assert_array_equal(out[:, 0], bz.norm(filled) + bz.math.any(filled))
    assert out[0, 0] == 0.0


def test_the_functions_are_in_bz_math_under_each_name():
    assert bz.math.dot is bz.dot and bz.math.outer_product is bz.outer
    a = np.array([[3.0, -4.0, 0.0]], np.float32)
    np.testing.assert_array_equal(bz.math.normalized(a), bz.normalize(a))  # without Taichi's epsilon, the same
    np.testing.assert_array_equal(bz.math.skew(a)[0] @ np.float32([1, 2, 3]), np.cross(a[0], [1, 2, 3]))
    assert bz.math.max(np.float32(1), np.float32(2)) == 2  # two scalars: elementwise, as before
    assert bz.math.any(a).tolist() == [True] and bz.math.all(a).tolist() == [False]


@bz.kernel
def with_epsilons(a: bz.Array[bz.vec3d, 1], out: bz.Array[bz.float64, 2], eps: float):
    for i in range(a.shape[0]):
        out[i, 0] = a[i].norm(eps)
        n = a[i].normalized(eps)
        out[i, 1], out[i, 2], out[i, 3] = n.x, n.y, n.z
        out[i, 4] = bz.math.normalized(a[i], 1e-6).x


def test_norm_and_normalized_take_taichis_epsilon():
    """Genesis writes `n / n.norm(EPS)` and difftaichi `ti.Vector.normalized(dist, 1e-6)`: sqrt(v.v + eps) and
    v / (|v| + eps), finite for a zero vector (the second was an error naming the count of arguments)."""
    a = np.array([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]])
    out = np.full((2, 5), np.nan)
    with_epsilons(a, out, 0.25)
    length = np.linalg.norm(a, axis=1)
    np.testing.assert_allclose(out[:, 0], np.sqrt(length ** 2 + 0.25), rtol=1e-15)
    np.testing.assert_allclose(out[:, 1:4], a / (length + 0.25)[:, None], rtol=1e-15)
    np.testing.assert_allclose(out[:, 4], a[:, 0] / (length + 1e-6), rtol=1e-15)
    np.testing.assert_allclose(bz.norm(a, 0.25), out[:, 0], rtol=1e-15)
    np.testing.assert_allclose(bz.math.normalized(a, 0.25), out[:, 1:4], rtol=1e-15)


def _compile_error(body: str, tmp_path, annotation: str = "bz.Array[bz.vec3, 1]"):
    path = tmp_path / f"k{abs(hash(body))}.py"
    path.write_text(f"import braze as bz\n\n@bz.kernel\ndef kern(x: {annotation}, s: bz.Array[bz.float32, 2]):\n"
                    f"    for i in range(x.shape[0]):\n        {body}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(bz.KernelError) as error:
        namespace["kern"](np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32))
    return str(error.value)


@pytest.mark.parametrize("body, message", [
    ("s[x[i]] = 1.0", "indexed by a bz.vec3: an index is one integer per axis"),
    ("s[i, 0] = x[i].cast(3)[0]", "cast: expected a dtype (int, float, bz.int32, ...), got 3"),
    ("s[i, 0] = x[i].frobenius()", "bz.vec3 has no method 'frobenius'; its methods are"),
    ("s[i, 0] = s[i, 1].norm()", "'.norm()' is a method of vectors and matrices; 's[i, 1]' is a float32"),
    ("s[i, 0] = x[i].trace()", "bz.trace: argument 1: expected a square matrix, got bz.vec3"),
    ("x[i].fill(x[i])", "fill: expected one number, got bz.vec3"),
    ("s[i, 0] = x[i].dot(1.0)", "bz.dot: argument 2: expected a vector, got float"),
    ("s[i, 0] = x[i].norm(x[i])", "bz.norm: argument 2: expected a number, got bz.vec3"),
    ("s[i, 0] = x[i].normalized(1.0, 2.0).x", "bz.math.normalized: expected 1 to 2 argument(s), got 3"),
])
def test_misused_methods_say_what_is_wrong(body, message, tmp_path):
    assert message in _compile_error(body, tmp_path)
