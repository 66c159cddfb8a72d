"""`bz.graph()` on the host: a recorded body replays as calling it again would, on the arrays it was
recorded with (their contents changed in place between replays), and what cannot be replayed is
refused by name. The GPU's capture is checked emulated in test_kernel_gpu_emulated.py and on a GPU
in tests/cuda/test_graph_gpu.py."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from kernel_cases import all_cases

import braze as bz


@bz.kernel
def step(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], dt: bz.float32):
    """Three launches: the middle loop reads a neighbour, so it is not fused with the others."""
    for i in range(x.shape[0]):
        v[i] -= 9.81 * dt
    for i in range(1, x.shape[0] - 1):
        x[i] += (v[i - 1] + v[i + 1]) * 0.5 * dt
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            x[i] = -x[i]
            v[i] = -v[i]


@bz.kernel
def scale(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1], a: bz.float32):
    for i in range(x.shape[0]):
        y[i] = a * x[i]


@bz.kernel
def checked(x: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        x[i] += 1.0


def axpy_fusion() -> bz.Fusion:
    with bz.Fusion() as f:
        a = f.define_tensor(shape=(-1,), dtype=bz.float32)
        b = f.define_tensor(shape=(-1,), dtype=bz.float32)
        f.add_output(bz.ops.exp(a) * b + 1.0)
    return f


def particles(n: int = 257, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)


def test_a_replayed_step_equals_the_calls() -> None:
    x, v = particles()
    x2, v2 = x.copy(), v.copy()
    with bz.graph() as g:
        step(x, v, 1e-2)
    assert [launch.kernel for launch in g.launches] == ["step"] * 3
    for _ in range(20):
        g.replay()
    for _ in range(21):  # the body ran once, as a call
        step(x2, v2, 1e-2)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(v, v2)


def test_replay_reads_the_inputs_contents_changed_in_place() -> None:
    f = axpy_fusion()
    a, b = np.ones(100, np.float32), np.linspace(0, 1, 100, dtype=np.float32)
    (y,) = f.execute([a, b])  # a prepared call exists: the graph must not take it silently
    x, out = np.zeros(100, np.float32), np.zeros(100, np.float32)
    with bz.graph() as g:
        (y,) = f.execute([a, b])
        scale(y, out, 2.0)
    a[:] = np.linspace(-1, 1, 100, dtype=np.float32)
    b *= 3
    x[:] = 5  # not read by the graph
    g.replay()
    expected = np.exp(a.astype(np.float64)) * b + 1.0
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    np.testing.assert_allclose(out, 2 * expected, rtol=1e-6)


def test_scalars_are_the_recorded_ones() -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with bz.graph() as g:
        scale(x, y, 3.0)
    scale(x, y, 5.0)  # a call after the graph changes nothing in it
    y[:] = 0
    g.replay()
    np.testing.assert_array_equal(y, 3 * x)


def test_swapped_buffers_replay_in_recorded_order() -> None:
    a, b = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    a2, b2 = a.copy(), b.copy()
    with bz.graph() as g:
        for _ in range(3):
            scale(a, b, 2.0)
            scale(b, a, 0.5)
            scale(a, b, 3.0)
    for _ in range(4):
        for _ in range(3):
            scale(a2, b2, 2.0)
            scale(b2, a2, 0.5)
            scale(a2, b2, 3.0)
    g.replay()
    g.replay()
    g.replay()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)


def test_the_graph_keeps_the_arrays_it_launches_on_alive() -> None:
    f = axpy_fusion()
    a, b = np.zeros(64, np.float32), np.ones(64, np.float32)
    with bz.graph() as g:
        (y,) = f.execute([a, b])
        scratch = np.zeros(64, np.float32)
        scale(y, scratch, 1.0)
    watched = weakref.ref(scratch)
    out = weakref.ref(y)
    del y, scratch
    gc.collect()
    assert watched() is not None and out() is not None
    a[:] = 1
    g.replay()
    np.testing.assert_allclose(watched(), np.e + 1, rtol=1e-6)
    del g
    gc.collect()
    assert watched() is None


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.name)
def test_every_kernel_case_replays_as_it_calls(case) -> None:
    """Recorded, then every array set back to its first contents in place and replayed: a call."""
    rng = np.random.default_rng(2)
    recorded = case.args(rng)
    initial = [a.copy() if isinstance(a, np.ndarray) else a for a in recorded]
    if case.kernel.debug:
        with pytest.raises(bz.UnsupportedError, match="debug checks"), bz.graph():
            case.kernel(*recorded)
        return
    with bz.graph() as g:
        case.kernel(*recorded)
    for array, first in zip(recorded, initial):
        if isinstance(array, np.ndarray):
            np.copyto(array, first)
    g.replay()
    called = [a.copy() if isinstance(a, np.ndarray) else a for a in initial]
    case.kernel(*called)
    if case.compare is not None:
        case.compare(recorded, called)
        return
    for got, want in zip(recorded, called):
        if isinstance(got, np.ndarray):
            np.testing.assert_array_equal(got, want)


def test_a_record_inside_a_graph_sees_the_launches_too() -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with bz.graph() as g, bz.record() as rec:
        scale(x, y, 1.0)
    assert [launch.task for launch in rec.launches] == [launch.task for launch in g.launches]
    with bz.graph() as outer:
        with bz.graph() as inner:
            scale(x, y, 4.0)
        scale(y, x, 0.5)
    y[:] = 0
    inner.replay()
    np.testing.assert_array_equal(y, 4 * x)
    x[:] = 1
    outer.replay()  # both launches, in order
    np.testing.assert_array_equal(x, 2.0)


def test_a_replay_in_another_graphs_body_is_recorded_there() -> None:
    x, y = np.ones(4, np.float32), np.empty(4, np.float32)
    with bz.graph() as inner:
        scale(x, y, 2.0)
    with bz.graph() as outer:
        inner.replay()  # y = 2x
        scale(y, x, 3.0)  # x = 3y
    np.testing.assert_array_equal(x, 6)
    outer.replay()
    np.testing.assert_array_equal(y, 12)
    np.testing.assert_array_equal(x, 36)


def test_a_gpu_graph_replayed_in_another_graphs_body_is_refused() -> None:
    from braze.runtime.graph import Graph

    gpu = Graph()
    gpu.state, gpu.capture = "ready", object()  # as a body of GPU launches leaves it (no GPU needed)
    with bz.graph(), pytest.raises(bz.UnsupportedError, match="in another graph's body"):
        gpu.replay()


def test_what_a_graph_cannot_replay_is_refused() -> None:
    x = np.zeros(8, np.float32)
    debug = bz.kernel(checked.fn, debug=True)
    with pytest.raises(bz.UnsupportedError, match="kernel 'checked' has debug checks"), bz.graph():
        debug(x)
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(-1,), dtype=bz.float32)
        f.add_output(t + bz.ops.rand((4,)))
    with pytest.raises(bz.UnsupportedError, match="draws random numbers"), bz.graph():
        f.execute([np.zeros(4, np.float32)])


def test_a_record_field_whose_copy_a_replay_would_read_is_refused() -> None:
    """A field of a packed record array has strides of no whole element: each call reads a copy of it,
    which a replay would read again, unchanged, after the array changed."""
    records = np.zeros(4, np.dtype([("tag", "u1"), ("x", "f4")]))
    f = axpy_fusion()
    f.execute([records["x"], np.ones(4, np.float32)])  # outside a graph: read from a copy
    with pytest.raises(bz.UnsupportedError, match=r"bz.graph: input 0 \(T0\) has strides \(5,\), not whole "
                                                  r"4-byte elements"), bz.graph():
        f.execute([records["x"], np.ones(4, np.float32)])


def test_a_graph_replays_only_once_its_body_ended_without_error() -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with bz.graph() as g:
        with pytest.raises(bz.Error, match="has not ended yet"):
            g.replay()
    with pytest.raises(ZeroDivisionError), bz.graph() as failed:
        scale(x, y, 1.0)
        _ = 1 / 0
    with pytest.raises(bz.Error, match="its body raised"):
        failed.replay()
    g.replay()  # empty: nothing happens
