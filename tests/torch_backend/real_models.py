"""Layers written as their model code writes them, for the torch backend's tests: GPT-NeoX's parallel residual
with partial rotary embeddings read from cos/sin caches by position ids, Gemma's RMSNorm with `(1 + weight)` in
float32, GPT-J's interleaved rotary embeddings (stack and flatten), DINO's centered, sharpened teacher targets,
LayerScale with per-sample drop path, a squeeze-and-excitation gate, GroupNorm and InstanceNorm over 5-D
inputs, int64 attention masks made additive and fully masked softmax rows, activations and statistics of
one tensor, a sum of the losses models train with, and weight-normed layers. Random weights at small sizes:
nothing is downloaded.

`check_against_eager` runs a module through `torch.compile(backend="braze")` and eager PyTorch and compares
every output, the gradient of every parameter and of every float input.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import braze as bz

STRICT = {"fallback": "error"}
F32 = {"rtol": 1e-4, "atol": 1e-5}
BF16 = {"rtol": 3e-2, "atol": 3e-2}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class NeoXLayer(nn.Module):
    """GPT-NeoX (Pythia): one fused qkv projection split per head, rotary embeddings on the first
    `rotary_pct` of each head's dimensions only (the rest passed through and concatenated back), cos and
    sin caches indexed by position ids, a causal mask applied by torch.where, and a parallel residual
    (attention and MLP both read the layer's input)."""

    def __init__(self, dim: int = 32, heads: int = 4, rotary_pct: float = 0.5, positions: int = 16) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.rotary = int(self.head_dim * rotary_pct)
        self.ln_attn, self.ln_mlp = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.dense = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.rotary, 2).float() / self.rotary))
        angles = torch.outer(torch.arange(positions).float(), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd, r = self.head_dim, self.rotary
        qkv = self.qkv(self.ln_attn(x)).view(b, t, self.heads, 3 * hd).permute(0, 2, 1, 3)
        q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        cos, sin = self.cos_cached[position_ids].unsqueeze(1), self.sin_cached[position_ids].unsqueeze(1)
        q = torch.cat((q[..., :r] * cos + _rotate_half(q[..., :r]) * sin, q[..., r:]), dim=-1)
        k = torch.cat((k[..., :r] * cos + _rotate_half(k[..., :r]) * sin, k[..., r:]), dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min, device=x.device))
        attention = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.dense(attention) + self.down(F.gelu(self.up(self.ln_mlp(x))))


def neox_inputs(g: torch.Generator) -> tuple:
    return torch.randn(2, 7, 32, generator=g), torch.arange(2, 9).expand(2, 7)


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: the weight stored as an offset from 1, the norm and the scale in float32, cast back,
    then the embedding scale sqrt(dim)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.weight = nn.Parameter(0.1 * torch.randn(dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        normed = h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return (normed * (1.0 + self.weight.float())).type_as(h) * math.sqrt(self.dim)


class GPTJRotary(nn.Module):
    """GPT-J's rotary embeddings: sin and cos from an einsum of int64 positions, repeat_interleave'd, pairs
    of neighbouring dimensions rotated by `rotate_every_two` (strided slices, stack, flatten)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.ln = nn.LayerNorm(dim)

    @staticmethod
    def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.ln(x)
        q, k = (m(h).view(b, t, self.heads, self.head_dim) for m in (self.q, self.k))
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64) / self.head_dim))
        sinusoid = torch.einsum("i,j->ij", torch.arange(t, dtype=torch.int64).float(), inv_freq).float()
        sin = torch.repeat_interleave(torch.sin(sinusoid)[None, :, None, :], 2, 3)
        cos = torch.repeat_interleave(torch.cos(sinusoid)[None, :, None, :], 2, 3)
        q = q * cos + self.rotate_every_two(q) * sin
        k = k * cos + self.rotate_every_two(k) * sin
        return (q * k).sum(-1)


class DINOHead(nn.Module):
    """DINO's loss: the teacher's outputs centered by a running center, sharpened by a low temperature and
    softmaxed under no_grad; the student's log_softmax at a higher temperature; cross-entropy of the two."""

    def __init__(self, dim: int = 16, out: int = 10) -> None:
        super().__init__()
        self.head = nn.Linear(dim, out)
        self.register_buffer("center", torch.full((1, out), 0.1))

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        logits = self.head(student) / 0.1
        with torch.no_grad():
            targets = F.softmax((self.head(teacher) - self.center) / 0.04, dim=-1)
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()


class LayerScaleDropPath(nn.Module):
    """timm's LayerScale and DropPath: a per-channel scale, then in training a per-sample keep mask drawn by
    `x.new_empty(...).bernoulli_(keep)` and divided by `keep` in place. Returns the mask too."""

    def __init__(self, dim: int = 16, drop: float = 0.5) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))
        self.drop = drop

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.gamma * self.fc(x)
        keep = 1 - self.drop
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x + y * mask.div_(keep), mask


