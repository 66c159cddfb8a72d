"""What braze holds between calls is bounded: compiled kernels and cached calls go with the last
fusion that uses them, buffers kept between calls stay within BRAZE_KEPT_BUFFER_BYTES, and a long
run of fusions or shapes returns resident memory to its baseline."""

from __future__ import annotations

import gc
import importlib
import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import braze as bz
from braze import config, engine
from braze.runtime.fast_call import KEPT_BUFFERS

RSS_SLACK_MB = 50
jit_module = importlib.import_module("braze.frontend.jit")  # `braze.frontend.jit` names the decorator


def _run_measuring_rss(body: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Runs `body` in a fresh interpreter; it calls `mark()` once warm and the RSS (MB) at that
    point and at its end come back."""
    prologue = textwrap.dedent("""
        import os, numpy as np, braze as bz
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        baseline = []
        def mark():
            baseline.append(rss())
    """)
    epilogue = "\nprint(baseline[0], rss())\n"
    result = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(body) + epilogue], capture_output=True,
                            text=True, timeout=120, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    before, after = map(float, result.stdout.split()[-2:])
    return before, after


def test_resident_memory_returns_to_its_baseline_after_a_thousand_fusions() -> None:
    before, after = _run_measuring_rss("""
        a = np.ones(65536, np.float32)  # a 256 kB hidden output per fusion
        for n in range(1000):
            with bz.Fusion() as f:
                x = f.define_tensor((-1,))
                f.add_output(bz.ops.exp(x) * 2.0 + 1.0, hidden=True)
                f.add_output(x * 3.0)
            f.execute([a])
            f.execute([a])  # the cached call, with its hidden output kept
            if n == 50:
                mark()
    """)
    assert after - before < RSS_SLACK_MB, (before, after)


def test_resident_memory_stays_bounded_over_a_thousand_shapes_of_one_fusion() -> None:
    # Each shape's cached call would keep a 0.4 MB hidden output: 100 MB for the 256 calls kept.
    before, after = _run_measuring_rss("""
        with bz.Fusion() as f:
            x = f.define_tensor((-1,))
            f.add_output(x * 2.0, hidden=True)
            f.add_output(x + 1.0)
        for n in range(1000):
            a = np.ones(100_000 + n, np.float32)
            f.execute([a])
            (y,) = f.execute([a])
            assert y[-1] == 2.0
            if n == 50:
                mark()
    """, env={"BRAZE_KEPT_BUFFER_BYTES": str(16 << 20)})
    assert after - before < RSS_SLACK_MB, (before, after)


# --- compiled kernels go with the last user ---------------------------------------------------------
def _fusion(scale: float) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x * scale + 0.5)
    return f


def test_a_compiled_kernel_goes_with_the_last_fusion_using_it() -> None:
    held = set(engine._kernels.keys())
    f = _fusion(7.25)
    f.execute([np.ones(3, np.float32)])
    (key,) = set(engine._kernels.keys()) - held
    kernel = weakref.ref(engine._kernels[key])
    fusion = weakref.ref(f)
    del f
    gc.collect()
    assert fusion() is None and kernel() is None and key not in engine._kernels


def test_a_cached_call_keeps_its_kernel_loaded_after_its_runtime_is_dropped() -> None:
    f = _fusion(9.5)
    a = np.arange(5, dtype=np.float32)
    f.execute([a])
    f.execute([a])
    cache = engine._cache_of(f)
    compiled = weakref.ref(next(iter(cache.entries.values())).executor.compiled)
    cache.entries.clear()  # as when 64 other signatures pushed it out
    cache.by_kernel.clear()
    gc.collect()
    assert compiled() is not None  # the cached call still launches its code
    (out,) = f.execute([a])
    np.testing.assert_array_equal(out, a * 9.5 + 0.5)


# --- buffers kept between calls -------------------------------------------------------------------
def _hidden_output_fusion() -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        h = x * 2.0
        f.add_output(h, hidden=True)
        f.add_output(h + x)
    return f


@pytest.mark.parametrize("budget", [0, 1 << 16, 1 << 20])
def test_kept_buffers_stay_within_their_byte_budget_and_results_stay_right(budget: int) -> None:
    f = _hidden_output_fusion()
    with config.scope(kept_buffer_bytes=budget):
        for n in range(40):
            a = np.arange(1000 + 100 * n, dtype=np.float32)
            for _ in range(2):
                (out,) = f.execute([a])
                np.testing.assert_array_equal(out, a * 3)
            assert KEPT_BUFFERS.total <= budget
        last = f.__dict__["_fast_calls"].last  # the most recent call keeps its buffers where they fit
        assert (last.kept is not None) == (budget >= 4 * (1000 + 100 * 39))
        (out,) = f.execute([np.arange(1000, dtype=np.float32)])  # a call whose buffers were given up
        np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32) * 3)


def test_threads_sharing_the_budget_keep_it_and_their_results() -> None:
    fusions = [_hidden_output_fusion() for _ in range(4)]
    failures = []

    def work(f: bz.Fusion, seed: int) -> None:
        for n in range(60):
            a = np.arange(500 + 37 * ((n * 7 + seed) % 12), dtype=np.float32) + seed
            (out,) = f.execute([a])
            if not np.array_equal(out, a * 3):
                failures.append((seed, n))

    budget = 1 << 14
    with config.scope(kept_buffer_bytes=budget):
        threads = [threading.Thread(target=work, args=(f, seed)) for seed, f in enumerate(fusions * 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures and KEPT_BUFFERS.total <= budget
    prepared = [p for f in fusions for p in f.__dict__["_fast_calls"].prepared.values() if p is not None]
    assert prepared and all(id(p) in KEPT_BUFFERS.holders for p in prepared if p.kept is not None)


def test_a_dropped_fusion_takes_its_kept_bytes_off_the_count() -> None:
    f = _hidden_output_fusion()
    gc.collect()  # earlier tests' fusions
    before = KEPT_BUFFERS.total
    a = np.ones(10_000, np.float32)
    f.execute([a])
    f.execute([a])
    assert KEPT_BUFFERS.total == before + a.nbytes
    del f
    gc.collect()
    assert KEPT_BUFFERS.total == before


def test_a_fusions_arrays_are_not_kept_after_its_call() -> None:
    f = _hidden_output_fusion()
    a = np.ones(1000, np.float32)
    f.execute([a])
    (out,) = f.execute([a])
    refs = [weakref.ref(a), weakref.ref(out)]
    del a, out
    gc.collect()
    assert all(r() is None for r in refs)


# --- @bz.jit keeps its most recently used signatures ------------------------------------------------
def test_jit_keeps_the_fusions_of_its_most_recent_signatures(monkeypatch) -> None:
    monkeypatch.setattr(jit_module, "MAX_TRACES", 3)
    double = bz.jit(lambda x: x * 2)
    dtypes = [np.float32, np.float64, np.int32, np.int64]
    fusions = []
    for dtype in dtypes:
        np.testing.assert_array_equal(double(np.arange(4, dtype=dtype)), np.arange(4) * 2)
        fusions.append(weakref.ref(next(reversed(double.fusions.values()))[0].fusion))
    gc.collect()
    assert len(double.fusions) == 3 and fusions[0]() is None and all(f() is not None for f in fusions[1:])
    double(np.arange(4, dtype=np.float32))  # traced again: float64's, the least recently used, goes
    gc.collect()
    assert len(double.fusions) == 3 and fusions[1]() is None and fusions[2]() is not None
