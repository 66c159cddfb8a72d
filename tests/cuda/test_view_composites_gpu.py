"""The views of braze/ops/view_composites.py (split, chunk, unbind, stack, repeat, tile,
repeat_interleave, roll, tril, triu, narrow, masked_fill, max(dim=)) on the GPU: the attention-shaped
fusion of tests/model_views.py over token counts from 1 to past a block, and each view alone, torch CUDA
tensors in, outputs poisoned before the kernels write them, against NumPy in float64.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import model_views
import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


def _on_the_gpu(f: bz.Fusion, arrays: list[np.ndarray]) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        outs = f.execute([torch.from_numpy(a).cuda() for a in arrays])
    assert all(isinstance(o, torch.Tensor) and o.device.type == "cuda" for o in outs)
    return [o.cpu().numpy() for o in outs]


@pytest.mark.parametrize("tokens", [1, 7, 130, 1031])
def test_an_attention_shaped_fusion_on_the_gpu(tokens: int) -> None:
    with bz.Fusion() as f:
        model_views.build(f)
    arrays = model_views.inputs(tokens, seed=tokens)
    for i, (out, want) in enumerate(zip(_on_the_gpu(f, arrays), model_views.reference(*arrays), strict=True)):
        assert out.shape == want.shape, i
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13, err_msg=f"output {i}")


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (33, 130), (257, 1025)])
def test_each_view_alone_on_the_gpu(shape: tuple[int, int]) -> None:
    x = np.random.default_rng(sum(shape)).uniform(-4, 4, shape).astype(np.float32)
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(-1, -1), dtype=bz.float32, name="x")
        for out in (*t.chunk(2, dim=0), bz.ops.stack([t, -t], 1), t.repeat(2, 3), t.repeat_interleave(3, dim=1),
                    t.roll((3, -5), dims=(0, 1)), t.tril(-1), t.triu(2), t.narrow(1, 0, 1), t.max(dim=1).indices):
            f.add_output(out)
    n = -(-shape[0] // 2)
    expected = [x[:n], x[n:], np.stack([x, -x], 1), np.tile(x, (2, 3)), np.repeat(x, 3, 1),
                np.roll(x, (3, -5), (0, 1)), np.tril(x, -1), np.triu(x, 2), x[:, :1], x.argmax(1)]
    if shape[0] == 1:  # torch's chunk of one row into two is one piece: refused over a symbolic extent
        with pytest.raises(bz.InputError, match="chunk"):
            _on_the_gpu(f, [x])
        return
    for i, (out, want) in enumerate(zip(_on_the_gpu(f, [x]), expected, strict=True)):
        assert out.shape == want.shape, i
        np.testing.assert_array_equal(out, want, err_msg=f"output {i}")
