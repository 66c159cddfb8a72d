"""Model code as people write it, through `torch.compile(backend="braze")` on CPU tensors against eager
PyTorch: a Mistral block (sliding-window causal mask from triu/tril and masked_fill, RoPE from int64
position ids), CLIP's contrastive loss with a learnable temperature, a Whisper encoder front (strided
conv1d, GELU, sinusoidal positions), a RoBERTa embedding (position ids from a padding mask's cumsum,
padding_idx), a sentence embedding (masked mean pooling, F.normalize), a DiT block (adaLN modulation,
gated residuals), an ALiBi attention (baddbmm, per-head slopes), a MobileNetV3 inverted residual
(hardswish, squeeze-excite through adaptive pooling, batch norm), a super-resolution upsampler
(pixel_shuffle, PReLU, reflect padding), a 1D CNN classifier (BatchNorm1d, max_pool1d), a YOLO head
with a GIoU loss, a graph convolution (index_add_, scatter_add_, scatter_reduce), a top-p filter (sort,
scatter), nn.TransformerEncoder with a padding mask, and modules of in-place ops, of where/clamp/
nan_to_num, of mixed dtypes and of non-contiguous inputs; then training loops (AdamW with
clip_grad_norm_ and a warmup schedule, label-smoothed cross-entropy with ignore_index, bf16 autocast,
fp16 autocast with a GradScaler), dynamic sizes, no_grad inference, dropout in eval mode, and state
written in place (buffers, the caller's input, a key/value cache).

Each compares every output, the gradient of every parameter (and of inputs that take one) and, for
training, the loss over a few optimizer steps. Random weights at small sizes: nothing is downloaded.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import braze as bz  # noqa: E402

STRICT = {"fallback": "error"}
F32 = {"rtol": 1e-4, "atol": 1e-5}
BF16 = {"rtol": 3e-2, "atol": 3e-2}


# --- comparison ------------------------------------------------------------------------------------------------
def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    """atol relative to the largest magnitude: kernels that sum in another order than PyTorch's."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (what, actual.dtype, actual.shape)
    scale = max(expected.float().abs().max().item(), 1.0) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}",
                               equal_nan=True)


def _outputs(out: object) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _weighted_sum(outs: list[torch.Tensor]) -> torch.Tensor:
    """A scalar that weighs every element of every float output differently, so a gradient mixed up
    between outputs or positions shows."""
    total = 0
    for i, o in enumerate(outs):
        if o.dtype.is_floating_point and o.requires_grad:
            weights = torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape).to(o.dtype)
            total = total + (o * weights).float().sum() * (i + 1)
    return total


def check_model(make_model: Callable[[], nn.Module], make_inputs: Callable[[torch.Generator], tuple], *,
                tolerance: dict = F32, dynamic: bool | None = None, options: dict | None = None,
                backward: bool = True) -> nn.Module:
    """The compiled model's outputs and gradients (parameters and float inputs) against eager's; every
    region built (fallback='error') and something ran in braze. Returns the compiled module."""
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)
    inputs = make_inputs(torch.Generator().manual_seed(1))
    leaves = [t.detach().clone().requires_grad_(backward and t.dtype.is_floating_point) for t in inputs]
    leaves_ref = [t.detach().clone().requires_grad_(backward and t.dtype.is_floating_point) for t in inputs]
    compiled = torch.compile(model, backend="braze", options=options or STRICT, dynamic=dynamic)
    with bz.record() as rec:
        outs = _outputs(compiled(*leaves))
        outs_ref = _outputs(reference(*leaves_ref))
        for n, (a, e) in enumerate(zip(outs, outs_ref, strict=True)):
            _close(a, e, f"output {n}", **tolerance)
        if backward:
            _weighted_sum(outs).backward()
            _weighted_sum(outs_ref).backward()
    assert rec.launches, "nothing ran in braze"
    if backward:
        for (name, p), p_ref in zip(model.named_parameters(), reference.parameters(), strict=True):
            assert (p.grad is None) == (p_ref.grad is None), name
            if p_ref.grad is not None:
                _close(p.grad, p_ref.grad, f"gradient of {name}", **tolerance)
        for n, (x, x_ref) in enumerate(zip(leaves, leaves_ref)):
            if x_ref.grad is not None:
                _close(x.grad, x_ref.grad, f"gradient of input {n}", **tolerance)
    return compiled


