"""engine.compile_ahead: a fusion planned for stand-ins of its inputs, its kernel compiled on a worker
thread (braze/compile/compiled_kernel.py); the first call takes the plan and the kernel, and each kernel
still compiles once whichever threads race on it."""

from __future__ import annotations

import threading
import uuid

import numpy as np

import braze as bz
from braze import engine
from braze.compile import compiled_kernel
from braze.record import record


def _fusion() -> bz.Fusion:
    scale = float(uuid.uuid4().int % 1000) / 7 + 1  # a kernel no other test compiled
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        f.add_output(bz.ops.sum(bz.ops.exp(x) * scale, axes=[1]))
    f.scale = scale
    return f


def _stand_in(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """An array of that layout over one element: the plan reads layouts, never elements."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, strides)


def _expected(f: bz.Fusion, x: np.ndarray) -> np.ndarray:
    return (np.exp(x.astype(np.float64)) * f.scale).sum(axis=1)


def test_the_first_call_takes_the_plan_and_kernel_made_ahead() -> None:
    f, x = _fusion(), np.random.default_rng(0).standard_normal((6, 5), dtype=np.float32)
    with record() as ahead:
        engine.compile_ahead(f, [_stand_in((6, 5), (20, 4))])
    with record() as first:
        (out,) = f.execute([x])
    assert len(ahead.segments) == 1 and first.segments == []  # planned once, before the call
    assert len(ahead.compiles) + len(first.compiles) == 1  # the worker noted it where the caller recorded
    np.testing.assert_allclose(out, _expected(f, x), rtol=1e-5)


def test_a_stand_in_of_another_layout_leaves_the_call_to_plan_its_own() -> None:
    f, x = _fusion(), np.random.default_rng(1).standard_normal((6, 5), dtype=np.float32)
    engine.compile_ahead(f, [_stand_in((6, 5), (4, 24))])  # a transposed layout: another signature
    with record() as first:
        (out,) = f.execute([x])
    assert len(first.segments) == 1
    np.testing.assert_allclose(out, _expected(f, x), rtol=1e-5)


def test_threads_racing_a_compile_ahead_compile_once(monkeypatch) -> None:
    compiles, real = [], compiled_kernel.CompiledKernel._compile
    monkeypatch.setattr(compiled_kernel.CompiledKernel, "_compile",
                        lambda self: (compiles.append(self.kernel.name), real(self))[1])
    f = _fusion()
    x = np.random.default_rng(2).standard_normal((6, 5), dtype=np.float32)
    results, start = [None] * 8, threading.Barrier(9)

    def call(n: int) -> None:
        start.wait()
        results[n] = f.execute([x])[0]

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    engine.compile_ahead(f, [_stand_in((6, 5), (20, 4))])
    start.wait()
    for thread in threads:
        thread.join()
    assert len(compiles) == 1
    for out in results:
        np.testing.assert_allclose(out, _expected(f, x), rtol=1e-5)
