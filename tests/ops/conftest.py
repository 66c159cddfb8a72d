"""Under BRAZE_OPS_BACKEND=nvrtc, the CUDA source of every fusion the op tests ran is compiled with
NVRTC once they are done: to PTX without optimization (`-G`: the C++ front end and NVVM's code
generation, ten times faster than an optimized build; the GPU suite runs optimized ones), in batches
(one translation unit holds many kernels, so the prelude and headers are parsed once a batch) on
every core; any kernel of a failing batch is compiled alone to name it."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import oracle
import pytest
from engine.nvrtc_batches import compile_sources, renamed  # shared with the fusion fuzzer

BATCH = 100


def _failures(cases: list[tuple[str, str]]) -> list[str]:
    from braze.errors import CompileError

    found = []
    for test, body in cases:
        try:
            compile_sources([body])
        except CompileError as e:
            found.append(f"{test}:\n{e}")
    return found


@pytest.fixture(scope="session", autouse=True)
def compile_collected_cuda():
    yield
    if oracle.BACKEND != "nvrtc" or not oracle.CUDA_SOURCES:
        return
    from braze.errors import CompileError

    unique: dict[str, tuple[str, str]] = {}
    for test, source in oracle.CUDA_SOURCES:
        unique.setdefault(source.body, (test, renamed(source.body, source.functions, f"k{len(unique)}")))
    cases = list(unique.values())
    batches = [cases[start:start + BATCH] for start in range(0, len(cases), BATCH)]

    def check(batch) -> list[str]:
        try:
            compile_sources([f"// {test}\n{body}" for test, body in batch])
            return []
        except CompileError:
            return _failures(batch)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failures = [f for found in pool.map(check, batches) for f in found]
    sys.stderr.write(f"\nNVRTC compiled {len(cases)} distinct CUDA kernels of the op suite in "
                     f"{time.perf_counter() - started:.1f} s\n")
    if failures:
        raise AssertionError("CUDA sources NVRTC rejects:\n" + "\n\n".join(failures[:5]))
