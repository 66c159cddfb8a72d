"""`bz.local`: per-thread arrays of a fixed size in `@bz.kernel`s, on the CPU: indexed at run time
(a sort, a histogram), by constants (negative ones from the end), zeroed where made, checked under
`debug=True`, and errors for what cannot be compiled."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz


@bz.kernel
def sort_rows(a: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 2], counts: bz.Array[bz.int64, 2]):
    for i in range(a.shape[0]):
        buf = bz.local(bz.float32, 8)
        for j in range(8):
            buf[j] = a[i, j]
        for j in range(1, 8):  # insertion sort: every index known only at run time
            key = buf[j]
            t = j - 1
            while t >= 0 and buf[t] > key:
                buf[t + 1] = buf[t]
                t -= 1
            buf[t + 1] = key
        for j in range(8):
            out[i, j] = buf[j]
        h = bz.local(bz.int64, 4)
        for j in range(8):
            h[int(buf[j] * 2.0 + 2.0) % 4] += 1  # a thread's own array: never atomic
        h[-1] += 100
        for j in range(4):
            counts[i, j] = h[j]


def test_local_arrays_indexed_at_run_time():
    n = 300
    a = np.random.default_rng(1).uniform(-1, 1, (n, 8)).astype(np.float32)
    out, counts = np.zeros_like(a), np.zeros((n, 4), np.int64)
    sort_rows(a, out, counts)
    np.testing.assert_array_equal(out, np.sort(a, axis=1))
    bins = (np.sort(a, axis=1) * np.float32(2) + np.float32(2)).astype(np.int64) % 4
    expected = np.stack([(bins == b).sum(axis=1) for b in range(4)], axis=1)
    expected[:, 3] += 100
    np.testing.assert_array_equal(counts, expected)


@bz.kernel
def constant_indices(x: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
    for i in range(x.shape[0]):
        taps = bz.local(bz.float64, 3)
        taps[0] = 0.25
        taps[1] = 0.5
        taps[-1] = 0.25
        acc = 0.0
        for t in bz.static(range(3)):
            acc += taps[t] * x[min(max(i + t - 1, 0), x.shape[0] - 1)]
        fresh = bz.local(bz.float64, 2)  # zeroed where made
        out[i] = acc + fresh[1]


def test_local_arrays_indexed_by_constants():
    x = np.random.default_rng(2).uniform(-1, 1, 100)
    out = np.zeros_like(x)
    constant_indices(x, out)
    padded = np.concatenate([x[:1], x, x[-1:]])
    np.testing.assert_array_equal(out, 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:])


def test_outside_a_kernel_a_local_array_is_a_zeroed_numpy_array():
    buf = bz.local(bz.int32, 5)
    assert buf.dtype == np.int32 and buf.tolist() == [0] * 5


def _kernel(source: str, tmp_path, **options):
    path = tmp_path / f"local_{abs(hash(source))}.py"
    path.write_text("import braze as bz\n\n" + source)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return bz.kernel(**options)(namespace["kern"])


def test_debug_checks_indices_known_only_at_run_time(tmp_path):
    kern = _kernel("def kern(out: bz.Array[bz.float32, 1], k: int):\n    for i in range(out.shape[0]):\n"
                   "        buf = bz.local(bz.float32, 4)\n        out[i] = buf[k]\n", tmp_path, debug=True)
    kern(np.zeros(4, np.float32), 3)
    with pytest.raises(bz.KernelAssertionError, match="index out of bounds: a bz.local array of 4"):
        kern(np.zeros(4, np.float32), 4)


@pytest.mark.parametrize("body, message", [
    ("buf = bz.local(bz.float32, 4)\n        out[i] = buf[4]", "index 4 is out of range for a bz.local array of 4"),
    ("buf = bz.local(bz.float32, n)\n        out[i] = buf[0]", "the size must be an integer constant"),
    ("buf = bz.local(bz.float32, 0)\n        out[i] = buf[0]", "the size must be an integer constant"),
    ("buf = bz.local(out, 4)\n        out[i] = buf[0]", "bz.local: expected a dtype"),
    ("buf = bz.local(bz.float32, 4)\n        out[i] = buf[0, 1]", "a bz.local array has one dimension"),
    ("buf = bz.local(bz.float32, 4)\n        buf[0] = bz.vec3(1.0, 2.0, 3.0)", "is a float32 scalar, the value is"),
])
def test_misuse_is_an_error_naming_the_line(body, message, tmp_path):
    kern = _kernel(f"def kern(out: bz.Array[bz.float32, 1], n: int):\n    for i in range(out.shape[0]):\n"
                   f"        {body}\n", tmp_path)
    with pytest.raises((bz.KernelTypeError, bz.KernelSyntaxError), match=message) as info:
        kern(np.zeros(4, np.float32), 4)
    assert "local_" in str(info.value)