def _normal(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g)


def _of(*makers: Callable[[torch.Generator], torch.Tensor]) -> Callable[[torch.Generator], tuple]:
    return lambda g: tuple(make(g) for make in makers)


# --- models ----------------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class MistralBlock(nn.Module):
    """Mistral's decoder layer: RoPE from int64 position ids, grouped KV heads by repeat_interleave, a
    sliding-window causal mask made from tril/triu and masked_fill, explicit matmul and softmax."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, window: int = 4) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.window = heads, kv_heads, dim // heads, window
        self.q = nn.Linear(dim, dim, bias=False)
        self.k, self.v = (nn.Linear(dim, kv_heads * self.head_dim, bias=False) for _ in range(2))
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, 64, bias=False), nn.Linear(dim, 64, bias=False)
        self.down = nn.Linear(64, dim, bias=False)
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        freqs = (self.inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        ones = torch.ones(t, t, dtype=torch.bool, device=x.device)
        allowed = torch.tril(ones) & torch.triu(ones, diagonal=-self.window + 1)
        scores = (q @ k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        x = x + self.o((probs @ v).transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def _mistral_inputs(g: torch.Generator) -> tuple:
    positions = torch.arange(3, 3 + 9, dtype=torch.int64).expand(2, 9)  # a continued sequence
    return torch.randn(2, 9, 32, generator=g), positions


class CLIPHead(nn.Module):
    """CLIP's projections and symmetric contrastive loss: normalized embeddings, a learnable
    temperature exp'd and clamped at 100, cross-entropy against arange labels both ways."""

    def __init__(self, image_dim: int = 24, text_dim: int = 20, dim: int = 16) -> None:
        super().__init__()
        self.image_proj = nn.Linear(image_dim, dim, bias=False)
        self.text_proj = nn.Linear(text_dim, dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.image_proj(image)
        text = self.text_proj(text)
        image = image / image.norm(dim=-1, keepdim=True)
        text = F.normalize(text, dim=-1)
        logits = self.logit_scale.exp().clamp(max=100) * image @ text.t()
        labels = torch.arange(logits.shape[0], device=logits.device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        return loss, logits


class WhisperFront(nn.Module):
    """Whisper's audio encoder front: two conv1d (the second strided) with exact GELU, a sinusoidal
    position table added to the transposed features, a pre-norm MLP layer and a final LayerNorm."""

    def __init__(self, mels: int = 8, dim: int = 32, frames: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        increment = math.log(10000) / (dim // 2 - 1)
        inv = torch.exp(-increment * torch.arange(dim // 2))
        scaled = torch.arange(frames // 2)[:, None] * inv[None, :]
        self.register_buffer("positions", torch.cat([scaled.sin(), scaled.cos()], dim=1))
        self.ln, self.ln_post = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = (x + self.positions).to(x.dtype)
        x = x + self.fc2(F.gelu(self.fc1(self.ln(x))))
        return self.ln_post(x)


class RobertaEmbeddings(nn.Module):
    """RoBERTa's embeddings: position ids counted from the padding mask (cumsum, int casts, + padding_idx),
    word, position and token-type embeddings with padding_idx, LayerNorm, then a masked attention bias
    from the same mask."""

    def __init__(self, vocab: int = 50, dim: int = 32, positions: int = 24, pad: int = 1) -> None:
        super().__init__()
        self.pad = pad
        self.words = nn.Embedding(vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(positions, dim, padding_idx=pad)
        self.types = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.query, self.key = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = input_ids.ne(self.pad).int()
        position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        token_types = torch.zeros_like(input_ids)
        x = self.norm(self.words(input_ids) + self.positions(position_ids) + self.types(token_types))
        extended = (1.0 - mask[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scores = self.query(x) @ self.key(x).transpose(-1, -2) / math.sqrt(x.shape[-1]) + extended
        return scores.softmax(-1) @ x


def _token_ids(g: torch.Generator) -> tuple:
    ids = torch.randint(2, 50, (3, 11), generator=g)
    ids[0, 8:], ids[2, 5:] = 1, 1  # right padding
    return (ids,)


class SentenceEmbedder(nn.Module):
    """sentence-transformers' pooling: mean of the token states under the attention mask (the count
    clamped at 1e-9), then F.normalize; cosine similarities between the two halves of the batch."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim))

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states = self.encoder(tokens)
        expanded = attention_mask.unsqueeze(-1).expand(states.size()).float()
        pooled = torch.sum(states * expanded, 1) / torch.clamp(expanded.sum(1), min=1e-9)
        embeddings = F.normalize(pooled, p=2, dim=1)
        a, b = embeddings.chunk(2)
        return embeddings, (a * b).sum(-1)


def _sentence_inputs(g: torch.Generator) -> tuple:
    mask = torch.ones(4, 10, dtype=torch.int64)
    mask[1, 6:], mask[3, 2:] = 0, 0
    return torch.randn(4, 10, 32, generator=g), mask


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    """DiT's block: adaLN-Zero (six modulations from the conditioning through SiLU + Linear, chunked),
    LayerNorm without affine parameters, attention by SDPA, a tanh-GELU MLP, gated residuals."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.ada(c).chunk(6, dim=1)
        b, t, d = x.shape
        h = _modulate(self.norm1(x), shift_a, scale_a)
        q, k, v = self.qkv(h).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + gate_a.unsqueeze(1) * self.proj(attn)
        return x + gate_m.unsqueeze(1) * self.mlp(_modulate(self.norm2(x), shift_m, scale_m))


class ALiBiAttention(nn.Module):
    """BLOOM's attention: ALiBi slopes (a geometric series per head) times key positions added to the
    scores by baddbmm, a causal mask as a bool tensor, softmax in float32, dropout (off in eval)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv, self.dense = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.1)
        start = 2 ** (-(2 ** -(math.log2(heads) - 3)))
        self.register_buffer("slopes", torch.tensor([start ** (i + 1) for i in range(heads)]))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        positions = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
        alibi = (self.slopes[..., None] * positions).reshape(b * self.heads, 1, t)
        q, k, v = self.qkv(x).view(b, t, self.heads, 3, self.head_dim).unbind(3)
        q = q.transpose(1, 2).reshape(b * self.heads, t, self.head_dim)
        k = k.permute(0, 2, 3, 1).reshape(b * self.heads, self.head_dim, t)
        v = v.transpose(1, 2).reshape(b * self.heads, t, self.head_dim)
        scores = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1 / math.sqrt(self.head_dim))
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        blocked = causal[None] | ~attention_mask.bool()[:, None, :]
        scores = scores.view(b, self.heads, t, t).masked_fill(blocked[:, None], torch.finfo(x.dtype).min)
        probs = self.drop(F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype))
        context = torch.bmm(probs.view(b * self.heads, t, t), v)
        return self.dense(context.view(b, self.heads, t, self.head_dim).permute(0, 2, 1, 3).reshape(b, t, d))


def _alibi_inputs(g: torch.Generator) -> tuple:
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, :3] = 0  # left padding
    return torch.randn(2, 8, 32, generator=g), mask


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expand, depthwise 3x3, BatchNorm, hardswish, squeeze-excite (adaptive
    average pool, ReLU, hardsigmoid), 1x1 project, residual."""

    def __init__(self, channels: int = 8, expanded: int = 24) -> None:
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(channels, expanded, 1, bias=False), nn.BatchNorm2d(expanded),
                                    nn.Hardswish())
        self.depthwise = nn.Sequential(nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False),
                                       nn.BatchNorm2d(expanded), nn.Hardswish())
        self.se_reduce, self.se_expand = nn.Conv2d(expanded, 8, 1), nn.Conv2d(8, expanded, 1)
        self.project = nn.Sequential(nn.Conv2d(expanded, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(self.expand(x))
        scale = F.adaptive_avg_pool2d(h, 1)
        scale = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(scale))))
        return x + self.project(h * scale)


class SuperResolution(nn.Module):
    """ESPCN-style upsampler: reflect padding, convolutions with PReLU (one slope per channel), then
    pixel_shuffle by 2, and a residual from bilinear upsampling of the input."""

    def __init__(self, channels: int = 3, features: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, features, 3)
        self.act = nn.PReLU(features, init=0.2)
        self.conv2 = nn.Conv2d(features, channels * 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.conv1(F.pad(x, (1, 1, 1, 1), mode="reflect")))
        up = F.pixel_shuffle(self.conv2(h), 2)
        return torch.clamp(up + F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), 0.0, 1.0)


class Conv1dClassifier(nn.Module):
    """A 1D CNN over signals: Conv1d, BatchNorm1d (batch statistics in training), ReLU, max_pool1d,
    a global average over time, a linear head and log_softmax."""

    def __init__(self, channels: int = 4, classes: int = 5) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv1d(channels, 16, 5, padding=2), nn.BatchNorm1d(16)
        self.conv2, self.bn2 = nn.Conv1d(16, 16, 3, padding=1), nn.BatchNorm1d(16)
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool1d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return F.log_softmax(self.head(x.mean(-1)), dim=-1)


class InPlaceOps(nn.Module):
    """In-place ops as model code writes them on intermediates: add_, relu_, mul_, masked_fill_, clamp_,
    slice assignment, and F.relu(inplace=True)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h.add_(self.bias)
        h.relu_()
        h = self.fc2(h)
        h.mul_(0.5).add_(x, alpha=2.0)
        h.masked_fill_(mask[..., None], 0.0)
        h[:, 0] = h[:, 0] * 3.0  # a class token scaled in place
        h.clamp_(min=-2.0, max=2.0)
        return F.relu(h, inplace=True) + x.sigmoid()


class SafeNumerics(nn.Module):
    """Guards models write against infinities and NaNs: torch.where around a division by a count that may
    be zero, log of clamped probabilities, nan_to_num after a masked softmax of a fully masked row."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        count = mask.sum(-1, keepdim=True)
        mean = torch.where(count > 0, (h * mask).sum(-1, keepdim=True) / count.clamp(min=1), torch.zeros_like(count))
        probs = torch.softmax(h.masked_fill(mask == 0, float("-inf")), dim=-1)
        probs = torch.nan_to_num(probs, nan=0.0)  # a row with nothing allowed is NaN: zero it
        entropy = -(probs * torch.log(probs.clamp(min=1e-12))).sum(-1)
        return mean, probs, entropy


def _safe_inputs(g: torch.Generator) -> tuple:
    mask = (torch.rand(6, 16, generator=g) > 0.5).float()
    mask[2] = 0  # a row with nothing allowed
    return torch.randn(6, 16, generator=g), mask


class MixedDtypes(nn.Module):
    """int64 indices and arithmetic on them, bool masks combined with & and |, a float64 accumulation of
    float32 values cast back, and an int32 count."""

    def __init__(self, vocab: int = 20, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(self.embed(ids))
        even = (ids % 2 == 0) & valid | (ids > 15)
        weights = even.to(h.dtype) + (ids // 4).to(torch.float32) * 0.1
        total = (h.double() * weights[..., None].double()).sum(1).float()
        counts = even.sum(-1, dtype=torch.int32)
        return total / (counts[:, None] + 1).to(total.dtype), counts


def _mixed_inputs(g: torch.Generator) -> tuple:
    return torch.randint(0, 20, (3, 7), generator=g), torch.rand(3, 7, generator=g) > 0.3


class LayoutSensitive(nn.Module):
    """A block whose inputs arrive transposed, sliced with a step, expanded (stride 0) or channels-last."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, a, b, c, image) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(self.norm(a + b)) * c
        return h.softmax(-1), F.gelu(self.conv(image)).mean((2, 3))


def _layout_inputs(g: torch.Generator) -> tuple:
    a = torch.randn(16, 2, 5, generator=g).permute(1, 2, 0)  # transposed
    b = torch.randn(2, 10, 16, generator=g)[:, ::2]  # sliced with a step
    c = torch.randn(1, 1, 16, generator=g).expand(2, 5, 16)  # stride 0
    image = torch.randn(2, 4, 6, 6, generator=g).to(memory_format=torch.channels_last)
    return a, b, c, image


class DetectionHead(nn.Module):
    """A YOLO head's decoding (a meshgrid of cell offsets, anchors, sigmoid) and a GIoU loss of the decoded
    boxes against targets (pairwise max/min corners, clamps, areas)."""

    def __init__(self, channels: int = 8, anchors: int = 2) -> None:
        super().__init__()
        self.anchors = anchors
        self.conv = nn.Conv2d(channels, anchors * 5, 1)
        self.register_buffer("anchor_sizes", torch.tensor([[10.0, 13.0], [16.0, 30.0]]).view(1, anchors, 1, 1, 2))

    def forward(self, features: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, _, h, w = features.shape
        p = self.conv(features).view(b, self.anchors, 5, h, w).permute(0, 1, 3, 4, 2)
        yv, xv = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, h, w, 2).float()
        xy = (p[..., :2].sigmoid() * 2 - 0.5 + grid) * 8
        wh = (p[..., 2:4].sigmoid() * 2) ** 2 * self.anchor_sizes
        boxes = torch.cat((xy - wh / 2, xy + wh / 2), -1).view(b, -1, 4)
        return _generalized_iou(boxes[0], targets), p[..., 4].sigmoid()


def _generalized_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def area(x):
        return (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])

    overlap = torch.min(a[:, None, 2:], b[None, :, 2:]) - torch.max(a[:, None, :2], b[None, :, :2])
    inter = overlap.clamp(min=0).prod(-1)
    union = area(a)[:, None] + area(b)[None] - inter
    enclosing = (torch.max(a[:, None, 2:], b[None, :, 2:]) - torch.min(a[:, None, :2], b[None, :, :2])).prod(-1)
    return inter / union - (enclosing - union) / enclosing


def _detection_inputs(g: torch.Generator) -> tuple:
    corner = torch.rand(5, 2, generator=g) * 20
    return torch.randn(2, 8, 3, 4, generator=g), torch.cat([corner, corner + 2 + torch.rand(5, 2, generator=g) * 8], -1)


class GraphConvolution(nn.Module):
    """A message-passing layer: messages of edge endpoints gathered by index, summed into nodes by
    index_add_, a degree from scatter_add_, a max aggregation by scatter_reduce."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.message, self.update = nn.Linear(2 * dim, dim), nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        src, dst = edges
        m = F.relu(self.message(torch.cat([x[src], x[dst]], -1)))
        total = torch.zeros_like(x).index_add_(0, dst, m)
        degree = torch.zeros(x.shape[0]).scatter_add_(0, dst, torch.ones_like(dst, dtype=torch.float)).clamp(min=1)
        largest = torch.full_like(x, -1e9).scatter_reduce(0, dst[:, None].expand(-1, x.shape[1]), m, "amax")
        return self.update(torch.cat([x, total / degree[:, None]], -1)) + largest.clamp(min=0)


def _graph_inputs(g: torch.Generator) -> tuple:
    return torch.randn(6, 8, generator=g), torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 3]])


class TopPFilter(nn.Module):
    """Nucleus sampling's filter: sort, cumulative softmax, a shifted removal mask scattered back."""

    def __init__(self, dim: int = 8, vocab: int = 12) -> None:
        super().__init__()
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x) / 0.7
        ordered, order = torch.sort(logits, descending=True)
        remove = ordered.softmax(-1).cumsum(-1) > 0.9
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf")).softmax(-1)


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder (pre-norm, two layers) with a key padding mask, then a masked mean."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x, src_key_padding_mask=padding)
        keep = (~padding)[..., None].float()
        return (h * keep).sum(1) / keep.sum(1)


def _padded_inputs(g: torch.Generator) -> tuple:
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 4:] = True
    return torch.randn(2, 7, 16, generator=g), padding


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Generator], tuple]]] = {
    "mistral_sliding_window": (MistralBlock, _mistral_inputs),
    "clip_contrastive": (CLIPHead, _of(_normal(6, 24), _normal(6, 20))),
    "whisper_front": (WhisperFront, _of(_normal(2, 8, 16))),
    "roberta_embeddings": (RobertaEmbeddings, _token_ids),
    "sentence_embedder": (SentenceEmbedder, _sentence_inputs),
    "dit_block": (DiTBlock, _of(_normal(2, 9, 32), _normal(2, 32))),
    "alibi_attention": (lambda: ALiBiAttention().eval(), _alibi_inputs),
    "mobilenet_v3_block": (InvertedResidual, _of(_normal(2, 8, 7, 7))),
    "super_resolution": (SuperResolution, _of(lambda g: torch.rand(2, 3, 6, 6, generator=g))),
    "conv1d_classifier": (Conv1dClassifier, _of(_normal(3, 4, 17))),
    "in_place_ops": (InPlaceOps, _of(_normal(3, 5, 16), lambda g: torch.rand(3, 5, generator=g) > 0.6)),
    "safe_numerics": (SafeNumerics, _safe_inputs),
    "mixed_dtypes": (MixedDtypes, _mixed_inputs),
    "non_contiguous_inputs": (LayoutSensitive, _layout_inputs),
    "detection_head": (DetectionHead, _detection_inputs),
    "graph_convolution": (GraphConvolution, _graph_inputs),
    "top_p_filter": (TopPFilter, _of(_normal(4, 8))),
    # In eval, with no grad, PyTorch would take its fused fast path; Dynamo traces the math path.
    "transformer_encoder_eval": (lambda: PaddedEncoder().eval(), _padded_inputs),
}


