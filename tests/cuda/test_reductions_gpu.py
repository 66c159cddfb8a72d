"""Reductions that span blocks on a GPU (cuda_plan.TaskSchedule): column sums and other outer
reductions, full reductions, sums over the middle axis, var and mean over axis 0, cross_entropy and
log_softmax over long rows. Torch CUDA tensors in, outputs poisoned (0xFF bytes) before the kernels
write, results against a float64 NumPy reference; and the same inputs give bit-identical results
from run to run (a fixed combine order, no float atomics).
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

_TORCH = {bz.float32: "float32", bz.float64: "float64", bz.float16: "float16", bz.bfloat16: "bfloat16",
          bz.int32: "int32"}


def run(build, *inputs):
    """`build(fusion, *input tensors)` over torch CUDA tensors, outputs poisoned; NumPy results."""
    with bz.Fusion() as f:
        defined = [f.define_tensor([-1] * x.ndim, dtype=bz.dtypes.as_dtype(str(x.dtype).removeprefix("torch.")))
                   for x in inputs]
        for out in build(*defined):
            f.add_output(out)
    with config.scope(enable="poison_outputs"):
        outs = f.execute(list(inputs))
    torch.cuda.synchronize()
    return [o.double().cpu().numpy() if o.dtype != torch.bool else o.cpu().numpy() for o in outs]


def cuda_tensor(shape, dtype=bz.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) if not dtype.is_integer else \
        torch.randint(-50, 50, shape, generator=g, dtype=torch.int64)
    return x.to(getattr(torch, _TORCH[dtype])).cuda()


def as64(x) -> np.ndarray:
    return x.double().cpu().numpy()


def close(actual, expected, dtype=bz.float32, scale=None):
    tolerance = {bz.float32: 1e-5, bz.float64: 1e-12, bz.float16: 2e-2, bz.bfloat16: 2e-2, bz.int32: 0}[dtype]
    scale = np.abs(expected).max(initial=1.0) if scale is None else scale
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance * scale)


COLUMN_SHAPES = [(8192, 4096), (1, 7), (7, 1), (33, 1000), (1000, 33), (0, 5), (5, 0), (4099, 3), (3, 70001)]


@pytest.mark.parametrize("shape", COLUMN_SHAPES, ids=str)
def test_column_sums(shape):
    x = cuda_tensor(shape)
    (s,) = run(lambda t: [bz.ops.sum(t, axes=[0])], x)
    close(s, as64(x).sum(0), scale=np.sqrt(max(shape[0], 1)))


@pytest.mark.parametrize("dtype", [bz.float16, bz.bfloat16, bz.float64, bz.int32])
def test_column_sums_of_other_dtypes(dtype):
    x = cuda_tensor((3001, 257), dtype)
    (s,) = run(lambda t: [bz.ops.sum(t, axes=[0])], x)
    close(s, as64(x).sum(0), dtype, scale=np.sqrt(3001) if dtype.is_floating else None)


@pytest.mark.parametrize("shape", [(4097, 130), (1, 1), (2, 100003)], ids=str)
def test_column_max_and_min(shape):
    x = cuda_tensor(shape)
    hi, lo = run(lambda t: [bz.ops.max(t, axes=[0]), bz.ops.min(t, axes=[0])], x)
    np.testing.assert_array_equal(hi, as64(x).max(0))
    np.testing.assert_array_equal(lo, as64(x).min(0))


@pytest.mark.parametrize("shape", [(16, 4096, 128), (3, 5, 7), (2, 0, 3), (64, 3, 1), (1, 20000, 2)], ids=str)
def test_sums_over_the_middle_axis(shape):
    x = cuda_tensor(shape)
    (s,) = run(lambda t: [bz.ops.sum(t, axes=[1])], x)
    close(s, as64(x).sum(1), scale=np.sqrt(max(shape[1], 1)))


@pytest.mark.parametrize("shape, axes", [((4, 4 * 1024 * 1024), [1]), ((1, 5000), [1]), ((3, 1), [1]),
                                         ((32, 64, 56, 56), [0, 2, 3]), ((2, 3, 4, 5), [0, 2, 3]),
                                         ((7, 0, 3), [0, 2]), ((1000, 8, 33), [0, 2]), ((0, 4), [1])], ids=str)
def test_rows_of_one_loop_nest_over_several_blocks(shape, axes):
    # Few long rows, and rows over axes apart (batch_norm's statistics per channel).
    x = cuda_tensor(shape)
    total, mean = run(lambda t: [bz.ops.sum(t, axes=axes), bz.ops.mean(t, axes=axes)], x)
    count = max(int(np.prod([shape[a] for a in axes])), 1)
    close(total, as64(x).sum(tuple(axes)), scale=np.sqrt(count))
    if x.numel():
        close(mean, as64(x).mean(tuple(axes)))
    again = run(lambda t: [bz.ops.sum(t, axes=axes), bz.ops.mean(t, axes=axes)], x)[0]
    assert again.tobytes() == total.tobytes()  # the same fusion on the same data: the same bits


def test_launch_params_name_each_schedule(capsys):
    x = cuda_tensor((4096, 512))
    with config.scope(dump="launch_params"):
        run(lambda t: [bz.ops.sum(t, axes=[0]), bz.ops.sum(t)], x)
    err = capsys.readouterr().err
    assert "===== braze dump: launch_params =====" in err
    assert ": columns range=[0, 512) grid=" in err and ": flat range=[0, 1) grid=" in err


@pytest.mark.parametrize("shape", [(8192, 1024), (1, 9), (1000, 33), (3, 70001)], ids=str)
def test_var_and_mean_over_axis_0(shape):
    x = cuda_tensor(shape) + 3.0

    def build(t):
        return [bz.ops.var(t, axes=[0]), bz.ops.mean(t, axes=[0])]

    var, mean = run(build, x)
    close(var, as64(x).var(0))
    close(mean, as64(x).mean(0))


@pytest.mark.parametrize("shape", [(8192, 4096), (0, 5), (1, 1), (7, 33), (3, 1, 5), (16 * 1024 * 1024,),
                                   (5, 100003)], ids=str)
def test_full_sums(shape):
    x = cuda_tensor(shape)
    (s,) = run(lambda t: [bz.ops.sum(t)], x)
    close(s, as64(x).sum(), scale=np.sqrt(max(x.numel(), 1)))


def test_full_max_mean_and_any():
    x = cuda_tensor((3000, 77))
    hi, mean = run(lambda t: [bz.ops.max(t), bz.ops.mean(t)], x)
    np.testing.assert_array_equal(hi, as64(x).max())
    close(mean, as64(x).mean())
    flags = torch.zeros(5000, 3, dtype=torch.bool, device="cuda")
    flags[4321, 2] = True
    (found,) = run(lambda t: [bz.ops.any(t)], flags)
    assert found


def test_a_long_float32_sum_is_accurate_and_reproducible():
    x = torch.full((16 * 1024 * 1024,), 0.1, dtype=torch.float32, device="cuda")
    first = run(lambda t: [bz.ops.sum(t)], x)[0]
    expected = as64(x).sum()
    assert abs(first - expected) <= 1e-6 * abs(expected)
    y = cuda_tensor((16 * 1024 * 1024,))
    a, b = (run(lambda t: [bz.ops.sum(t)], y)[0] for _ in range(2))
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("build", [lambda t: [bz.ops.sum(t, axes=[0])], lambda t: [bz.ops.sum(t)],
                                   lambda t: [bz.ops.sum(t.reshape((64, 128, 1024)), axes=[1])]],
                         ids=["columns", "full", "middle"])
def test_two_runs_are_bit_identical(build):
    x = cuda_tensor((8192, 1024), seed=3)
    first, second = run(build, x)[0], run(build, x)[0]
    assert first.tobytes() == second.tobytes()


def reference_cross_entropy(logits: np.ndarray, target: np.ndarray, reduction: str) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True) if logits.shape[-1] else logits
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    loss = -np.take_along_axis(log_probs, target[:, None], -1)[:, 0] if len(target) else np.zeros(0)
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean() if len(loss) else np.nan}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(8192, 32000), (1, 1), (7, 7), (33, 33), (5, 1000), (0, 10), (3, 100003)],
                         ids=str)
def test_cross_entropy(shape, reduction):
    logits = cuda_tensor(shape) * 4.0
    g = torch.Generator().manual_seed(1)
    target = torch.randint(0, shape[1], (shape[0],), generator=g).cuda()

    def build(t, y):
        return [bz.ops.cross_entropy(t, y, reduction)]

    (loss,) = run(build, logits, target)
    expected = reference_cross_entropy(as64(logits), target.cpu().numpy(), reduction)
    if reduction == "mean" and shape[0] == 0:
        assert np.isnan(loss)
        return
    close(loss, expected, scale=np.abs(expected).max(initial=1.0))
    if reduction != "none":
        again = run(build, logits, target)[0]
        assert again.tobytes() == loss.tobytes()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(2, 3, 6), (4, 33, 1000), (3, 0, 5), (2, 512, 4096)], ids=str)
def test_cross_entropy_over_batched_rows(shape, reduction):
    logits = cuda_tensor(shape) * 4.0
    g = torch.Generator().manual_seed(2)
    target = torch.randint(0, shape[-1], shape[:-1], generator=g).cuda()

    def build(t, y):
        return [bz.ops.cross_entropy(t, y, reduction)]

    (loss,) = run(build, logits, target)
    flat = reference_cross_entropy(as64(logits).reshape(-1, shape[-1]), target.cpu().numpy().reshape(-1), reduction)
    expected = flat.reshape(shape[:-1]) if reduction == "none" else flat
    if reduction == "mean" and 0 in shape:
        assert np.isnan(loss)
        return
    close(loss, expected, scale=np.abs(expected).max(initial=1.0))


@pytest.mark.parametrize("shape", [(64, 32000), (3, 100003), (5, 1)], ids=str)
def test_softmax_and_log_softmax_of_long_rows(shape):
    x = cuda_tensor(shape) * 3.0
    soft, log_soft = run(lambda t: [bz.ops.softmax(t, -1), bz.ops.log_softmax(t, -1)], x)
    ref = as64(x)
    shifted = ref - ref.max(-1, keepdims=True)
    expected_log = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    close(log_soft, expected_log, scale=np.abs(expected_log).max())
    close(soft, np.exp(expected_log), scale=1.0)


# --- argmax / argmin: (value, index) pairs over the lanes of a row ------------------------------
def _with_specials(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Ties, infinities and NaNs at random places: the first occurrence must win across lanes."""
    g = torch.Generator().manual_seed(seed)
    x = x.clone().cpu()
    if x.numel() == 0 or not x.is_floating_point():
        return x.cuda()
    flat = x.view(-1)
    picks = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50), 4), generator=g)
    flat[picks[:, 0]] = flat.max()  # ties with the maximum
    flat[picks[:, 1]] = flat.min()  # and with the minimum
    flat[picks[: max(1, len(picks) // 4), 2]] = float("inf")
    flat[picks[: max(1, len(picks) // 8), 3]] = float("nan")
    return x.cuda()


@pytest.mark.parametrize("dtype", [bz.float32, bz.float64, bz.bfloat16, bz.int32])
@pytest.mark.parametrize("shape", [(512, 128256), (3, 1), (7, 31), (5, 33), (64, 1000), (2, 5000), (1, 70001),
                                   (4, 0)], ids=str)
def test_argmax_and_argmin_over_rows(shape, dtype):
    x = cuda_tensor(shape, dtype, seed=shape[-1])
    for seed in (0, 1):
        y = _with_specials(x, seed) if seed else x
        if shape[-1] == 0:
            continue  # argmax of an empty row raises (tests/ops)
        hi, lo = run(lambda t: [bz.ops.argmax(t, -1), bz.ops.argmin(t, -1)], y)
        ref = y.double().cpu().numpy() if dtype != bz.int32 else y.cpu().numpy()
        np.testing.assert_array_equal(hi, ref.argmax(-1))
        np.testing.assert_array_equal(lo, ref.argmin(-1))


@pytest.mark.parametrize("shape", [(1000, 33), (3, 5000), (70001, 2)], ids=str)
def test_argmax_over_axis_0(shape):
    x = _with_specials(cuda_tensor(shape), 3)
    (hi,) = run(lambda t: [bz.ops.argmax(t, 0)], x)
    np.testing.assert_array_equal(hi, as64(x).argmax(0))


def test_argmax_of_a_row_of_minus_infinities_is_its_first_element():
    x = torch.full((4, 3000), float("-inf")).cuda()
    x[1, 2000] = 0.0
    (hi,) = run(lambda t: [bz.ops.argmax(t, -1)], x)
    np.testing.assert_array_equal(hi, [0, 2000, 0, 0])


# --- statistics over axes apart, two passes each, walked flat by the lanes -----------------------
@pytest.mark.parametrize("shape", [(32, 256, 56, 56), (2, 3, 4, 5), (1, 8, 1, 1), (3, 5, 0, 2), (64, 4, 7, 9)],
                         ids=str)
def test_channel_variance_and_batch_norm_statistics(shape):
    x = cuda_tensor(shape) * 2.0 + 1.0
    var, mean = run(lambda t: [bz.ops.var(t, axes=[0, 2, 3]), bz.ops.mean(t, axes=[0, 2, 3])], x)
    if x.numel():
        close(var, as64(x).var((0, 2, 3)))
        close(mean, as64(x).mean((0, 2, 3)))


def test_group_norm_through_a_reshape():
    x = cuda_tensor((4, 64, 16, 16))

    def build(t):
        grouped = bz.ops.reshape(t, [4, 8, -1])
        return [bz.ops.reshape(bz.ops.layer_norm(grouped, eps=1e-5), [4, 64, 16, 16])]

    (y,) = run(build, x)
    g = as64(x).reshape(4, 8, -1)
    expected = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    close(y, expected, scale=1.0)


@pytest.mark.parametrize("shape", [(8192, 4096), (33, 1000), (1, 7)], ids=str)
def test_layer_norm_backward_weight_and_bias_gradients(shape):
    dy, x = cuda_tensor(shape, seed=1), cuda_tensor(shape, seed=2)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)

    with bz.Fusion() as f:
        dy_, x_ = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        mean_, rstd_ = f.define_tensor([-1, 1]), f.define_tensor([-1, 1])
        f.add_output(bz.ops.sum(dy_ * ((x_ - mean_) * rstd_), axes=[0]))
        f.add_output(bz.ops.sum(dy_, axes=[0]))
    with config.scope(enable="poison_outputs"):
        dw, db = (o.double().cpu().numpy() for o in f.execute([dy, x, mean, rstd]))
    xhat = (as64(x) - as64(mean)) * as64(rstd)
    close(dw, (as64(dy) * xhat).sum(0), scale=np.sqrt(shape[0]) * 4)
    close(db, as64(dy).sum(0), scale=np.sqrt(shape[0]) * 4)


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16])
@pytest.mark.parametrize("shape", [(4, 1024, 1024), (3, 33, 33), (2, 8, 4096), (2, 5, 6)], ids=str)
def test_masked_softmax_reads_scores_in_16_byte_vectors_under_a_where(shape, dtype):
    x = cuda_tensor(shape, dtype) * 4.0
    mask = torch.from_numpy(np.tril(np.ones(shape[1:], bool))[None].copy()).cuda()
    mask[0, 0, :] = False  # a row with every score masked: NaN, as in NumPy

    with bz.Fusion() as f:
        xs = f.define_tensor([-1, -1, -1], dtype=dtype)
        ms = f.define_tensor([1, -1, -1], dtype=bz.bool_)
        scores = bz.ops.where(ms, bz.ops.cast(xs, bz.float32) * 0.125, float("-inf"))
        f.add_output(bz.ops.cast(bz.ops.softmax(scores, -1), dtype))
    with config.scope(enable="poison_outputs"):
        (y,) = f.execute([x, mask])
    s = np.where(mask.cpu().numpy(), as64(x) * 0.125, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        expected = e / e.sum(-1, keepdims=True)
    close(as64(y), expected, dtype, scale=1.0)


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16])
@pytest.mark.parametrize("columns, stride", [(1024, 1024), (1024, 1026), (512, 514), (2048, 2050), (96, 98)])
def test_softmax_rows_with_misaligned_strides(dtype, columns, stride):
    """A row stride that is not a multiple of four leaves every other row misaligned for 16-byte
    vectors: those rows take the general path, the others the vector or register path."""
    x = cuda_tensor((37, stride), dtype)[:, :columns]
    mask = (cuda_tensor((37, stride), bz.float32, seed=1) > -1.0)[:, :columns]
    (got, masked) = run(lambda t, m: [bz.ops.softmax(t, -1),
                                      bz.ops.softmax(bz.ops.where(m, t * 0.125, float("-inf")), -1)], x, mask)
    x64, keep = as64(x), mask.cpu().numpy()
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    close(got, e / e.sum(-1, keepdims=True), dtype)
    scores = np.where(keep, x64 * 0.125, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    close(masked, e / e.sum(-1, keepdims=True), dtype)
