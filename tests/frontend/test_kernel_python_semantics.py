"""Loop kernels follow Python where a user would notice: the loop variable after a loop, constant
negative indices, shadowed loop indices (refused), loops that cannot run in parallel (warned), the
builtin `round`, parameters left to their default values, bools in arithmetic, math functions of literals,
the values of `and` and `or`, an integer to a negative literal power, and integers meeting a float
literal (float64, as in Python and NumPy, where a typed float would keep its own type)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


@bz.kernel
def last_index(trips: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1], start: bz.int64):
    for i in range(trips.shape[0]):
        last = -5
        for last in range(start, trips[i]):  # noqa: B007  (its value after the loop is the point)
            pass
        out[i] = last


@bz.kernel
def last_index_down(trips: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1], start: bz.int64):
    for i in range(trips.shape[0]):
        last = -5
        for last in range(trips[i], start, -3):  # noqa: B007
            pass
        out[i] = last


@bz.kernel
def index_at_break(trips: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1]):
    for i in range(trips.shape[0]):
        for j in range(100):
            if j == trips[i]:
                break
        out[i] = j


def python_last(bounds):
    results = []
    for bound in bounds:
        last = -5
        for last in range(*bound):  # noqa: B007  (its value after the loop is the point)
            pass
        results.append(last)
    return results


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.integers(-6, 12), min_size=1, max_size=8), st.integers(-3, 3))
def test_the_loop_variable_keeps_the_last_value_taken(ends, start):
    trips = np.array(ends, np.int64)
    out = np.zeros(len(ends), np.int64)
    last_index(trips, out, start)
    assert out.tolist() == python_last([(start, end) for end in ends])
    last_index_down(trips, out, start)
    assert out.tolist() == python_last([(end, start, -3) for end in ends])


def test_the_loop_variable_keeps_its_value_at_a_break():
    trips = np.array([0, 3, 7, 200], np.int64)
    out = np.zeros(4, np.int64)
    index_at_break(trips, out)
    assert out.tolist() == [0, 3, 7, 99]


def test_constant_negative_indices_count_from_the_end():
    @bz.kernel
    def ends(a: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 1]):
        for i in range(out.shape[0]):
            out[i] = a[-1, -1] * 100.0 + a[0, -2] * 10.0 + a[-3, 0]

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros(2, np.float32)
    ends(a, out)
    np.testing.assert_array_equal(out, a[-1, -1] * 100 + a[0, -2] * 10 + a[-3, 0])


def test_reusing_an_enclosing_loop_index_is_refused():
    @bz.kernel
    def shadow(a: bz.Array[bz.int64, 1]):
        for i in range(a.shape[0]):
            for i in range(3):  # noqa: B007
                a[i] = 1

    with pytest.raises(bz.KernelSyntaxError, match="loop variable 'i' reuses the index of an enclosing loop"):
        shadow(np.zeros(5, np.int64))


def test_sequential_loops_may_reuse_a_name():
    @bz.kernel
    def twice(a: bz.Array[bz.int64, 1]):
        for i in range(a.shape[0]):
            for j in range(2):
                a[i] += j
            for j in range(3):
                a[i] += j * 10

    a = np.zeros(4, np.int64)
    twice(a)
    assert a.tolist() == [31] * 4


def test_a_loop_under_a_top_level_if_is_said_to_run_serially():
    @bz.kernel
    def guarded(a: bz.Array[bz.float32, 1], on: bz.int32):
        if on > 0:
            for i in range(a.shape[0]):
                a[i] += 1.0

    a = np.zeros(8, np.float32)
    with pytest.warns(bz.SerialLoopWarning, match="nested under a top-level if and runs serially"):
        guarded(a, 1)
    np.testing.assert_array_equal(a, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guarded(a, 1)  # the compiled kernel is reused: nothing said again


def test_braze_debug_checks_every_kernels_indices():
    @bz.kernel
    def past_the_end(a: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            a[i + 1] = 1.0

    a = np.zeros(1 << 20, np.float32)[:8]  # a view: the write past its end lands in memory braze owns
    with bz.config.scope(debug=True), pytest.raises(bz.KernelAssertionError, match="index out of bounds"):
        past_the_end(a)


def test_integer_division_by_zero_gives_zero_as_numpy_does():
    @bz.kernel
    def divide(a: bz.Array[bz.int64, 1], b: bz.Array[bz.int64, 1], q: bz.Array[bz.int64, 1],
               r: bz.Array[bz.int64, 1]):
        for i in range(a.shape[0]):
            q[i] = a[i] // b[i]
            r[i] = a[i] % b[i]

    a, b = np.array([7, -7, 5, 0], np.int64), np.array([2, 2, 0, 0], np.int64)
    q, r = np.zeros(4, np.int64), np.zeros(4, np.int64)
    divide(a, b, q, r)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(q, a // b)
        np.testing.assert_array_equal(r, a % b)


def test_integer_division_by_zero_is_an_error_under_debug():
    @bz.kernel
    def divide(a: bz.Array[bz.int32, 1], b: bz.Array[bz.int32, 1], c: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            a[i] = a[i] // b[i] + c[i] % b[i]

    @bz.kernel
    def guarded(a: bz.Array[bz.int32, 1], b: bz.Array[bz.int32, 1]):
        for i in range(a.shape[0]):
            a[i] = a[i] // b[i] if b[i] != 0 else -1  # the division runs only where b is not zero

    @bz.kernel
    def real(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            x[i] = x[i] // y[i]  # float floor division by zero is NaN or an infinity, as in NumPy

    a, b, c = np.array([7, 6], np.int32), np.array([2, 0], np.int32), np.array([5, 5], np.int32)
    with bz.config.scope(debug=True):
        with pytest.raises(bz.KernelAssertionError, match=r"integer division by zero in a\[i\] = a\[i\] // b"):
            divide(a.copy(), b, c)
        ok = np.array([7, 6], np.int32)
        guarded(ok, b)
        np.testing.assert_array_equal(ok, [3, -1])
        x = np.array([1.0, -1.0], np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            expected = x // np.zeros(2, np.float32)
        real(x, np.zeros(2, np.float32))
        np.testing.assert_array_equal(x, expected)
    without = a.copy()
    divide(without, b, c)  # without debug: no check, 0 where the divisor is 0
    np.testing.assert_array_equal(without, [7 // 2 + 5 % 2, 0])


def test_debug_checks_an_integer_to_a_negative_integer_power():
    @bz.kernel
    def powers(a: bz.Array[bz.int64, 1], e: bz.Array[bz.int64, 1]):
        for i in range(a.shape[0]):
            a[i] = a[i] ** e[i]

    a, e = np.array([2, 3], np.int64), np.array([3, -1], np.int64)
    with bz.config.scope(debug=True):
        with pytest.raises(bz.KernelAssertionError, match=r"negative integer power in a\[i\] = a\[i\] \*\* e"):
            powers(a.copy(), e)
        fine = a.copy()
        powers(fine, np.array([3, 2], np.int64))
        np.testing.assert_array_equal(fine, [8, 9])


@bz.kernel
def rounded(x: bz.Array[bz.float64, 1], whole: bz.Array[bz.int64, 1], cents: bz.Array[bz.float64, 1]):
    for i in range(x.shape[0]):
        whole[i] = round(x[i]) * 2  # an int, as Python's round gives
        cents[i] = round(x[i], 2)


def test_round_gives_an_int_with_halves_to_even_or_a_float_of_given_digits():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, -3.7, 1234.5678, 0.125])
    whole, cents = np.full(x.shape, -1, np.int64), np.full(x.shape, np.nan)
    rounded(x, whole, cents)
    np.testing.assert_array_equal(whole, [round(v) * 2 for v in x.tolist()])
    np.testing.assert_array_equal(cents, np.round(x, 2))


def test_round_refuses_digits_that_are_not_a_constant_int():
    @bz.kernel
    def bad(x: bz.Array[bz.float64, 1], digits: bz.int64):
        for i in range(x.shape[0]):
            x[i] = round(x[i], digits)

    with pytest.raises(bz.KernelError, match="round: expected a value and an optional constant int of digits, got 2 "
                                             "argument"):
        bad(np.zeros(2), 1)


@bz.kernel
def scaled(x: bz.Array[bz.float32, 1], factor: bz.float32 = 2.0, offset: int = 1):
    for i in range(x.shape[0]):
        x[i] = x[i] * factor + offset


def test_parameters_left_out_take_their_default_values():
    x = np.ones(3, np.float32)
    scaled(x)
    scaled(x, offset=0)
    scaled(x, 0.5)
    scaled(x=x, factor=3.0, offset=-1)
    np.testing.assert_array_equal(x, (((1 * 2 + 1) * 2 + 0) * 0.5 + 1) * 3 - 1)
    with pytest.raises(bz.InputError, match="kernel scaled: missing a required argument: 'x'"):
        scaled(factor=1.0)
    assert scaled.cuda_source(x) == scaled.cuda_source(x, 2.0, 1)  # CUDA source needs no GPU


@bz.kernel
def bools_as_ints(x: bz.Array[bz.float64, 1], out: bz.Array[bz.int64, 2]):
    for i in range(x.shape[0]):
        out[i, 0] = (x[i] > 0) + (x[i] > 1)  # a count, not a logical or
        out[i, 1] = (x[i] > 0) - (x[i] < 0)  # the sign idiom
        out[i, 2] = (x[i] > 0) * (x[i] > 1) * 3
        out[i, 3] = -(x[i] > 0) + abs(x[i] < 0)
        out[i, 4] = math.floor(x[i] > 0) + 2 * math.ceil(x[i] > 1)  # Python's math.floor(True) is 1
        out[i, 5] = round(x[i] < 0) + 2 * math.trunc(x[i] >= 0)


def test_bools_in_arithmetic_are_the_ints_zero_and_one_as_in_python():
    x = np.array([-2.0, 0.0, 0.5, 1.5])
    out = np.zeros((4, 6), np.int64)
    bools_as_ints(x, out)
    expected = [[(v > 0) + (v > 1), (v > 0) - (v < 0), (v > 0) * (v > 1) * 3, -(v > 0) + abs(v < 0),
                 math.floor(v > 0) + 2 * math.ceil(v > 1), round(v < 0) + 2 * math.trunc(v >= 0)] for v in x.tolist()]
    np.testing.assert_array_equal(out, expected)


@bz.kernel
def math_of_literals(x: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
    out[0] = math.sqrt(2)
    out[1] = math.exp(1) * x[0]
    out[2] = math.log(x[0], 10)  # log(10) is a literal's: float64, as Python's
    out[3] = math.atan2(1, 3)


def test_math_functions_of_int_literals_compute_in_float64_as_python_does():
    x, out = np.array([7.0]), np.zeros(4)
    math_of_literals(x, out)
    np.testing.assert_array_equal(out, [math.sqrt(2), math.e * 7.0, np.log(7.0) / np.log(10), math.atan2(1, 3)])


@bz.kernel(debug=True)
def either(a: bz.Array[bz.float64, 1], n: bz.Array[bz.int64, 1], out: bz.Array[bz.float64, 2]):
    for i in range(a.shape[0]):
        out[i, 0] = a[i] or 7.0  # an operand's value, not a bool
        out[i, 1] = a[i] and 3.0
        out[i, 2] = n[i] or 5
        out[i, 3] = (a[i] > 0) and n[i]
        out[i, 4] = n[i] and a[n[i] - 1]  # read only where n[i] is nonzero (index -1 would fail the check)
        out[i, 5] = 0 or a[i]


def test_and_or_give_an_operands_value_as_python_does():
    a, n = np.array([0.0, 2.5, -1.0, 0.0]), np.array([0, 3, 1, 4], np.int64)
    out = np.zeros((4, 6))
    either(a, n, out)
    expected = [[x or 7.0, x and 3.0, m or 5, (x > 0) and m, m and a[m - 1], 0 or x]
                for x, m in zip(a.tolist(), n.tolist())]
    np.testing.assert_array_equal(out, expected)


@bz.kernel
def negative_powers(n: bz.Array[bz.int32, 1], out: bz.Array[bz.float64, 2]):
    for i in range(n.shape[0]):
        out[i, 0] = n[i] ** -1  # a float, as in Python: not the integer power 0
        out[i, 1] = (n[i] != 0) ** -2
        out[i, 2] = n[i] ** 2  # a non-negative literal keeps the integer power


def test_an_integer_to_a_negative_literal_power_is_a_float_as_in_python():
    n = np.array([5, -4, 1, 8], np.int32)
    out = np.zeros((4, 3))
    negative_powers(n, out)
    expected = [[m ** -1, 1.0, m ** 2] for m in n.tolist()]
    np.testing.assert_allclose(out, expected, rtol=1e-7)


@bz.kernel
def typed_constants(out: bz.Array[bz.float64, 1], n: int):
    for i in range(n):
        out[i] = bz.float64(i) + bz.float64(0) + bz.float32(1) / 3  # a dtype of a literal: a typed constant


def test_a_dtype_of_a_literal_is_a_typed_constant():
    out = np.zeros(3)
    typed_constants(out, 3)
    np.testing.assert_array_equal(out, np.arange(3.0) + np.float64(np.float32(1) / np.float32(3)))


@bz.kernel
def powers(x: bz.Array[bz.float32, 1], v: bz.Array[bz.vec2, 1], n: bz.Array[bz.int64, 1]):
    for i in range(x.shape[0]):
        x[i] = pow(1 - x[i], 2)
        v[i] = pow(v[i], 2.0)
        n[i] = pow(n[i], 3)


def test_builtin_pow_is_a_power():
    """Python's pow(a, b), as Taichi's examples write pow(1 - cos_i, 2): a ** b, for numbers and vectors."""
    x, v, n = np.float32([0.25, 3.0]), np.float32([[1, 2], [3, -4]]), np.int64([2, -3])
    powers(x, v, n)
    assert x.tolist() == [0.5625, 4.0] and v.tolist() == [[1, 4], [9, 16]] and n.tolist() == [8, -27]


def pow_modulo(x: bz.Array[bz.int64, 1]):
    for i in range(x.shape[0]):
        x[i] = pow(x[i], 2, 5)


def test_pow_modulo_is_refused():
    with pytest.raises(bz.KernelTypeError, match=r"pow: expected 2 arguments \(pow\(a, b\) is a \*\* b\), got 3"):
        bz.kernel(pow_modulo)(np.int64([3]))


SPACING = 0.001


@bz.kernel
def integers_meet_float_literals(out: bz.Array[bz.float64, 2], counts: bz.Array[bz.int32, 1],
                                 narrow: bz.Array[bz.float32, 1]):
    for i in range(out.shape[0]):
        c = 0
        out[i, 0] = i * SPACING  # a loop index times a module constant
        out[i, 1] = (i + 0.5) * SPACING  # a cell's centre
        out[i, 2] = c + math.sqrt(2)  # an int local and the math of a literal
        out[i, 3] = math.sqrt(i)  # an integer's square root
        out[i, 4] = i / 3  # true division of integers
        out[i, 5] = counts[i] * 0.1  # an int32 array's element
        out[i, 6] = narrow[i] * 0.1  # a float32 element keeps float32


def test_integers_meeting_a_float_literal_compute_in_float64_as_python_does():
    n = 7
    out, counts = np.zeros((n, 7)), np.arange(n, dtype=np.int32) * 3
    narrow = np.linspace(0.5, 2, n).astype(np.float32)
    integers_meet_float_literals(out, counts, narrow)
    want = [[i * SPACING, (i + 0.5) * SPACING, 0 + math.sqrt(2), math.sqrt(i), i / 3, int(counts[i]) * 0.1,
             float(narrow[i] * np.float32(0.1))] for i in range(n)]
    np.testing.assert_array_equal(out, np.array(want))