@pytest.mark.parametrize("name", MODELS)
def test_a_model_matches_eager_forward_and_backward(name: str) -> None:
    check_model(*MODELS[name])


@pytest.mark.parametrize("name", ["clip_contrastive", "sentence_embedder"])
def test_a_model_matches_eager_under_dynamic_true(name: str) -> None:
    check_model(*MODELS[name], dynamic=True)


def test_batch_norm_running_statistics_follow_eager_through_train_and_eval() -> None:
    make_model, make_inputs = MODELS["conv1d_classifier"]
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        (x,) = make_inputs(g)
        _close(compiled(x), reference(x), "output in training", **F32)
    for name, buffer in model.named_buffers():
        _close(buffer, dict(reference.named_buffers())[name], name, **F32)
    model.eval(), reference.eval()
    (x,) = make_inputs(g)
    with torch.no_grad():
        _close(compiled(x), reference(x), "output in eval", **F32)


# --- training ----------------------------------------------------------------------------------------------
class TinyLM(nn.Module):
    """A small causal language model: token and learned position embeddings, a pre-norm MLP block with
    dropout, a LayerNorm and a head tied to the embedding."""

    def __init__(self, vocab: int = 29, dim: int = 32, length: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(length, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.tokens(ids) + self.positions(positions))
        x = x + self.mlp(self.norm1(x))
        return self.norm2(x) @ self.tokens.weight.t()


def _lm_batch(g: torch.Generator, batch: int = 3, length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 29, (batch, length), generator=g)
    targets = ids.roll(-1, dims=1)
    targets[:, -1] = -100  # nothing to predict after the last token
    targets[0, 7:] = -100  # padding
    return ids, targets


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100,
                           label_smoothing=0.1)


