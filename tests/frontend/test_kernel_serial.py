"""`for ... in bz.serial(range(...))`: a top-level loop that runs in order on one thread (a serial task),
reading the locals set before it; loops under a compile-time `if`; reads of a parallel loop's local
that would see an earlier iteration's value; `bz.bool`."""

import itertools
import linecache
import warnings

import numpy as np
import pytest

import braze as bz


@bz.kernel
def exclusive_scan(counts: bz.Array[bz.int32, 1], start: bz.Array[bz.int32, 1]):
    total = 0
    for c in bz.serial(range(counts.shape[0])):
        start[c] = total
        total += counts[c]


def exclusive_reference(counts: np.ndarray) -> np.ndarray:
    wide = counts.astype(np.int64)
    return (np.cumsum(wide) - wide).astype(counts.dtype)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_a_serial_loop_carries_a_running_total_from_a_local_set_before_it(n):
    counts = np.random.default_rng(n).integers(0, 50, n).astype(np.int32)
    start = np.full(n, -1, np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit bz.serial is no surprise: nothing is said
        exclusive_scan(counts, start)
    np.testing.assert_array_equal(start, exclusive_reference(counts))


def test_the_kernel_run_as_python_gives_the_same_result():
    counts = np.arange(1, 9, dtype=np.int32)
    ours, python = np.zeros(8, np.int32), np.zeros(8, np.int32)
    exclusive_scan(counts, ours)
    exclusive_scan.fn(counts, python)  # bz.serial(range(n)) is range(n) outside a kernel
    np.testing.assert_array_equal(ours, python)
    assert list(bz.serial(range(3))) == [0, 1, 2]


def test_a_serial_loop_is_one_task_of_one_thread():
    with bz.record() as r:
        exclusive_scan(np.ones(5, np.int32), np.zeros(5, np.int32))
    assert "task exclusive_scan_t0: serial" in exclusive_scan.kernel_ir()
    assert [(t.begin, t.end) for t in r.launches] == [(0, 1)]


def test_a_local_reassigned_in_the_loop_is_the_serial_tasks_own():
    @bz.kernel
    def running_max(x: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
        best = -1e300  # not a launch-time value: the loop below assigns it
        for i in bz.serial(range(x.shape[0])):
            best = max(best, x[i])
            out[i] = best

    x = np.random.default_rng(1).standard_normal(50)
    out = np.zeros(50)
    running_max(x, out)
    np.testing.assert_array_equal(out, np.maximum.accumulate(x))


def test_a_serial_ndrange_runs_in_row_major_order():
    @bz.kernel
    def flat_scan(a: bz.Array[bz.float64, 2], out: bz.Array[bz.float64, 2]):
        total = 0.0
        for i, j in bz.serial(bz.ndrange(a.shape[0], (1, a.shape[1]))):
            total += a[i, j]
            out[i, j] = total

    a = np.random.default_rng(2).standard_normal((3, 5))
    out = np.zeros((3, 5))
    flat_scan(a, out)
    expected = np.zeros((3, 5))
    expected[:, 1:] = np.cumsum(a[:, 1:].ravel()).reshape(3, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-14)


def test_a_serial_loop_between_parallel_loops_is_never_fused_with_them():
    @bz.kernel
    def scale_scan_shift(x: bz.Array[bz.int64, 1], y: bz.Array[bz.int64, 1], start: bz.Array[bz.int64, 1]):
        for i in range(x.shape[0]):
            y[i] = 2 * x[i]
        total = 0
        for i in bz.serial(range(x.shape[0])):
            start[i] = total
            total += y[i]
        for i in range(x.shape[0]):
            y[i] = start[i] + 1

    x = np.arange(1, 101, dtype=np.int64)
    y, start = np.zeros(100, np.int64), np.zeros(100, np.int64)
    with bz.record() as r:
        scale_scan_shift(x, y, start)
    assert [(t.begin, t.end) for t in r.launches] == [(0, 100), (0, 1), (0, 100)]
    np.testing.assert_array_equal(start, exclusive_reference(2 * x))
    np.testing.assert_array_equal(y, start + 1)


def test_an_update_in_a_serial_loop_stays_plain():
    @bz.kernel
    def stable_scatter(keys: bz.Array[bz.int32, 1], cursor: bz.Array[bz.int32, 1], order: bz.Array[bz.int32, 1]):
        for i in bz.serial(range(keys.shape[0])):
            order[cursor[keys[i]]] = i
            cursor[keys[i]] += 1

    keys = np.array([2, 0, 2, 1, 0, 2], np.int32)
    cursor = exclusive_reference(np.bincount(keys).astype(np.int32))
    order = np.full(6, -1, np.int32)
    stable_scatter(keys, cursor, order)
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
    assert "atomic" not in stable_scatter.kernel_ir()


def test_bz_serial_under_a_run_time_if_and_inside_a_parallel_loop():
    @bz.kernel
    def guarded(x: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1], on: bz.int32):
        if on > 0:
            total = 0
            for i in bz.serial(range(x.shape[0])):
                total += x[i]
                out[i] = total

    @bz.kernel
    def triangular(x: bz.Array[bz.int64, 1], out: bz.Array[bz.int64, 1]):
        for i in range(x.shape[0]):
            s = 0
            for j in bz.serial(range(i + 1)):  # already serial here: the same loop
                s += x[j]
            out[i] = s

    x = np.arange(10, dtype=np.int64)
    a, b = np.zeros(10, np.int64), np.zeros(10, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guarded(x, a, 1)
        triangular(x, b)
    np.testing.assert_array_equal(a, np.cumsum(x))
    np.testing.assert_array_equal(b, np.cumsum(x))


def test_the_serial_loop_warning_names_bz_serial():
    @bz.kernel
    def guarded(a: bz.Array[bz.float32, 1], on: bz.int32):
        if on > 0:
            for i in range(a.shape[0]):
                a[i] += 1.0

    with pytest.warns(bz.SerialLoopWarning, match=r"bz\.serial\(range\(\.\.\.\)\)") as said:
        guarded(np.zeros(4, np.float32), 1)
    assert len(said) == 1  # once, though the kernel is translated more than once at its first call


@pytest.mark.parametrize("body", ["for c in bz.serial(x):\n        x[c] = 0",
                                  "for c in bz.serial(range(3), range(4)):\n        x[c] = 0",
                                  "for c in bz.serial(bz.static(range(3))):\n        x[c] = 0"])
def test_bz_serial_takes_one_range_or_ndrange(body):
    k = _kernel_from_source(f"def k(x: bz.Array[bz.int32, 1]):\n    {body}\n")
    with pytest.raises(bz.KernelSyntaxError, match=r"bz\.serial: expected one range\(\.\.\.\), bz\.ndrange"):
        k(np.zeros(4, np.int32))


def test_bz_serial_is_not_a_value():
    @bz.kernel
    def k(x: bz.Array[bz.int32, 1]):
        r = bz.serial(range(3))
        x[0] = r

    with pytest.raises(bz.KernelSyntaxError, match="bz.serial.* marks a loop"):
        k(np.zeros(4, np.int32))


def test_a_parallel_loop_reading_a_local_of_an_earlier_task_points_to_bz_serial():
    @bz.kernel
    def prefix(counts: bz.Array[bz.int32, 1], start: bz.Array[bz.int32, 1]):
        total = 0
        for c in range(counts.shape[0]):
            start[c] = total
            total += counts[c]

    with pytest.raises(bz.KernelSyntaxError, match=r"local of an earlier task.*bz\.serial\(range"):
        prefix(np.ones(4, np.int32), np.zeros(4, np.int32))


# --- a loop under an `if` known at compile time is a top-level loop -------------------------------------------
FLAG = True


def test_a_loop_under_a_compile_time_true_if_is_a_parallel_task_as_at_top_level():
    @bz.kernel
    def doubled(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
        if FLAG:
            for i in range(x.shape[0]):
                y[i] = 2.0 * x[i]

    x = np.arange(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    with warnings.catch_warnings(), bz.record() as r:
        warnings.simplefilter("error")
        doubled(x, y)
    assert [(t.begin, t.end) for t in r.launches] == [(0, 300)]
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.parametrize("guard", ["if True:", "if FLAG:", "if bz.static(FLAG):", "if not False:"])
def test_a_running_local_in_a_loop_under_a_compile_time_if_is_refused(guard):
    """Python reads the total the previous iteration left; a parallel iteration has its own locals, so
    it would read zero: refused (it once gave all zeros), pointing to bz.serial."""
    k = _kernel_from_source(f"""
def k(counts: bz.Array[bz.int32, 1], start: bz.Array[bz.int32, 1]):
    {guard}
        for c in range(counts.shape[0]):
            if c == 0:
                total = 0
            start[c] = total
            total += counts[c]
""")
    with pytest.raises(bz.KernelSyntaxError, match=r"'total' may be read before this iteration.*bz\.serial"):
        k(np.ones(4, np.int32), np.zeros(4, np.int32))


def test_the_same_loop_under_bz_serial_gives_python_s_result():
    @bz.kernel
    def prefix(counts: bz.Array[bz.int32, 1], start: bz.Array[bz.int32, 1]):
        for c in bz.serial(range(counts.shape[0])):
            if c == 0:
                total = 0
            start[c] = total
            total += counts[c]

    counts = np.arange(1, 11, dtype=np.int32)
    start = np.zeros(10, np.int32)
    prefix(counts, start)
    np.testing.assert_array_equal(start, exclusive_reference(counts))


@pytest.mark.parametrize("body", [
    # set on one branch only, read after the if
    """        if x[i] > 0.0:
            s = 1.0
        y[i] = s""",
    # set in a serial loop on some passes only, read after it
    """        for j in range(2):
            if x[j] > 0.0:
                s = x[j]
        y[i] = s""",
    # read in a serial loop that never sets it
    """        if i > 2:
            s = 1.0
        for j in range(2):
            y[i] += s""",
    # an augmented assignment reads first
    """        if i == 0:
            s = 0.0
        s += x[i]
        y[i] = s""",
])
def test_every_read_that_could_see_an_earlier_iteration_is_refused(body):
    k = _kernel_from_source("def k(x: bz.Array[bz.float64, 1], y: bz.Array[bz.float64, 1]):\n"
                                      "    for i in range(x.shape[0]):\n" + body + "\n")
    with pytest.raises(bz.KernelSyntaxError, match="'s' may be read before this iteration of a parallel loop"):
        k(np.ones(4), np.zeros(4))


def test_locals_set_on_every_path_are_read_as_before():
    @bz.kernel
    def k(x: bz.Array[bz.float64, 2], y: bz.Array[bz.float64, 1]):
        for i in range(x.shape[0]):
            if x[i, 0] < -1.0:
                y[i] = -1.0
                continue  # this branch does not reach the read below
            elif x[i, 0] > 0.0:
                sign = 1.0
            else:
                sign = 0.5
            for j in range(x.shape[1]):
                if j == 0:
                    acc = 0.0  # a serial loop's running value: set on its first pass
                acc += x[i, j] * sign
                last = j
            y[i] = acc + last

    x = np.random.default_rng(3).standard_normal((40, 3))
    y = np.zeros(40)
    k(x, y)
    sign = np.where(x[:, 0] > 0.0, 1.0, 0.5)
    expected = np.where(x[:, 0] < -1.0, -1.0, x.sum(axis=1) * sign + 2)
    np.testing.assert_allclose(y, expected, rtol=1e-14)


# --- bz.bool ------------------------------------------------------------------------------------------------
def test_bz_bool_is_bz_bool_():
    assert bz.bool is bz.bool_
    assert bz.bool.numpy == np.bool_

    @bz.kernel
    def positive(x: bz.Array[bz.float32, 1], mask: bz.Array[bz.bool, 1], flip: bz.bool):
        for i in range(x.shape[0]):
            mask[i] = bz.bool(x[i] > 0.0) != flip

    x = np.array([-1.0, 0.0, 2.0], np.float32)
    mask = np.zeros(3, np.bool_)
    positive(x, mask, False)
    np.testing.assert_array_equal(mask, x > 0)
    positive(x, mask, True)
    np.testing.assert_array_equal(mask, x <= 0)


def _kernel_from_source(source: str):
    """A kernel from its source text, registered with linecache (braze reads a kernel's source), with
    `bz` and FLAG in scope."""
    filename = f"<serial-test {next(_COUNTER)}>"
    text = source.strip() + "\n"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict = {"bz": bz, "FLAG": True}
    exec(compile(text, filename, "exec"), namespace)
    return bz.kernel(namespace["k"])


_COUNTER = itertools.count()
