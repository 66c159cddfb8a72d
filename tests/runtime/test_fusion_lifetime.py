"""A fusion's runtime lives as long as the fusion and no longer, and leaves the user's object as it was.

- Running a fusion adds no reference to it and replaces nothing on it: the runtime holds the fusion
  weakly, and the native call on torch tensors is reached through the fusion's own `execute`.
- The runtime (its cache, runtimes, executors, compiled kernels and prepared calls) is in no
  reference cycle: reference counting alone frees it, with the garbage collector off, once the
  fusion lets it go. (The fusion itself is freed by the collector: its tensors refer to it, and a
  tensor kept on its own keeps its fusion.)
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

import braze as bz


@pytest.fixture
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _fusion() -> bz.Fusion:
    """Two tasks (a row reduction, then an elementwise op reading it), two outputs and a scalar."""
    with bz.Fusion(name="lifetime") as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        scale = f.define_scalar(dtype=bz.float32)
        rows = bz.ops.sum(bz.ops.exp(x), axes=[1])
        f.add_output(x / bz.ops.broadcast_in_dim(rows, [x.shape[0], x.shape[1]], [0]) * scale)
        f.add_output(rows)
    return f


def _runtime_parts(f: bz.Fusion) -> list[object]:
    """Everything the runtime made for `f`: its cache, runtimes, executors, compiled kernels and
    prepared calls."""
    cache, fast = f.__dict__["_fusion_cache"], f.__dict__["_fast_calls"]
    runtimes = list(cache.entries.values())
    executors = [r.executor for r in runtimes]
    prepared = [p for p in fast.prepared.values() if p is not None]
    assert runtimes and prepared
    return [cache, fast, *runtimes, *executors, *(e.compiled for e in executors), *prepared]


def _run(f: bz.Fusion, shapes: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        for _ in range(3):  # the first call prepares, the later ones take the prepared call
            normalized, sums = f.execute([x, 2.0])
        x64 = x.astype(np.float64)
        expected_sums = np.exp(x64).sum(axis=1)
        np.testing.assert_allclose(sums, expected_sums, rtol=1e-5)
        np.testing.assert_allclose(normalized, x64 / expected_sums[:, None] * 2.0, rtol=1e-5, atol=1e-6)


def test_running_a_fusion_adds_no_reference_to_it():
    f = _fusion()
    before = sys.getrefcount(f)
    _run(f, [(4, 8), (3, 5)])
    assert sys.getrefcount(f) == before


def test_a_fusion_runtime_is_freed_by_reference_counting_alone(no_collector):
    f = _fusion()
    _run(f, [(4, 8), (3, 5)])  # two descriptions: two prepared calls
    refs = [weakref.ref(part) for part in _runtime_parts(f)]
    del f.__dict__["_fusion_cache"], f.__dict__["_fast_calls"]  # as when the fusion itself is freed
    alive = [type(r()).__name__ for r in refs if r() is not None]
    assert not alive, f"kept alive by reference cycles: {alive}"


def test_a_prepared_call_evicted_by_another_configuration_is_freed(no_collector):
    f = _fusion()
    _run(f, [(4, 8)])
    (prepared,) = [weakref.ref(p) for p in f.__dict__["_fast_calls"].prepared.values()]
    with bz.config.scope(disable="kernel_reuse"):  # another configuration: the prepared calls are dropped
        _run(f, [(4, 8)])
    assert prepared() is None


def test_running_a_fusion_replaces_nothing_on_it():
    f = _fusion()
    _run(f, [(4, 8)])
    assert "execute" not in f.__dict__
    assert type(f).execute is bz.Fusion.execute
