"""Vectors and matrices in `@bz.kernel`s on the CPU: every operator and function against the same
function called on NumPy arrays (bit for bit: both round after each operation) and against float64
NumPy (linalg), arrays of vectors over (n, 3) arrays without a copy, components read and written,
atomic updates of vector elements, task fusion over arrays of vectors, and errors for misuse."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz

RNG = np.random.default_rng(7)


def floats(*shape, dtype=np.float32, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


def kernel_from(source: str, tmp_path, name: str = "kern", **names):
    """A kernel defined in a file of its own (its source must be readable), with `names` as globals."""
    path = tmp_path / f"{name}_{abs(hash(source))}.py"
    path.write_text("import braze as bz\n\n" + source)
    namespace = dict(names)
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


# --- values and operators -------------------------------------------------------------------------
@bz.kernel
def operators(a: bz.Array[bz.vec3, 1], b: bz.Array[bz.vec3, 1], s: bz.Array[bz.float32, 1],
              out: bz.Array[bz.vec3, 2]):
    for i in range(a.shape[0]):
        out[i, 0] = a[i] + b[i]
        out[i, 1] = a[i] - b[i] * s[i]
        out[i, 2] = s[i] * a[i] / 3.0
        out[i, 3] = -a[i] + 1.5
        out[i, 4] = a[i] * b[i]  # component by component
        out[i, 5] = 2.0 / (b[i] + 3.0)
        out[i, 6] = bz.vec3(a[i].z, a[i][0], s[i])
        out[i, 7] = bz.vec3(s[i]) + bz.vec3()


def test_operators_match_numpy_bit_for_bit():
    n = 257
    a, b, s = floats(n, 3), floats(n, 3), floats(n)
    out = np.zeros((n, 8, 3), np.float32)
    operators(a, b, s, out)
    c = s[:, None]
    f = np.float32
    expected = [a + b, a - b * c, c * a / f(3), -a + f(1.5), a * b, f(2) / (b + f(3)),
                np.stack([a[:, 2], a[:, 0], s], -1), np.repeat(c, 3, 1)]
    for column, want in enumerate(expected):
        np.testing.assert_array_equal(out[:, column], want, err_msg=f"column {column}")


@bz.kernel
def powers(a: bz.Array[bz.vec3, 1], b: bz.Array[bz.vec3, 1], n: int, out: bz.Array[bz.vec3, 2]):
    for i in range(a.shape[0]):
        out[i, 0] = 0.5 * (1.5 - a[i]) ** 2  # a quadratic B-spline weight, as MPM codes write it
        out[i, 1] = abs(a[i]) ** b[i]
        out[i, 2] = 2.0 ** a[i]
        out[i, 3] = a[i] ** n


def test_powers_of_vectors_are_component_by_component():
    a, b = floats(33, 3), floats(33, 3)
    out = np.zeros((33, 4, 3), np.float32)
    powers(a, b, 3, out)
    f = np.float32
    expected = [f(0.5) * (f(1.5) - a) ** 2, np.abs(a) ** b, f(2) ** a, a ** 3]
    for column, want in enumerate(expected):
        np.testing.assert_allclose(out[:, column], want, rtol=2e-6, err_msg=f"column {column}")


@bz.kernel
def functions(a: bz.Array[bz.vec3, 1], b: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1], p: bz.Array[bz.mat22, 1],
              q: bz.Array[bz.mat44, 1], scalars: bz.Array[bz.float32, 2], vectors: bz.Array[bz.vec3, 2],
              mats: bz.Array[bz.mat33, 2], small: bz.Array[bz.mat22, 1], big: bz.Array[bz.mat44, 1]):
    for i in range(a.shape[0]):
        scalars[i, 0] = bz.dot(a[i], b[i])
        scalars[i, 1] = bz.length(a[i])
        scalars[i, 2] = bz.length_sq(b[i])
        scalars[i, 3] = bz.determinant(m[i])
        scalars[i, 4] = bz.determinant(p[i])
        scalars[i, 5] = bz.determinant(q[i])
        scalars[i, 6] = bz.cross(bz.vec2(a[i].x, a[i].y), bz.vec2(b[i].x, b[i].y))
        scalars[i, 7] = a[i] @ b[i]
        scalars[i, 8] = bz.norm(b[i])
        vectors[i, 0] = bz.cross(a[i], b[i])
        vectors[i, 1] = bz.normalize(a[i])
        vectors[i, 2] = m[i] @ a[i]
        vectors[i, 3] = a[i] @ m[i]
        mats[i, 0] = bz.outer(a[i], b[i])
        mats[i, 1] = bz.transpose(m[i])
        mats[i, 2] = bz.inverse(m[i])
        mats[i, 3] = m[i] @ bz.inverse(m[i])
        mats[i, 4] = m[i] * 2.0 - bz.mat33.identity()
        small[i] = bz.inverse(p[i])
        big[i] = bz.inverse(q[i])


def test_functions_match_their_numpy_forms_bit_for_bit_and_linalg_closely():
    n = 200
    a, b = floats(n, 3), floats(n, 3)
    a[0] = 0  # normalize of a zero vector is the zero vector
    m, p, q = floats(n, 3, 3), floats(n, 2, 2), floats(n, 4, 4)
    scalars, vectors = np.zeros((n, 9), np.float32), np.zeros((n, 4, 3), np.float32)
    mats = np.zeros((n, 5, 3, 3), np.float32)
    small, big = np.zeros((n, 2, 2), np.float32), np.zeros((n, 4, 4), np.float32)
    functions(a, b, m, p, q, scalars, vectors, mats, small, big)
    same = np.testing.assert_array_equal
    same(scalars[:, 0], bz.dot(a, b))
    same(scalars[:, 1], bz.length(a))
    same(scalars[:, 2], bz.length_sq(b))
    same(scalars[:, 3], bz.determinant(m))
    same(scalars[:, 4], bz.determinant(p))
    same(scalars[:, 5], bz.determinant(q))
    same(scalars[:, 6], bz.cross(a[:, :2], b[:, :2]))
    same(scalars[:, 7], bz.dot(a, b))
    same(scalars[:, 8], bz.length(b))
    same(vectors[:, 0], bz.cross(a, b))
    same(vectors[:, 1], bz.normalize(a))
    assert np.all(vectors[0, 1] == 0)
    same(mats[:, 0], bz.outer(a, b))
    same(mats[:, 1], bz.transpose(m))
    same(mats[:, 2], bz.inverse(m))
    same(small, bz.inverse(p))
    same(big, bz.inverse(q))
    # and against float64 NumPy
    a64, b64, m64 = a.astype(np.float64), b.astype(np.float64), m.astype(np.float64)
    close = lambda got, want, tol=1e-5: np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    close(scalars[:, 0], np.einsum("ni,ni->n", a64, b64))
    close(scalars[:, 3], np.linalg.det(m64), 1e-4)
    close(scalars[:, 5], np.linalg.det(q.astype(np.float64)), 1e-4)
    close(vectors[:, 0], np.cross(a64, b64))
    close(vectors[:, 2], np.einsum("nij,nj->ni", m64, a64))
    close(vectors[:, 3], np.einsum("ni,nij->nj", a64, m64))
    close(mats[:, 0], np.einsum("ni,nj->nij", a64, b64))
    well = np.abs(np.linalg.det(m64)) > 0.1
    close(mats[well, 2], np.linalg.inv(m64[well]), 1e-3)
    close(mats[well, 3], np.broadcast_to(np.eye(3), (well.sum(), 3, 3)), 1e-3)
    close(mats[:, 4], 2 * m64 - np.eye(3))


@bz.kernel
def wide(a: bz.Array[bz.vec3d, 1], b: bz.Array[bz.vec3, 1], x: bz.float64, out: bz.Array[bz.vec3d, 1],
         lengths: bz.Array[bz.float64, 1]):
    for i in range(a.shape[0]):
        out[i] = a[i] + b[i] * x  # float32 vector times a float64 scalar: a vec3d
        lengths[i] = bz.length(b[i] * i)  # an integer scalar takes the vector's dtype


def test_float64_vectors_and_promotion():
    n = 50
    a, b = floats(n, 3, dtype=np.float64), floats(n, 3)
    out, lengths = np.zeros((n, 3)), np.zeros(n)
    wide(a, b, 0.1, out, lengths)
    np.testing.assert_array_equal(out, a + b.astype(np.float64) * 0.1)
    np.testing.assert_array_equal(lengths, bz.length(b * np.arange(n, dtype=np.float32)[:, None]).astype(np.float64))


# --- components ---------------------------------------------------------------------------------
@bz.kernel
def components(x: bz.Array[bz.vec4, 1], m: bz.Array[bz.mat33, 1], out: bz.Array[bz.float32, 2],
               rows: bz.Array[bz.vec3, 1]):
    for i in range(x.shape[0]):
        v = x[i]
        out[i, 0] = v.x + v.y * 10.0 + v.z * 100.0 + v.w * 1000.0
        out[i, 1] = v[-1] + x[i, 2]
        j = i % 4
        out[i, 2] = v[j] + x[i][j]  # chosen at run time: a select for the local, a load for the array
        a, b, c, d = v
        out[i, 3] = a - d
        w = bz.vec4()
        w.y = v.x
        w[2] = 5.0
        w.w += 1.0
        out[i, 4] = bz.dot(w, bz.vec4(1.0, 2.0, 3.0, 4.0))
        out[i, 5] = m[i][1, 2] + m[i, 2, 0] + m[i][0][1]
        rows[i] = m[i][i % 3]
        x[i].z = -v.z
        x[i][0] *= 2.0
        r = m[i][2] if v.x > 0.0 else m[i][0]
        out[i, 6] = r.y


def test_components_read_and_written():
    n = 64
    x, m = floats(n, 4), floats(n, 3, 3)
    x0 = x.copy()
    out, rows = np.zeros((n, 7), np.float32), np.zeros((n, 3), np.float32)
    components(x, m, out, rows)
    f = np.float32
    i = np.arange(n)
    np.testing.assert_array_equal(out[:, 0], x0[:, 0] + x0[:, 1] * f(10) + x0[:, 2] * f(100) + x0[:, 3] * f(1000))
    np.testing.assert_array_equal(out[:, 1], x0[:, 3] + x0[:, 2])
    np.testing.assert_array_equal(out[:, 2], 2 * x0[i, i % 4])
    np.testing.assert_array_equal(out[:, 3], x0[:, 0] - x0[:, 3])
    np.testing.assert_array_equal(out[:, 4], x0[:, 0] * f(2) + f(15) + f(4))
    np.testing.assert_array_equal(out[:, 5], m[:, 1, 2] + m[:, 2, 0] + m[:, 0, 1])
    np.testing.assert_array_equal(rows, m[i, i % 3])
    np.testing.assert_array_equal(out[:, 6], np.where(x0[:, 0] > 0, m[:, 2, 1], m[:, 0, 1]))
    np.testing.assert_array_equal(x[:, 2], -x0[:, 2])
    np.testing.assert_array_equal(x[:, 0], 2 * x0[:, 0])



@bz.kernel
def reflect_into_box(x: bz.Array[bz.vec3, 1], v: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1], hi: bz.vec3):
    for i in range(x.shape[0]):
        p, vel, a = x[i], v[i], m[i]
        for d in range(3):  # d known only at run time: each write picks its component
            while p[d] < 0.0 or p[d] > hi[d]:
                p[d] = -p[d] if p[d] < 0.0 else 2.0 * hi[d] - p[d]
                vel[d] = -vel[d]
            a[d][(d + 1) % 3] += p[d]
            a[d, d] = 0.0
        x[i], v[i], m[i] = p, vel, a


def test_components_of_locals_written_at_indices_known_only_at_run_time():
    n = 40
    x, v, m = floats(n, 3, low=-3.0, high=4.0), floats(n, 3), floats(n, 3, 3)
    p, vel, a = (t.astype(np.float64) for t in (x, v, m))
    hi = np.array([1.0, 2.0, 1.5])
    reflect_into_box(x, v, m, tuple(hi))
    for d in range(3):
        while np.any(out := (p[:, d] < 0) | (p[:, d] > hi[d])):
            p[out, d] = np.where(p[out, d] < 0, -p[out, d], 2 * hi[d] - p[out, d])
            vel[out, d] = -vel[out, d]
        a[:, d, (d + 1) % 3] += p[:, d]
        a[:, d, d] = 0.0
    np.testing.assert_allclose(x, p, atol=1e-5)
    np.testing.assert_array_equal(v, vel)
    np.testing.assert_allclose(m, a, atol=1e-5)


@bz.kernel
def scatter(x: bz.Array[bz.vec3, 1], bins: bz.Array[bz.vec3, 1], olds: bz.Array[bz.vec3, 1]):
    for i in range(x.shape[0]):
        bins[i % 4] += x[i]  # not this thread's own: atomic, component by component
        bins[i % 4].y -= 1.0
        olds[i] = bz.atomic_add(bins[4], bz.vec3(1.0, 2.0, 3.0))


def test_updates_of_shared_vector_elements_are_atomic():
    n = 4000
    x = np.ones((n, 3), np.float32)
    bins, olds = np.zeros((5, 3), np.float32), np.zeros((n, 3), np.float32)
    scatter(x, bins, olds)
    np.testing.assert_array_equal(bins[:4], np.tile([[n / 4, 0, n / 4]], (4, 1)))
    np.testing.assert_array_equal(bins[4], [n, 2 * n, 3 * n])
    assert sorted(olds[:, 0].tolist()) == list(range(n))


@bz.kernel
def component_atomics(x: bz.Array[bz.float64, 1], bins: bz.Array[bz.vec3d, 1], frames: bz.Array[bz.mat22d, 1],
                      olds: bz.Array[bz.float64, 1]):
    for i in range(x.shape[0]):
        olds[i] = bz.atomic_add(bins[i % 2].y, x[i])
        bz.atomic_max(bins[i % 2][2], x[i])
        bz.atomic_sub(frames[0][1, 0], 1.0)


def test_atomics_on_components_of_vector_and_matrix_elements():
    x = np.arange(1.0, 9.0)
    bins, frames, olds = np.zeros((2, 3)), np.zeros((1, 2, 2)), np.zeros(8)
    component_atomics(x, bins, frames, olds)
    np.testing.assert_array_equal(bins, [[0, 16, 7], [0, 20, 8]])
    np.testing.assert_array_equal(frames[0], [[0, 0], [-8, 0]])
    assert sorted(olds[::2].tolist()) == sorted(np.cumsum(x[::2])[:-1].tolist() + [0.0])


def test_an_atomic_on_a_local_names_what_it_expects():
    @bz.kernel
    def local_atomic(x: bz.Array[bz.vec3, 1]):
        for i in range(x.shape[0]):
            p = x[i]
            bz.atomic_add(p.y, 1.0)

    with pytest.raises(bz.KernelSyntaxError, match=r"atomic_add: expected \(array\[index\], value\) or \(array, index, "
                                                    r"\.\.\., value\), an element of an array argument or a "
                                                    r"component of one, got \(p.y, 1.0\)"):
        local_atomic(floats(2, 3))


# --- arrays of vectors ----------------------------------------------------------------------------
@bz.kernel
def integrate(x: bz.Array[bz.vec3, 1], v: bz.Array[bz.vec3, 1], dt: bz.float32):
    for i in range(x.shape[0]):
        v[i] += bz.vec3(0.0, -9.81, 0.0) * dt
    for i in range(x.shape[0]):
        x[i] += v[i] * dt


def test_arrays_of_vectors_are_the_arrays_themselves_and_their_loops_fuse():
    n = 1000
    x, v = floats(n, 3), floats(n, 3)
    want_v = v + np.array([0, -9.81, 0], np.float32) * np.float32(0.01)
    want_x = x + want_v * np.float32(0.01)
    with bz.record() as rec:
        integrate(x, v, np.float32(0.01))
    np.testing.assert_array_equal(v, want_v)
    np.testing.assert_array_equal(x, want_x)
    assert len(rec.launches) == 1
    strided = floats(n, 6)[:, ::2]  # a view: no copy, the strides are read at run time
    before = strided.copy()
    integrate(strided, np.zeros((n, 3), np.float32), np.float32(1.0))
    np.testing.assert_array_equal(strided[:, 1], before[:, 1] - np.float32(9.81))


@bz.kernel
def in_place(x: bz.Array[bz.vec3, 1], bins: bz.Array[bz.vec3, 1]):
    for i in range(x.shape[0]):
        x[i] = bz.normalize(x[i])  # every component is computed before any is stored
        w = x[i] * 2.0
        w = bz.vec3(w.z, w.x, w.y)  # a rotation of the local's own components
        x[i] -= bz.vec3(w.y, w.z, w.x) * 0.25
        bins[0] += bz.vec3(bins[0].z, 1.0, 0.0)  # the same for atomic updates


def test_a_vector_written_from_its_own_components():
    x = floats(10, 3)
    bins = np.zeros((1, 3), np.float32)
    want = bz.normalize(x)
    in_place(x, bins)
    np.testing.assert_array_equal(x, want - want * np.float32(2) * np.float32(0.25))
    np.testing.assert_array_equal(bins[0], [0, 10, 0])


@bz.func
def reflect(v, n):
    if bz.dot(v, n) < 0.0:
        return v - n * (2.0 * bz.dot(v, n))
    else:
        return v


@bz.kernel
def bounce(v: bz.Array[bz.vec2, 1]):
    for i in range(v.shape[0]):
        v[i] = reflect(v[i], bz.vec2(0.0, 1.0))


def test_a_helper_may_return_vectors_from_both_branches():
    v = floats(50, 2)
    want = np.where(v[:, 1:] < 0, v * np.float32([1, -1]), v)
    bounce(v)
    np.testing.assert_array_equal(v, want)


@bz.func
def unit_or_up(q):
    n = bz.length(q)
    if n < 1e-6:
        return bz.vec4(0.0, 0.0, 0.0, 1.0), 0
    return q / n, 1


@bz.kernel
def normalized_quaternions(q: bz.Array[bz.vec4, 1], flags: bz.Array[bz.int32, 1]):
    for i in range(q.shape[0]):
        q[i], flags[i] = unit_or_up(q[i])


def test_a_helper_may_return_a_vector_and_a_number_from_both_branches():
    q = floats(6, 4)
    q[2] = 0
    want = np.where(np.arange(6)[:, None] == 2, np.float32([0, 0, 0, 1]), bz.normalize(q))
    flags = np.zeros(6, np.int32)
    normalized_quaternions(q, flags)
    np.testing.assert_array_equal(q, want)
    np.testing.assert_array_equal(flags, [1, 1, 0, 1, 1, 1])


def vector_parameters_reference(x, gravity, frame, k):
    """tests/kernel_cases.py's vector_parameters in NumPy, float64."""
    x, g, frame = x.astype(np.float64), np.array(gravity, np.float64), np.array(frame, np.float64)
    n = len(x)
    history = x[:, None, :] + g * np.arange(4.0)[None, :, None]
    history[:, k % 4, 1] = 0.5
    history[np.arange(n), (np.arange(n) + 1) % 4] += g
    turns = np.stack([frame.T, frame])[np.arange(n) % 2]
    trail = turns[:, 0, 0] * x[:, 0] + turns[:, 0, 1] + frame[1, 0]
    return history.sum(axis=1), trail


