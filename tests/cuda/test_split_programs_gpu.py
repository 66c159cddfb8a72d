"""A kernel of many tasks compiled as several NVRTC programs (braze/compile/cuda_kernel.py) on a GPU:
each task runs from its own program's module, results against NumPy in float64 with braze's outputs
poisoned first, the same as one program (`BRAZE_DISABLE=split_programs`), and every module of the
kernel unloads after the fusion is dropped.

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_split_programs_gpu.py
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

from braze import config, engine
from braze.compile import cuda_driver, cuda_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from many_task_fusions import inputs, many_tasks, reference  # noqa: E402

INPUTS = 4  # 12 tasks


@pytest.fixture
def program_sizes(monkeypatch) -> list[int]:
    """Programs of one task each; the program count of every kernel compiled from now on."""
    counts: list[int] = []
    compile_side_by_side = cuda_kernel.compile_side_by_side
    monkeypatch.setattr(cuda_kernel, "PROGRAM_CHARS", 1)
    monkeypatch.setattr("braze.compile.cuda_kernel.compile_side_by_side",
                        lambda units: (counts.append(len(units)), compile_side_by_side(units))[1])
    engine.forget_compiled_kernels()
    return counts


def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
    f = many_tasks(INPUTS)
    with config.scope(enable="poison_outputs"):
        outputs = f.execute([torch.from_numpy(a).cuda() for a in arrays])
    return [o.double().cpu().numpy() for o in outputs]


@pytest.mark.parametrize("split", [True, False])
def test_a_kernel_split_into_programs_computes_every_task(program_sizes, split) -> None:
    arrays = inputs(INPUTS, seed=3)
    if split:
        got = run(arrays)
    else:
        with config.scope(disable="split_programs"):
            got = run(arrays)
    assert program_sizes and set(program_sizes) == ({3 * INPUTS} if split else {1})
    for out, want in zip(got, reference(arrays), strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_every_module_of_a_split_kernel_unloads_after_its_fusion(program_sizes) -> None:
    gc.collect()
    modules = cuda_driver.loaded_module_count()
    arrays = inputs(INPUTS, seed=4)
    got = run(arrays)
    for out, want in zip(got, reference(arrays), strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    engine.forget_compiled_kernels()
    gc.collect()
    torch.cuda.synchronize()
    assert set(program_sizes) == {3 * INPUTS} and cuda_driver.loaded_module_count() <= modules
