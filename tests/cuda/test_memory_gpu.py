"""The memory bounds of tests/runtime/test_memory_bounds.py on torch CUDA tensors: after 1,000 fusions
created, called and dropped, and over 1,000 shapes of one fusion, the GPU memory braze's calls hold
(through torch's caching allocator) and the process's resident memory return near their baselines."""

from __future__ import annotations

import pytest
from runtime.test_memory_bounds import RSS_SLACK_MB, _run_measuring_rss

from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

GPU_SLACK_MB = 64


def test_gpu_and_host_memory_return_after_a_thousand_fusions() -> None:
    pytest.importorskip("torch")
    before, after = _run_measuring_rss(f"""
        import torch
        a = torch.ones(1 << 20, device="cuda")  # a 4 MB hidden output per fusion
        held = []
        for n in range(1000):
            with bz.Fusion() as f:
                x = f.define_tensor((-1,))
                f.add_output(bz.ops.exp(x) * 2.0 + 1.0, hidden=True)
                f.add_output(x * 3.0)
            f.execute([a])
            f.execute([a])  # the cached call, with its hidden output kept
            if n == 50:
                mark()
                held.append(torch.cuda.memory_allocated())
        del f
        import gc; gc.collect()
        grown = (torch.cuda.memory_allocated() - held[0]) / 2**20
        assert grown < {GPU_SLACK_MB}, f"GPU memory grew {{grown:.0f}} MB over 950 fusions"
    """)
    assert after - before < RSS_SLACK_MB, (before, after)


def test_gpu_memory_kept_between_calls_stays_within_its_budget() -> None:
    pytest.importorskip("torch")
    before, after = _run_measuring_rss(f"""
        import torch
        with bz.Fusion() as f:
            x = f.define_tensor((-1,))
            f.add_output(x * 2.0, hidden=True)
            f.add_output(x + 1.0)
        start = torch.cuda.memory_allocated()
        for n in range(1000):
            a = torch.ones(1_000_000 + n, device="cuda")
            (y,) = f.execute([a])
            (y,) = f.execute([a])
            assert y[-1].item() == 2.0
            if n == 50:
                mark()
        del a, y
        kept = (torch.cuda.memory_allocated() - start) / 2**20
        assert kept < 16 + {GPU_SLACK_MB}, f"{{kept:.0f}} MB kept on the GPU with a 16 MB budget"
    """, env={"BRAZE_KEPT_BUFFER_BYTES": str(16 << 20)})
    assert after - before < RSS_SLACK_MB, (before, after)
