"""Errors of the kernel language: each names the Python file and line, and shows the offending source."""

import inspect
import re

import numpy as np
import pytest

import braze as bz

F32 = bz.Array[bz.float32, 1]


def helper_without_decorator(x):
    return x


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(n for n, line in enumerate(lines) if line.strip().startswith(text))


def check(fn, args, error: type, message: str, culprit: str, **options):
    kern = bz.kernel(**options)(fn)
    with pytest.raises(error) as info:
        kern(*args)
    text = str(info.value)
    where = f"test_kernel_errors.py:{_line_of(fn, culprit)}: "
    assert where in text, text
    assert re.search(message, text), text
    assert text.splitlines()[-1].strip().startswith(culprit), text  # the offending source line is shown last


def f32(n=4):
    return np.zeros(n, np.float32)


# --- unsupported constructs -----------------------------------------------------------------------
def uses_with(a: F32):
    for i in range(a.shape[0]):
        with open("x"):
            a[i] = 1.0


def uses_lambda(a: F32):
    for i in range(a.shape[0]):
        g = lambda x: x  # noqa: E731
        a[i] = g(1.0)


def iterates_an_array(a: F32):
    for i in range(a.shape[0]):
        for x in a:
            a[i] = x


def slices(a: F32):
    for i in range(a.shape[0]):
        a[i] = a[1:3]


def returns(a: F32):
    for i in range(a.shape[0]):
        a[i] = 1.0
    return a


def returns_in_a_serial_loop(a: F32):
    for i in range(a.shape[0]):
        for j in range(3):
            if a[i] > j:
                return  # would end the serial loop and the parallel iteration both


@bz.func
def first_below(v):
    for bound in bz.static((-1.0, 0.0, 1.0)):
        if v < bound:
            return bound
    return 2.0


def returns_in_a_helpers_static_loop(a: F32):
    for i in range(a.shape[0]):
        a[i] = first_below(a[i])


def indexes_a_list_at_run_time(a: F32):
    for i in range(a.shape[0]):
        v = [a[i], 1.0]
        a[i] = v[i % 2]


def raises(a: F32):
    for i in range(a.shape[0]):
        if a[i] < 0.0:
            raise ValueError("negative")


def breaks_a_parallel_loop(a: F32):
    for i in range(a.shape[0]):  # noqa: B007
        break


def steps_a_parallel_range_by_a_float(a: F32):
    for i in range(0, a.shape[0], 0.5):
        a[i] = 1.0


def steps_a_parallel_ndrange(a: F32):
    for i, j in bz.ndrange(2, (0, a.shape[0], 2)):  # noqa: B007
        a[j] = 1.0


@pytest.mark.parametrize("fn, message, culprit", [
    (uses_with, "unsupported construct: With statement; .*call the kernel inside the `with`", 'with open("x"):'),
    (uses_lambda, "unsupported construct: Lambda expression; .*@bz.func", "g = lambda x: x"),
    (indexes_a_list_at_run_time, r"a tuple or list of values is indexed by constants .*`bz.local\(dtype, n\)`",
     "a[i] = v[i % 2]"),
    (raises, r"unsupported construct: Raise statement; use `assert condition`", 'raise ValueError("negative")'),
    (iterates_an_array, r"unsupported loop: iterate over range\(...\)", "for x in a:"),
    (slices, "unsupported construct: slices", "a[i] = a[1:3]"),
    (returns, r"unsupported construct: return in a kernel \(.*a bare `return` ends an iteration of a parallel "
              r"loop", "return a"),
    (returns_in_a_serial_loop, r"return in a kernel \(.*outside the serial loops nested in it; there, set a flag "
                               r"and break\)", "return"),
    (breaks_a_parallel_loop, "unsupported construct: break outside a serial loop", "break"),
    (steps_a_parallel_ndrange, r"bz.ndrange: expected each dimension as n or \(lo, hi\), got a tuple of 3 \(a "
                               r"parallel loop with a step is range\(lo, hi, step\)", "for i, j in bz.ndrange("),
])
def test_unsupported_constructs(fn, message, culprit):
    check(fn, [f32()], bz.KernelSyntaxError, message, culprit)