class SqueezeExcite(nn.Module):
    """A squeeze-and-excitation gate: adaptive average pooling, a bottleneck MLP, a sigmoid gate broadcast
    over the spatial dimensions."""

    def __init__(self, channels: int = 8, reduction: int = 2) -> None:
        super().__init__()
        hidden = channels // reduction
        self.reduce, self.expand = nn.Linear(channels, hidden), nn.Linear(hidden, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(x, 1).flatten(1)))))
        return x * gate[:, :, None, None]


class VolumeNorms(nn.Module):
    """GroupNorm with affine parameters and InstanceNorm3d over a 5-D (video or volume) input, and a
    non-affine InstanceNorm1d of it flattened."""

    def __init__(self, channels: int = 6) -> None:
        super().__init__()
        self.group = nn.GroupNorm(2, channels)
        self.instance = nn.InstanceNorm3d(channels, affine=True)
        self.instance_1d = nn.InstanceNorm1d(channels)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.group(x) + self.instance(x), self.instance_1d(x.flatten(2))


class IntegerMasks(nn.Module):
    """An int64 attention mask made an additive float mask (BERT's -10000), the same mask by masked_fill of
    -inf with fully masked rows zeroed after the softmax, and torch.where over Python numbers and integer
    tensors."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple:
        h = self.fc(x)
        scores = h @ h.transpose(-1, -2)
        additive = scores + (1.0 - mask[:, None, :].to(h.dtype)) * -10000.0
        blocked = scores.masked_fill(mask[:, None, :] == 0, float("-inf")).softmax(-1)
        blocked = torch.where(torch.isnan(blocked), 0.0, blocked)
        keep = torch.where(mask[..., None].bool(), h, 0.0)
        return (additive.softmax(-1), blocked, keep, torch.where(mask > 0, 1, 0) * 2,
                torch.where(mask == 0, mask, mask + 3))


def integer_mask_inputs(g: torch.Generator, batch: int = 3, length: int = 5) -> tuple:
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[1, length // 2:] = 0
    mask[-1] = 0  # a row with nothing to attend to
    return torch.randn(batch, length, 8, generator=g), mask


class Statistics(nn.Module):
    """The activations and statistics model code calls on one tensor."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> tuple:
        h = self.fc(x)
        activations = torch.stack([F.silu(h), F.mish(h), F.hardswish(h * 3), F.softplus(h * 5, beta=2, threshold=4),
                                   F.elu(h), F.leaky_relu(h, 0.1), F.gelu(h),
                                   torch.clamp(h, min=-x.abs(), max=x.abs())])
        return (activations, torch.logsumexp(h, -1), torch.cumsum(h, 1), torch.var(h, 1, unbiased=True), h.std(0),
                h.amax(1), h.norm(p=2, dim=-1), F.cosine_similarity(h, x, dim=-1), (h.abs() + 0.1) ** -0.5, h ** 3)


