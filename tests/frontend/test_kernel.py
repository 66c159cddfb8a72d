"""The `@bz.kernel` loop language on the CPU: each feature against NumPy or plain Python."""

import importlib.util
import math
import re

import numpy as np
import pytest

import braze as bz

SCALE = 3  # a global: read as a compile-time constant
rng = np.random.default_rng(0)


def floats(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_parallel_loops_over_range_and_bounds():
    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1], lo: int, hi: int):
        for i in range(a.shape[0]):
            a[i] = 0.0
        for i in range(lo, hi):
            a[i] = i * 2.0

    a = np.full(10, 7, np.float32)
    fill(a, 3, 7)
    assert a.tolist() == [0, 0, 0, 6, 8, 10, 12, 0, 0, 0]


def test_ndrange_with_begin_end_pairs():
    @bz.kernel
    def border(a: bz.Array[bz.int32, 2]):
        for i, j in bz.ndrange(a.shape[0], a.shape[1]):
            a[i, j] = i * 10 + j
        for i, j in bz.ndrange((1, a.shape[0] - 1), (1, a.shape[1] - 1)):
            a[i, j] = -1

    a = np.zeros((4, 5), np.int32)
    border(a)
    expected = np.add.outer(np.arange(4) * 10, np.arange(5)).astype(np.int32)
    expected[1:-1, 1:-1] = -1
    np.testing.assert_array_equal(a, expected)


def test_serial_loops_while_break_continue_and_branches():
    @bz.kernel
    def collatz(n: bz.Array[bz.int64, 1], steps: bz.Array[bz.int64, 1], odd_sum: bz.Array[bz.int64, 1]):
        for i in range(n.shape[0]):
            x = n[i]
            count = 0
            while x != 1:
                if x % 2 == 0:
                    x = x // 2
                elif x % 3 == 0:
                    x = 3 * x + 1
                else:
                    x = 3 * x + 1
                count += 1
                if count > 1000:
                    break
            steps[i] = count
            total = 0
            for j in range(0, 20, 1):
                if j % 2 == 0:
                    continue
                if j > 2 * n[i]:
                    break
                total += j
            odd_sum[i] = total

    n = np.arange(1, 30, dtype=np.int64)
    steps, odd = np.zeros_like(n), np.zeros_like(n)
    collatz(n, steps, odd)

    def ref(x):
        c = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            c += 1
        return c

    assert steps.tolist() == [ref(int(x)) for x in n]
    assert odd.tolist() == [sum(j for j in range(1, 20, 2) if j <= 2 * x) for x in n]