def test_a_return_inside_a_helpers_static_loop_says_what_to_write():
    """A return in a helper's serial loop breaks out of it (braze/frontend/kernel_loop_returns.py); an unrolled
    bz.static loop has no break."""
    with pytest.raises(bz.KernelSyntaxError, match=r"test_kernel_errors.py:\d+: unsupported construct: return inside "
                                                   r"a bz.static loop, a multi-dimensional bz.ndrange loop or "
                                                   r"a loop's else clause of a @bz.func \(.*\); set a local "
                                                   r"there and return it after the loop"):
        bz.kernel(returns_in_a_helpers_static_loop)(f32())


def test_a_parallel_range_step_must_be_an_integer():
    check(steps_a_parallel_range_by_a_float, [f32()], bz.KernelTypeError,
          "a parallel range step: expected an integer index, got float", "for i in range(0, a.shape[0], 0.5):")


# --- type mismatches ---------------------------------------------------------------------------------
def int_local_takes_a_float(a: F32):
    for i in range(a.shape[0]):
        count = 0
        count += 0.5
        a[i] = count


def float_into_int_array(a: F32, n: bz.Array[bz.int32, 1]):
    for i in range(a.shape[0]):
        n[i] = a[i] * 2.0


def bitwise_on_floats(a: F32):
    for i in range(a.shape[0]):
        a[i] = a[i] & 1


def float_index(a: F32):
    for i in range(a.shape[0]):
        a[i] = a[a[i]]


@pytest.mark.parametrize("fn, args, message, culprit", [
    (int_local_takes_a_float, [f32()], r"type mismatch: 'count' is int64, the value is float64; .*start it as a "
     r"float \(count = 0.0, not count = 0\)", "count += 0.5"),
    (float_into_int_array, [f32(), np.zeros(4, np.int32)], "type mismatch: 'n' is int32, the value is float32",
     "n[i] = a[i] * 2.0"),
    (bitwise_on_floats, [f32()], "bitwise_and: expected bool or integer operands, got float32", "a[i] = a[i] & 1"),
    (float_index, [f32()], "expected an integer index, got float32", "a[i] = a[a[i]]"),
])
def test_type_mismatches(fn, args, message, culprit):
    check(fn, args, bz.KernelTypeError, message, culprit)


# --- indices ---------------------------------------------------------------------------------------
def too_few_indices(m: bz.Array[bz.float32, 2]):
    for i in range(m.shape[0]):
        m[i] = 0.0


def too_many_indices(a: F32):
    for i in range(a.shape[0]):
        a[i, 0] = 0.0


def bad_shape_axis(a: F32):
    for i in range(a.shape[1]):
        a[i] = 0.0


@pytest.mark.parametrize("fn, args, message, culprit", [
    (too_few_indices, [np.zeros((2, 2), np.float32)], r"wrong number of indices: 'm' has 2 dimension\(s\), got 1",
     "m[i] = 0.0"),
    (too_many_indices, [f32()], r"wrong number of indices: 'a' has 1 dimension\(s\), got 2", "a[i, 0] = 0.0"),
    (bad_shape_axis, [f32()], r"shape: expected a constant axis in \[0, 1\), got 1", "for i in range(a.shape[1]):"),
])
def test_wrong_indices(fn, args, message, culprit):
    check(fn, args, bz.KernelTypeError, message, culprit)


# --- assignments ------------------------------------------------------------------------------------
def assigns_a_scalar_parameter(a: F32, dt: bz.float32):
    for i in range(a.shape[0]):
        dt = 0.5
        a[i] = dt


