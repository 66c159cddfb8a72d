"""Programs of a fourth kind from real models, written with NumPy's functions and braze's ops under
`@bz.jit` and as `bz.Fusion` definitions: activations and their backwards (Mish, softplus with a
threshold, hardswish, ELU, SELU), an instance norm backward over an NHWC tensor read as NCHW, weight
normalization and its backward, T5's relative position buckets (integer log buckets) gathered from a bias
table, pixel shuffle and Swin's shifted window partition by reshape and transpose, segmentation losses
(soft Dice over softmax channels, a sigmoid focal loss normalized by its positives), a VAE's
reparametrization and loss, a DDPM sampling step with classifier-free guidance and its schedule gathered
by one-hot rows, Adafactor's factored second moments, LAMB's trust ratios, Mamba-2's segment sums,
causal linear attention by cumulative sums of outer products, PPO's clipped losses with GAE by a reversed
cumsum, box deltas decoded from strided slices with a GIoU loss, a spectral norm power iteration and a
conv-batch-norm fold, and mixup targets with label smoothing over bfloat16 logits.

Each runs on the CPU backend, through its generated CUDA run on the CPU (tests/cuda_on_cpu.py: g++, a
thread per CUDA thread, after NVRTC has compiled the same source), and on a GPU, and is checked against
NumPy in float64; new outputs start as NaN or -1."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from programs.conftest import BFLOAT16, CUDA, Place
from programs.test_model_programs import assert_close, erf, log_softmax, softmax

import braze as bz
from braze import engine
from braze.compile import nvrtc
from braze.frontend.jit import _arg_signature, _python_value

ops = bz.ops
RNG = np.random.default_rng(44)


@dataclass(frozen=True)
class CudaOnCpu(Place):
    """Host arrays, with each program run through its generated CUDA, compiled by NVRTC and by g++ and
    launched on the CPU as the executor plans it for a small fake GPU."""

    def __call__(self, array):
        return array

    def view(self, array: np.ndarray, make):
        return make(array)

    @property
    def negative_strides(self) -> bool:
        return False  # as on a GPU, whose torch tensors step forwards only


FAKE_GPU = pytest.param(CudaOnCpu("cuda_on_cpu"), id="cuda_on_cpu",
                        marks=pytest.mark.skipif(not available(), reason="needs g++"))


@pytest.fixture(params=[pytest.param(Place("cpu"), id="cpu"), FAKE_GPU, CUDA])
def where(request) -> Place:
    return request.param


def nvrtc_compiles(fusion, inputs) -> None:
    """NVRTC reads the CUDA the fusion generates for `inputs` (g++, which runs it, is more lenient)."""
    nvrtc.compile_ptx(engine.cuda_source(fusion, inputs).text, fusion.name or "fusion", "sm_90")


def fake_gpu_outputs(fusion, inputs) -> list:
    nvrtc_compiles(fusion, inputs)
    outputs, _ = run_on_cpu(fusion, inputs)
    return outputs


def call(where: Place, fn, *args, **static):
    """`fn(*args, **static)` where `where` says, its results on the host. On the fake GPU the jit function
    is traced for the arguments and its fusion run through the CUDA code generator."""
    if not isinstance(where, CudaOnCpu):
        return where.host(fn(*(where(a) if isinstance(a, np.ndarray) else a for a in args), **static))
    values, defaulted = fn._bind(args, static)
    baked = fn.static | defaulted
    key = tuple(_arg_signature(a, n, i in baked) for i, (a, n) in enumerate(zip(values, fn.names)))
    trace = fn._traced(key, values)
    inputs = [_python_value(a) if sig[0] == "scalar" else a for a, sig in zip(values, key) if sig[0] != "const"]
    result = trace.rebuild(fake_gpu_outputs(trace.fusion, [*inputs, *trace.captured]))
    return where.host(result)


def execute(where: Place, fusion, inputs: list) -> list:
    if isinstance(where, CudaOnCpu):
        return where.host(fake_gpu_outputs(fusion, inputs))
    return where.host(fusion.execute([where(a) if isinstance(a, np.ndarray) else a for a in inputs]))


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def f64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(a).astype(np.float64) for a in arrays]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def bce_with_logits(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))


# --- activations -----------------------------------------------------------------------------------
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def test_mish_forward_and_backward_and_torch_activations(where):
    @bz.jit
    def activations(x, grad):
        tsp = np.tanh(ops.softplus(x))
        sig = 1 / (1 + np.exp(-x))
        d_mish = grad * (tsp + x * sig * (1 - tsp * tsp))  # d/dx x tanh(softplus(x))
        return (ops.mish(x), d_mish, ops.hardswish(x), ops.softplus(x, 2.0, 5.0), ops.elu(x, 0.5),
                ops.selu(x))

    x, grad = normal(3, 1031) * 4, normal(3, 1031)  # |x| up to ~16: softplus's threshold is crossed
    x64, g64 = f64(x, grad)
    sp = np.log1p(np.exp(x64))
    tsp = np.tanh(sp)
    expected = [x64 * tsp, g64 * (tsp + x64 * sigmoid(x64) * (1 - tsp**2)),
                x64 * np.clip(x64 + 3, 0, 6) / 6, np.where(2 * x64 > 5, x64, np.log1p(np.exp(2 * x64)) / 2),
                np.where(x64 > 0, x64, 0.5 * np.expm1(x64)),
                SELU_SCALE * np.where(x64 > 0, x64, SELU_ALPHA * np.expm1(x64))]
    assert_close(call(where, activations, x, grad), expected, tol=2e-4)


# --- norms -----------------------------------------------------------------------------------------
def test_instance_norm_backward_over_an_nhwc_tensor_read_as_nchw(where):
    @bz.jit
    def instance_norm_backward(x, w, dy):
        hw = x.shape[2] * x.shape[3]
        mu = x.mean(axis=(2, 3), keepdims=True)
        rstd = 1 / np.sqrt(x.var(axis=(2, 3), keepdims=True) + 1e-5)
        xhat = (x - mu) * rstd
        dxhat = dy * w[None, :, None, None]
        dx = rstd / hw * (hw * dxhat - dxhat.sum(axis=(2, 3), keepdims=True)
                          - xhat * (dxhat * xhat).sum(axis=(2, 3), keepdims=True))
        return dx, (dy * xhat).sum(axis=(0, 2, 3)), dy.sum(axis=(0, 2, 3))

    for n, c, h, w_ in ((2, 3, 5, 7), (1, 17, 1, 9)):
        x_nhwc, w, dy = normal(n, h, w_, c), normal(c), normal(n, c, h, w_)
        x, w64, dy64 = f64(x_nhwc.transpose(0, 3, 1, 2), w, dy)
        mu, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
        xhat = (x - mu) / np.sqrt(var + 1e-5)
        dxhat = dy64 * w64[:, None, None]
        m = h * w_
        dx = (m * dxhat - dxhat.sum((2, 3), keepdims=True) - xhat * (dxhat * xhat).sum((2, 3), keepdims=True)) \
            / (m * np.sqrt(var + 1e-5))
        got = call(where, instance_norm_backward, where.permuted(x_nhwc, (0, 3, 1, 2)), w, dy)
        assert_close(got, [dx, (dy64 * xhat).sum((0, 2, 3)), dy64.sum((0, 2, 3))], tol=5e-4)


def test_weight_norm_and_its_backward_as_a_fusion(where):
    # torch.nn.utils.weight_norm(conv1d, dim=0): w = g * v / ||v|| over every axis but the first
    with bz.Fusion(name="weight_norm") as f:
        v = f.define_tensor((-1, -1, -1), name="v")
        g = f.define_tensor((-1, 1, 1), name="g")
        grad_w = f.define_tensor((-1, -1, -1), name="grad_w")
        norm = (v * v).sum((1, 2), keepdim=True).sqrt()
        f.add_output(g * v / norm)
        grad_g = (grad_w * v).sum((1, 2), keepdim=True) / norm
        f.add_output(grad_g)
        f.add_output(g / norm * grad_w - g * grad_g / (norm * norm) * v)

    for out, inp, k in ((8, 5, 3), (1, 1, 1), (33, 17, 5)):
        v, g, grad_w = normal(out, inp, k), normal(out, 1, 1) + 2, normal(out, inp, k)
        v64, g64, gw64 = f64(v, g, grad_w)
        norm = np.sqrt((v64**2).sum((1, 2), keepdims=True))
        grad_g = (gw64 * v64).sum((1, 2), keepdims=True) / norm
        expected = [g64 * v64 / norm, grad_g, g64 / norm * gw64 - g64 * grad_g / norm**2 * v64]
        assert_close(execute(where, f, [v, g, grad_w]), expected, tol=5e-4)


# --- positions -------------------------------------------------------------------------------------
def t5_buckets(relative: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int, nudge: float):
    """HF T5's `_relative_position_bucket`, its log term moved by `nudge` before truncation (the float32
    log of a bucket's edge may fall either side of the integer)."""
    buckets = np.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.log(relative / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        large = max_exact + np.nan_to_num(scaled + nudge, neginf=0).astype(np.int64)
    return buckets + np.where(relative < max_exact, relative, np.minimum(large, num_buckets - 1))


def test_t5_relative_position_buckets_and_bias(where):
    @bz.jit(static_argnames=("bidirectional", "num_buckets", "max_distance"))
    def position_bias(scores, table, bidirectional, num_buckets, max_distance):
        q, k = scores.shape[-2], scores.shape[-1]
        relative = ops.arange(k)[None, :] - ops.arange(q)[:, None]
        buckets = np.zeros_like(relative)
        if bidirectional:
            num_buckets //= 2
            buckets = buckets + (relative > 0).astype(np.int64) * num_buckets
            relative = np.abs(relative)
        else:
            relative = -np.minimum(relative, np.zeros_like(relative))
        max_exact = num_buckets // 2
        large = max_exact + (np.log(relative.astype(np.float32) / max_exact) / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).astype(np.int64)
        large = np.minimum(large, np.full_like(large, num_buckets - 1))
        buckets = buckets + np.where(relative < max_exact, relative, large)
        bias = (ops.one_hot(buckets, table.shape[0])[..., None] * table).sum(-2)  # table[buckets]: (q, k, heads)
        return buckets, scores + bias.transpose(2, 0, 1)[None]

    for q, k, bidirectional in ((1, 1, True), (7, 150, True), (150, 7, True), (40, 40, False)):
        scores, table = normal(2, 3, q, k), normal(32, 3)
        relative = np.arange(k)[None, :] - np.arange(q)[:, None]
        low, high = (t5_buckets(relative, bidirectional, 32, 128, nudge) for nudge in (-1e-4, 1e-4))
        buckets, biased = call(where, position_bias, scores, table, bidirectional=bidirectional, num_buckets=32,
                               max_distance=128)
        assert buckets.shape == (q, k) and ((buckets == low) | (buckets == high)).all(), buckets
        assert (buckets == high).mean() > 0.9  # the edge cases are few
        assert_close([biased], [scores + table[buckets].transpose(2, 0, 1)[None].astype(np.float64)])


# --- vision views ----------------------------------------------------------------------------------
def swin_windows(x: np.ndarray, ws: int) -> np.ndarray:
    b, h, w, c = x.shape
    return x.reshape(b, h // ws, ws, w // ws, ws, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)


def test_pixel_shuffle_and_shifted_window_partition(where):
    @bz.jit(static_argnames=("r", "ws", "shift"))
    def vision(x, feat, gamma, r, ws, shift):
        n, c, h, w = x.shape
        shuffled = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, -1, h * r, w * r)
        b, hh, ww, cc = feat.shape
        shifted = np.roll(feat, (-shift, -shift), axis=(1, 2))
        windows = shifted.reshape(b, hh // ws, ws, ww // ws, ws, cc).transpose(0, 1, 3, 2, 4, 5)
        windows = windows.reshape(-1, ws * ws, cc)
        centred = windows - windows.mean(-1, keepdims=True)
        normed = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * gamma
        back = normed.reshape(b, hh // ws, ww // ws, ws, ws, cc).transpose(0, 1, 3, 2, 4, 5).reshape(b, hh, ww, cc)
        return np.tanh(shuffled), windows, np.roll(back, (shift, shift), axis=(1, 2))

    x = normal(2, 12, 3, 5)  # 3 output channels of a 2x upscale
    big = normal(2, 8, 12, 7)
    feat = big[..., 1:6]  # 5 channels of 7: rows of the view are 7 apart
    gamma = normal(5)
    shuffled = x.reshape(2, 3, 2, 2, 3, 5).transpose(0, 1, 4, 2, 5, 3).reshape(2, 3, 6, 10)
    windows = swin_windows(np.roll(feat, (-2, -2), axis=(1, 2)), 4)
    w64 = windows.astype(np.float64)
    centred = w64 - w64.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5) * gamma
    back = normed.reshape(2, 2, 3, 4, 4, 5).transpose(0, 1, 3, 2, 4, 5).reshape(2, 8, 12, 5)
    got = call(where, vision, x, where.view(big, lambda a: a[..., 1:6]), gamma, r=2, ws=4, shift=2)
    assert_close(got, [np.tanh(shuffled.astype(np.float64)), windows, np.roll(back, (2, 2), axis=(1, 2))])


# --- losses ----------------------------------------------------------------------------------------
def test_soft_dice_over_softmax_channels_and_sigmoid_focal_loss(where):
    @bz.jit
    def segmentation_losses(logits, target, mask_logits, mask_target, smooth):
        e = np.exp(logits - logits.max(1, keepdims=True))
        probs = e / e.sum(1, keepdims=True)
        onehot = ops.arange(logits.shape[1])[None, :, None, None] == target[:, None]
        inter = (probs * onehot).sum((0, 2, 3))
        dice = 1 - (2 * inter + smooth) / (probs.sum((0, 2, 3)) + onehot.sum((0, 2, 3)) + smooth)
        # torchvision.ops.sigmoid_focal_loss(alpha=0.25, gamma=2, reduction="sum") / the number of positives
        t = mask_target.astype(mask_logits.dtype)
        p = 1 / (1 + np.exp(-mask_logits))
        ce = np.maximum(mask_logits, 0) - mask_logits * t + np.log1p(np.exp(-np.abs(mask_logits)))
        p_t = p * t + (1 - p) * (1 - t)
        focal = (0.25 * t + 0.75 * (1 - t)) * ce * (1 - p_t) ** 2
        return dice, dice.mean(), focal.sum() / np.maximum(mask_target.sum(), 1)

    logits, target = normal(2, 5, 9, 11), RNG.integers(0, 4, (2, 9, 11))  # class 4 never appears
    mask_logits, mask_target = normal(3, 17, 17) * 3, RNG.random((3, 17, 17)) < 0.1
    probs = softmax(logits.astype(np.float64), 1)
    onehot = np.arange(5)[None, :, None, None] == target[:, None]
    dice = 1 - (2 * (probs * onehot).sum((0, 2, 3)) + 1) / (probs.sum((0, 2, 3)) + onehot.sum((0, 2, 3)) + 1)
    x, t = f64(mask_logits, mask_target)
    p = sigmoid(x)
    p_t = p * t + (1 - p) * (1 - t)
    focal = ((0.25 * t + 0.75 * (1 - t)) * bce_with_logits(x, t) * (1 - p_t) ** 2).sum() / mask_target.sum()
    got = call(where, segmentation_losses, logits, target, mask_logits, mask_target, 1.0)
    assert_close(got, [dice, dice.mean(), focal])


def test_vae_reparametrization_and_loss(where):
    @bz.jit
    def vae(recon_logits, x, encoded, eps, beta):
        mu, logvar = np.split(encoded, 2, axis=-1)
        z = mu + np.exp(0.5 * logvar) * eps
        recon = (np.maximum(recon_logits, 0) - recon_logits * x + np.log1p(np.exp(-np.abs(recon_logits))))
        kld = -0.5 * (1 + logvar - mu**2 - np.exp(logvar)).sum(-1)
        return z, kld, (recon.sum(axis=(1, 2, 3)) + beta * kld).mean()

    for b in (1, 6):
        recon_logits, x = normal(b, 1, 28, 28) * 2, RNG.random((b, 1, 28, 28)).astype(np.float32)
        encoded, eps = normal(b, 32), normal(b, 16)
        r64, x64, e64, eps64 = f64(recon_logits, x, encoded, eps)
        mu, logvar = e64[:, :16], e64[:, 16:]
        kld = -0.5 * (1 + logvar - mu**2 - np.exp(logvar)).sum(-1)
        loss = (bce_with_logits(r64, x64).sum((1, 2, 3)) + 0.5 * kld).mean()
        assert_close(call(where, vae, recon_logits, x, encoded, eps, 0.5),
                     [mu + np.exp(0.5 * logvar) * eps64, kld, loss], tol=2e-4)


def test_mixup_targets_with_label_smoothing_over_bfloat16_logits(where):
    @bz.jit
    def mixup_loss(logits, y_a, y_b, lam, smoothing):
        classes = logits.shape[-1]
        off = smoothing / classes
        target_a = ops.one_hot(y_a, classes) * (1 - smoothing) + off
        target_b = ops.one_hot(y_b, classes) * (1 - smoothing) + off
        target = lam * target_a + (1 - lam) * target_b
        logp = ops.log_softmax(logits.astype(np.float32), -1)
        correct = (logits.argmax(-1) == y_a).astype(np.float32).mean()
        return (-target * logp).sum(-1).mean(), correct

    logits = (normal(7, 1000) * 3).astype(BFLOAT16)
    y_a, y_b = RNG.integers(0, 1000, 7), RNG.integers(0, 1000, 7)
    y_a[2] = logits[2].astype(np.float32).argmax()  # one right answer
    x = f64(logits)[0]
    eye = np.eye(1000)
    target = 0.7 * (eye[y_a] * 0.9 + 1e-4) + 0.3 * (eye[y_b] * 0.9 + 1e-4)
    correct = (x.argmax(-1) == y_a).mean()
    assert correct > 0
    assert_close(call(where, mixup_loss, logits, y_a, y_b, 0.7, 0.1),
                 [(-target * log_softmax(x)).sum(-1).mean(), correct])


# --- diffusion -------------------------------------------------------------------------------------
def test_ddpm_step_with_classifier_free_guidance(where):
    @bz.jit
    def ddpm_step(x, eps_cond, eps_uncond, t, betas, noise, guidance):
        eps = eps_uncond + guidance * (eps_cond - eps_uncond)
        alphas_cumprod = np.cumprod(1 - betas)
        previous = np.pad(alphas_cumprod[:-1], (1, 0), constant_values=1.0)
        rows = ops.one_hot(t, betas.shape[0]).astype(np.float32)  # the schedule at each sample's step
        abar, abar_prev, beta = ((rows * s).sum(-1)[:, None, None, None] for s in (alphas_cumprod, previous, betas))
        x0 = np.clip((x - np.sqrt(1 - abar) * eps) / np.sqrt(abar), -1, 1)
        mean = np.sqrt(abar_prev) * beta / (1 - abar) * x0 + np.sqrt(1 - beta) * (1 - abar_prev) / (1 - abar) * x
        var = beta * (1 - abar_prev) / (1 - abar)
        nonzero = (t > 0).astype(np.float32)[:, None, None, None]
        return mean + nonzero * np.sqrt(var) * noise, x0

    betas = np.linspace(1e-4, 0.02, 1000).astype(np.float32)
    t = np.array([0, 1, 499, 999])
    x, cond, uncond, noise = normal(4, 3, 8, 8), normal(4, 3, 8, 8), normal(4, 3, 8, 8), normal(4, 3, 8, 8)
    b64, x64, c64, u64, n64 = f64(betas, x, cond, uncond, noise)
    eps = u64 + 7.5 * (c64 - u64)
    acp = np.cumprod(1 - b64)
    prev = np.concatenate([[1.0], acp[:-1]])
    abar, abar_prev, beta = (s[t][:, None, None, None] for s in (acp, prev, b64))
    x0 = np.clip((x64 - np.sqrt(1 - abar) * eps) / np.sqrt(abar), -1, 1)
    mean = np.sqrt(abar_prev) * beta / (1 - abar) * x0 + np.sqrt(1 - beta) * (1 - abar_prev) / (1 - abar) * x64
    var = beta * (1 - abar_prev) / (1 - abar)
    x_prev = mean + (t > 0)[:, None, None, None] * np.sqrt(var) * n64
    # the cumulative product over 1000 steps in float32 drifts by ~1e-5 relatively, and x0 divides by sqrt(abar)
    assert_close(call(where, ddpm_step, x, cond, uncond, t, betas, noise, 7.5), [x_prev, x0], tol=2e-3)


# --- optimizers ------------------------------------------------------------------------------------
def test_adafactor_step_with_factored_second_moments(where):
    @bz.jit
    def adafactor(param, grad, row, col, beta2, lr):
        g = grad.astype(np.float32)
        g2 = g * g + 1e-30
        row = beta2 * row + (1 - beta2) * g2.mean(-1)
        col = beta2 * col + (1 - beta2) * g2.mean(-2)
        r = row / row.mean(-1, keepdims=True)
        update = g / np.sqrt(r[..., :, None] * col[..., None, :])
        update = update / np.maximum(1.0, np.sqrt((update * update).mean()))  # clip the update's RMS at 1
        scale = np.maximum(1e-3, np.sqrt((param * param).mean()))
        return param - lr * scale * update, row, col

    for shape in ((17, 1031), (2, 5, 3)):
        param, grad = normal(*shape), (normal(*shape) * 0.1).astype(BFLOAT16)
        row, col = np.abs(normal(*shape[:-1])) * 1e-3, np.abs(normal(*shape[:-2], shape[-1])) * 1e-3
        p64, g64, r64, c64 = f64(param, grad, row, col)
        beta2 = 1 - 10.0**-0.8
        r64 = beta2 * r64 + (1 - beta2) * (g64**2 + 1e-30).mean(-1)
        c64 = beta2 * c64 + (1 - beta2) * (g64**2 + 1e-30).mean(-2)
        update = g64 / np.sqrt((r64 / r64.mean(-1, keepdims=True))[..., None] * c64[..., None, :])
        update /= max(1.0, np.sqrt((update**2).mean()))
        expected = p64 - 0.01 * max(1e-3, np.sqrt((p64**2).mean())) * update
        assert_close(call(where, adafactor, param, grad, row, col, beta2, 0.01), [expected, r64, c64], tol=2e-4)


def test_lamb_steps_with_per_tensor_trust_ratios(where):
    @bz.jit
    def lamb(w, g, m, v, b, gb, mb, vb, lr, step, weight_decay):
        def one(w, g, m, v, decay):
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            update = (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-6) + decay * w
            w_norm, u_norm = np.sqrt((w * w).sum()), np.sqrt((update * update).sum())
            trust = np.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            return w - lr * trust * update, m, v

        return (*one(w, g, m, v, weight_decay), *one(b, gb, mb, vb, 0.0))  # no decay on the bias

    weight = normal(33, 17)
    w, m, v = where.permuted(weight, (1, 0)), normal(17, 33) * 0.01, np.abs(normal(17, 33)) * 1e-4
    g = normal(17, 33)
    b, gb = np.zeros(1, np.float32), normal(1)  # a zero bias: its trust ratio is 1
    mb, vb = np.zeros(1, np.float32), np.zeros(1, np.float32)

    def reference(w, g, m, v, decay, step=3):
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        update = m / (1 - 0.9**step) / (np.sqrt(v / (1 - 0.999**step)) + 1e-6) + decay * w
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
        trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        return [w - 0.01 * trust * update, m, v]

    expected = reference(*f64(weight.T, g, m, v), 0.01) + reference(*f64(b, gb, mb, vb), 0.0)
    assert_close(call(where, lamb, w, g, m, v, b, gb, mb, vb, 0.01, 3, 0.01), expected)


# --- sequence models -------------------------------------------------------------------------------
def test_mamba2_segment_sums_naive_and_stable(where):
    @bz.jit
    def segment_sums(dt_raw, dt_bias, a_log):
        dt = ops.softplus(dt_raw + dt_bias)  # (batch, time, heads)
        da = (dt * -np.exp(a_log)).transpose(0, 2, 1)  # (batch, heads, time)
        t = da.shape[-1]
        causal = ops.arange(t)[:, None] >= ops.arange(t)[None, :]
        cs = np.cumsum(da, -1)
        naive = np.where(causal, cs[..., :, None] - cs[..., None, :], -np.inf)
        # ssd_minimal's stable form: repeat, zero on and above the diagonal, cumsum down the columns
        strict = ops.arange(t)[:, None] > ops.arange(t)[None, :]
        repeated = np.where(strict, np.broadcast_to(da[..., :, None], (*da.shape, t)), 0.0)
        stable = np.where(causal, np.cumsum(repeated, -2), -np.inf)
        return np.exp(naive), np.exp(stable), np.exp(cs[..., -1:] - cs)

    for t in (1, 17):
        dt_raw, dt_bias, a_log = normal(2, t, 3), normal(3), normal(3) * 0.5
        dt = np.log1p(np.exp(f64(dt_raw)[0] + f64(dt_bias)[0]))
        da = (dt * -np.exp(f64(a_log)[0])).transpose(0, 2, 1)
        cs = np.cumsum(da, -1)
        with np.errstate(over="ignore"):
            decay = np.where(np.tril(np.ones((t, t), bool)), np.exp(cs[..., :, None] - cs[..., None, :]), 0.0)
        assert_close(call(where, segment_sums, dt_raw, dt_bias, a_log), [decay, decay, np.exp(cs[..., -1:] - cs)],
                     tol=2e-4)


def test_causal_linear_attention_by_cumulative_outer_products(where):
    @bz.jit
    def linear_attention(q, k, v):
        phi_q, phi_k = ops.elu(q) + 1, ops.elu(k) + 1  # (batch, heads, time, d)
        kv = np.cumsum(phi_k[..., :, None] * v[..., None, :], axis=-3)  # (batch, heads, time, d, dv)
        z = np.cumsum(phi_k, axis=-2)
        out = (phi_q[..., :, None] * kv).sum(-2) / ((phi_q * z).sum(-1, keepdims=True) + 1e-6)
        return out, kv[..., -1, :, :]  # the state a recurrent decoder carries on

    q, k, v = normal(2, 2, 9, 4), normal(2, 9, 2, 4), normal(2, 2, 9, 3)
    q64, k64, v64 = f64(q, k.transpose(0, 2, 1, 3), v)
    phi_q, phi_k = (np.where(a > 0, a, np.expm1(a)) + 1 for a in (q64, k64))
    kv = np.cumsum(phi_k[..., :, None] * v64[..., None, :], -3)
    out = (phi_q[..., :, None] * kv).sum(-2) / ((phi_q * np.cumsum(phi_k, -2)).sum(-1, keepdims=True) + 1e-6)
    assert_close(call(where, linear_attention, q, where.permuted(k, (0, 2, 1, 3)), v), [out, kv[..., -1, :, :]])


# --- reinforcement learning ------------------------------------------------------------------------
def test_ppo_clipped_losses_with_gae_by_a_reversed_cumsum(where):
    @bz.jit
    def ppo(logits, actions, old_logp, rewards, values, old_values, clip, gamma_lambda, gamma):
        # GAE over each environment's steps: A_t = sum_k (gamma lambda)^(k-t) delta_k, by a reversed cumsum
        delta = rewards + gamma * values[:, 1:] - values[:, :-1]
        w = gamma_lambda ** ops.arange(rewards.shape[-1]).astype(np.float32)
        advantages = np.flip(np.cumsum(np.flip(w * delta, -1), -1), -1) / w
        returns = advantages + values[:, :-1]
        adv = (advantages - advantages.mean()) / (np.sqrt(np.var(advantages, ddof=1)) + 1e-8)
        logp_all = ops.log_softmax(logits, -1)
        logp = (logp_all * ops.one_hot(actions, logits.shape[-1])).sum(-1)
        ratio = np.exp(logp - old_logp)
        policy = -np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        v_clipped = old_values + np.clip(values[:, :-1] - old_values, -clip, clip)
        value = 0.5 * np.maximum((values[:, :-1] - returns) ** 2, (v_clipped - returns) ** 2).mean()
        entropy = -(np.exp(logp_all) * logp_all).sum(-1).mean()
        clip_fraction = (np.abs(ratio - 1) > clip).astype(np.float32).mean()
        return advantages, policy + 0.5 * value - 0.01 * entropy, ((ratio - 1) - (logp - old_logp)).mean(), \
            clip_fraction

    envs, steps, n_actions = 4, 33, 6
    logits, actions = normal(envs, steps, n_actions), RNG.integers(0, n_actions, (envs, steps))
    rewards, values = normal(envs, steps), normal(envs, steps + 1)
    x, r64, v64 = f64(logits, rewards, values)
    logp_all = log_softmax(x)
    logp = np.take_along_axis(logp_all, actions[..., None], -1)[..., 0]
    old_logp = (logp + RNG.standard_normal(logp.shape) * 0.3).astype(np.float32)
    old_values = (v64[:, :-1] + RNG.standard_normal((envs, steps)) * 0.5).astype(np.float32)
    delta = r64 + 0.99 * v64[:, 1:] - v64[:, :-1]
    advantages = np.zeros_like(delta)
    running = np.zeros(envs)
    for t in reversed(range(steps)):
        running = delta[:, t] + 0.95 * running
        advantages[:, t] = running
    returns = advantages + v64[:, :-1]
    adv = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)
    ratio = np.exp(logp - old_logp)
    policy = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv).mean()
    v_clipped = old_values + np.clip(v64[:, :-1] - old_values, -0.2, 0.2)
    value = 0.5 * np.maximum((v64[:, :-1] - returns) ** 2, (v_clipped - returns) ** 2).mean()
    entropy = -(np.exp(logp_all) * logp_all).sum(-1).mean()
    got = call(where, ppo, logits, actions, old_logp, rewards, values, old_values, 0.2, 0.95, 0.99)
    # 0.95^32 ~ 0.19: dividing the reversed cumsum by it costs a few float32 ulps
    assert_close(got, [advantages, policy + 0.5 * value - 0.01 * entropy,
                       ((ratio - 1) - (logp - old_logp)).mean(), (np.abs(ratio - 1) > 0.2).mean()], tol=5e-4)


