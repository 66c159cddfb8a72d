"""The scaled causal-masked softmax on a GPU (the suite's `scaled_masked_softmax`): rows held in
registers keep their exponentials from the loop that sums them to the loop that divides
(codegen/cuda_row_values.py), and divide by the sum through its scaled reciprocal
(passes/hoist.py). Rows of one warp (1000, 1024), of a whole block (2048), of shared memory (4096)
and short ones (1, 7), with fully masked rows (0/0: NaN) among them; torch CUDA tensors in, outputs
poisoned first, against NumPy in float64.

    pytest -m cuda tests/cuda/test_masked_softmax_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest
import row_quotients

import braze as bz
from braze import config
from braze.cli.bench.cases import ATTENTION_SCALE
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16}
TOLERANCE = {bz.float32: 1e-5, bz.bfloat16: 1e-2}


def masked_softmax(dtype) -> bz.Fusion:
    with bz.Fusion() as f:
        x, mask = f.define_tensor((-1, -1, -1), dtype=dtype), f.define_tensor((1, -1, -1), dtype=bz.bool_)
        scores = bz.ops.where(mask, bz.ops.cast(x, bz.float32) * ATTENTION_SCALE, float("-inf"))
        f.add_output(bz.ops.cast(bz.ops.softmax(scores, -1), dtype))
    return f


def reference(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        scores = np.where(mask, x * ATTENTION_SCALE, -np.inf)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def inputs(batch: int, rows: int, length: int, dtype, misaligned: bool, seed: int = 0):
    """Scores [batch, rows, length] (`misaligned`: sliced one element into longer rows, so no row
    starts on 16 bytes) and a causal mask [1, rows, length] whose rows 1 and the last are all masked."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((batch, rows, length + misaligned), generator=g) * 4).to(TORCH[dtype]).cuda()[..., misaligned:]
    mask = torch.ones((rows, length), dtype=torch.bool).tril(diagonal=length - rows)
    mask[min(1, rows - 1)] = False
    mask[-1] = False
    return x, mask[None].cuda()


@pytest.mark.parametrize("dtype", [bz.bfloat16, bz.float32], ids=lambda d: d.name)
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("length", [1, 7, 1000, 1024, 2048, 4096])
def test_masked_softmax_rows_match_numpy(length, misaligned, dtype):
    x, mask = inputs(3, 37, length, dtype, misaligned)
    f = masked_softmax(dtype)
    with config.scope(enable="poison_outputs"):
        with bz.record() as rec:
            (out,) = f.execute([x, mask])
        (again,) = f.execute([x, mask])
    torch.cuda.synchronize()
    assert len(rec.launches) == 1
    if length in (1000, 1024) and dtype == bz.bfloat16:
        assert rec.launches[0].task.endswith("_warp")  # one warp a row, the row in its registers
    want = reference(x.double().cpu().numpy(), mask.cpu().numpy())
    got = out.double().cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # fully masked rows only
    assert np.isnan(want[:, -1]).all()
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=tolerance, atol=tolerance / 10)
    assert torch.equal(again.isnan(), out.isnan()) and torch.equal(again.nan_to_num(), out.nan_to_num())


def test_division_by_extreme_row_maxima_on_the_gpu():
    """x / max(row) with divisors whose reciprocal is not a normal float32: the scaled reciprocal."""
    x = row_quotients.rows(1024)
    with config.scope(enable="poison_outputs"):
        (got,) = row_quotients.divided_by_row_maximum().execute([torch.from_numpy(x).cuda()])
    row_quotients.check_quotients(x, got.cpu().numpy())


@pytest.mark.parametrize("build", [lambda x: x * 3.0, lambda x: x + x, lambda x: x - 2.0], ids=["mul", "add", "sub"])
def test_arithmetic_nans_convert_to_the_bits_the_payload_rule_gives(build):
    """A NaN an add, subtract or multiply makes is the canonical one (no payload) on the GPU, so the
    bare conversion (bz_arith_float_to_bf16_bits) gives 0x7fff, as the payload rule would; a NaN
    loaded and converted as it is keeps its payload's top bits."""
    bits = np.array([0x7FC12345, 0xFFC00001, 0x7F800001, 0x3F800000], np.uint32)
    x = torch.from_numpy(bits.view(np.float32).copy()).cuda()
    with bz.Fusion() as f:
        t = f.define_tensor((-1,), dtype=bz.float32)
        f.add_output(bz.ops.cast(build(t), bz.bfloat16))
        f.add_output(bz.ops.cast(t, bz.bfloat16))
    with config.scope(enable="poison_outputs"):
        computed, loaded = f.execute([x])
    computed = computed.view(torch.int16).cpu().numpy().view(np.uint16)
    loaded = loaded.view(torch.int16).cpu().numpy().view(np.uint16)
    assert list(computed[:3]) == [0x7FFF] * 3
    assert list(loaded[:3]) == [0x7FC1, 0xFFC0, 0x7FC0]
