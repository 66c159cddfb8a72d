"""Row-invariant work done once a thread (braze/codegen/cuda_invariants.py) on the GPU: the prelude's
BzDivisor over the whole unsigned 32-bit range against NumPy, and fusions whose index digits divide by
run-time extents (cat and broadcasts, reshapes, grouped sums, transposes) at many odd extents and in
aligned, misaligned and mixed layouts, against NumPy in float64 with outputs poisoned first, with the
features on and off (the same bits).

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_index_division_gpu as index_division  # the views' fusions and their NumPy references

import braze as bz
from braze import config
from braze.codegen.cuda import PRELUDE
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

FEATURES = "fast_divisors,uniform_alignment"

DIVIDE = PRELUDE + r'''
extern "C" __global__ void divide(const unsigned* d, const unsigned* n, unsigned* q, unsigned* r, int count) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const BzDivisor divisor = bz_divisor(d[i]);
    q[i] = bz_divide(n[i], divisor);
    r[i] = (unsigned)bz_fast_remainder((int)n[i], divisor);
  }
}'''


def test_the_prelude_divides_the_whole_unsigned_range_on_the_gpu():
    rng = np.random.default_rng(7)
    edges = np.array([0, 1, 2, 3, 7, 8, 255, 65535, 65536, 65537, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 2,
                      2**32 - 1, 2163417524, 2385846974, 3347060973, 2446384990, 4036555567], np.uint64)
    divisors = np.concatenate([np.repeat(edges, len(edges)), rng.integers(0, 2**32, 1 << 20, dtype=np.uint64),
                               rng.integers(0, 1 << 12, 1 << 18, dtype=np.uint64)])
    dividends = np.concatenate([np.tile(edges, len(edges)), rng.integers(0, 2**32, 1 << 20, dtype=np.uint64),
                                rng.integers(0, 2**32, 1 << 18, dtype=np.uint64)])
    d, n = (torch.from_numpy(a.astype(np.uint32).view(np.int32)).cuda() for a in (divisors, dividends))
    q, r = torch.full_like(n, -1), torch.full_like(n, -1)
    bz.RtcKernel(DIVIDE, "divide").launch((512,), (256,), [d, n, q, r, len(divisors)])
    nonzero = np.maximum(divisors, 1)
    want_q = np.where(divisors == 0, 0, dividends // nonzero)
    want_r = np.where(divisors == 0, 0, dividends % nonzero)
    np.testing.assert_array_equal(q.cpu().numpy().view(np.uint32), want_q.astype(np.uint32))
    np.testing.assert_array_equal(r.cpu().numpy().view(np.uint32), want_r.astype(np.uint32))


def rope(f, x, cos):
    """Halves of 8: each half of a row a vector path of its own (4 float32 or 8 bfloat16 a lane)."""
    return x * cos + bz.ops.cat([-x[..., 8:], x[..., :8]], -1)


REFERENCES = {**index_division.REFERENCES,
              rope: lambda x, cos: x * cos + np.concatenate([-x[..., 8:], x[..., :8]], -1)}
reshape_bias, grouped_sums, transposed = index_division.reshape_bias, index_division.grouped_sums, \
    index_division.transposed


# Extents odd, prime, 1 and past 2^16 (a divisor whose multiplier the estimate must get right). Where
# a slice is given, it cuts the last axis of the first input: `slice(1, None)` misaligns every row,
# rows of 18 elements align every other (float32) or every fourth (bfloat16) row.
CASES = [
    (rope, [(3, 7, 5, 16), (1, 7, 1, 16)], None), (rope, [(5, 31, 3, 16), (1, 31, 1, 16)], None),
    (rope, [(2, 33, 17, 16), (1, 33, 1, 16)], None), (rope, [(1, 1, 1, 16), (1, 1, 1, 16)], None),
    (rope, [(3, 0, 2, 16), (1, 0, 1, 16)], None),
    (rope, [(4, 9, 3, 17), (1, 9, 1, 16)], slice(1, None)), (rope, [(3, 5, 7, 18), (1, 5, 1, 16)], slice(0, 16)),
    (reshape_bias, [(3, 5, 7), (35,)], None), (reshape_bias, [(2, 65537, 3), (65537 * 3,)], None),
    (reshape_bias, [(7, 3, 11), (33,)], None),
    (grouped_sums, [(3, 6, 5, 7)], None), (grouped_sums, [(2, 6, 65539, 1)], None),
    (grouped_sums, [(5, 6, 33, 17)], None),
    (transposed, [(67, 129), (129, 67)], None), (transposed, [(1, 257), (257, 1)], None),
]


def _inputs(shapes, cut, dtype):
    g = torch.Generator(device="cuda").manual_seed(len(str(shapes)))
    tensors = [torch.randn(shape, generator=g, device="cuda").to(dtype) for shape in shapes]
    if cut is not None:
        tensors[0] = tensors[0][..., cut]
    return tensors


def _run(build, tensors, dtype_name, **scope):
    with bz.Fusion() as f:
        inputs = [f.define_tensor([1 if n == 1 else -1 for n in t.shape], dtype=getattr(bz, dtype_name))
                  for t in tensors]
        f.add_output(build(f, *inputs))
    with config.scope(enable="poison_outputs", **scope):
        (out,) = f.execute(tensors)
    return out


@pytest.mark.parametrize("build, shapes, cut", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fusions_at_odd_extents_and_layouts_give_the_reference(build, shapes, cut, dtype):
    tensors = _inputs(shapes, cut, getattr(torch, dtype))
    out = _run(build, tensors, dtype)
    want = REFERENCES[build](*[t.float().cpu().numpy().astype(np.float64) for t in tensors])
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    assert tuple(out.shape) == want.shape
    got = out.float().cpu().numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * max(np.abs(want).max(initial=0.0), 1.0))
    before = _run(build, tensors, dtype, disable=FEATURES)  # a fusion and a kernel of its own (engine.py)
    if build is grouped_sums:  # its rows split over as many blocks as fit, which registers decide: an order of its own
        np.testing.assert_allclose(before.float().cpu().numpy(), got, rtol=tolerance, atol=tolerance)
    else:
        assert torch.equal(out, before)
