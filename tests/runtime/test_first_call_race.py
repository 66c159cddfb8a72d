"""Threads racing on a first call: 8 threads call a fusion, a `@bz.jit` function and a `@bz.kernel`
that no thread has called yet, at once. Each round runs in a fresh process (a crash there would
kill the test run otherwise), with new definitions whose kernels no process has compiled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from braze.compile import cuda_driver

ROUND = textwrap.dedent("""
    import faulthandler, sys, threading
    faulthandler.dump_traceback_later(150, exit=True)  # a round that hangs shows where each thread waits
    import numpy as np
    import braze as bz

    salt = float(sys.argv[1])  # a constant of its own, so no cached kernel serves this round
    on_gpu = sys.argv[2] == "cuda"
    if on_gpu:
        import torch
    threads = 8
    barrier = threading.Barrier(threads)

    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.softmax(x * salt, axis=-1))
        f.add_output((x + salt).sum(0))

    @bz.jit
    def gelu_shift(x):
        return bz.ops.gelu(x - salt)

    @bz.kernel
    def scale(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
        for i in range(a.shape[0]):
            out[i] = a[i] * salt + 1.0

    def device(array):
        return torch.from_numpy(array).cuda() if on_gpu else array

    def host(array):
        return array.cpu().numpy() if on_gpu else array

    def work(seed, failures):
        try:
            rng = np.random.default_rng(seed)
            x = rng.standard_normal((64, 300)).astype(np.float32)
            a = rng.standard_normal(5000).astype(np.float32)
            out = np.full_like(a, np.nan)
            xd, ad, outd = device(x), device(a), device(out)
            # A thread that fails before here breaks the barrier: the others stop too, not wait forever.
            barrier.wait(timeout=120)
            soft, col = map(host, f.execute([xd]))
            y = host(gelu_shift(xd))
            scale(ad, outd)
            out = host(outd)
            want_soft, want_col = f.execute([x], backend="reference")
            checks = {"softmax": np.allclose(soft, want_soft, rtol=1e-5, atol=1e-6),
                      "column sum": np.allclose(col, want_col, rtol=1e-4, atol=1e-3),
                      "loop kernel": np.allclose(out, a * np.float32(salt) + 1, rtol=1e-6),
                      "jit": y.shape == x.shape and bool(np.isfinite(y).all())}
            wrong = [name for name, ok in checks.items() if not ok]
            if wrong:
                failures.append(f"thread {seed}: wrong {wrong}; softmax error {np.abs(soft - want_soft).max()}, "
                                f"column sum error {np.abs(col - want_col).max()}")
        except Exception as error:
            barrier.abort()
            failures.append(f"thread {seed}: {type(error).__name__}: {error}")

    failures = []
    pool = [threading.Thread(target=work, args=(n, failures)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not failures, failures
    print("ok")
""")


def race(round_: int, device: str, folder) -> None:
    # A fresh, empty cache each round: every thread compiles, loads and tiers up at once.
    env = dict(os.environ, BRAZE_CACHE_DIR=str(folder / "cache"))
    script = folder / "race.py"  # a file: @bz.kernel reads its function's source
    script.write_text(ROUND)
    result = subprocess.run([sys.executable, str(script), f"{1.25 + round_ / 64}", device], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (
        f"round {round_} on {device}: exit code {result.returncode}\n{result.stdout}\n{result.stderr[-20000:]}")


@pytest.mark.parametrize("round_", range(20))
def test_eight_threads_racing_on_a_first_call(round_, tmp_path):
    race(round_, "cpu", tmp_path)


@pytest.mark.cuda
@pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("round_", range(100))  # the GPU suite's time allows the goal's hundred runs
def test_eight_threads_racing_on_a_first_call_on_the_gpu(round_, tmp_path):
    pytest.importorskip("torch")
    race(round_, "cuda", tmp_path)
