"""Fusions with several reductions (a norm, a softmax of its rows, column sums for the weight
gradients) on the GPU, torch tensors in and out, outputs poisoned before the kernels write them.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_fusions import MODEL_FUSIONS, assert_close, build, inputs, reference

from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


# Rows of 4-element vectors and not, short and long enough to hold in registers or shared memory.
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (8, 16), (37, 100), (64, 1024), (33, 4096), (9, 20000)])
@pytest.mark.parametrize("name", MODEL_FUSIONS)
def test_several_reductions_on_the_gpu(name: str, shape: tuple[int, int]) -> None:
    arrays = inputs(name, *shape)
    with config.scope(enable="poison_outputs"):
        outs = build(name).execute([torch.from_numpy(a).cuda() for a in arrays])
    assert all(isinstance(o, torch.Tensor) and o.device.type == "cuda" for o in outs)
    assert_close([o.cpu().numpy() for o in outs], reference(name, arrays))


@pytest.mark.parametrize("name", MODEL_FUSIONS)
def test_several_reductions_on_strided_rows(name: str) -> None:
    """Rows that start off 16-byte boundaries take the scalar loops."""
    arrays = inputs(name, 24, 65)
    tensors = [torch.from_numpy(a).cuda() for a in arrays]
    tensors = [t[:, 1:] if t.ndim == 2 else t[1:] for t in tensors]
    with config.scope(enable="poison_outputs"):
        outs = build(name).execute(tensors)
    assert_close([o.cpu().numpy() for o in outs], reference(name, [np.asarray(t.cpu()) for t in tensors]))
