"""Row-wise fusions on a GPU at the row lengths where the row paths split: vector loops of 8
elements for 2-byte types, rows held in the registers of one warp (the tasks' `_warp` functions)
or of the whole block, rows of shared memory, and rows on the general path.

softmax, layer_norm, a scaled masked softmax, rms_norm and a residual layer_norm (two row caches)
in bfloat16, float16 and float32; rows contiguous, offset by one element (every row start
misaligned), and of an odd stride (rows of one block aligned and misaligned, so they take different
copies of the row). Torch CUDA tensors in, outputs poisoned (0xFF bytes) before the kernels write,
results against NumPy in float64.
"""

from __future__ import annotations

import contextlib
import re
import warnings

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

DEVICE = "cuda"
DTYPES = [bz.bfloat16, bz.float16, bz.float32]
_TORCH = {bz.float32: torch.float32, bz.float16: torch.float16, bz.bfloat16: torch.bfloat16, bz.bool_: torch.bool}
# Across the split points: a vector of 8 (7, 8), lanes_for's warp below 1024, the warp function's
# register rows (1024 float32, 2048 bfloat16 and float16; 1024 with a mask), the block's (8192 float32,
# 4096 2-byte), shared memory beyond, lengths 8 does not divide (1000, 1032, 4100).
LENGTHS = [1, 7, 8, 200, 512, 1000, 1024, 1032, 2048, 4096, 4100, 8192]
ROWS = 67  # not a multiple of a block's 8 warp rows: the last block has rows past the end
LAYOUTS = ["contiguous", "offset", "odd_stride"]
SCALE = 0.125


def rows(shape, dtype, layout: str, seed: int = 0):
    """A tensor of `shape` whose last axis is the row: contiguous; one element into each row of a
    buffer 8 wider (every row start misaligned for vectors); or the first columns of rows one longer
    (an odd stride where the length is even: row starts of one block aligned and misaligned)."""
    *outer, length = shape
    pad = {"contiguous": 0, "offset": 8, "odd_stride": 1}[layout]
    g = torch.Generator().manual_seed(seed)
    full = torch.randn((*outer, length + pad), generator=g, dtype=torch.float64)
    full = (full > -1.0) if dtype is bz.bool_ else full.to(_TORCH[dtype])
    start = 1 if layout == "offset" else 0
    return full.to(DEVICE)[..., start:start + length]


def fusion_of(build, *inputs) -> bz.Fusion:
    """The fusion `build(*defined)` over tensors defined like `inputs` (an axis of extent 1 as one
    that broadcasts)."""
    with bz.Fusion() as f:
        for out in build(*(f.define_tensor([1 if n == 1 else -1 for n in x.shape],
                                           dtype=bz.dtypes.as_dtype(str(x.dtype).split(".")[-1]))
                           for x in inputs)):
            f.add_output(out)
    return f


def run(build, *inputs, poison: bool = True) -> list[np.ndarray]:
    """`build` run over the tensors `inputs` (outputs poisoned first, unless not `poison`): NumPy
    float64 results."""
    with config.scope(enable="poison_outputs") if poison else contextlib.nullcontext():
        outs = (build if isinstance(build, bz.Fusion) else fusion_of(build, *inputs)).execute(list(inputs))
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return [o.double().cpu().numpy() for o in outs]


def as64(x) -> np.ndarray:
    return x.cpu().numpy() if x.dtype == torch.bool else x.double().cpu().numpy()


def close(actual, expected, dtype, scale=None):
    tolerance = {bz.float32: 1e-5, bz.float16: 2e-2, bz.bfloat16: 2e-2}[dtype]
    scale = np.nanmax(np.abs(expected), initial=1.0) if scale is None else scale
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance * scale)


