"""Index arithmetic divided as unsigned values (braze/kir/signs.py, codegen/cuda_rules.py
index_division) on the GPU: views whose index decompositions divide by extents and constants (cat
and broadcasts, reshapes, grouped sums, transposes), at empty, unit and odd extents, against NumPy
in float64, outputs poisoned first.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


def rope(f, x, cos):
    return x * cos + bz.ops.cat([-x[..., 2:], x[..., :2]], -1)


def reshape_bias(f, x, bias):
    return bz.ops.reshape(x, [x.shape[0], -1]) + bias


def grouped_sums(f, x):
    return bz.ops.sum(bz.ops.reshape(x, [x.shape[0], 3, -1]), axes=[2])


def transposed(f, x, y):
    return x + bz.ops.transpose(y, 0, 1)


REFERENCES = {
    rope: lambda x, cos: x * cos + np.concatenate([-x[..., 2:], x[..., :2]], -1),
    reshape_bias: lambda x, bias: x.reshape(x.shape[0], -1) + bias,
    grouped_sums: lambda x: x.reshape(x.shape[0], 3, -1).sum(axis=2),
    transposed: lambda x, y: x + y.T,
}

CASES = [
    (rope, [(2, 5, 3, 4), (1, 5, 1, 4)]), (rope, [(3, 0, 2, 4), (1, 0, 1, 4)]),
    (rope, [(4, 33, 5, 12), (1, 33, 1, 12)]),
    (reshape_bias, [(3, 5, 7), (35,)]), (reshape_bias, [(2, 0, 3), (0,)]), (reshape_bias, [(1, 1, 1), (1,)]),
    (grouped_sums, [(3, 6, 5, 7)]), (grouped_sums, [(2, 6, 0, 3)]), (grouped_sums, [(5, 6, 33, 17)]),
    (transposed, [(5, 7), (7, 5)]), (transposed, [(0, 3), (3, 0)]), (transposed, [(67, 129), (129, 67)]),
]


@pytest.mark.parametrize("build, shapes", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_views_divide_their_indices_as_the_reference(build, shapes, dtype):
    torch_dtype = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(len(str(shapes)))
    tensors = [torch.randn(shape, generator=g, device="cuda").to(torch_dtype) for shape in shapes]
    with bz.Fusion() as f:
        inputs = [f.define_tensor([1 if n == 1 else -1 for n in t.shape], dtype=getattr(bz, dtype)) for t in tensors]
        f.add_output(build(f, *inputs))
    with config.scope(enable="poison_outputs"):
        (out,) = f.execute(tensors)
    want = REFERENCES[build](*[t.float().cpu().numpy().astype(np.float64) for t in tensors])
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    assert tuple(out.shape) == want.shape
    got = out.float().cpu().numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * max(np.abs(want).max(initial=0.0), 1.0))
