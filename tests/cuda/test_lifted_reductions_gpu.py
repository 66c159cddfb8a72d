"""Reductions placed by a pad, a cat or a slice_scatter (tests/lifted_reductions.py) on the GPU: torch
tensors in, each a view of a GPU buffer whose next row is NaN (a read past an input's end that reached an
output shows), outputs poisoned before the kernels write them, against NumPy in float64.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from lifted_reductions import (
    MIXED,
    Program,
    programs,
    row_sum_padded,
    row_sum_padded_expected,
    shifted_cross_entropy_backward,
    shifted_cross_entropy_backward_expected,
)

from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


def _poisoned_on_gpu(array: np.ndarray) -> torch.Tensor:
    buffer = torch.full((array.shape[0] + 1, *array.shape[1:]), float("nan"), dtype=torch.float32, device="cuda")
    buffer[: array.shape[0]] = torch.from_numpy(np.ascontiguousarray(array))
    return buffer[: array.shape[0]]


def _run(fusion, arrays: list[np.ndarray]) -> np.ndarray:
    with config.scope(enable="poison_outputs"):
        (got,) = fusion.execute([_poisoned_on_gpu(a) for a in arrays])
    torch.cuda.synchronize()
    return got.cpu().numpy()


@pytest.mark.parametrize("shape", [(0, 5), (4, 7), (37, 130), (9, 4099)])
def test_a_row_sum_padded_below(shape: tuple[int, int]) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_run(row_sum_padded(), [x]), row_sum_padded_expected(x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("batch, seq, vocab", [(2, 5, 11), (2, 9, 37), (2, 256, 2051)])
def test_the_shifted_cross_entropy_backward(batch: int, seq: int, vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    g, logp = (rng.standard_normal((batch * (seq - 1), vocab)).astype(np.float32) for _ in range(2))
    expected = shifted_cross_entropy_backward_expected(g, logp, batch, seq)
    got = _run(shifted_cross_entropy_backward(batch, seq, vocab), [g, logp])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3 * max(np.abs(expected).max(), 1.0))


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(MIXED))
def test_generated_placements_of_reductions_on_the_gpu(program: Program) -> None:
    arrays = program.arrays()
    expected = program.expected(arrays)
    scale = max(np.nanmax(np.abs(expected), initial=1.0), 1.0)
    np.testing.assert_allclose(_run(program.fusion(), arrays), expected, rtol=1e-4, atol=1e-4 * scale,
                               err_msg=repr(program))
