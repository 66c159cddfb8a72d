"""The math a kernel writes under the names users know: Python's `math` (two-argument `log`,
`degrees`, `copysign`, `floor` giving an int), NumPy's ufuncs, `bz.math`'s constants and the functions it
composes, `divmod`; and constant tables (global tuples and NumPy arrays) indexed at run time, whose
tuple entries are as weak as the Python literals they are. Each is checked against NumPy in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

import braze as bz

RNG = np.random.default_rng(5)


@bz.kernel
def python_math(x: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 2], whole: bz.Array[bz.int64, 2]):
    for i in range(x.shape[0]):
        out[i, 0] = math.log(abs(x[i]) + 1.0, 2.0)
        out[i, 1] = math.degrees(x[i])
        out[i, 2] = math.radians(x[i])
        out[i, 3] = math.copysign(2.0, x[i])
        out[i, 4] = math.log(abs(x[i]) + 1.0)
        whole[i, 0] = math.floor(x[i])  # an int, as in Python: no conversion needed
        whole[i, 1] = math.ceil(x[i])
        whole[i, 2] = math.trunc(x[i])
        q, r = divmod(whole[i, 0], 3)
        whole[i, 3] = q
        whole[i, 4] = r


def test_python_math_functions_compute_as_python_does():
    x = np.concatenate([RNG.standard_normal(30) * 4, [-0.0, 0.0, 2.5, -2.5]])
    out, whole = np.full((34, 5), np.nan), np.zeros((34, 5), np.int64)
    python_math(x, out, whole)
    ref = np.stack([np.log2(np.abs(x) + 1), np.degrees(x), np.radians(x), np.copysign(2.0, x),
                    np.log(np.abs(x) + 1)], 1)
    np.testing.assert_allclose(out, ref, rtol=1e-14)
    floor = np.floor(x).astype(np.int64)
    np.testing.assert_array_equal(whole, np.stack([floor, np.ceil(x), np.trunc(x), floor // 3, floor % 3], 1))


@bz.kernel
def numpy_and_bz_math(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 2]):
    for i in range(x.shape[0]):
        out[i, 0] = np.sqrt(x[i]) + np.maximum(x[i], 0.5)
        out[i, 1] = np.clip(np.arctan2(x[i], 2.0), 0.1, 0.4)
        out[i, 2] = np.arccos(x[i]) + np.hypot(x[i], 1.0)
        out[i, 3] = bz.math.pi * bz.math.acos(x[i]) + bz.math.min(x[i], 0.25)
        out[i, 4] = bz.math.fmod(x[i] * 10.0, 3.0) + bz.math.log10(x[i] + 1.0)


def test_numpy_ufuncs_and_bz_math_names_in_a_kernel():
    x = RNG.random(40).astype(np.float32)
    out = np.full((40, 5), np.nan, np.float32)
    numpy_and_bz_math(x, out)
    x64 = x.astype(np.float64)
    ref = np.stack([np.sqrt(x64) + np.maximum(x64, 0.5), np.clip(np.arctan2(x64, 2.0), 0.1, 0.4),
                    np.arccos(x64) + np.hypot(x64, 1.0), np.pi * np.arccos(x64) + np.minimum(x64, 0.25),
                    np.fmod(np.float32(x * np.float32(10)).astype(np.float64), 3.0) + np.log10(x64 + 1)], 1)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)
    assert bz.math.acos(np.array([0.5]))[0] == np.arccos(0.5) and bz.math.pi == math.pi


@pytest.mark.parametrize("body, message", [
    ("a[i] = math.log(a[i], 2.0, 3.0)", r"log: expected 1 or 2 argument\(s\), got 3"),
    ("a[i] = bz.math.sqrt(a[i], 2.0)", r"sqrt: expected 1 argument\(s\), got 2"),
])
def test_a_math_function_given_too_many_arguments_says_how_many_it_takes(tmp_path, body, message):
    kernel = _kernel_from_source(tmp_path, body)
    with pytest.raises(bz.KernelTypeError, match=message):
        kernel(np.ones(3, np.float32))


@pytest.mark.parametrize("call, instead", [
    ("bz.min(a[i], 1.0)", r"write Python's min\(\.\.\.\)"), ("bz.sqrt(a[i])", r"write bz.math.sqrt\(\.\.\.\)"),
    ("bz.select(a[i] > 0, 1.0, 2.0)", "write `a if condition else b`"),
])
def test_an_unknown_function_of_a_known_name_says_what_to_write(tmp_path, call, instead):
    kernel = _kernel_from_source(tmp_path, f"a[i] = {call}")
    with pytest.raises(bz.KernelSyntaxError, match=instead):
        kernel(np.ones(3, np.float32))


def _kernel_from_source(tmp_path, body: str):
    """A kernel over one float32 array whose loop body is `body`, defined in a file (braze reads source)."""
    path = tmp_path / f"k{abs(hash(body))}.py"
    path.write_text("import math\nimport braze as bz\n\n\ndef k(a: bz.Array[bz.float32, 1]):\n"
                    f"    for i in range(a.shape[0]):\n        {body}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return bz.kernel(namespace["k"])


# --- constant tables ---------------------------------------------------------------------------------
WEIGHTS = (4 / 9, 1 / 9, 1 / 36)
STEPS = np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], np.int32)
THIRDS = np.array([1 / 3, 2 / 3, 1.0], np.float32)
MASK = (True, False, True)
NESTED = ((1, 2), (3, 4))


@bz.kernel
def tables(q: bz.Array[bz.int32, 1], x64: bz.Array[bz.float64, 1], y64: bz.Array[bz.float64, 1],
           x32: bz.Array[bz.float32, 1], y32: bz.Array[bz.float32, 1], moves: bz.Array[bz.int32, 2]):
    for i in range(q.shape[0]):
        y64[i] = 0.5 * WEIGHTS[q[i]] * x64[i] + WEIGHTS[q[i] - 3]  # exact as Python's floats
        w = WEIGHTS[q[i]]  # a float32 local, as `w = 0.5` is
        y32[i] = w * x32[i] + THIRDS[q[i]] + (1.0 if MASK[q[i]] else 0.0)
        moves[i, 0] = STEPS[q[i] + 2, 0] + STEPS[-1, 1]
        moves[i, 1] = STEPS[q[i] - 5, 1]


def test_constant_tables_indexed_at_run_time():
    n = 30
    q = RNG.integers(0, 3, n).astype(np.int32)
    x64, x32 = RNG.random(n), RNG.random(n).astype(np.float32)
    y64, y32, moves = np.full(n, np.nan), np.full(n, np.nan, np.float32), np.zeros((n, 2), np.int32)
    tables(q, x64, y64, x32, y32, moves)
    w = np.array(WEIGHTS)
    np.testing.assert_array_equal(y64, 0.5 * w[q] * x64 + w[q - 3])
    ref32 = w.astype(np.float32)[q] * x32 + THIRDS[q] + np.array(MASK, np.float32)[q]
    np.testing.assert_allclose(y32, ref32, rtol=1e-6)
    np.testing.assert_array_equal(moves, np.stack([STEPS[q + 2, 0] + STEPS[-1, 1], STEPS[q - 5, 1]], 1))


@bz.kernel
def nested_table(q: bz.Array[bz.int32, 1], y: bz.Array[bz.int32, 1]):
    for i in range(q.shape[0]):
        y[i] = NESTED[q[i]][0] + 10 * NESTED[q[i]][-1] + 100 * STEPS[q[i]][1]  # as t[i, j]


@bz.kernel
def table_row_as_a_number(q: bz.Array[bz.int32, 1], y: bz.Array[bz.int32, 1]):
    for i in range(q.shape[0]):
        y[i] = NESTED[q[i]] + 1


@bz.kernel
def tuple_as_a_number(y: bz.Array[bz.int32, 1]):
    for i in range(y.shape[0]):
        y[i] = NESTED[0] + 1


@bz.kernel(debug=True)
def table_out_of_range(q: bz.Array[bz.int32, 1], y: bz.Array[bz.float32, 1]):
    for i in range(q.shape[0]):
        y[i] = WEIGHTS[q[i]]


def test_a_table_takes_its_indices_at_once_or_in_turn_and_is_checked_under_debug():
    q, y = np.array([0, 1, 1], np.int32), np.zeros(3, np.int32)
    nested_table(q, y)
    np.testing.assert_array_equal(y, [NESTED[v][0] + 10 * NESTED[v][-1] + 100 * STEPS[v][1] for v in q.tolist()])
    with pytest.raises(bz.KernelTypeError, match=r"expected a number, got a row of a constant table of shape \(2, 2\) "
                                                 r"indexed by 1 index\(es\); index the rest too"):
        table_row_as_a_number(q, y)
    with pytest.raises(bz.KernelTypeError, match=r"test_kernel_math_names.py:\d+: add of constants \(1, 2\) and 1"):
        tuple_as_a_number(y)
    y = np.zeros(2, np.float32)
    table_out_of_range(np.array([0, -3], np.int32), y)
    assert y[1] == np.float32(WEIGHTS[0])
    with pytest.raises(bz.KernelAssertionError, match="axis 0 of a constant table"):
        table_out_of_range(np.array([0, 3], np.int32), y)