# --- detection -------------------------------------------------------------------------------------
def decode_reference(anchors, deltas, weights, clip):
    widths, heights = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    cx, cy = anchors[:, 0] + 0.5 * widths, anchors[:, 1] + 0.5 * heights
    dx, dy = deltas[:, 0::4] / weights[0], deltas[:, 1::4] / weights[1]
    dw, dh = np.minimum(deltas[:, 2::4] / weights[2], clip), np.minimum(deltas[:, 3::4] / weights[3], clip)
    px, py = dx * widths[:, None] + cx[:, None], dy * heights[:, None] + cy[:, None]
    pw, ph = np.exp(dw) * widths[:, None], np.exp(dh) * heights[:, None]
    return np.stack([px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw, py + 0.5 * ph], -1).reshape(len(anchors), -1)


def giou_loss_reference(a, b):
    area_a, area_b = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt, rb = np.maximum(a[:, :2], b[:, :2]), np.minimum(a[:, 2:], b[:, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[:, 0] * wh[:, 1]
    union = area_a + area_b - inter
    enclosing = np.prod(np.maximum(a[:, 2:], b[:, 2:]) - np.minimum(a[:, :2], b[:, :2]), -1)
    return 1 - (inter / union - (enclosing - union) / enclosing)


def test_box_deltas_decoded_from_strided_slices_and_a_giou_loss(where):
    @bz.jit
    def detection(anchors, deltas, gt):
        widths, heights = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        cx, cy = anchors[:, 0] + 0.5 * widths, anchors[:, 1] + 0.5 * heights
        clip = math.log(1000.0 / 16)
        dx, dy = deltas[:, 0::4] / 10.0, deltas[:, 1::4] / 10.0
        dw, dh = np.minimum(deltas[:, 2::4] / 5.0, clip), np.minimum(deltas[:, 3::4] / 5.0, clip)
        px, py = dx * widths[:, None] + cx[:, None], dy * heights[:, None] + cy[:, None]
        pw, ph = np.exp(dw) * widths[:, None], np.exp(dh) * heights[:, None]
        boxes = np.stack([px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw, py + 0.5 * ph], -1)
        a = boxes[:, 0]  # the first class's box against the ground truth
        area_a, area_b = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1])
        wh = np.clip(np.minimum(a[:, 2:], gt[:, 2:]) - np.maximum(a[:, :2], gt[:, :2]), 0, None)
        inter = wh[:, 0] * wh[:, 1]
        union = area_a + area_b - inter
        hull = np.maximum(a[:, 2:], gt[:, 2:]) - np.minimum(a[:, :2], gt[:, :2])
        enclosing = hull[:, 0] * hull[:, 1]
        return boxes.reshape(boxes.shape[0], -1), (1 - (inter / union - (enclosing - union) / enclosing)).mean()

    corner = RNG.random((11, 2)) * 50
    anchors = np.concatenate([corner, corner + RNG.random((11, 2)) * 30 + 4], 1).astype(np.float32)
    deltas = normal(11, 12) * 0.5
    deltas[0, 2] = 40.0  # a width far past the clip
    gt = np.concatenate([corner + 2, corner + RNG.random((11, 2)) * 30 + 6], 1).astype(np.float32)
    a64, d64, g64 = f64(anchors, deltas, gt)
    boxes = decode_reference(a64, d64, (10, 10, 5, 5), math.log(1000 / 16))
    expected = [boxes, giou_loss_reference(boxes[:, :4], g64).mean()]
    assert_close(call(where, detection, anchors, deltas, gt), expected, tol=2e-4)


