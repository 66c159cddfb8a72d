"""Transposes on a GPU (braze/codegen/cuda_tiles.py): `x + y.T`, batched and 3-D/4-D permutations that
move the innermost axis, several transposed tensors beside straight and broadcast ones, inputs passed
as transposed or sliced (misaligned) views, a channels-last output, pads and wheres around the
transposed reads; every dtype, extents 0, 1, around the tile (31, 32, 33, 63, 64, 65) and large.
Torch CUDA tensors in, outputs poisoned (0xFF bytes) first, results against a float64 NumPy reference
(exact for integers, bools and the permuted copies; float math within its dtype's rounding); and
each fusion is checked to run its tile kernel.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config, engine
from braze.codegen import cuda
from braze.compile import cuda_driver
from braze.runtime.inputs import bind_inputs

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

DTYPES = [bz.float32, bz.float64, bz.bfloat16, bz.float16, bz.int32, bz.int8, bz.bool_]
_TORCH = {bz.float32: "float32", bz.float64: "float64", bz.float16: "float16", bz.bfloat16: "bfloat16",
          bz.int32: "int32", bz.int8: "int8", bz.bool_: "bool"}
TOLERANCE = {bz.float32: 1e-6, bz.float64: 1e-14, bz.float16: 1e-3, bz.bfloat16: 8e-3}  # of the largest |value|
SHAPES = [(67, 130), (1, 1), (0, 5), (5, 0), (1, 33), (33, 1), (31, 33), (32, 32), (63, 65), (64, 64), (4096, 2056)]


def cuda_tensor(shape, dtype=bz.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == bz.bool_:
        return (torch.randn(shape, generator=g) > 0).cuda()
    if dtype.is_integer:
        return torch.randint(-60, 60, shape, generator=g, dtype=torch.int64).to(getattr(torch, _TORCH[dtype])).cuda()
    return torch.randn(shape, generator=g, dtype=torch.float64).to(getattr(torch, _TORCH[dtype])).cuda()


def as64(x) -> np.ndarray:
    return x.cpu().numpy() if x.dtype == torch.bool else x.double().cpu().numpy()


def schedules(f: bz.Fusion, inputs: list) -> list[str]:
    """How each task of the fusion's kernel runs at the signature of `inputs` (cuda_plan.TaskSchedule)."""
    key = engine.signature(f, bind_inputs(f, inputs))
    _, kernel, _ = engine.plan_kernel(f, key, views_on_host=False, gpu=True)
    return [s.kind for s in cuda.generate(kernel, restrict=True).schedules]


def execute(f: bz.Fusion, inputs: list) -> list:
    with config.scope(enable="poison_outputs"):
        outs = f.execute(list(inputs))
    torch.cuda.synchronize()
    return outs


def run(f: bz.Fusion, inputs: list) -> list[np.ndarray]:
    """The fusion's outputs on `inputs`, poisoned first, as float64 (or bool) NumPy arrays; it must
    take tiles where there is anything to read (binding gives empty arrays no unit stride)."""
    kinds = schedules(f, inputs)
    assert "tiles" in kinds or not all(t.numel() for t in inputs), kinds
    return [as64(o) for o in execute(f, inputs)]


def check(got: np.ndarray, want: np.ndarray, dtype) -> None:
    assert got.shape == want.shape
    if dtype not in TOLERANCE:
        np.testing.assert_array_equal(got, want)
        return
    scale = np.abs(want).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype] * scale)


def rounded(values: np.ndarray, dtype) -> np.ndarray:
    """float64 values rounded to `dtype` as the GPU stores them."""
    return as64(torch.from_numpy(values).to(getattr(torch, _TORCH[dtype])))


def fusion(rank: int, dtypes, build) -> bz.Fusion:
    with bz.Fusion() as f:
        tensors = [f.define_tensor((-1,) * rank, dtype=d) for d in dtypes]
        for out in build(*tensors):
            f.add_output(out)
    return f


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_x_plus_y_transposed(shape, dtype):
    x, y = cuda_tensor(shape, dtype, 1), cuda_tensor(shape[::-1], dtype, 2)
    op = (lambda a, b: a | b) if dtype == bz.bool_ else (lambda a, b: a + b)
    (got,) = run(fusion(2, [dtype, dtype], lambda a, b: [op(a, b.T)]), [x, y])
    want = op(as64(x), as64(y).T)
    if dtype.is_integer:  # int8 wraps around
        want = (want.astype(np.int64) + 128) % 256 - 128 if dtype == bz.int8 else want
    check(got, rounded(want, dtype) if dtype.is_floating else want, dtype)