def softmax64(s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a row masked whole: NaN, as the kernel gives
        e = np.exp(s - s.max(-1, keepdims=True, initial=-np.inf))
        return e / e.sum(-1, keepdims=True)


def layer_norm64(h: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    centered = h - h.mean(-1, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5) * w + b


# (name, inputs as (ndim of the row's shape, dtype or None for the task's dtype, seed), fusion, reference)
OPS = {
    "softmax": ([(2, None, 0)], lambda x: [bz.ops.softmax(x, -1)], lambda x: softmax64(x)),
    "layer_norm": ([(2, None, 0), (1, None, 1), (1, None, 2)],
                   lambda x, w, b: [bz.ops.layer_norm(x, w, b, eps=1e-5)], layer_norm64),
    "masked_softmax": (
        [(2, None, 0), (2, bz.bool_, 3)],
        lambda x, m: [bz.ops.cast(bz.ops.softmax(bz.ops.where(m, bz.ops.cast(x, bz.float32) * SCALE,
                                                               float("-inf")), -1), x.dtype)],
        lambda x, m: softmax64(np.where(m, x * SCALE, -np.inf))),
    "rms_norm": ([(2, None, 0), (1, None, 1)], lambda x, w: [bz.ops.rms_norm(x, w, eps=1e-6)],
                 lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w),
    "residual_layer_norm": ([(2, None, 0), (2, None, 4), (1, None, 1), (1, None, 2)],
                            lambda x, r, w, b: [bz.ops.layer_norm(x + r, w, b, eps=1e-5)],
                            lambda x, r, w, b: layer_norm64(x + r, w, b)),
}


def check(op: str, dtype, layout: str, shape) -> None:
    specs, build, reference = OPS[op]
    tensors = [rows(shape if ndim == 2 else shape[-1:], d or dtype, layout if ndim == 2 else "contiguous", seed)
               for ndim, d, seed in specs]
    (got,) = run(build, *tensors)
    with warnings.catch_warnings():  # rows of no elements: means of nothing, in an empty result
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = reference(*(as64(t) for t in tensors))
    scale = 1.0 if "softmax" in op else None
    close(got, expected, dtype, scale)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_rows_at_every_length(op, dtype, layout):
    for length in LENGTHS:
        check(op, dtype, layout, (ROWS, length))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape", [(0, 1024), (1, 1024), (1, 1), (5, 0), (3, 2048), (9, 1024)], ids=str)
def test_few_or_empty_rows(op, shape):
    check(op, bz.bfloat16, "odd_stride", shape)


def test_many_warp_rows_in_three_dimensions():
    """The suite's masked softmax shape, smaller: a mask broadcast over the batch."""
    x = rows((16, 256, 1024), bz.bfloat16, "contiguous")
    mask = torch.ones((1, 256, 1024), dtype=torch.bool).tril().to(DEVICE)
    (got,) = run(OPS["masked_softmax"][1], x, mask)
    close(got, softmax64(np.where(as64(mask), as64(x) * SCALE, -np.inf)), bz.bfloat16, scale=1.0)


@pytest.mark.parametrize("dtype, length, warp", [
    (bz.bfloat16, 200, True), (bz.bfloat16, 1024, True), (bz.bfloat16, 2048, True), (bz.bfloat16, 4096, False),
    (bz.float32, 1024, True), (bz.float32, 2048, False), (bz.float32, 40, False)])
def test_medium_rows_launch_the_warp_function(capsys, dtype, length, warp):
    x = rows((ROWS, length), dtype, "contiguous")
    with config.scope(dump="launch_params"):
        (got,) = run(OPS["softmax"][1], x)
    launches = [line for line in capsys.readouterr().err.splitlines() if ": rows range=" in line]
    # the warp function, or its narrow one for rows that fit half its room (`_warp4`, `_warp2`...)
    assert len(launches) == 1 and bool(re.search(r"_warp\d*: rows", launches[0])) == warp
    assert (" lanes=32 " in launches[0]) if warp else ("_warp" not in launches[0])
    close(got, softmax64(as64(x)), dtype, scale=1.0)


def test_prepared_calls_run_the_warp_function_with_the_same_bits_every_time():
    """Without poisoned outputs, calls after the first take the fusion's prepared call
    (runtime/fast_call.py), its launches planned once: the warp function's here."""
    x = rows((ROWS, 1024), bz.bfloat16, "odd_stride")
    f = fusion_of(OPS["softmax"][1], x)
    first, *again = [run(f, x, poison=False)[0] for _ in range(3)]
    close(first, softmax64(as64(x)), bz.bfloat16, scale=1.0)
    assert all(first.tobytes() == a.tobytes() for a in again)
    with bz.record() as recorded:
        f.execute([x])
    assert [bool(re.search(r"_warp\d*$", launch.task)) for launch in recorded.launches] == [True]


def log_softmax64(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rows_count, length, block", [(264, 32000, 1024), (264, 12000, 512), (8, 32000, 1024)])
def test_rows_registers_hold_only_at_a_wider_block_launch_it(capsys, layout, rows_count, length, block):
    """log_softmax reads its rows twice: rows that 256 threads' registers do not hold and 512 or 1024
    threads' do launch the kernel recompiled for that block, where there are rows for every SM."""
    x = rows((rows_count, length), bz.float32, layout)
    with config.scope(dump="launch_params"):
        (got,) = run(lambda t: [bz.ops.log_softmax(t, -1)], x)
    launches = [line for line in capsys.readouterr().err.splitlines() if ": rows range=" in line]
    assert len(launches) == 1 and f" block={block} " in launches[0]
    close(got, log_softmax64(as64(x)), bz.float32)


@pytest.mark.parametrize("rows_count, length", [(3, 100_003), (40, 20_000), (67, 4100)])
def test_few_long_rows_take_wider_blocks(rows_count, length):
    """argmax over rows too few to fill the GPU a block each: the wider blocks' answer is NumPy's,
    ties and NaN included."""
    x = rows((rows_count, length), bz.float32, "offset")
    x[1 % rows_count, length // 3] = float("nan")
    x[0, 5] = x[0, length - 2] = 1e9
    (got,) = run(lambda t: [bz.ops.argmax(t, -1)], x)
    np.testing.assert_array_equal(got, np.argmax(as64(x), -1))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [bz.bfloat16, bz.float16], ids=str)
def test_many_two_byte_rows_launch_blocks_of_128(capsys, op, dtype, layout):
    """Rows of 2-byte elements that a block of 256 keeps in registers run on blocks of 128 threads
    (cuda_plan.NARROW_BLOCK) where there are at least 8 rows an SM; their results are the same
    normalizations. Lengths up to 4096, and 4100 past the register rows (a wider block instead)."""
    rows_count = 8 * cuda_driver.device(0).sm_count + 3
    for length in (2056, 4096, 4100):
        with config.scope(dump="launch_params"):
            check(op, dtype, layout, (rows_count, length))
        launches = [line for line in capsys.readouterr().err.splitlines() if ": rows range=" in line]
        assert len(launches) == 1
        if op in ("softmax", "layer_norm", "rms_norm"):  # one row cache; a residual's two hold 2048 a block
            assert (" block=128 " in launches[0]) == (length <= 4096), launches
