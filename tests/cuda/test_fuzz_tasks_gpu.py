"""Differential fuzzing of task fusion on a GPU: the random loop programs of
tests/passes/test_fuzz_tasks.py (2 to 8 tasks over 1 to 4 arrays, injective and non-injective
indices, `if`s, locals, integer atomics), run fused and unfused on the GPU against plain Python
over NumPy on the host.

On the CPU those programs run each task on one thread in index order, so even a task that races
with itself has one result. On a GPU its threads run at once, so only programs whose every task
is race-free on its own have one answer: each array a task writes is accessed in that task only at
rows it owns (one injective row index; any column), and other arrays are only read. Such programs
must give the same arrays fused, unfused and in Python, whatever the fuser decided across tasks.
Sliding-window arguments are left to tests/cuda/test_loop_kernels.py (a window's column 1 is the
next row's column 0, so a task writing one races with itself).

Every test needs an NVIDIA GPU (`make gpu-test`); run just this one with

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_fuzz_tasks_gpu.py
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sibling_tests
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import braze as bz
from braze import config
from braze.compile import cuda_driver
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]


fuzz = sibling_tests.load("passes/test_fuzz_tasks.py")
# A store, an update, or an atomic min or max into an array (`if` lines only read): an atomic is a write
# too, which another thread's read of the same element races with (`atomic_min(a0[i], a0[i + 3])`).
WRITE = re.compile(r"\s*(?:@atomic\|\w+\|)?(a\d)\[.*?\](?:\s*\+?= |\|)")
ACCESS = re.compile(r"\b(a\d)\[([^\],]+)(?:, [^\]]+)?\]")
OWNED_ROWS = set(fuzz.INDICES[:6])  # the injective row indices of the generator


def race_free(body: list[str]) -> bool:
    """Whether one task alone has one result on a GPU: every array it writes is accessed, in it,
    at one owned row index only."""
    written = {m.group(1) for line in body if (m := WRITE.match(line))}
    for array in written:
        rows = {row for line in body for name, row in ACCESS.findall(line) if name == array}
        if len(rows) != 1 or not rows <= OWNED_ROWS:
            return False
    return True


def on_the_gpu(kernel, host: list, fuse: bool) -> list:
    args = [DeviceArray.from_numpy(a) if isinstance(a, np.ndarray) else a for a in host]
    with config.scope(fuse_tasks=fuse):
        kernel(*args)
    return [a.numpy() if isinstance(a, DeviceArray) else a for a in args]


@settings(max_examples=fuzz.EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(fuzz.programs(), st.integers(0, 2**31))
def test_fused_unfused_and_python_agree_on_the_gpu(program, seed):
    arrays, columns, overlapping, tasks = program
    assume(not overlapping and all(race_free(body) for _, body in tasks))
    source = fuzz.render(arrays, columns, tasks, atomics=True)
    note(source)
    kernel = bz.kernel(fuzz.load(source))
    python_fn = fuzz.load(fuzz.render(arrays, columns, tasks, atomics=False))
    expected = fuzz.inputs(arrays, columns, overlapping, seed)
    with np.errstate(all="ignore"):
        python_fn(*expected)
    fused = on_the_gpu(kernel, fuzz.inputs(arrays, columns, overlapping, seed), fuse=True)
    unfused = on_the_gpu(kernel, fuzz.inputs(arrays, columns, overlapping, seed), fuse=False)
    for n, (got, off, want) in enumerate(zip(fused[:-1], unfused[:-1], expected[:-1])):
        # the GPU may contract a * b + c into one fused multiply-add: equal to rounding, not bit for bit
        np.testing.assert_allclose(off, want, rtol=1e-5, atol=1e-5, err_msg=f"unfused, argument {n}")
        np.testing.assert_allclose(got, off, rtol=1e-5, atol=1e-5, err_msg=f"fused, argument {n}")