@pytest.mark.parametrize("dims", [(0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)], ids=str)
@pytest.mark.parametrize("shape", [(3, 67, 130), (1, 1, 1), (2, 0, 3), (40, 1, 33), (16, 2048, 128), (5, 64, 1)],
                         ids=str)
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16, bz.float64], ids=str)
def test_permuted_copies_of_3d_tensors(dims, shape, dtype):
    """A batched transpose (attention's q.transpose(1, 2) on [batch * heads, tokens, head_dim]) and the
    permutations that move the innermost axis to the front: copies, exact."""
    x = cuda_tensor(shape, dtype)
    (got,) = run(fusion(3, [dtype], lambda a: [bz.ops.permute(a, dims)]), [x])
    check(got, np.transpose(as64(x), dims), None)


@pytest.mark.parametrize("dims", [(0, 1, 3, 2), (0, 2, 3, 1), (3, 1, 2, 0)], ids=str)
def test_4d_permutations_beside_a_straight_tensor(dims):
    x = cuda_tensor((2, 33, 5, 70), bz.bfloat16, 1)
    shape = tuple(x.shape[d] for d in dims)
    y = cuda_tensor(shape, bz.float32, 2)
    (got,) = run(fusion(4, [bz.bfloat16, bz.float32], lambda a, b: [bz.ops.cast(bz.ops.permute(a, dims),
                                                                                 bz.float32) * b]), [x, y])
    check(got, np.transpose(as64(x), dims) * as64(y), bz.float32)


@pytest.mark.parametrize("shape", [(70, 45), (1, 33), (130, 1), (1000, 999)], ids=str)
def test_several_transposed_tensors_beside_straight_and_broadcast_ones(shape):
    x, y, z = cuda_tensor(shape, seed=1), cuda_tensor(shape[::-1], seed=2), cuda_tensor(shape[::-1], seed=3)
    rows, columns = cuda_tensor(shape[:1], seed=4), cuda_tensor(shape[1:], seed=5)
    with bz.Fusion() as f:
        a, b, c = (f.define_tensor((-1, -1)) for _ in range(3))
        r, k = f.define_tensor((-1,)), f.define_tensor((-1,))
        f.add_output(a * b.T - c.T + bz.ops.broadcast(r, [False, True]) * bz.ops.broadcast(k, [True, False]))
        f.add_output(bz.ops.exp(b.T))
    first, second = run(f, [x, y, z, rows, columns])
    X, Y, Z = as64(x), as64(y), as64(z)
    check(first, X * Y.T - Z.T + as64(rows)[:, None] * as64(columns)[None, :], bz.float32)
    check(second, np.exp(Y.T), bz.float32)


@pytest.mark.parametrize("shape", [(70, 45), (33, 1), (257, 129)], ids=str)
def test_inputs_passed_as_transposed_and_misaligned_views(shape):
    """Torch's `y.t()` and a column-sliced `y.t()[:, 1:]` (rows starting off any alignment) read through
    their strides: the fusion itself has no transpose."""
    x = cuda_tensor((shape[0], shape[1] - 1) if shape[1] > 1 else shape, seed=1)
    base = cuda_tensor(shape[::-1], seed=2)
    y = base.t()[:, 1:] if shape[1] > 1 else base.t()
    (got,) = run(fusion(2, [bz.float32, bz.float32], lambda a, b: [a * 2.0 + b]), [x, y])
    check(got, as64(x) * 2 + as64(y), bz.float32)


@pytest.mark.parametrize("shape", [(2, 33, 70), (1, 1, 1), (3, 64, 5)], ids=str)
def test_a_channels_last_output(shape):
    """An output laid out across its inputs (written along axis 1, read along axis 2)."""
    x = cuda_tensor(shape)
    with bz.Fusion() as f:
        out = bz.ops.exp(f.define_tensor((-1, -1, -1)))
        out.set_stride_order((2, 0, 1))
        f.add_output(out)
    (got,) = run(f, [x])
    check(got, np.exp(as64(x)), bz.float32)


@pytest.mark.parametrize("shape", [(40, 37), (1, 1), (64, 65)], ids=str)
def test_pads_and_wheres_around_transposed_reads(shape):
    x, y = cuda_tensor(shape, seed=1), cuda_tensor(shape[::-1], seed=2)
    with bz.Fusion() as f:
        a, b = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
        f.add_output(bz.ops.pad(b.T, [(1, 2), (0, 3)], 0.5) * 2.0)
        f.add_output(bz.ops.where(a > 0, b.T, a))
    padded, chosen = run(f, [x, y])
    X, Y = as64(x), as64(y)
    check(padded, np.pad(Y.T, [(1, 2), (0, 3)], constant_values=0.5) * 2, bz.float32)
    check(chosen, np.where(X > 0, Y.T, X), bz.float32)


def test_more_tiles_than_a_grid_holds_in_one_wave():
    x, y = cuda_tensor((8192, 4096), seed=1), cuda_tensor((4096, 8192), seed=2)
    (got,) = run(fusion(2, [bz.float32, bz.float32], lambda a, b: [a + b.T]), [x, y])
    check(got, as64(x) + as64(y).T, bz.float32)