def test_label_smoothed_cross_entropy_with_ignore_index_matches_eager() -> None:
    torch.manual_seed(0)
    model = TinyLM()
    reference = copy.deepcopy(model)
    ids, targets = _lm_batch(torch.Generator().manual_seed(1))
    compiled = torch.compile(lambda i, t: _lm_loss(model(i), t), backend="braze", options=STRICT)
    loss = compiled(ids, targets)
    loss_ref = _lm_loss(reference(ids), targets)
    _close(loss, loss_ref, "loss", **F32)
    loss.backward(), loss_ref.backward()
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p.grad, p_ref.grad, f"gradient of {name}", **F32)


def test_adamw_with_clip_grad_norm_and_a_warmup_schedule_follows_eagers_loss_curve() -> None:
    """The usual loop: the compiled model, eager loss.backward(), clip_grad_norm_, AdamW, a LambdaLR warmup."""
    torch.manual_seed(0)
    model = TinyLM()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    g = torch.Generator().manual_seed(1)
    batches = [_lm_batch(g) for _ in range(5)]
    histories = []
    for net in (compiled, reference):
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-2, weight_decay=0.1)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
        losses, norms = [], []
        for ids, targets in batches:
            optimizer.zero_grad(set_to_none=True)
            loss = _lm_loss(net(ids), targets)
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0).item())
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        histories.append((losses, norms))
    (losses, norms), (losses_ref, norms_ref) = histories
    torch.testing.assert_close(losses, losses_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(norms, norms_ref, rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p, p_ref, f"{name} after 5 steps", **F32)


def test_a_whole_compiled_training_step_with_clipping_follows_eagers_loss_curve() -> None:
    """torch.compile around the whole step: forward, backward, clip_grad_norm_, optimizer.step."""
    torch.manual_seed(0)
    model = TinyLM()
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    batches = [_lm_batch(g) for _ in range(4)]

    def step(net, optimizer, ids, targets):
        optimizer.zero_grad(set_to_none=True)
        loss = _lm_loss(net(ids), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.5)
        optimizer.step()
        return loss.detach()

    optimizer, optimizer_ref = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, reference))
    compiled_step = torch.compile(step, backend="braze", options=STRICT)
    losses = [compiled_step(model, optimizer, *b).item() for b in batches]
    losses_ref = [step(reference, optimizer_ref, *b).item() for b in batches]
    torch.testing.assert_close(losses, losses_ref, rtol=1e-4, atol=1e-5)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p, p_ref, f"{name} after 4 steps", **F32)


