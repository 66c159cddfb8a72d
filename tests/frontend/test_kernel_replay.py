"""A cached `@bz.kernel` call (a prepared call of its call cache) checks what a first call checks
(writability, dtype, shape, strides, overlap), and no call keeps the user's arrays alive."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


@bz.kernel
def plus_one(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        y[i] = x[i] + 1.0


@bz.kernel
def add_rows(x: bz.Array[bz.float32, 2], y: bz.Array[bz.float32, 2]):
    for i, j in bz.ndrange(x.shape[0], x.shape[1]):
        y[i, j] = x[i, j] + i


def test_an_array_made_read_only_after_a_call_is_not_written() -> None:
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    plus_one(x, y)
    y[:] = 0
    y.flags.writeable = False
    with pytest.raises(bz.InputError, match="argument 'y': the kernel writes it, but the array is read-only"):
        plus_one(x, y)
    assert not y.any()
    x.flags.writeable = False  # only read: the kernel may still take it
    y.flags.writeable = True
    plus_one(x, y)
    np.testing.assert_array_equal(y, 2.0)


def test_an_array_whose_dtype_was_reassigned_is_refused() -> None:
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    plus_one(x, y)
    y.dtype = np.int32  # the same buffer, read as int32 from now on
    with pytest.raises(bz.InputError, match="argument 'y': expected float32, got int32"):
        plus_one(x, y)
    y.dtype = np.float32
    plus_one(x, y)
    np.testing.assert_array_equal(y, 2.0)


def test_an_array_reshaped_in_place_runs_over_its_new_shape() -> None:
    x, y = np.arange(8, dtype=np.float32).reshape(2, 4), np.zeros((2, 4), np.float32)
    add_rows(x, y)
    x.shape, y.shape = (4, 2), (4, 2)
    add_rows(x, y)
    np.testing.assert_array_equal(y, x + np.arange(4, dtype=np.float32)[:, None])


def test_no_array_is_kept_alive_after_a_call() -> None:
    x, y = np.ones(1000, np.float32), np.zeros(1000, np.float32)
    plus_one(x, y)
    plus_one(x, y)  # the cached call
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)


def test_no_array_is_kept_alive_by_another_threads_last_call() -> None:
    refs = []

    def call() -> None:
        x, y = np.ones(1000, np.float32), np.zeros(1000, np.float32)
        plus_one(x, y)
        refs.extend((weakref.ref(x), weakref.ref(y)))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    gc.collect()
    assert len(refs) == 2 and all(r() is None for r in refs)


def test_a_new_array_at_a_freed_arrays_address_is_bound_afresh() -> None:
    for n in range(20):  # freed and allocated again: ids and buffers are reused
        x, y = np.full(64, n, np.float32), np.zeros(64, np.float32)
        plus_one(x, y)
        np.testing.assert_array_equal(y, n + 1.0)


_MUTATIONS = st.sampled_from(["call", "x read-only", "y read-only", "y writable", "y int32", "y float32",
                              "y 2-D", "y 1-D", "y reversed view"])


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(_MUTATIONS, min_size=1, max_size=8))
def test_a_cached_call_does_what_a_first_call_does(steps: list[str]) -> None:
    """After any changes to the arrays, a call (which may take the cached call) and a first call on
    the same arrays (the cache emptied) raise the same error or write the same values."""
    x, y = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    plus_one(x, y)
    for step in steps + ["call"]:
        if step == "call":
            first = _outcome(x, y, cached=True)
            again = _outcome(x, y, cached=False)
            assert first == again
        elif step == "x read-only":
            x.flags.writeable = False
        elif step == "y read-only":
            y.flags.writeable = False
        elif step == "y writable" and (y.base is None or y.base.flags.writeable):
            y.flags.writeable = True
        elif step in ("y int32", "y float32"):
            y.dtype = np.int32 if step == "y int32" else np.float32
        elif step in ("y 2-D", "y 1-D") and y.flags.c_contiguous:
            y.shape = (4, 4) if step == "y 2-D" else (16,)
        elif step == "y reversed view" and y.ndim == 1:
            y = y[::-1]


def _outcome(x: np.ndarray, y: np.ndarray, cached: bool) -> tuple:
    if not cached:
        plus_one.calls.prepared.clear()
    try:
        plus_one(x, y)
    except bz.InputError as error:
        return ("error", str(error))
    return ("ran", y.tobytes())


@bz.kernel
def add_then_double(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
    for i in range(a.shape[0]):
        b[i] = a[i] + 1.0
    for i in range(a.shape[0]):
        a[i] = b[i] * 2.0


def test_arguments_of_a_cached_description_that_overlap_get_the_unfused_kernel_and_stay_cached(monkeypatch) -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    add_then_double(x, y)
    add_then_double(x, y)  # the cached call, on the fused kernel
    assert len(add_then_double.entries) == 1 and add_then_double.decisions()[0].fused
    add_then_double(x, x)  # the same description, one array twice
    assert len(add_then_double.entries) == 2 and add_then_double.decisions() == []
    np.testing.assert_array_equal(x, ((np.arange(8) + 1) * 2 + 1) * 2 * 2 + 2)
    bound = []  # the calls the call cache did not take
    bind_and_run = type(add_then_double)._bind_and_run
    monkeypatch.setattr(type(add_then_double), "_bind_and_run",
                        lambda fn, args: bound.append(1) or bind_and_run(fn, args))
    for _ in range(3):  # apart and together in turn: each way has its prepared call
        add_then_double(x, y)
        np.testing.assert_array_equal(y, x / 2)
        add_then_double(x, x)
    assert not bound and len(add_then_double.calls.prepared) == 1


def test_threads_calling_one_kernel_at_once_get_their_own_results() -> None:
    failures = []

    def calls(n: int) -> None:
        x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
        for step in range(200):
            x[0] = n * 1000 + step
            plus_one(x, y)
            if not np.array_equal(y, x + 1):
                failures.append((n, step))

    threads = [threading.Thread(target=calls, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


@bz.kernel(debug=True)
def pick(x: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1], start: int):
    for i in range(out.shape[0]):
        out[i] = x[i + start]


def test_a_cached_debug_call_raises_its_failed_check_and_runs_again_after() -> None:
    x, out = np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    pick(x, out, 0)
    pick(x, out, 4)  # the cached call
    np.testing.assert_array_equal(out, x[4:])
    with pytest.raises(bz.KernelAssertionError, match="index out of bounds: axis 0 of 'x'"):
        pick(x, out, 5)
    pick(x, out, 1)
    np.testing.assert_array_equal(out, x[1:5])
    with pytest.raises(bz.InputError, match="argument 'start': 18446744073709551616 does not fit in int64"):
        pick(x, out, 2 ** 64)
    assert len(pick.calls.prepared) == 1


def test_a_recording_lists_the_prepared_call_and_every_launch() -> None:
    @bz.kernel
    def minus_one(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            y[i] = x[i] - 1.0

    x, y, longer = np.ones(8, np.float32), np.zeros(8, np.float32), np.zeros(16, np.float32)
    with bz.record() as first:
        minus_one(x, y)
    with bz.record() as again:
        minus_one(x, y)
        minus_one(x, y)
        minus_one(np.ones(16, np.float32), longer)  # another description
    assert first.entries == ["prepared call minus_one"] and len(first.launches) == 1
    assert again.entries == ["prepared call minus_one"] and len(again.launches) == 3
    np.testing.assert_array_equal(longer, 0.0)