def updates_a_scalar_parameter(a: F32, dt: float):
    dt *= 2.0
    for i in range(a.shape[0]):
        a[i] = dt


def assigns_an_array_parameter(a: F32, dt: float):
    for i in range(a.shape[0]):  # noqa: B007
        a = 1.0


def assigns_the_loop_index(a: F32, dt: float):
    for i in range(a.shape[0]):
        i += 1


def reads_a_local_of_an_earlier_task(a: F32, dt: float):
    a[0] = 1.0
    total = a[0] * 2.0
    for i in range(a.shape[0]):
        a[i] = total


@pytest.mark.parametrize("fn, message, culprit", [
    (assigns_a_scalar_parameter, "assignment to scalar parameter 'dt'", "dt = 0.5"),
    (updates_a_scalar_parameter, "assignment to scalar parameter 'dt'", "dt *= 2.0"),
    (assigns_an_array_parameter, "assignment to array parameter 'a'", "a = 1.0"),
    (assigns_the_loop_index, "assignment to loop index 'i'", "i += 1"),
    (reads_a_local_of_an_earlier_task, "'total' is a local of an earlier task", "a[i] = total"),
])
def test_invalid_assignments(fn, message, culprit):
    check(fn, [f32(), 1.0], bz.KernelSyntaxError, message, culprit)


# --- calls -------------------------------------------------------------------------------------------
def calls_an_undefined_function(a: F32):
    for i in range(a.shape[0]):
        a[i] = no_such_function(1.0)  # noqa: F821


def calls_a_plain_function(a: F32):
    for i in range(a.shape[0]):
        a[i] = helper_without_decorator(a[i])


def calls_numpy(a: F32):
    for i in range(a.shape[0]):
        a[i] = np.linalg.norm(a[i])


def prints(a: F32):
    for i in range(a.shape[0]):
        print(a[i])


@bz.kernel
def another_kernel(a: F32):
    for i in range(a.shape[0]):
        a[i] = 1.0


def calls_a_kernel(a: F32):
    for _ in range(1):
        another_kernel(a)


def spins_on_a_lock(a: F32):
    for _i in range(a.shape[0]):
        while bz.atomic_cas(a[0], 0.0, 1.0) == 1.0:
            pass


def asks_for_its_thread(a: F32):
    for _ in range(1):
        a[bz.tid()] = 1.0


@pytest.mark.parametrize("fn, message, culprit", [
    (spins_on_a_lock, r"unknown function 'bz.atomic_cas'; braze's atomics are bz.atomic_add, atomic_sub, "
                      r"atomic_min and atomic_max: it has no compare-and-swap", "while bz.atomic_cas("),
    (asks_for_its_thread, r"unknown function 'bz.tid'; a top-level `for i in range\(n\)`.* is the launch, and its "
                          r"index the thread's", "a[bz.tid()] = 1.0"),
    (calls_an_undefined_function, "call to unknown function 'no_such_function'", "a[i] = no_such_function(1.0)"),
    (calls_a_plain_function, r"call to unknown function 'helper_without_decorator' \(decorate it with @bz.func",
     "a[i] = helper_without_decorator(a[i])"),
    (calls_numpy, "call to unknown function 'np.linalg.norm'", "a[i] = np.linalg.norm(a[i])"),
    (prints, r"'print' \(a kernel prints nothing: write the values into an array", "print(a[i])"),
    (calls_a_kernel, r"'another_kernel' \(a @bz.kernel is launched from Python, not called from a kernel: put the "
                     r"shared code in a @bz.func\)", "another_kernel(a)"),
])
def test_unknown_functions(fn, message, culprit):
    check(fn, [f32()], bz.KernelSyntaxError, message, culprit)


