"""A residual add (or dropout + residual) under rms_norm or layer_norm in one task on a GPU
(braze/passes/fold_rows.py): the row the first loop stores is read back from registers, shared memory
or (rows too long for either) the memory the same lanes wrote (cuda_plan.RowCache.stored), and rand
draws one Philox block for four elements of a 16-byte loop (cuda_random). Torch CUDA tensors in,
outputs poisoned first, h and y against NumPy in float64; each path by the shapes that take it.

    pytest -m cuda tests/cuda/test_fold_rows_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest
from residual_norms import NORM_IDS, NORMS, SEED, P, build, reference

import braze as bz
from braze import config
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16}
TOLERANCE = {bz.float32: 1e-5, bz.bfloat16: 2e-2}

# Which path each shape's rows take (256 threads a block):
SHAPES = [
    (8192, 4096),  # the suite's: a block a row in registers (bfloat16: x and r issued first)
    (64, 8192),  # float32 in registers; bfloat16 past their 4096 elements: shared memory
    (3, 40000),  # shared memory (bfloat16); float32 past 96 KiB: read back from memory
    (2, 60000),  # read back from the memory the same lanes wrote, 16 bytes at a time
    (2, 70001),  # the same, an element at a time (4 divides no odd row)
    (1000, 33),  # several rows a block, an element at a time
    (1024, 128),  # several rows a block, 16 bytes at a time
    (7, 3), (5, 1), (1, 1), (0, 16),
]


def tensors(shape, dtype, layout: str, seed: int = 0) -> list:
    """x, r, weight, bias on the GPU. `misaligned`: x and r sliced from rows one element longer, so
    neighbouring rows of a block start aligned or not and take different paths; `transposed`: x
    column-major."""
    g = torch.Generator().manual_seed(seed)
    rows, columns = shape
    wide = layout == "misaligned"
    x, r = (torch.randn((rows, columns + wide), generator=g).to(TORCH[dtype]).cuda()[:, wide:] for _ in range(2))
    if layout == "transposed":
        x = x.t().contiguous().t()
    w, b = (torch.randn(columns, generator=g).to(TORCH[dtype]).cuda() for _ in range(2))
    return [x, r, w, b]


def check(norm: str, dtype, dropout: bool, shape, layout: str) -> None:
    inputs = tensors(shape, dtype, layout)
    f = build(norm, dtype, 2, dropout)
    with config.scope(enable="poison_outputs"):
        with bz.record() as rec:
            y, h = f.execute(inputs)
        again = f.execute(inputs)
    torch.cuda.synchronize()
    # h and y in one kernel; a transposed x makes h a tile task of its own (braze/lower/tiles.py).
    assert len(rec.launches) <= (2 if layout == "transposed" else 1)
    want_y, want_h = reference(norm, dtype, dropout, *(t.double().cpu().numpy() for t in inputs))
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(h.double().cpu().numpy(), want_h, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(y.double().cpu().numpy(), want_y, rtol=tolerance, atol=tolerance)
    assert torch.equal(again[0], y) and torch.equal(again[1], h)  # the same bits run to run


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("norm, dropout", NORMS, ids=NORM_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_h_and_y_in_one_task_match_numpy(norm, dropout, dtype, shape):
    check(norm, dtype, dropout, shape, "contiguous")


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("layout", ["misaligned", "transposed"])
@pytest.mark.parametrize("shape", [(4096, 4096), (300, 128), (33, 130), (2, 60000)], ids=str)
def test_rows_that_cannot_move_16_bytes_read_back_their_own_elements(dtype, layout, shape):
    check("layer_norm", dtype, True, shape, layout)


def test_a_sliced_dropout_mask_draws_the_words_its_counters_name():
    # keep = rand over [rows, n + 1] without its first column: each 16-byte group's counters start
    # one past a multiple of 4 (rows whose length 4 divides), so each draws from two blocks.
    rows, n = 64, 4096
    with bz.Fusion() as f:
        z = f.define_tensor([-1, -1])
        x, r = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        keep = bz.ops.rand(z.shape, seed=SEED)[:, 1:] >= P
        h = bz.ops.where(keep, x, 0.0) + r
        f.add_output(bz.ops.softmax(h, -1))
        f.add_output(h)
    x, r = (torch.randn(rows, n).cuda() for _ in range(2))
    z = torch.empty(rows, n + 1).cuda()
    with config.scope(enable="poison_outputs"):
        y, h = f.execute([z, x, r])
    want = f.execute([z.cpu().numpy(), x.cpu().numpy(), r.cpu().numpy()], backend="reference")
    np.testing.assert_array_equal(h.cpu().numpy(), want[1])  # the same mask, bit for bit
    np.testing.assert_allclose(y.cpu().numpy(), want[0], rtol=1e-5, atol=1e-7)


def test_fold_rows_off_gives_the_same_results():
    inputs = tensors((512, 1024), bz.bfloat16, "contiguous")
    folded = build("layer_norm", bz.bfloat16, 2, True).execute(inputs)
    with config.scope(disable="fold_rows"):
        apart = build("layer_norm", bz.bfloat16, 2, True).execute(inputs)
    assert torch.equal(folded[1], apart[1])  # h: the same words, the same adds
    np.testing.assert_allclose(folded[0].double().cpu().numpy(), apart[0].double().cpu().numpy(), rtol=2e-2,
                               atol=2e-2)
