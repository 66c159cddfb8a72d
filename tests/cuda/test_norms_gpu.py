"""group_norm and batch_norm on a GPU, and the schedules they take (braze/codegen/cuda_variance.py,
cuda_grid.GridWriter.walk_vectors, LaunchPlanner._plan_split_rows): a variance in one pass of shifted
sums, rows split across blocks, nests walked four elements at a time, the normalization as a
pointwise pass. Torch CUDA tensors in, outputs poisoned (0xFF bytes) before the kernels write,
results against a float64 NumPy reference.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

EPS, MOMENTUM = 1e-5, 0.1
TOLERANCE = {"float32": 2e-5, "bfloat16": 3e-2}


def run(build, *arrays: np.ndarray, layout=None, dtype: str = "float32") -> list[np.ndarray]:
    """`build(fusion)` over CUDA copies of `arrays` in `dtype` (the 4-D ones passed through `layout`,
    which may make them non-contiguous or misaligned), outputs poisoned; float64 NumPy results."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(getattr(torch, dtype)).cuda() for a in arrays]
    tensors = [layout(t) if layout is not None and t.ndim == 4 else t for t in tensors]
    with bz.Fusion() as f:
        for out in build(f):
            f.add_output(out)
    with config.scope(enable="poison_outputs"):
        results = f.execute(tensors)
    torch.cuda.synchronize()
    return [r.double().cpu().numpy() for r in results]