def test_errors_are_braze_errors_and_annotations_are_checked():
    assert issubclass(bz.KernelTypeError, bz.KernelError) and issubclass(bz.KernelError, bz.Error)
    with pytest.raises(bz.KernelTypeError, match="parameter 'a': expected an annotation"):
        @bz.kernel
        def unannotated(a):
            pass
    with pytest.raises(bz.KernelSyntaxError, match="only be called inside a @bz.kernel"):
        bz.atomic_add(1, 2)


# --- messages a Warp or Taichi user meets first ----------------------------------------------------
def test_a_scalar_of_the_wrong_kind_reads_well():
    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1], n: bz.int64):
        for i in range(n):
            a[i] = 1.0

    where = f"test_kernel_errors.py:{fill.fn.__code__.co_firstlineno}: kernel fill: "
    with pytest.raises(bz.InputError, match=f"{where}argument 'n': expected an int64 scalar, got float"):
        fill(np.zeros(3, np.float32), 1.5)


def test_a_call_time_error_names_the_kernels_file_and_line():
    @bz.kernel
    def fill(a: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            a[i] = 1.0

    where = f"test_kernel_errors.py:{fill.fn.__code__.co_firstlineno}: kernel fill: "
    for args, message in [((np.zeros(3, np.float64),), "argument 'a': expected float32, got float64"),
                          ((), "missing a required argument: 'a'"),
                          ((np.zeros(3, np.float32)[::-1].copy().view(np.float32),), None)]:
        if message is None:
            fill(*args)  # a good call between two bad ones
            continue
        with pytest.raises(bz.InputError, match=where + message):
            fill(*args)
    read_only = np.zeros(3, np.float32)
    fill(read_only)
    read_only.flags.writeable = False
    with pytest.raises(bz.InputError, match=where + "argument 'a': the kernel writes it, but the array is read-only"):
        fill(read_only)


def test_a_missing_annotation_says_so():
    with pytest.raises(bz.KernelTypeError, match="parameter 'n': expected an annotation .* got no annotation"):
        @bz.kernel
        def fill(a: bz.Array[bz.float32, 1], n):
            for i in range(n):
                a[i] = 1.0


def test_an_annotation_naming_a_local_under_postponed_evaluation(tmp_path):
    path = tmp_path / "postponed.py"
    path.write_text("from __future__ import annotations\nimport braze as bz\n\ndef make():\n"
                    "    T = bz.float32\n\n    @bz.kernel\n    def fill(a: bz.Array[T, 1]):\n"
                    "        for i in range(a.shape[0]):\n            a[i] = 1.0\n    return fill\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102  (the test's own file)
    with pytest.raises(bz.KernelTypeError, match=r"postponed.py:\d+: kernel fill: an annotation names .*'T'.*"
                                                 r"module level"):
        namespace["make"]()


def test_unpacking_a_shape():
    @bz.kernel
    def corners(a: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 1]):
        h, w = a.shape
        for i in range(out.shape[0]):
            rows, cols = a.shape
            out[i] = a[h - 1, w - 1] + a[rows - 1, 0] + cols

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros(2, np.float32)
    corners(a, out)
    np.testing.assert_array_equal(out, a[2, 3] + a[2, 0] + 4)


def test_unpacking_a_shape_into_the_wrong_number_of_names():
    @bz.kernel
    def bad(a: bz.Array[bz.float32, 2]):
        for i in range(a.shape[0]):
            h, w, d = a.shape
            a[i, 0] = h

    with pytest.raises(bz.KernelTypeError, match=r"'a.shape' has 2 extent\(s\), unpacked into 3 name\(s\)"):
        bad(np.zeros((2, 2), np.float32))


def test_a_kernel_without_readable_source_says_where_to_put_it():
    import subprocess
    import sys

    script = ("import braze as bz, numpy as np\n@bz.kernel\ndef k(a: bz.Array[bz.float32, 1]):\n"
              "    for i in range(a.shape[0]):\n        a[i] = 1.0\nk(np.zeros(3, np.float32))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "cannot read its source" in result.stderr and "define it in a file" in result.stderr
