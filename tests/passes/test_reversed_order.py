"""`BRAZE_ENABLE=reverse_parallel`: the CPU runs each parallel loop from its last index to its first, on
one thread, so a loop kernel whose answer depends on the order of its iterations (a data race on a
GPU) shows it on the CPU."""

import numpy as np

import braze as bz
from braze import config

REVERSED = {"enable": "reverse_parallel"}


@bz.kernel
def arrival_order(order: bz.Array[bz.int64, 1], counter: bz.Array[bz.int64, 1]):
    for i in range(order.shape[0]):
        order[i] = bz.atomic_add(counter[0], 1)


def _arrivals(n: int, **knobs) -> np.ndarray:
    order, counter = np.zeros(n, np.int64), np.zeros(1, np.int64)
    with config.scope(**knobs):
        arrival_order(order, counter)
    return order


def test_indices_run_last_to_first_on_one_thread():
    n = 1 << 20  # enough work that the pool splits the range in increasing order
    np.testing.assert_array_equal(_arrivals(n, **REVERSED), np.arange(n)[::-1])
    small = _arrivals(9)
    np.testing.assert_array_equal(small, np.arange(9))  # the knob is part of the compiled code's key


@bz.kernel
def smooth_in_place(a: bz.Array[bz.float64, 1]):
    for i in range(1, a.shape[0] - 1):
        a[i] = a[i - 1] + a[i + 1]  # reads elements other iterations write: a race by nature


def test_a_loop_racing_with_itself_gives_another_answer():
    forward, backward = np.arange(8.0), np.arange(8.0)
    smooth_in_place(forward)
    with config.scope(**REVERSED):
        smooth_in_place(backward)
    np.testing.assert_array_equal(forward, [0, 2, 5, 9, 14, 20, 27, 7])
    np.testing.assert_array_equal(backward, [0, 22, 22, 21, 19, 16, 12, 7])