def rounded(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array`'s values in `dtype`, as float64."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(getattr(torch, dtype)).double().numpy()


def channels_last(t):
    return t.to(memory_format=torch.channels_last)


def misaligned(t):
    """The same values starting one element into a buffer: no row starts 16-byte aligned."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = flat[1:].view(t.shape)
    view.copy_(t)
    return view


def group_norm_fusion(channels: int, groups: int, dtype=bz.float32):
    def build(f):
        x = f.define_tensor([-1, channels, -1, -1], dtype=dtype)
        w, b = f.define_tensor([-1], dtype=dtype), f.define_tensor([-1], dtype=dtype)
        grouped = bz.ops.reshape(x, [x.shape[0], groups, -1])
        y = bz.ops.reshape(bz.ops.layer_norm(grouped, eps=EPS), x.shape)
        return [y * w[:, None, None] + b[:, None, None]]
    return build


def group_norm_reference(x, w, b, groups):
    x = x.astype(np.float64)
    grouped = x.reshape(x.shape[0], groups, -1)
    mean = grouped.mean(-1, keepdims=True)
    var = grouped.var(-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + EPS)).reshape(x.shape)
    return y * w[:, None, None] + b[:, None, None]


def batch_norm_fusion(shape, dtype=bz.float32):
    n = shape[0] * shape[2] * shape[3]  # the sample count, baked in as the suite's case does

    def build(f):
        x = f.define_tensor([-1] * 4, dtype=dtype)
        w, b, running_mean, running_var = (f.define_tensor([-1], dtype=dtype) for _ in range(4))
        mean, var = x.mean((0, 2, 3), keepdim=True), x.var((0, 2, 3), keepdim=True)
        y = (x - mean) * bz.ops.rsqrt(var + EPS) * w[:, None, None] + b[:, None, None]
        new_mean = (1 - MOMENTUM) * running_mean + MOMENTUM * mean.reshape([-1])
        new_var = (1 - MOMENTUM) * running_var + var.reshape([-1]) * (MOMENTUM * n / max(n - 1, 1))
        return [y, new_mean, new_var]
    return build


def batch_norm_reference(x, w, b, running_mean, running_var):
    x = x.astype(np.float64)
    n = x.shape[0] * x.shape[2] * x.shape[3]
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    y = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + EPS) * w[:, None, None] + b[:, None, None]
    return [y, (1 - MOMENTUM) * running_mean + MOMENTUM * mean,
            (1 - MOMENTUM) * running_var + MOMENTUM * var * n / max(n - 1, 1)]


def close(actual, expected, dtype="float32"):
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max(initial=1.0))


def channel_inputs(shape, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rng.standard_normal(shape) * 2.0 + offset
    return [x.astype(np.float32), rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)]


# (N, C, H, W, groups): one group and many, channels 1, 3 and 256, pixels 1, 49 (odd: no 16-byte
# path) and 3136, a batch of 1 and 32; the suite's shape. (An empty batch has no group size to
# infer: reshape's -1 is undefined there, as in NumPy.)
GROUP_NORM_SHAPES = [(1, 1, 1, 1, 1), (32, 3, 7, 7, 1), (1, 3, 56, 56, 1), (32, 256, 1, 1, 32),
                     (1, 256, 56, 56, 32), (32, 256, 7, 7, 2), (2, 256, 56, 56, 2), (3, 6, 5, 9, 2),
                     (16, 512, 64, 64, 32)]


@pytest.mark.parametrize("n, c, h, w, groups", GROUP_NORM_SHAPES, ids=str)
def test_group_norm(n, c, h, w, groups):
    x, weight, bias = channel_inputs((n, c, h, w))
    (y,) = run(group_norm_fusion(c, groups), x, weight, bias)
    close(y, group_norm_reference(x, weight, bias, groups))


@pytest.mark.parametrize("layout", [channels_last, misaligned], ids=["channels_last", "misaligned"])
@pytest.mark.parametrize("n, c, h, w, groups", [(2, 256, 56, 56, 32), (3, 6, 5, 8, 2), (32, 3, 7, 7, 1)], ids=str)
def test_group_norm_of_other_layouts(n, c, h, w, groups, layout):
    x, weight, bias = channel_inputs((n, c, h, w), seed=1)
    (y,) = run(group_norm_fusion(c, groups), x, weight, bias, layout=layout)
    close(y, group_norm_reference(x, weight, bias, groups))


# Groups of 2-byte elements walk eight at a time where the group's length allows (3 * 5 * 4 = 60 does not).
@pytest.mark.parametrize("n, c, h, w, groups", [(2, 256, 56, 56, 32), (3, 6, 5, 8, 2), (3, 6, 5, 4, 2)], ids=str)
def test_group_norm_in_bfloat16(n, c, h, w, groups):
    inputs = [rounded(a, "bfloat16") for a in channel_inputs((n, c, h, w), seed=1)]
    (y,) = run(group_norm_fusion(c, groups, bz.bfloat16), *inputs, dtype="bfloat16")
    close(y, group_norm_reference(*inputs, groups), "bfloat16")


# (N, C, H, W): the suite's shape; pixels 1, 49 and 3136; channels 1, 3 and 256; batches 1 and 32;
# a row over a nest whose innermost extent 4 does not divide (W = 7), and one it does (W = 56, 8).
BATCH_NORM_SHAPES = [(32, 256, 56, 56), (32, 1, 1, 1), (2, 3, 1, 1), (1, 3, 7, 7), (32, 3, 7, 7),
                     (1, 256, 56, 56), (32, 256, 7, 7), (4, 3, 56, 56), (3, 5, 2, 8), (1, 1, 1, 3136)]


@pytest.mark.parametrize("shape", BATCH_NORM_SHAPES, ids=str)
def test_batch_norm_with_running_statistics(shape):
    x, weight, bias = channel_inputs(shape, seed=2, offset=3.0)
    rng = np.random.default_rng(3)
    running_mean, running_var = rng.standard_normal(shape[1]).astype(np.float32), \
        (1 + rng.random(shape[1])).astype(np.float32)
    inputs = (x, weight, bias, running_mean, running_var)
    outputs = run(batch_norm_fusion(shape), *inputs)
    for actual, expected in zip(outputs, batch_norm_reference(*inputs)):
        close(actual, expected)


# Nests of 2-byte elements walk eight at a time where the innermost extent is a multiple of 8 (not 4 or 12).
@pytest.mark.parametrize("shape", [(4, 16, 56, 56), (2, 3, 5, 8), (2, 3, 5, 4), (3, 2, 1, 12)], ids=str)
def test_batch_norm_in_bfloat16(shape):
    x, weight, bias = (rounded(a, "bfloat16") for a in channel_inputs(shape, seed=5, offset=1.0))
    running_mean, running_var = np.zeros(shape[1]), np.ones(shape[1])
    inputs = (x, weight, bias, running_mean, running_var)
    outputs = run(batch_norm_fusion(shape, bz.bfloat16), *inputs, dtype="bfloat16")
    for actual, expected in zip(outputs, batch_norm_reference(*inputs)):
        close(actual, expected, "bfloat16")


@pytest.mark.parametrize("layout", [channels_last, misaligned], ids=["channels_last", "misaligned"])
@pytest.mark.parametrize("shape", [(32, 256, 14, 14), (2, 3, 8, 8), (5, 7, 3, 5)], ids=str)
def test_batch_norm_of_other_layouts(shape, layout):
    x, weight, bias = channel_inputs(shape, seed=4)
    running_mean, running_var = np.zeros(shape[1], np.float32), np.ones(shape[1], np.float32)
    inputs = (x, weight, bias, running_mean, running_var)
    outputs = run(batch_norm_fusion(shape), *inputs, layout=layout)
    for actual, expected in zip(outputs, batch_norm_reference(*inputs)):
        close(actual, expected)


# --- the variance schedules directly ----------------------------------------------------------------
def var_and_mean(axes, correction=0):
    def build(f):
        x = f.define_tensor([-1, -1], dtype=bz.float32)
        return [bz.ops.var(x, axes, correction=correction), bz.ops.mean(x, axes)]
    return build


@pytest.mark.parametrize("shape, axes", [
    ((3, 200003), [1]),  # few long rows: split across blocks, one pass
    ((1024, 65536), [1]),  # many rows too long to keep on chip: a block a row, one pass
    ((8192, 4096), [1]),  # rows kept on chip: two passes over the cached row
    ((16, 4096), [1]), ((8, 30000), [1]),
    ((5, 1), [1]), ((1, 4099), [1]), ((33, 1000), [0]), ((70001, 3), [0]),  # column strips, split
    ((4099, 7), None), ((1, 1), None), ((1 << 22, 1), None)], ids=str)  # the whole tensor over the grid
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_var_and_mean(shape, axes, offset):
    x = (np.random.default_rng(5).standard_normal(shape) + offset).astype(np.float32)
    var, mean = run(var_and_mean(axes, correction=1), x)
    reduced = tuple(axes) if axes is not None else None
    count = x.size if axes is None else int(np.prod([shape[a] for a in axes]))
    if count > 1:
        close(var, x.astype(np.float64).var(reduced, ddof=1))
    close(mean, x.astype(np.float64).mean(reduced))
    again = run(var_and_mean(axes, correction=1), x)[0]
    assert again.tobytes() == var.tobytes()  # a fixed combine order: the same bits every run


@pytest.mark.parametrize("axes", [[1], [0], None], ids=str)
def test_the_variance_of_constant_rows_is_zero(axes):
    # Shifted by the row's first element, every shifted element is 0; the mean, summed exactly here,
    # is the constant, so nothing is left over.
    x = np.full((7, 70001) if axes != [0] else (70001, 7), 0.5, np.float32)
    var, mean = run(var_and_mean(axes), x)
    assert (var == 0).all() and (mean == 0.5).all()


def test_a_first_element_far_from_the_rest_keeps_the_variance_accurate():
    # The one-pass sums are shifted by the row's first element: an outlier there multiplies their
    # error by about (outlier - mean)^2 / var, here 10^6, which their float64 leaves room for.
    x = np.random.default_rng(6).standard_normal((4, 100003)).astype(np.float32)
    x[:, 0] = 1000.0
    var, _ = run(var_and_mean([1]), x)
    np.testing.assert_allclose(var, x.astype(np.float64).var(1), rtol=1e-6)