class TrainingLosses(nn.Module):
    """Losses as training code calls them: label-smoothed cross-entropy with ignore_index=-100, KL divergence
    with log targets, BCE with logits and pos_weight, weighted BCE, smooth L1, Huber, soft-target
    cross-entropy, soft margin, margin ranking, triplet, Poisson and Gaussian NLL."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 5)

    def forward(self, x, target, log_target, labels, regression) -> torch.Tensor:
        z = self.linear(x)
        labels, signs = labels.detach(), (labels * 2 - 1).detach()  # targets these losses take no gradient for
        return (F.cross_entropy(z, target, label_smoothing=0.2, ignore_index=-100)
                + F.kl_div(F.log_softmax(z, -1), log_target, reduction="batchmean", log_target=True)
                + F.binary_cross_entropy_with_logits(z, labels, pos_weight=torch.linspace(0.5, 3, 5))
                + F.binary_cross_entropy(torch.sigmoid(z), labels, weight=torch.linspace(0.5, 3, 5))
                + F.smooth_l1_loss(z, regression, beta=1.0, reduction="sum") + F.huber_loss(z, regression, delta=0.3)
                + F.cross_entropy(z, F.softmax(regression, -1)) + F.soft_margin_loss(z, signs)
                + F.margin_ranking_loss(z[:, 0], z[:, 1], signs[:, 0], margin=0.1)
                + F.triplet_margin_loss(z, regression, x[:, :5]) + F.poisson_nll_loss(z, labels)
                + F.gaussian_nll_loss(z, regression, torch.ones_like(z) * 0.5))


def training_loss_inputs(g: torch.Generator, batch: int = 6) -> tuple:
    target = torch.randint(0, 5, (batch,), generator=g)
    target[2] = -100
    return (torch.randn(batch, 8, generator=g), target, F.log_softmax(torch.randn(batch, 5, generator=g), -1),
            (torch.rand(batch, 5, generator=g) > 0.5).float(), torch.randn(batch, 5, generator=g))


class WeightNormed(nn.Module):
    """Layers under `nn.utils.parametrizations.weight_norm`: a linear layer (norm over dim 0), wav2vec2's
    positional convolution (a grouped conv1d, norm over its last dim, dim=2) and a vocoder's conv1d."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        weight_norm = nn.utils.parametrizations.weight_norm
        self.fc = weight_norm(nn.Linear(dim, dim))
        self.positional = weight_norm(nn.Conv1d(dim, dim, 3, padding=1, groups=2), dim=2)
        self.conv = weight_norm(nn.Conv1d(dim, dim, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x).transpose(1, 2)
        h = h + F.gelu(self.positional(h))
        return torch.tanh(self.conv(F.leaky_relu(h, 0.1)))


def normal(*shape: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.randn(*shape, generator=g),)


# --- comparison ------------------------------------------------------------------------------------------------
def close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    """atol relative to the largest magnitude: kernels that sum in another order than PyTorch's."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (what, actual.dtype, actual.shape)
    scale = max(expected.float().abs().max().item(), 1.0) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


def _outputs(out: object) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _weighted_sum(outs: list[torch.Tensor]) -> torch.Tensor:
    """A scalar weighing every element of every float output differently, so a gradient mixed up between
    outputs or positions shows."""
    total = torch.zeros(())
    for i, o in enumerate(outs):
        if o.dtype.is_floating_point and o.requires_grad:
            weights = torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape).to(o.dtype)
            total = total + (o * weights).float().sum() * (i + 1)
    return total


def check_against_eager(make_model: Callable[[], nn.Module], inputs: Sequence[tuple], *, tolerance: dict = F32,
                        dynamic: bool | None = None, autocast: bool = False) -> None:
    """Each tuple of `inputs` through the compiled model and through eager PyTorch (a copy of the same
    weights): every output, and the gradients of every parameter and float input. Every region braze
    takes must build (fallback='error'), and something must run in braze."""
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT, dynamic=dynamic)
    for call, example in enumerate(inputs):
        leaves, leaves_ref = ([t.detach().clone().requires_grad_(t.dtype.is_floating_point) for t in example]
                              for _ in range(2))
        for p in (*model.parameters(), *reference.parameters()):
            p.grad = None
        with bz.record() as rec:
            with _autocast(autocast):
                outs, outs_ref = _outputs(compiled(*leaves)), _outputs(reference(*leaves_ref))
            _weighted_sum(outs).backward()
            _weighted_sum(outs_ref).backward()
        assert rec.launches, "nothing ran in braze"
        for n, (a, e) in enumerate(zip(outs, outs_ref, strict=True)):
            close(a, e, f"call {call}: output {n}", **tolerance)
        for (name, p), p_ref in zip(model.named_parameters(), reference.parameters(), strict=True):
            assert (p.grad is None) == (p_ref.grad is None), name
            if p_ref.grad is not None:
                close(p.grad, p_ref.grad, f"call {call}: gradient of {name}", **tolerance)
        for n, (x, x_ref) in enumerate(zip(leaves, leaves_ref, strict=True)):
            if x_ref.grad is not None:
                close(x.grad, x_ref.grad, f"call {call}: gradient of input {n}", **tolerance)


def _autocast(on: bool) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()
