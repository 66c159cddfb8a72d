"""Row loops split where a condition on the column changes (braze/passes/split_loops.py) on the GPU:
RoPE, cat and pad, against NumPy in float64, outputs poisoned first.

The parts of a split row take the 16-byte path where their lengths and row starts allow
(cuda_rows.RowLoopWriter: the vectors start at the part's begin) and the element path elsewhere,
row by row: the cases below reach both, in one launch where rows of one block differ (an odd row
stride), with rows short and long (one warp a row, or the whole block).

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

DTYPES = {"float32": (torch.float32, bz.float32, 1e-5), "bfloat16": (torch.bfloat16, bz.bfloat16, 2e-2)}


def run(build, tensors, dtype):
    with bz.Fusion() as f:
        # Extents of 1 are static, so they broadcast (cos and sin over batch and heads).
        outs = build(*[f.define_tensor([1 if n == 1 else -1 for n in t.shape], dtype=dtype) for t in tensors])
        f.add_output(outs)
    with config.scope(enable="poison_outputs"):
        (out,) = f.execute(list(tensors))
    return out


def host(t) -> np.ndarray:
    return t.float().cpu().numpy().astype(np.float64)


def check(got, want: np.ndarray, tolerance: float) -> None:
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(host(got), want, rtol=tolerance, atol=tolerance)


def rope(x, cos, sin, dtype):
    half = x.shape[-1] // 2
    if isinstance(x, np.ndarray):
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin
    f32 = lambda t: bz.ops.cast(t, bz.float32)  # noqa: E731
    rotated = bz.ops.cat([-f32(x)[..., half:], f32(x)[..., :half]], -1)
    return bz.ops.cast(f32(x) * f32(cos) + rotated * f32(sin), dtype)


def tensor(shape, torch_dtype, seed: int, layout: str = "contiguous"):
    """Random values of `shape`: contiguous; "odd_stride" (rows 1 element apart from a multiple of 8,
    so neighbouring rows differ in alignment); "offset" (every row starts 1 element past alignment);
    or "permuted" (the two leading axes swapped in memory)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    if layout == "permuted":
        return torch.randn(shape[1], shape[0], *shape[2:], generator=g, device="cuda").to(torch_dtype).transpose(0, 1)
    pad = {"contiguous": 0, "odd_stride": 1, "offset": 1}[layout]
    full = torch.randn(*shape[:-1], shape[-1] + pad, generator=g, device="cuda").to(torch_dtype)
    return full[..., 1:] if layout == "offset" else full[..., :shape[-1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, layout", [
    ((2, 64, 8, 128), "contiguous"),  # both halves 16 bytes at a time, 8 (bfloat16) or 16 lanes a row
    ((16, 2048, 32, 128), "contiguous"),  # the suite's shape: a million rows strided over the grid
    ((3, 7, 5, 128), "contiguous"),  # 105 rows: the last of a block's rows past the end
    ((2, 5, 3, 64), "contiguous"),  # halves of 32: 4 lanes a bfloat16 row
    ((2, 5, 3, 16), "odd_stride"),  # halves of one 8-wide vector, a lane a bfloat16 row
    ((1, 3, 2, 2048), "contiguous"),  # rows of 2048: the whole block on a row
    ((2, 5, 3, 128), "odd_stride"),  # rows of one block on both paths
    ((2, 5, 3, 128), "offset"),  # no row aligned: the element path throughout
    ((3, 4, 2, 128), "permuted"),
    ((2, 7, 3, 34), "contiguous"),  # halves of 17: the element path
    ((2, 3, 5, 2), "contiguous"),
    ((0, 4, 2, 128), "contiguous"),
    ((1, 1, 1, 8), "contiguous"),
], ids=str)
def test_rope(dtype, shape, layout):
    torch_dtype, bz_dtype, tolerance = DTYPES[dtype]
    x = tensor(shape, torch_dtype, 0, layout)
    angles = tensor((1, shape[1], 1, shape[3]), torch.float32, 1) * 3
    cos, sin = angles.cos().to(torch_dtype), angles.sin().to(torch_dtype)
    got = run(lambda a, b, c: rope(a, b, c, bz_dtype), [x, cos, sin], bz_dtype)
    check(got, rope(host(x), host(cos), host(sin), None), tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("widths, rows, layout", [
    ((64, 32, 96), 300, "contiguous"),  # every part 16 bytes at a time
    ((17, 3, 40), 37, "contiguous"),  # parts of odd lengths and odd starts
    ((1024, 512, 4), 5, "contiguous"),  # long rows: the whole block on a row
    ((12, 20, 8), 64, "odd_stride"),
    ((0, 8, 1), 9, "contiguous"),  # an empty input
    ((8, 8, 8), 0, "contiguous"),
], ids=str)
def test_cat_of_three(dtype, widths, rows, layout):
    torch_dtype, bz_dtype, tolerance = DTYPES[dtype]
    xs = [tensor((rows, w), torch_dtype, n, layout) for n, w in enumerate(widths)]
    scale = tensor((sum(widths),), torch_dtype, 9)
    got = run(lambda a, b, c, s: bz.ops.cat([a, b, c], 1) * s, [*xs, scale], bz_dtype)
    check(got, np.concatenate([host(x) for x in xs], axis=1) * host(scale), tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, widths, layout", [
    ((40, 128), [(0, 0), (4, 4)], "contiguous"),  # the inside part aligned: 16 bytes at a time
    ((33, 61), [(0, 0), (3, 2)], "contiguous"),
    ((9, 2000), [(0, 0), (1, 7)], "odd_stride"),
    ((6, 5, 40), [(1, 2), (0, 0), (8, 0)], "permuted"),  # rows padded too: their loop keeps a branch
    ((7, 0), [(0, 0), (2, 3)], "contiguous"),  # only padding
    ((1, 1), [(0, 0), (0, 1)], "contiguous"),
], ids=str)
def test_pad(dtype, shape, widths, layout):
    torch_dtype, bz_dtype, tolerance = DTYPES[dtype]
    x = tensor(shape, torch_dtype, 3, layout)
    got = run(lambda a: bz.ops.pad(a, widths, -1.5) + 0.5, [x], bz_dtype)
    check(got, np.pad(host(x), widths, constant_values=-1.5) + 0.5, tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("columns, below", [(128, 64), (130, 7), (9, 0), (9, 20)], ids=str)
def test_where_on_an_iota(dtype, columns, below):
    torch_dtype, bz_dtype, tolerance = DTYPES[dtype]
    x = tensor((50, columns), torch_dtype, 5)
    got = run(lambda a: bz.ops.where(bz.ops.arange(a.shape[1]) < below, a, a * -2.0), [x], bz_dtype)
    want = host(x)
    check(got, np.where(np.arange(columns) < below, want, want * -2.0), tolerance)