@pytest.mark.parametrize("gravity, frame", [
    ((0.0, -9.81, 0.5), ((1.0, 2.0), (3.0, 4.0))),  # tuples
    ([0, -9.81, 0.5], [[1, 2], [3, 4]]),  # lists, integers among them
    (bz.vec3(0.0, -9.81, 0.5), bz.mat22d(1, 2, 3, 4)),  # the types' own values
    (np.array([0.0, -9.81, 0.5]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)),  # arrays of another dtype
])
def test_vector_and_matrix_parameters_and_local_arrays_of_them(gravity, frame):
    from kernel_cases import vector_parameters

    x = floats(300, 3)
    out, trail = np.full((300, 3), np.nan, np.float32), np.full(300, np.nan)
    vector_parameters(x, out, trail, gravity, frame, 3)
    want_out, want_trail = vector_parameters_reference(x, np.float32(gravity), frame, 3)
    np.testing.assert_allclose(out, want_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(trail, want_trail, rtol=1e-12)
    vector_parameters(x, out, trail, frame=frame, gravity=(0, 0, 0), k=1)  # by keyword
    np.testing.assert_allclose(out, vector_parameters_reference(x, (0, 0, 0), frame, 1)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("gravity, message", [
    ((1.0, 2.0), "got shape \\(2,\\)"),
    ("xyz", "got str"),
    (np.zeros((3, 1)), "got shape \\(3, 1\\)"),
    ((1.0, (2.0, 3.0), 4.0), "got tuple"),
    ((1.0, None, 2.0), "real numbers, got \\(1.0, None, 2.0\\) \\(dtype object\\)"),
    (np.array([1j, 2, 3]), "real numbers, got .*dtype complex128"),
])
def test_a_vector_argument_of_the_wrong_shape_or_kind_is_an_input_error(gravity, message):
    from kernel_cases import vector_parameters

    with pytest.raises(bz.InputError, match="argument 'gravity': expected (a bz.vec3.*)?" + message):
        vector_parameters(floats(4, 3), np.zeros((4, 3), np.float32), np.zeros(4), gravity, ((1, 0), (0, 1)), 0)


def test_a_parameter_named_like_a_component_is_refused():
    def kern(x: bz.Array[bz.float32, 1], g: bz.vec2, g_y: bz.float32):
        pass

    with pytest.raises(bz.KernelTypeError, match="parameter 'g_y' is also the name of a component"):
        bz.kernel(kern)


def test_outside_a_kernel_a_local_array_of_vectors_is_zeros_of_their_shape():
    assert bz.local(bz.vec3, 4).shape == (4, 3) and bz.local(bz.mat22d, 2).dtype == np.float64


def test_python_calls_give_numpy_values():
    assert bz.vec3(1, 2, 3).dtype == np.float32 and bz.vec3(1, 2, 3).tolist() == [1, 2, 3]
    assert bz.vec2d(5).tolist() == [5.0, 5.0] and bz.vec2d(5).dtype == np.float64
    assert bz.mat22(1, 2, 3, 4).tolist() == [[1, 2], [3, 4]]
    assert bz.mat22(bz.vec2(1, 2), bz.vec2(3, 4)).tolist() == [[1, 2], [3, 4]]
    assert bz.mat33.identity().tolist() == np.eye(3).tolist()
    assert bz.dot(bz.vec3(1, 2, 3), bz.vec3(4, 5, 6)) == 32
    with pytest.raises(bz.InputError, match="expected 3 components"):
        bz.vec3(1, 2)


# --- misuse ---------------------------------------------------------------------------------------
F32 = "bz.Array[bz.float32, 1]"
V3 = "bz.Array[bz.vec3, 1]"


@pytest.mark.parametrize("params, body, message", [
    (f"x: {V3}, out: {F32}", "out[i] = x[i]", "'out\\[i\\]' is a float32 scalar, the value is a bz.vec3"),
    (f"x: {V3}, out: {F32}", "out[i] = x[i] + 1.0", "the value is a bz.vec3"),
    (f"x: {V3}, out: {F32}", "out[i] = 1.0 if x[i] > 0.0 else 0.0", "combine the components with .all\\(\\) or "
                                                                    ".any\\(\\)"),
    (f"x: {V3}, out: {F32}", "out[i] = x[i].w", "bz.vec3 has no component 'w'; it has components x, y, z"),
    (f"x: {V3}, out: {F32}", "out[i] = x[i].xy", "bz.vec3 has no component 'xy'; it has components x, y, z"),
    (f"x: {V3}, out: {F32}", "p = x[i]; out[i] = 1.0 if p else 0.0", "expected a scalar, got a bz.vec3 value"),
    (f"x: {V3}, out: {F32}", "out[i] = 1.0 if x else 0.0", "expected a number as a condition, got an array"),
    (f"x: {V3}, out: {F32}", "x[i] = 1.0", "'x\\[i\\]' is a bz.vec3, the value is float"),
    (f"x: {V3}, out: {F32}", "x[i] = bz.vec2(1.0, 2.0)", "'x\\[i\\]' is a bz.vec3, the value is a bz.vec2"),
    (f"x: {V3}, out: {F32}", "out[i] = bz.dot(x[i], out[i])", "bz.dot: argument 2: expected a vector, got float32"),
    (f"x: {V3}, out: {F32}", "out[i] = x[i][3]", "index 3 is out of range"),
    (f"x: {V3}, out: {F32}", "out[i] = bz.vec3(1.0, 2.0).x", "bz.vec3: expected 3 components"),
    (f"x: {V3}, out: {F32}", "out[i] = (x[i] + bz.vec2(1.0, 2.0)).x", "the shapes differ"),
    (f"x: {V3}, out: {F32}", "out[i] = x[i, 0, 1]", "'x' has 1 dimension\\(s\\) of bz.vec3, got 3 index"),
    (f"x: bz.Array[bz.mat33, 1], out: {F32}", "out[i] = (x[i] * x[i])[0, 0]", "a product of matrices is written a @ b"),
    (f"x: bz.Array[bz.mat33, 1], out: {F32}", "out[i] = (x[i] ** 2)[0, 0]", "a power of a matrix is written a @ a"),
    (f"x: {V3}, out: {F32}", "out[i] = (x[i] << 2).x", "operator left_shift is not defined for bz.vec3"),
    (f"x: {V3}, out: {F32}", "out[i] = bz.float32(x[i])", "float32: expected scalar arguments, got bz.vec3"),
    (f"x: {V3}, out: {F32}", "out[i] = out[i] @ out[i]", "a @ b: expected vectors or matrices"),
])
def test_misuse_is_a_type_error_naming_the_line(params, body, message, tmp_path):
    source = f"@bz.kernel\ndef kern({params}):\n    for i in range(out.shape[0]):\n        {body}\n"
    kern = kernel_from(source, tmp_path)
    with pytest.raises(bz.KernelTypeError, match=message) as info:
        kern(np.zeros((4, 3, 3) if "mat33" in params else (4, 3), np.float32), np.zeros(4, np.float32))
    assert ".py:6: " in str(info.value) and body in str(info.value)


@pytest.mark.parametrize("array, message", [
    (np.zeros((8, 4), np.float32), "argument 'x': expected a 1-d array of bz.vec3, that is float32 values with "
                                   "last extent\\(s\\) \\(3,\\); got shape \\(8, 4\\)"),
    (np.zeros(24, np.float32), "argument 'x': expected a 1-d array of bz.vec3.*got shape \\(24,\\)"),
    (np.zeros((2, 4, 3), np.float32), "argument 'x': expected a 1-d array of bz.vec3.*got shape \\(2, 4, 3\\)"),
    (np.zeros((8, 3)), "argument 'x': expected a 1-d array of bz.vec3.*got dtype float64"),
])
def test_a_backing_array_of_the_wrong_shape_or_dtype_is_an_input_error(array, message):
    with pytest.raises(bz.InputError, match=message):
        integrate(array, np.zeros((8, 3), np.float32), np.float32(0.1))


@bz.kernel
def swap_ends(x: bz.Array[bz.vec2, 1]):
    for i in range(x.shape[0] // 2):
        j = x.shape[0] - 1 - i
        x[i], x[j] = x[j], x[i]


@bz.kernel
def swap_locals(x: bz.Array[bz.vec2, 1]):
    for i in range(x.shape[0]):
        a, b = x[i], bz.vec2(-1.0, -2.0)
        a, b = b, a
        x[i] = a + 10.0 * b


def test_a_tuple_assignment_swaps_vectors():
    """Both sides are read before either is stored, for vectors as for numbers: the second store took the
    vector the first had just written (x[j] got x[j] back, b got b)."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    swap_ends(x)
    assert x.tolist() == [[6, 7], [4, 5], [2, 3], [0, 1]]
    y = np.arange(4, dtype=np.float32).reshape(2, 2)
    swap_locals(y)
    assert y.tolist() == [[-1, 8], [19, 28]]


@bz.kernel
def chained(x: bz.Array[bz.vec2, 1], y: bz.Array[bz.vec2, 1], s: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        x[i] = y[i] = x[i] * 2.0
        a = b = s[i] + 1.0
        s[i] = a + b


def test_a_chained_assignment_stores_one_value_in_every_target():
    """Taichi's `f_old[i, j] = f_new[i, j] = f_eq(i, j)`: the value is computed once, before the first
    store (x[i] doubles once, and y[i] takes the same)."""
    x, y, s = np.arange(4, dtype=np.float32).reshape(2, 2), np.zeros((2, 2), np.float32), np.float32([1, 2])
    chained(x, y, s)
    assert x.tolist() == y.tolist() == [[0, 2], [4, 6]] and s.tolist() == [4, 6]