def test_a_mistral_block_trains_under_bf16_autocast_like_eager() -> None:
    torch.manual_seed(0)
    model = MistralBlock()
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    batches = [(*_mistral_inputs(g), torch.randn(2, 9, 32, generator=g)) for _ in range(3)]
    compiled = torch.compile(model, backend="braze", options=STRICT)
    histories = []
    for net, params in ((compiled, model.parameters()), (reference, reference.parameters())):
        optimizer = torch.optim.AdamW(params, lr=1e-2)
        losses = []
        for x, positions, target in batches:
            optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                out = net(x, positions)
            loss = F.mse_loss(out.float(), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        histories.append(losses)
    torch.testing.assert_close(histories[0], histories[1], rtol=2e-2, atol=1e-3)


# --- inference, dropout, dynamic sizes ---------------------------------------------------------------------------
def test_dropout_models_in_eval_mode_match_eager_under_no_grad_and_train_mode_runs() -> None:
    torch.manual_seed(0)
    model = TinyLM(dropout=0.3)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    ids, targets = _lm_batch(torch.Generator().manual_seed(1))
    model.eval(), reference.eval()
    with torch.no_grad(), bz.record() as rec:
        _close(compiled(ids), reference(ids), "eval output", **F32)
    assert rec.launches
    model.train()
    loss = _lm_loss(compiled(ids), targets)  # masks differ from eager's: only check it runs and learns
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():  # back in eval, the eval graph again
        _close(compiled(ids), reference(ids), "eval output after training mode", **F32)


def test_inference_mode_and_no_grad_of_a_dit_block() -> None:
    make_model, make_inputs = MODELS["dit_block"]
    torch.manual_seed(0)
    model = make_model().eval()
    compiled = torch.compile(model, backend="braze", options=STRICT)
    x, c = make_inputs(torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x, c)
        _close(compiled(x, c), expected, "under no_grad", **F32)
    with torch.inference_mode():
        _close(compiled(x, c), expected, "under inference_mode", **F32)


def test_new_batch_sizes_and_lengths_recompile_once_and_match_eager() -> None:
    """Default dynamic: the second shape recompiles with symbolic sizes; later shapes reuse it."""
    torch.manual_seed(0)
    model = MistralBlock()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    g = torch.Generator().manual_seed(1)
    frames = []
    for batch, length in ((2, 9), (3, 13), (2, 11), (3, 17)):
        x = torch.randn(batch, length, 32, generator=g)
        positions = torch.arange(length).expand(batch, length)
        _close(compiled(x, positions), reference(x, positions), f"output at {batch}x{length}", **F32)
        frames.append(counters["stats"]["unique_graphs"])
    assert frames[2] == frames[3] == frames[1], frames


# --- state: buffers, inputs and caches written in place ------------------------------------------------------------
class CountingEMA(nn.Module):
    """A step counter and an EMA buffer updated in forward under no_grad, and the caller's input scaled in place."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        x.mul_(2)
        h = self.fc(x)
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
        return h * self.steps


def test_buffers_and_inputs_written_in_forward_match_eager_over_calls() -> None:
    torch.manual_seed(0)
    model = CountingEMA()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    g = torch.Generator().manual_seed(1)
    for call in range(3):
        x = torch.randn(4, 8, generator=g)
        x_ref = x.clone()
        out, expected = compiled(x), reference(x_ref)
        _close(out, expected, f"output of call {call}", **F32)
        _close(x, x_ref, f"input after call {call}", **F32)
        out.sum().backward(), expected.sum().backward()
    assert model.steps.item() == reference.steps.item() == 3
    _close(model.ema, reference.ema, "EMA buffer", **F32)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p.grad, p_ref.grad, f"accumulated gradient of {name}", **F32)


class CachedAttention(nn.Module):
    """Decoding with a key/value cache: a prompt, then one token a call, written into buffers by slice
    assignment at a Python int position (a recompile per position until Dynamo makes it symbolic)."""

    def __init__(self, dim: int = 8, length: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.register_buffer("keys", torch.zeros(2, length, dim))
        self.register_buffer("values", torch.zeros(2, length, dim))

    def forward(self, x: torch.Tensor, position: int) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        end = position + x.shape[1]
        self.keys[:, position:end], self.values[:, position:end] = k, v
        scores = q @ self.keys[:, :end].transpose(1, 2) / math.sqrt(q.shape[-1])
        return scores.softmax(-1) @ self.values[:, :end]


def test_a_key_value_cache_decodes_like_eager() -> None:
    torch.manual_seed(0)
    model = CachedAttention()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="braze", options=STRICT)
    g = torch.Generator().manual_seed(1)
    steps = [(0, torch.randn(2, 3, 8, generator=g))] + [(p, torch.randn(2, 1, 8, generator=g)) for p in range(3, 7)]
    with torch.no_grad():
        for position, x in steps:
            _close(compiled(x, position), reference(x, position), f"output at {position}", **F32)
    _close(model.keys, reference.keys, "key cache", **F32)


def test_fp16_autocast_with_a_grad_scaler_follows_eagers_loss_curve() -> None:
    """The mixed-precision loop on the CPU: autocast to float16, GradScaler, unscale_, clip_grad_norm_."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
    histories = []
    for net, module in ((torch.compile(model, backend="braze", options=STRICT), model), (reference, reference)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu")
        losses = []
        for _ in range(4):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(net(x).float(), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        histories.append(losses)
    torch.testing.assert_close(histories[0], histories[1], rtol=1e-2, atol=1e-3)
    assert histories[0][-1] < histories[0][0]
