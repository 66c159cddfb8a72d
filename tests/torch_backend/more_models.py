"""More architectures for the torch backend's tests, written as their model code writes them: a diffusion
UNet's residual block (GroupNorm, SiLU, a time embedding, nearest upsampling), a T5 layer (its RMS norm
in float32, relative position buckets from log and integer casts, an attention bias), a top-2 mixture
of experts (softmax, topk, one_hot, torch.where's indices, index_add_), a ViT block (patch convolution,
class token, nn.MultiheadAttention), a ConvNeXt block (depthwise convolution, channels-last LayerNorm,
layer scale), a grouped-query attention with complex RoPE (torch.polar, view_as_complex), a Swin window
attention around torch.roll, a state-space scan (softplus, cumsum, logcumsumexp, erfinv), a Mamba-style
selective scan (a causal depthwise conv1d, a decay from cumsum and exp under a masked tril), and a sum of
the losses models train with. Random weights and inputs at small sizes: nothing is downloaded.

MODELS maps a name to (a function making the model, a function making its inputs from a generator);
`check_against_eager` runs one through the braze backend and eager PyTorch and compares them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class UNetResBlock(nn.Module):
    def __init__(self, channels: int = 16, time_dim: int = 32) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(4, channels), nn.GroupNorm(4, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time = nn.Linear(time_dim, channels)

    def forward(self, x: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(time))[:, :, None, None]
        h = self.conv2(F.dropout(F.silu(self.norm2(h)), 0.0, self.training))
        return F.interpolate(x + h, scale_factor=2, mode="nearest")


class T5Layer(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, buckets: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.relative = nn.Embedding(buckets, heads)
        self.ff_in, self.ff_out = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)
        self.heads, self.buckets = heads, buckets

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))

    def bucket(self, relative: torch.Tensor) -> torch.Tensor:
        half = self.buckets // 2
        offset = (relative > 0).to(torch.long) * half
        distance = torch.abs(relative)
        exact = half // 2
        scaled = torch.log(distance.float() / exact) / math.log(16 / exact) * (half - exact)
        large = torch.min(exact + scaled.to(torch.long), torch.full_like(distance, half - 1))
        return offset + torch.where(distance < exact, distance, large)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        y = self.norm(x)
        q, k, v = (m(y).view(b, t, self.heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        position = torch.arange(t, device=x.device)
        bias = self.relative(self.bucket(position[None, :] - position[:, None])).permute(2, 0, 1)[None]
        scores = q @ k.transpose(-1, -2) + bias
        attention = F.softmax(scores.float(), dim=-1).type_as(scores)
        x = x + self.o((attention @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff_out(F.relu(self.ff_in(self.norm(x))))


class MixtureOfExperts(nn.Module):
    def __init__(self, dim: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 32), nn.SiLU(), nn.Linear(32, dim))
                                     for _ in range(experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        x = x.view(-1, d)
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(probs, 2, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, len(self.experts)).permute(2, 1, 0)
        for i, expert in enumerate(self.experts):
            slot, token = torch.where(mask[i])
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        balance = (probs.mean(0) * F.one_hot(chosen[:, 0], len(self.experts)).float().mean(0)).sum()
        return out.view(b, t, d), balance * len(self.experts)


class ViTBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, patch: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.position = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.patch(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


class ConvNeXtBlock(nn.Module):
    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.up, self.down = nn.Linear(channels, 4 * channels), nn.Linear(4 * channels, channels)
        self.scale = nn.Parameter(0.1 * torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y)))) * self.scale
        return x + y.permute(0, 3, 1, 2)


class Losses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 5)

    def forward(self, x, target, soft, labels, regression) -> torch.Tensor:
        z = self.linear(x)
        p = torch.sigmoid(z)
        pt = torch.where(labels > 0, p, 1 - p)
        return (F.cross_entropy(z, target, label_smoothing=0.1)
                + F.kl_div(F.log_softmax(z, -1), soft, reduction="batchmean")
                + (-(1 - pt) ** 2.0 * torch.log(pt.clamp_min(1e-6))).mean()  # focal loss
                + F.smooth_l1_loss(z, regression, beta=0.5)
                + (1 - F.cosine_similarity(z, regression, dim=-1)).mean()
                + F.binary_cross_entropy_with_logits(z, labels, pos_weight=torch.full((5,), 2.0, device=z.device))
                + F.huber_loss(z, regression) + F.mse_loss(z, regression) + F.l1_loss(z, regression)
                + F.nll_loss(F.log_softmax(z, -1), target, ignore_index=1))


class GroupedQueryAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.heads, self.kv_heads = heads, kv_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd, groups = d // self.heads, self.heads // self.kv_heads
        q = self.q(x).view(b, t, self.heads, hd).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, hd).unbind(2)
        k = k.transpose(1, 2)[:, :, None].expand(b, self.kv_heads, groups, t, hd).reshape(b, self.heads, t, hd)
        v = v.transpose(1, 2).repeat_interleave(groups, dim=1)
        steps = torch.arange(0, hd, 2, device=x.device).float() / hd
        angles = torch.outer(torch.arange(t, device=x.device).float(), 1.0 / (10000 ** steps))
        rotation = torch.polar(torch.ones_like(angles), angles)
        q = torch.view_as_real(torch.view_as_complex(q.float().reshape(b, self.heads, t, hd // 2, 2)) * rotation)
        q = q.flatten(3).type_as(x)
        causal = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + causal
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class SwinWindows(nn.Module):
    def __init__(self, channels: int = 8, window: int = 4) -> None:
        super().__init__()
        self.window = window
        self.norm, self.linear = nn.LayerNorm(channels), nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, height, width, channels)
        b, h, w, c = x.shape
        s = self.window
        x = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        windows = x.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, s * s, c)
        windows = self.linear(self.norm(windows)).softmax(1) * windows
        y = windows.view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return torch.roll(y, shifts=(2, 2), dims=(1, 2))


class StateSpaceScan(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        decay = torch.cumsum(-F.softplus(self.a(x)), dim=1)
        h = torch.exp(decay) * torch.cumsum(torch.exp(-decay.clamp(min=-20)) * self.b(x), dim=1)
        return h.logcumsumexp(1).mean() + F.logsigmoid(h).sum() + torch.erfinv(torch.tanh(h) * 0.9).sum()


class SelectiveScan(nn.Module):
    """Mamba's selective scan written without a loop: h_t = sum over s <= t of exp(A (D_t - D_s)) dt_s B_s x_s,
    with D the running sum of dt. The conv1d's output, cropped to the sequence and transposed, is read
    both as it is and through contiguous copies for the projections."""

    def __init__(self, dim: int = 8, state: int = 4) -> None:
        super().__init__()
        self.inner = nn.Linear(dim, 2 * dim)
        self.conv = nn.Conv1d(dim, dim, 4, groups=dim, padding=3)
        self.dt, self.b, self.c = nn.Linear(dim, dim), nn.Linear(dim, state), nn.Linear(dim, state)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, state + 1).float()).repeat(dim, 1))
        self.skip, self.out = nn.Parameter(torch.ones(dim)), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        u, gate = self.inner(x).chunk(2, -1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length].transpose(1, 2))
        dt = F.softplus(self.dt(u))
        decay = torch.cumsum(dt[..., None] * -torch.exp(self.a_log), dim=1)  # (batch, time, dim, state)
        causal = torch.tril(torch.ones(length, length, dtype=torch.bool, device=x.device))[None, :, :, None, None]
        weights = torch.exp((decay[:, :, None] - decay[:, None, :]).masked_fill(~causal, -float("inf")))
        inputs = (dt * u)[..., None] * self.b(u)[:, :, None, :]
        h = (weights * inputs[:, None]).sum(2)
        y = (h * self.c(u)[:, :, None, :]).sum(-1) + self.skip * u
        return self.out(y * F.silu(gate))


def _normal(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g)


def _losses_inputs(g: torch.Generator) -> tuple:
    return (torch.randn(6, 8, generator=g), torch.randint(0, 5, (6,), generator=g),
            F.softmax(torch.randn(6, 5, generator=g), -1), (torch.randn(6, 5, generator=g) > 0).float(),
            torch.randn(6, 5, generator=g))


def _of(*makers: Callable[[torch.Generator], torch.Tensor]) -> Callable[[torch.Generator], tuple]:
    return lambda g: tuple(make(g) for make in makers)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Generator], tuple]]] = {
    "unet_res_block": (UNetResBlock, _of(_normal(2, 16, 8, 8), _normal(2, 32))),
    "t5_layer": (T5Layer, _of(_normal(2, 12, 32))),
    "mixture_of_experts": (MixtureOfExperts, _of(_normal(2, 6, 16))),
    "vit_block": (ViTBlock, _of(_normal(2, 3, 16, 16))),
    "convnext_block": (ConvNeXtBlock, _of(_normal(2, 16, 9, 9))),
    "losses": (Losses, _losses_inputs),
    "gqa_complex_rope": (GroupedQueryAttention, _of(_normal(2, 7, 32))),
    "swin_windows": (SwinWindows, _of(_normal(2, 8, 8, 8))),
    "state_space_scan": (StateSpaceScan, _of(_normal(2, 10, 8))),
    "selective_scan": (SelectiveScan, _of(_normal(2, 6, 8))),
}


STRICT = {"fallback": "error"}
# The mixture of experts loops over torch.where's indices: without this Dynamo skips the frame (a graph
# break in a loop), and the model runs eagerly. With it, the expert batches are unbacked sizes.
DATA_DEPENDENT = {"capture_dynamic_output_shape_ops": True}


def outputs_and_gradients(model, inputs: tuple) -> tuple[list, list]:
    """The model's outputs and the gradients of its parameters of a weighted sum of them (each output
    its own weight, so a gradient mixed up between outputs shows)."""
    out = model(*inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    total = sum(o.float().sum() * (i + 1) for i, o in enumerate(outs))
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(total, params, allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def check_against_eager(name: str, dynamic: bool | None, device: str = "cpu",
                        tolerance: tuple[float, float] = (1e-4, 1e-4), backend: object = "braze") -> None:
    """`backend`: the backend's name, or its function where braze runs uninstalled (no entry point)."""
    make_model, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model = make_model().to(device)
    reference = copy.deepcopy(model)
    inputs = tuple(t.to(device) for t in make_inputs(torch.Generator().manual_seed(1)))
    compiled = torch.compile(model, backend=backend, options=STRICT, dynamic=dynamic)
    with torch._dynamo.config.patch(DATA_DEPENDENT):
        outs, grads = outputs_and_gradients(compiled, inputs)
    outs_ref, grads_ref = outputs_and_gradients(reference, inputs)
    rtol, atol = tolerance
    for n, (actual, expected) in enumerate(zip(outs, outs_ref, strict=True)):
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m, n=n: f"output {n}: {m}")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    for param, actual, expected in zip(names, grads, grads_ref, strict=True):
        assert (actual is None) == (expected is None), param
        if expected is not None:
            torch.testing.assert_close(actual, expected, rtol=rtol * 10, atol=atol,
                                       msg=lambda m, param=param: f"gradient of {param}: {m}")
