"""`bz.graph()` on a GPU: the launches of a `with` body captured into one CUDA graph, replayed with
one cuGraphLaunch, against calling the body again and against NumPy in float64 (outputs poisoned
first, so an element the replay does not write shows).

Every test needs an NVIDIA GPU (`make gpu-test`); run just these with

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_graph_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import cuda_driver
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
DT, K, DAMPING = 1e-2, 4.0, 0.999
LIBRARIES = ["torch", "cuda"]


@bz.kernel
def spring_forces(x: bz.Array[bz.float32, 1], f: bz.Array[bz.float32, 1]):
    """Two launches: the second loop reads neighbours and runs over fewer indices."""
    for i in range(x.shape[0]):
        f[i] = -4.0 * x[i]
    for i in range(1, x.shape[0] - 1):
        f[i] += x[i - 1] + x[i + 1] - 2.0 * x[i]


@bz.kernel
def integrate(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], f: bz.Array[bz.float32, 1], dt: bz.float32):
    for i in range(x.shape[0]):
        v[i] = v[i] * 0.999 + f[i] * dt
    for i in range(x.shape[0]):
        x[i] += v[i] * dt


def sim_step(x, v, f) -> None:
    spring_forces(x, f)
    integrate(x, v, f, np.float32(DT))


def reference_steps(x: np.ndarray, v: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    x, v = x.astype(np.float64), v.astype(np.float64)
    for _ in range(steps):
        f = -K * x
        f[1:-1] += x[:-2] + x[2:] - 2.0 * x[1:-1]
        v = v * DAMPING + f * DT
        x = x + v * DT
    return x, v


def on_device(library: str, array: np.ndarray):
    if library == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(array.copy()).cuda()
    return DeviceArray.from_numpy(array)


def on_host(value) -> np.ndarray:
    if isinstance(value, DeviceArray):
        return value.numpy()
    return value.cpu().numpy()


def poisoned(library: str, n: int):
    return on_device(library, np.full(n, np.nan, np.float32))


def start(n: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, n).astype(np.float32), np.zeros(n, np.float32)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_step_replayed_999_times_equals_1000_calls(library):
    x0, v0 = start()
    x, v, f = on_device(library, x0), on_device(library, v0), poisoned(library, x0.size)
    with bz.graph() as g:
        sim_step(x, v, f)  # runs once, as a call
    assert g.gpu_nodes == len(g.launches) == 3  # the forces' two loops, and integrate's two fused
    for _ in range(999):
        g.replay()
    called = on_device(library, x0), on_device(library, v0), poisoned(library, x0.size)
    for _ in range(1000):
        sim_step(*called)
    np.testing.assert_array_equal(on_host(x), on_host(called[0]))
    np.testing.assert_array_equal(on_host(v), on_host(called[1]))
    want_x, want_v = reference_steps(x0, v0, 1000)
    np.testing.assert_allclose(on_host(x), want_x, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(on_host(v), want_v, rtol=1e-3, atol=1e-4)


def test_a_graph_of_1000_steps_replays_as_1000_calls():
    x0, v0 = start(1 << 16)
    x, v, f = on_device("torch", x0), on_device("torch", v0), poisoned("torch", x0.size)
    with bz.graph() as g:
        for _ in range(1000):
            sim_step(x, v, f)
    assert g.gpu_nodes == len(g.launches) == 3000
    x.copy_(on_device("torch", x0))  # back to the start, in place: the graph reads these buffers
    v.copy_(on_device("torch", v0))
    f.fill_(float("nan"))
    g.replay()
    want_x, want_v = reference_steps(x0, v0, 1000)
    np.testing.assert_allclose(on_host(x), want_x, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(on_host(v), want_v, rtol=1e-3, atol=1e-4)


def test_fusions_and_loop_kernels_in_one_graph_read_inputs_changed_in_place():
    torch = pytest.importorskip("torch")
    with bz.Fusion() as fusion:
        a = fusion.define_tensor(shape=(-1, -1), dtype=bz.float32)
        fusion.add_output(bz.ops.sum(bz.ops.exp(a), axes=[1]))  # a row reduction into a fresh buffer
        fusion.add_output(bz.ops.sum(a, axes=[0]))  # a column reduction
    rng = np.random.default_rng(1)
    host = rng.uniform(-1, 1, (300, 700)).astype(np.float32)
    a = torch.from_numpy(host).cuda()
    out = torch.full((300,), float("nan"), device="cuda")
    with bz.graph() as g:
        rows, columns = fusion.execute([a])
        spring_forces(rows, out)
    del rows  # the graph keeps its buffer: a replay writes it
    host = rng.uniform(-1, 1, (300, 700)).astype(np.float32)
    a.copy_(torch.from_numpy(host))
    out.fill_(float("nan"))
    columns.fill_(float("nan"))
    g.replay()
    row_sums = np.exp(host.astype(np.float64)).sum(axis=1)
    forces = -K * row_sums
    forces[1:-1] += row_sums[:-2] + row_sums[2:] - 2 * row_sums[1:-1]
    np.testing.assert_allclose(out.cpu().numpy(), forces, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(columns.cpu().numpy(), host.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-4)


def test_a_graph_replays_on_the_stream_it_was_recorded_for():
    torch = pytest.importorskip("torch")
    x0, v0 = start()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x, v, f = on_device("torch", x0), on_device("torch", v0), poisoned("torch", x0.size)
        with bz.graph() as g:
            sim_step(x, v, f)
    for _ in range(9):
        g.replay()  # queued on `side`, as the recording was
    side.synchronize()
    want_x, _ = reference_steps(x0, v0, 10)
    np.testing.assert_allclose(on_host(x), want_x, rtol=1e-4, atol=1e-5)


def test_what_a_gpu_graph_cannot_hold_is_refused():
    x = on_device("torch", np.zeros(8, np.float32))
    f = poisoned("torch", 8)
    debug = bz.kernel(spring_forces.fn, debug=True)
    with pytest.raises(bz.UnsupportedError, match="debug checks"), bz.graph():
        debug(x, f)
    with pytest.raises(bz.UnsupportedError, match="profile outside the graph"), \
            bz.record(profile=True), bz.graph():
        spring_forces(x, f)
    spring_forces(x, f)  # the failed captures left the stream usable
    np.testing.assert_array_equal(on_host(f), 0.0)
