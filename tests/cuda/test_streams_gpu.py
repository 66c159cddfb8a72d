"""Streams and what braze gives back on a GPU (runtime/cuda_resources.py, compile/cuda_driver.py): one
grid-reduction fusion
(a full sum and a column sum, whose blocks meet in a workspace) launched on four torch streams at
once, from one thread and from four, through the host program, the cached call, the native torch
call and a `bz.graph()`, each result against NumPy in float64; and a thousand fusions created,
called and dropped, after which braze's loaded modules and the GPU's free memory are back near
where they started. Each stream's input has another mean, so a stream reading another's partial
results or counters is off by far more than the tolerance.

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_streams_gpu.py
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver
from braze.runtime import cuda_resources

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

ROWS, COLUMNS = 8192, 1024  # 32 MB of float32: every SM is busy for a while on each
STREAMS, ROUNDS = 4, 40


def sums(scale: float = 1.0) -> bz.Fusion:
    """A full sum and a column sum of one input (`scale` makes another kernel)."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        y = x * scale if scale != 1.0 else x
        f.add_output(bz.ops.sum(y))
        f.add_output(bz.ops.sum(y, axes=[0]))
    return f


class Case:
    """One stream's input (mean `n + 1`) and its sums in float64."""

    def __init__(self, n: int, scale: float = 1.0) -> None:
        generator = torch.Generator().manual_seed(n)
        host = (torch.randn(ROWS, COLUMNS, generator=generator) + (n + 1)).numpy()
        self.x = torch.from_numpy(host).cuda()
        wide = host.astype(np.float64) * scale
        self.total, self.columns = wide.sum(), wide.sum(axis=0)

    def check(self, outputs: list) -> None:
        total, columns = (o.double().cpu().numpy() for o in outputs)
        np.testing.assert_allclose(total, self.total, rtol=1e-5)
        np.testing.assert_allclose(columns, self.columns, rtol=1e-5)


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    made = [Case(n) for n in range(STREAMS)]
    torch.cuda.synchronize()  # copied in on the default stream: the tests read them on others
    return made


def test_one_thread_launching_on_four_streams_gets_each_streams_sums(cases) -> None:
    f, streams = sums(), [torch.cuda.Stream() for _ in cases]
    results = []  # every output kept, so no output reuses the memory of another
    with config.scope(enable="poison_outputs"):  # the host program, outputs poisoned first
        for stream, case in zip(streams, cases):
            with torch.cuda.stream(stream):
                results.append((case, f.execute([case.x])))
    for _ in range(ROUNDS):  # the cached call, its launches queued on the four streams in turn
        for stream, case in zip(streams, cases):
            with torch.cuda.stream(stream):
                results.append((case, f.execute([case.x])))
    torch.cuda.synchronize()
    for case, outputs in results:
        case.check(outputs)


def test_four_threads_each_on_its_own_stream_get_their_sums(cases) -> None:
    f = sums()
    results: list[list] = [[] for _ in cases]
    errors: list[BaseException] = []
    start = threading.Barrier(len(cases))

    def work(n: int) -> None:
        try:
            stream = torch.cuda.Stream()
            start.wait()
            with torch.cuda.stream(stream):
                for _ in range(ROUNDS):
                    results[n].append(f.execute([cases[n].x]))
            stream.synchronize()
        except BaseException as error:  # noqa: BLE001  (reported by the main thread)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for case, outputs in zip(cases, results):
        assert len(outputs) == ROUNDS
        for out in outputs:
            case.check(out)


def test_a_graph_replayed_on_its_stream_while_other_streams_call_the_fusion(cases) -> None:
    f, streams = sums(), [torch.cuda.Stream() for _ in cases]
    f.execute([cases[0].x])  # prepared: the graph's body takes the host program anyway
    with torch.cuda.stream(streams[0]), bz.graph() as g:
        replayed = f.execute([cases[0].x])
    results = []
    for _ in range(ROUNDS):
        g.replay()  # on streams[0]
        for stream, case in zip(streams[1:], cases[1:]):
            with torch.cuda.stream(stream):
                results.append((case, f.execute([case.x])))
    torch.cuda.synchronize()
    cases[0].check(replayed)
    for case, outputs in results:
        case.check(outputs)


def test_a_fusion_dropped_while_its_kernels_wait_in_the_queue_computes_them_all(cases) -> None:
    """Its module is unloaded when the fusion goes, its kernels queued behind a sleeping one, and
    the next fusion's module loaded meanwhile."""
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this torch has no torch.cuda._sleep")
    scales = [1.0 + n / 8 for n in range(8)]
    for scale in scales:  # compiled once, so that below each load comes from the disk cache
        sums(scale).execute([cases[0].x])
    gc.collect()
    results = []
    for n, scale in enumerate(scales):
        torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time ahead of the fusion's kernels
        f = sums(scale)
        results.append((n, scale, f.execute([cases[n % len(cases)].x])))
        del f
        gc.collect()
    torch.cuda.synchronize()
    for n, scale, outputs in results:
        case = cases[n % len(cases)]
        total, columns = (o.double().cpu().numpy() for o in outputs)
        np.testing.assert_allclose(total, case.total * scale, rtol=1e-5)
        np.testing.assert_allclose(columns, case.columns * scale, rtol=1e-5)


def test_a_thousand_fusions_give_their_modules_and_gpu_memory_back() -> None:
    """50 kernels (their binaries from the disk cache after the first time), each loaded again by
    the next fusion that uses it after the last one went, and a grid reduction's workspace."""
    a = torch.ones(1 << 20, device="cuda")

    def run(n: int) -> None:
        with bz.Fusion() as f:
            x = f.define_tensor((-1,))
            f.add_output(bz.ops.sum(x * float(n % 50 + 2)))
            f.add_output(x + float(n % 50))
        for _ in range(2):  # the host program, then the cached call
            total, shifted = f.execute([a])
        assert np.isclose(total.item(), (1 << 20) * (n % 50 + 2), rtol=1e-6) and shifted[-1].item() == 1 + n % 50

    gc.collect()
    modules = cuda_driver.loaded_module_count()
    for n in range(50):
        run(n)
    gc.collect()
    torch.cuda.synchronize()
    assert cuda_driver.loaded_module_count() <= modules + 2
    # torch's count of its own bytes, not the device's free memory: the GPU suite runs in several
    # processes at once, whose allocations move that. The modules' memory is their count above.
    held = torch.cuda.memory_allocated()
    for n in range(1000):
        run(n)
    gc.collect()
    torch.cuda.synchronize()
    assert cuda_driver.loaded_module_count() <= modules + 2
    grown = (torch.cuda.memory_allocated() - held) / 2**20
    assert grown < 64, f"the outputs held grew {grown:.0f} MB over 1,000 fusions"
    assert len(cuda_resources._workspaces) <= 1  # one device's workspaces, not one set a fusion