# --- weights ---------------------------------------------------------------------------------------
def test_spectral_norm_power_iteration(where):
    @bz.jit
    def spectral_norm(weight, u):
        m = weight.reshape(weight.shape[0], -1)
        v = (m * u[:, None]).sum(0)
        v = v / np.maximum(np.sqrt((v * v).sum()), 1e-12)
        mv = (m * v[None, :]).sum(1)
        u = mv / np.maximum(np.sqrt((mv * mv).sum()), 1e-12)
        sigma = (u * mv).sum()
        return weight / sigma, u, v, sigma

    weight, u = normal(8, 3, 3, 3), normal(8)
    m, u64 = weight.reshape(8, -1).astype(np.float64), f64(u)[0]
    v = m.T @ u64
    v /= np.linalg.norm(v)
    mv = m @ v
    u_new = mv / np.linalg.norm(mv)
    sigma = u_new @ mv
    assert_close(call(where, spectral_norm, weight, u), [weight / sigma, u_new, v, sigma])


def test_conv_batch_norm_fold_as_a_fusion(where):
    with bz.Fusion(name="fold_bn") as f:
        w = f.define_tensor((-1, -1, -1, -1), name="w")
        b, gamma, beta, mean, var = (f.define_tensor((-1,), name=n) for n in ("b", "gamma", "beta", "mean", "var"))
        eps = f.define_scalar(dtype=bz.float32, name="eps")
        scale = gamma * ops.rsqrt(var + eps)
        f.add_output(w * scale[:, None, None, None])
        f.add_output(beta + (b - mean) * scale)

    for out, inp in ((16, 3), (1, 1)):
        w = normal(out, inp, 3, 3)
        b, gamma, beta, mean = normal(out), normal(out), normal(out), normal(out)
        var = np.abs(normal(out)) + 0.1
        b64, g64, be64, m64, v64 = f64(b, gamma, beta, mean, var)
        scale = g64 / np.sqrt(v64 + 1e-5)
        got = execute(where, f, [w, b, gamma, beta, mean, var, 1e-5])
        assert_close(got, [w * scale[:, None, None, None], be64 + (b64 - m64) * scale])


def test_gelu_erf_backward_in_bfloat16_with_float32_math(where):
    @bz.jit
    def gelu_backward(x, grad):
        xf = x.astype(np.float32)
        cdf = 0.5 * (1 + ops.erf(xf / math.sqrt(2)))
        pdf = np.exp(-0.5 * xf * xf) / math.sqrt(2 * math.pi)
        return (grad.astype(np.float32) * (cdf + xf * pdf)).astype(x.dtype), ops.gelu(xf).astype(x.dtype)

    x, grad = (normal(5, 333) * 3).astype(BFLOAT16), normal(5, 333).astype(BFLOAT16)
    x64, g64 = f64(x, grad)
    cdf = 0.5 * (1 + erf(x64 / math.sqrt(2)))
    pdf = np.exp(-0.5 * x64**2) / math.sqrt(2 * math.pi)
    got = call(where, gelu_backward, x, grad)
    assert all(g.dtype == BFLOAT16 for g in got)
    assert_close(got, [g64 * (cdf + x64 * pdf), x64 * cdf], tol=1e-2)  # bfloat16 keeps 8 bits