def test_a_bare_return_ends_the_parallel_iteration_as_in_warp():
    """`if ...: return`, a Warp or CUDA thread's early exit, skips the rest of its iteration only: not the
    loop fused after it, nor the other iterations; in a bz.static loop too."""
    @bz.kernel
    def steps_up_to(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            out[i] = -1.0
            if a[i] < 0.0:
                return
            out[i] = 0.0
            for _ in bz.static(range(3)):
                if out[i] >= a[i]:
                    return
                out[i] += 1.0
        for i in range(a.shape[0]):
            a[i] = a[i] * 2.0

    a = np.array([-2.0, 0.0, 0.5, 2.0, 7.0], np.float32)
    out = np.full(5, np.nan, np.float32)
    steps_up_to(a, out)
    assert out.tolist() == [-1.0, 0.0, 1.0, 2.0, 3.0]
    assert a.tolist() == [-4.0, 0.0, 1.0, 4.0, 14.0]
    assert [d.fused for d in steps_up_to.decisions()] == [True]


def test_locals_infer_types_and_augmented_assignment():
    @bz.kernel
    def k(a: bz.Array[bz.float64, 1], out: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            acc = a[i]       # float64
            acc *= 2
            acc -= 0.5
            m = i            # int64
            m <<= 2
            m |= 1
            a[i] = acc
            out[i] = m

    a = np.arange(5, dtype=np.float64)
    out = np.zeros(5, np.int32)
    k(a, out)
    assert a.tolist() == [x * 2 - 0.5 for x in range(5)]
    assert out.tolist() == [(i << 2) | 1 for i in range(5)]


def test_three_dimensional_indexing_and_shape():
    @bz.kernel
    def transpose_sum(a: bz.Array[bz.float32, 3], out: bz.Array[bz.float32, 2]):
        for i, j in bz.ndrange(a.shape[0], a.shape[1]):
            s = 0.0
            for t in range(a.shape[2]):
                s += a[i, j, t]
            out[j, i] = s

    a = floats(3, 4, 5)
    out = np.zeros((4, 3), np.float32)
    transpose_sum(a, out)
    expected = np.zeros((4, 3), np.float32)
    for i in range(3):
        for j in range(4):
            s = np.float32(0)
            for t in range(5):
                s += a[i, j, t]
            expected[j, i] = s
    np.testing.assert_array_equal(out, expected)


def test_strided_views_work():
    @bz.kernel
    def double(a: bz.Array[bz.float64, 2]):
        for i, j in bz.ndrange(a.shape[0], a.shape[1]):
            a[i, j] *= 2

    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = base[::2, 1::2]
    double(view)
    expected = np.arange(24, dtype=np.float64).reshape(4, 6)
    expected[::2, 1::2] *= 2
    np.testing.assert_array_equal(base, expected)


def test_math_functions_and_builtins():
    @bz.kernel
    def k(x: bz.Array[bz.float64, 1], y: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0]):
            v = x[i]
            y[i] = bz.math.sin(v) + bz.math.atan2(v, 2.0) + math.sqrt(abs(v)) + max(v, 0.25, -v) + min(v, 1.0) \
                + bz.math.where(v > 0, v, -2 * v) + bz.math.clamp(v, -0.5, 0.5) + math.pi \
                + math.copysign(2.0, -v)

    x = np.linspace(-2, 2, 17)
    y = np.zeros_like(x)
    k(x, y)
    expected = (np.sin(x) + np.arctan2(x, 2.0) + np.sqrt(np.abs(x)) + np.maximum(np.maximum(x, 0.25), -x)
                + np.minimum(x, 1.0) + np.where(x > 0, x, -2 * x) + np.clip(x, -0.5, 0.5) + math.pi
                + np.copysign(2.0, -x))
    np.testing.assert_allclose(y, expected, rtol=1e-12)


def test_casts_and_division():
    @bz.kernel
    def k(a: bz.Array[bz.int32, 1], f: bz.Array[bz.float32, 1], g: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            f[i] = a[i] / 4          # true division: float32
            g[i] = bz.int32(f[i] * 10.0) + a[i] // 3 + a[i] % 3

    a = np.arange(-6, 7, dtype=np.int32)
    f, g = np.zeros(13, np.float32), np.zeros(13, np.int32)
    k(a, f, g)
    np.testing.assert_array_equal(f, a.astype(np.float32) / 4)
    np.testing.assert_array_equal(g, (f * 10).astype(np.int32) + a // 3 + a % 3)


def test_half_precision_arrays_round_after_each_op():
    @bz.kernel
    def k(a: bz.Array[bz.float16, 1], b: bz.Array[bz.float16, 1]):
        for i in range(a.shape[0]):
            b[i] = a[i] * 0.1 + 1.0

    a = np.linspace(-3, 3, 11).astype(np.float16)
    b = np.zeros_like(a)
    k(a, b)
    expected = a * np.float16(0.1) + np.float16(1.0)  # NumPy's float16 ops round once per op too
    np.testing.assert_array_equal(b, expected)


def test_atomics_return_the_old_value():
    @bz.kernel
    def histogram(values: bz.Array[bz.int64, 1], bins: bz.Array[bz.int32, 1], olds: bz.Array[bz.int32, 1],
                  extremes: bz.Array[bz.float64, 1]):
        for i in range(values.shape[0]):
            olds[i] = bz.atomic_add(bins[values[i] % bins.shape[0]], 1)
            bz.atomic_sub(bins[0], 0)
            bz.atomic_max(extremes[0], bz.float64(values[i]))
            bz.atomic_min(extremes[1], bz.float64(values[i]))

    values = np.arange(20, dtype=np.int64) * 7
    bins = np.zeros(4, np.int32)
    olds = np.zeros(20, np.int32)
    extremes = np.array([-1e9, 1e9])
    histogram(values, bins, olds, extremes)
    np.testing.assert_array_equal(bins, np.bincount(values % 4, minlength=4))
    # single-threaded for so few elements: each bin's old values count up from 0
    for b in range(4):
        assert sorted(olds[values % 4 == b].tolist()) == list(range(int(bins[b])))
    assert extremes.tolist() == [133.0, 0.0]


def test_static_branches_and_unrolled_loops():
    @bz.kernel
    def k(a: bz.Array[bz.float32, 2]):
        for i in range(a.shape[0]):
            for d in bz.static(range(SCALE)):
                if bz.static(d == 1):
                    a[i, d] = 100.0
                else:
                    a[i, d] = d * 1.0

    a = np.zeros((2, 3), np.float32)
    k(a)
    assert a.tolist() == [[0, 100, 2]] * 2



def test_a_static_ndrange_unrolls_every_index_tuple():
    """`for a, b in bz.static(bz.ndrange(3, (1, 3)))` unrolls, as Taichi's ti.static(ti.ndrange(3, 3)) over an
    MPM stencil: the index tuples are constants (a static `if` and a constant index see them)."""
    @bz.kernel
    def k(a: bz.Array[bz.float32, 2]):
        for i in range(a.shape[0]):
            for p, q in bz.static(bz.ndrange(3, (1, 3))):
                if bz.static(q == 2):
                    a[i, p] += 10.0 * p
                else:
                    a[i, p] += 1.0

    a = np.zeros((2, 3), np.float32)
    k(a)
    assert a.tolist() == [[1, 11, 21]] * 2


def test_a_local_list_of_vectors_keeps_what_it_read():
    """Taichi's MPM weights `w = [0.5 * (1.5 - fx) ** 2, ...]`, read at constant indices: each item is a
    local of its own (a later store to the array it was read from leaves it alone), a tuple of the same
    length may replace it in a branch, and its items unpack."""
    @bz.kernel
    def k(x: bz.Array[bz.vec2, 1], y: bz.Array[bz.float32, 2]):
        for i in range(x.shape[0]):
            fx = x[i]
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
            x[i] = bz.vec2(9.0)
            if fx.x > 0.5:
                w = (fx, 2.0 * fx, 3.0 * fx)
            for a, b in bz.static(bz.ndrange(3, 3)):
                y[i, 3 * a + b] = w[a].x * w[b].y
            first, _, last = w
            y[i, 9] = first.y + last.x

    fx = np.random.default_rng(0).random((6, 2)).astype(np.float32)
    x, y = fx.copy(), np.full((6, 10), np.nan, np.float32)
    k(x, y)
    f = fx.astype(np.float64)
    w = [0.5 * (1.5 - f) ** 2, 0.75 - (f - 1) ** 2, 0.5 * (f - 0.5) ** 2]
    w = [np.where(f[:, :1] > 0.5, (m + 1) * f, w[m]) for m in range(3)]
    expected = [w[a][:, 0] * w[b][:, 1] for a in range(3) for b in range(3)] + [w[0][:, 1] + w[2][:, 0]]
    np.testing.assert_allclose(y, np.stack(expected, 1), rtol=1e-6)
    assert (x == 9).all()


def tuple_then_number(y: bz.Array[bz.float32, 1]):
    for i in range(y.shape[0]):
        w = (1.0, 2.0)
        w = 3.0
        y[i] = w


def number_then_tuple(y: bz.Array[bz.float32, 1]):
    for i in range(y.shape[0]):
        w = 3.0
        w = (1.0, 2.0)
        y[i] = w[0]


def two_then_three(y: bz.Array[bz.float32, 1]):
    for i in range(y.shape[0]):
        w = [1.0, 2.0]
        w = [1.0, 2.0, 3.0]
        y[i] = w[0]


@pytest.mark.parametrize("fn, message", [
    (tuple_then_number, "'w' holds a tuple of 2 values; it cannot take a float"),
    (number_then_tuple, "'w' holds a single value; it cannot take a tuple of 2 values"),
    (two_then_three, "'w' holds a tuple of 2 values; it cannot take a tuple of 3 values"),
])
def test_a_local_tuple_keeps_its_length(fn, message):
    with pytest.raises(bz.KernelTypeError, match=re.escape(message)):
        bz.kernel(fn)(np.zeros(3, np.float32))

@bz.func
def clamp01(x):
    if x < 0.0:
        return 0.0
    elif x > 1.0:
        return 1.0
    else:
        return x


@bz.func
def lerp_into(out, i, a, b, t):
    t = clamp01(t)
    out[i] = a + (b - a) * t


def test_func_helpers_are_inlined():
    @bz.kernel
    def k(t: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
        for i in range(t.shape[0]):
            lerp_into(out, i, 10.0, 20.0, t[i])

    t = np.linspace(-1, 2, 7)
    out = np.zeros_like(t)
    k(t, out)
    np.testing.assert_allclose(out, 10 + 10 * np.clip(t, 0, 1))
    assert clamp01(0.5) == 0.5  # still callable from Python


@bz.func
def kernel_weight(r, h):
    if r >= h:  # an early return: the rest of the body is its else branch
        return 0.0
    if r < 0.25 * h:
        return 1.0
    q = 1.0 - r / h
    return q * q


@bz.func
def sorted_pair(a, b):
    if a > b:
        return b, a
    return a, b


@bz.func
def polar(x, y):
    return math.sqrt(x * x + y * y), math.atan2(y, x)


@bz.func
def store_if_positive(out, i, v):
    if v <= 0.0:
        return  # a helper that returns nothing may leave early too
    out[i, 0] = v


def test_func_early_returns_and_tuples_follow_python():
    @bz.kernel
    def k(r: bz.Array[bz.float64, 1], xy: bz.Array[bz.float64, 2], out: bz.Array[bz.float64, 2]):
        for i in range(r.shape[0]):
            out[i, 0] = kernel_weight(r[i], 1.0)
            lo, hi = sorted_pair(xy[i, 0], xy[i, 1])
            out[i, 1], out[i, 2] = lo, hi
            out[i, 3], out[i, 4] = polar(xy[i, 0], xy[i, 1])
            store_if_positive(out, i, r[i] - 0.5)

    r = np.linspace(-0.1, 1.2, 17)
    xy = np.random.default_rng(0).standard_normal((17, 2))
    out = np.full((17, 5), 7.0)
    k(r, xy, out)
    expected = np.array([(kernel_weight(v, 1.0), *sorted_pair(*p), *polar(*p)) for v, p in zip(r, xy)])
    expected[:, 0] = np.where(r > 0.5, r - 0.5, expected[:, 0])  # stored over the weight where positive
    np.testing.assert_allclose(out, expected, rtol=1e-12)


@bz.func
def nested_results(x, y):
    return sorted_pair(x, y), polar(x, y)


def test_nested_tuples_unpack_as_in_python():
    @bz.kernel
    def k(xy: bz.Array[bz.float64, 2], out: bz.Array[bz.float64, 2]):
        for i in range(xy.shape[0]):
            (out[i, 0], out[i, 1]), (r, t) = nested_results(xy[i, 0], xy[i, 1])
            (out[i, 2], out[i, 3]), out[i, 4] = (t, r), 1.0

    xy = np.random.default_rng(1).standard_normal((5, 2))
    out = np.zeros((5, 5))
    k(xy, out)
    expected = np.array([(*sorted_pair(*p), *polar(*p)[::-1], 1.0) for p in xy])
    np.testing.assert_allclose(out, expected, rtol=1e-12)


@bz.func
def piecewise(x):
    if x > 0.0:
        if x > 1.0:
            return 2.0  # an early return in a branch that goes on
        x = x * 5.0
        if x > 4.0:
            return -x
    elif x < -1.0:
        return -1.0
    return x


def test_func_returns_nested_in_branches_that_go_on_follow_python():
    @bz.kernel
    def k(x: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0]):
            x[i] = piecewise(x[i])

    x = np.array([-2.0, -0.5, 0.0, 0.5, 0.9, 1.5])
    expected = [piecewise(v) for v in x.tolist()]  # a @bz.func runs as Python outside a kernel
    k(x)
    np.testing.assert_array_equal(x, expected)


@bz.func
def literal_step(x):
    if x > 0.0:
        if x > 1.0:  # a nested if's result returned by the outer one
            return 1.0 / 3.0
        return 0.1
    if x < -1.0:
        return x  # beside a typed value
    return math.sqrt(2)


def test_func_returning_literals_alone_returns_them_at_the_type_they_meet():
    @bz.kernel
    def k(x: bz.Array, out: bz.Array):
        for i in range(x.shape[0]):
            out[i] = literal_step(x[i])  # stored into float64: Python's 0.1 and sqrt(2), not float32's
            out[i] += literal_step(x[i]) * x[i]

    for dtype in (np.float64, np.float32):
        x = np.array([-1.0, 0.5, 2.0, -3.0], dtype)
        out = np.zeros(4, dtype)
        k(x, out)
        steps = np.array([literal_step(v) for v in x.tolist()], dtype)  # float32 data rounds them, as literals
        np.testing.assert_array_equal(out, steps + steps * x)


def test_math_functions_composed_of_ops_match_numpy():
    from kernel_cases import composed_math, composed_math_args

    x, f, out, out32 = composed_math_args(np.random.default_rng(1))
    composed_math(x, f, out, out32)
    f64 = f.astype(np.float64)
    for column, fn in enumerate([lambda v: np.hypot(v, 2.0), np.arctan, lambda v: np.arcsin(v / 3),
                                 lambda v: np.arccos(v / 3), np.sinh, np.cosh, lambda v: np.log10(abs(v) + 1e-3)]):
        np.testing.assert_allclose(out[:, column], fn(x), rtol=1e-13, atol=1e-15, err_msg=f"column {column}")
        np.testing.assert_allclose(out32[:, column], fn(f64), rtol=2e-6, atol=1e-6, err_msg=f"float32 column {column}")
    np.testing.assert_array_equal(out[:, 7], np.minimum(x, f64))
    np.testing.assert_array_equal(out32[:, 7], np.maximum(x, f64).astype(np.float32))
    np.testing.assert_array_equal(out[:, 8], np.fmod(x, -0.7))  # C's fmod: the sign of the dividend, exact
    np.testing.assert_array_equal(out32[:, 8], np.fmod(f, np.float32(0.7)))


@pytest.mark.parametrize("lo, step", [(0, 2), (3, 7), (0, 1), (998, 5), (2000, 3), (10, -3), (0, 0)])
def test_parallel_ranges_with_a_step_match_python(lo, step):
    from kernel_cases import stepped_ranges

    rng = np.random.default_rng(abs(step))
    a, b = rng.uniform(-2, 2, 1001).astype(np.float32), rng.uniform(-2, 2, (37, 5)).astype(np.float32)
    expected_a, expected_b = a.copy(), b.copy()
    # Plain Python over NumPy is the reference; a step of 0, which Python refuses, runs nothing.
    stepped_ranges.fn(expected_a, expected_b, lo if step else len(a), step or 1)
    stepped_ranges(a, b, lo, step)
    np.testing.assert_array_equal(a, expected_a)
    np.testing.assert_array_equal(b, expected_b)


def test_a_parallel_range_step_of_constant_zero_is_an_error():
    @bz.kernel
    def zero_step(a: bz.Array[bz.float32, 1]):
        for i in range(0, a.shape[0], 0):
            a[i] = 1.0

    with pytest.raises(bz.KernelSyntaxError, match="expected a non-zero step, got 0"):
        zero_step(np.zeros(4, np.float32))


def test_closure_values_are_compile_time_constants():
    offset = 5

    @bz.kernel
    def k(a: bz.Array[bz.int64, 1]):
        for i in range(a.shape[0]):
            a[i] = i + offset * SCALE

    a = np.zeros(4, np.int64)
    k(a)
    assert a.tolist() == [15, 16, 17, 18]


def test_conditional_expressions_short_circuit():
    @bz.kernel(debug=True)
    def k(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            # a[i - 1] is only read when i > 0 (debug mode would catch a read of a[-1])
            left = a[i - 1] if i > 0 else 0.0
            both = i > 0 and a[i - 1] > 0.0
            out[i] = left + (1.0 if both else 0.0)

    a = np.array([1, -2, 3, 4], np.float32)
    out = np.zeros(4, np.float32)
    k(a, out)
    assert out.tolist() == [0.0, 2.0, -2.0, 4.0]


def test_top_level_statements_are_serial_tasks_and_aliases_are_shared():
    @bz.kernel
    def k(a: bz.Array[bz.int64, 1], total: bz.Array[bz.int64, 1]):
        n = a.shape[0] - 1
        total[0] = 0
        for i in range(n):
            a[i] = i * i
        if n > 0:  # not a loop: a serial task, whose loops are serial
            s = 0
            for j in range(n):
                s += a[j]
            total[0] = s

    a = np.zeros(6, np.int64)
    total = np.zeros(1, np.int64)
    with bz.record() as r:
        k(a, total)
    assert total[0] == sum(i * i for i in range(5))
    assert [t.task for t in r.launches] == ["k_t0", "k_t1", "k_t2"]
    assert [(t.begin, t.end) for t in r.launches] == [(0, 1), (0, 5), (0, 1)]


def test_a_tuple_of_launch_time_values_names_each_for_every_task():
    @bz.kernel
    def k(a: bz.Array[bz.float64, 2], b: bz.Array[bz.float64, 2], scale: bz.int64):
        rows, cols, s = a.shape[0] - 1, a.shape[1], scale * 2
        last, rows = rows, rows + 1  # every value is read before any name is bound, as in Python
        for i, j in bz.ndrange(rows, cols):
            b[i, j] = a[i, j] * s + last

    a = np.arange(12.0).reshape(3, 4)
    b = np.zeros_like(a)
    with bz.record() as r:
        k(a, b, 3)
    np.testing.assert_array_equal(b, a * 6 + 2)
    assert len(r.launches) == 1  # no serial task: the names are launch-time values


def test_a_top_level_value_of_float_parameters_is_read_by_every_task():
    @bz.kernel
    def leapfrog(x: bz.Array[bz.float64, 1], v: bz.Array[bz.float64, 1], dt: float, k: float):
        half_dt = 0.5 * dt
        stiffness = k
        for i in range(x.shape[0]):
            v[i] -= half_dt * stiffness * x[i]
        for i in range(x.shape[0]):
            x[i] += dt * v[i]

    x, v = np.linspace(-1, 1, 5), np.zeros(5)
    with bz.record() as r:
        leapfrog(x, v, 0.1, 4.0)
    np.testing.assert_allclose(v, -0.2 * np.linspace(-1, 1, 5), rtol=1e-15)
    np.testing.assert_allclose(x, np.linspace(-1, 1, 5) * 0.98, rtol=1e-15)
    assert len(r.launches) == 1  # no serial task computes the names: each task does


def test_a_top_level_float_a_later_task_updates_stays_a_serial_local():
    @bz.kernel
    def total(a: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
        s = 0.0
        i = 0
        while i < a.shape[0]:
            s += a[i]
            i += 1
        out[0] = s

    out = np.zeros(1)
    total(np.arange(5.0), out)
    assert out[0] == 10.0


def test_tuple_assignment_swaps():
    @bz.kernel
    def k(a: bz.Array[bz.int64, 2]):
        for i in range(a.shape[0]):
            x, y = a[i, 0], a[i, 1]
            x, y = y, x
            a[i, 0], a[i, 1] = x, y

    a = np.array([[1, 2], [3, 4]], np.int64)
    k(a)
    assert a.tolist() == [[2, 1], [4, 3]]


def test_compiled_once_per_signature():
    @bz.kernel
    def k(a: bz.Array, s: float):
        for i in range(a.shape[0]):
            a[i] = a[i] * s

    a32, a64 = np.ones(8, np.float32), np.ones(8, np.float64)
    k(a32, 2.0)
    k(a32[:4], 3.0)       # same signature: new extents reuse the kernel
    assert len(k.entries) == 1
    k(a64, 2.0)           # a new dtype: a new signature
    k(np.ones(8)[::2], 2.0)  # not contiguous: a new signature (the other vectorizes)
    assert len(k.entries) == 3
    assert a32.tolist() == [6] * 4 + [2] * 4


def test_kernel_launches_are_recorded():
    @bz.kernel
    def k(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            a[i] = 1.0
        for i in range(b.shape[0] - 1):
            b[i] = 2.0

    with bz.record() as r:
        k(np.zeros(8, np.float32), np.zeros(8, np.float32))
    assert [(t.kernel, t.begin, t.end) for t in r.launches] == [("k", 0, 8), ("k", 0, 7)]


def test_debug_mode_reports_out_of_bounds_indices():
    @bz.kernel(debug=True)
    def shift(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(b.shape[0]):
            b[i] = a[i + 1]

    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(bz.KernelAssertionError, match=r"test_kernel.py:\d+: index out of bounds: axis 0 of 'a'"):
        shift(a, b)
    shift(a, np.zeros(3, np.float32))  # in bounds: no error


def test_without_debug_no_checks_are_compiled():
    @bz.kernel
    def shift(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
        for i in range(b.shape[0]):
            b[i] = a[i + 1]

    shift(np.ones(4, np.float32), np.zeros(3, np.float32))
    assert "assert" not in shift.kernel_ir()


def test_arguments_are_checked():
    @bz.kernel
    def k(a: bz.Array[bz.float32, 1], n: bz.int32):
        for i in range(n):
            a[i] = 0.0

    with pytest.raises(bz.InputError, match="argument 'a': expected float32, got float64"):
        k(np.zeros(3), 1)
    with pytest.raises(bz.InputError, match="argument 'a': expected 1 dimension"):
        k(np.zeros((3, 1), np.float32), 1)
    with pytest.raises(bz.InputError, match="argument 'n': expected an int32 scalar, got float"):
        k(np.zeros(3, np.float32), 1.5)
    with pytest.raises(bz.InputError, match="argument 'n': 4294967296 does not fit in int32"):
        k(np.zeros(3, np.float32), 2**32)
    class GpuArray:
        __cuda_array_interface__ = {}

    with pytest.raises(bz.InputError, match="argument 'a': could not read the GPU array"):
        k(GpuArray(), 1)
    readonly = np.zeros(3, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(bz.InputError, match="read-only"):
        k(readonly, 1)


def test_repeated_calls_take_the_cached_call_safely():
    @bz.kernel
    def axpy(x: bz.Array[bz.float64, 1], y: bz.Array[bz.float64, 1], a: float):
        for i in range(x.shape[0]):
            y[i] += a * x[i]

    x, y = np.arange(6.0), np.zeros(6)
    axpy(x, y, 1.0)
    axpy(x, y=y, a=2.0)        # the cached call: only the scalar changes
    assert y.tolist() == [3.0 * v for v in range(6)]
    other = np.zeros(6)
    axpy(x, other, 1.0)        # another array: its pointer patched
    assert other.tolist() == list(np.arange(6.0))
    y.shape = (6,)
    x.shape = (2, 3)           # the same object with a new shape is another description (and the wrong rank)
    with pytest.raises(bz.InputError, match="expected 1 dimension"):
        axpy(x, y, 1.0)
    x.shape = (6,)
    axpy(x[::2], y[:3], 1.0)   # views: new extents and strides
    assert y[:3].tolist() == [0.0, 5.0, 10.0]


def test_swapped_and_rotated_buffers_stay_on_the_cached_call(monkeypatch):
    """A time loop that swaps two buffers each step (or rotates three) calls with each set of arrays
    every few steps: every call after the first takes the one prepared call of their description, and
    each set's pointers are checked for overlap once."""
    @bz.kernel
    def blur(src: bz.Array[bz.float64, 1], dst: bz.Array[bz.float64, 1], w: float):
        for i in range(1, src.shape[0] - 1):
            dst[i] = src[i] + w * (src[i - 1] - 2 * src[i] + src[i + 1])

    bound = []  # the calls the call cache did not take
    bind_and_run = type(blur)._bind_and_run
    monkeypatch.setattr(type(blur), "_bind_and_run", lambda fn, args: bound.append(1) or bind_and_run(fn, args))
    a, b, c = np.zeros(8), np.zeros(8), np.zeros(8)
    a[4] = b[4] = 1.0
    expected = a.copy()
    for step in range(6):
        blur(a, b, 0.25 + step)
        expected[1:-1] += (0.25 + step) * (expected[:-2] - 2 * expected[1:-1] + expected[2:])
        a, b = b, a
    np.testing.assert_array_equal(a, expected)
    for _ in range(6):
        blur(a, b, 0.25)
        a, b, c = b, c, a
    (prepared,) = blur.calls.prepared.values()
    assert len(bound) == 1 and len(prepared.verified) == 4  # (a, b), (b, a), then (b, c) and (c, a)


def test_kernel_ir_of_loop_kernels_generates_cuda_source():
    """The CUDA code generator reads the same Kernel IR (tests/codegen/test_cuda_loops.py compiles it)."""
    @bz.kernel
    def k(a: bz.Array[bz.int64, 1], counts: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            x = a[i]
            while x > 1:
                x = x // 2 if x % 2 == 0 else 3 * x + 1
                if x == 4:
                    break
            bz.atomic_add(counts[x % counts.shape[0]], 1)

    args = np.arange(1, 9, dtype=np.int64), np.zeros(4, np.int32)
    k(*args)
    source = k.cuda_source(*args).body
    assert "__global__" in source and "while" in source and "break;" in source


def test_an_empty_kernel_and_out_of_range_scalars():
    @bz.kernel
    def nothing(a: bz.Array[bz.float32, 1]):
        """Only a docstring."""

    nothing(np.zeros(2, np.float32))

    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1], s: bz.float32):
        for i in range(a.shape[0]):
            a[i] = s

    a = np.zeros(2, np.float32)
    with np.errstate(over="ignore"):
        fill(a, 1e300)  # rounds to float32 as NumPy would
    assert a.tolist() == [np.inf, np.inf]


def test_numpy_scalar_types_convert():
    @bz.kernel
    def k(a: bz.Array[bz.float64, 1], b: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            b[i] = np.int32(a[i] * 2.0)
            a[i] = np.float32(a[i] / 3.0)

    a, b = np.array([1.25, -2.75]), np.zeros(2, np.int32)
    k(a, b)
    assert b.tolist() == [2, -5]
    np.testing.assert_array_equal(a, (np.array([1.25, -2.75]) / 3.0).astype(np.float32).astype(np.float64))


def _guarded_helper(levels: int, folder):
    """A @bz.func of `levels` ifs in a row, each returning under a nested if and going on otherwise,
    written to a module in `folder` (braze reads a helper's source)."""
    lines = ["import braze as bz", "", "", "@bz.func", "def guarded(x):"]
    for n in range(levels):
        lines += [f"    if x > {n}.0:", f"        if x > {100 * (n + 1)}.0:", f"            return {n + 1}.0",
                  "    x = x * 2.0"]
    path = folder / f"guarded{levels}.py"
    path.write_text("\n".join([*lines, "    return x", ""]))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.guarded


@pytest.mark.parametrize("levels, compiles", [(8, True), (10, False)])
def test_nested_returns_that_would_copy_code_exponentially_are_refused(levels, compiles, tmp_path):
    """Folding returns nested under ifs copies the statements after each such if into both branches:
    2^levels copies. Eight fold (8,000 nodes); ten would copy 33,000 and are refused with what to write."""
    guarded = _guarded_helper(levels, tmp_path)

    @bz.kernel
    def k(x: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0]):
            x[i] = guarded(x[i])

    x = np.linspace(-5.0, 500.0, 32)
    if compiles:
        expected = [guarded(v) for v in x.tolist()]
        k(x)
        np.testing.assert_array_equal(x, expected)
    else:
        with pytest.raises(bz.KernelSyntaxError, match="end each branch with its return"):
            k(x)
