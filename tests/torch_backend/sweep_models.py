"""Model code as its authors write it, for the torch backend's tests, beyond real_models.py and more_models.py:
an LSTM cell unrolled over time steps (its gates split by `chunk`), a diffusion model's timestep embedding
with a float `torch.arange`, Swin-style shifted windows by `torch.roll` with `index_select`, and PointNet's
max over points by `torch.max(x, dim)` with a classifier's accuracy from `out.max(1)[1]`, a U-Net decoder's
upsampling and a vocoder's reflect padding (advanced indexing), CLIP's end-of-text pooling, and BERT's
embeddings with position ids from the attention mask, and patches and frames by `Tensor.unfold`. Random weights at
small sizes: nothing is downloaded. `real_models.check_against_eager` compares each with eager PyTorch,
outputs and gradients.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class UnrolledLSTM(nn.Module):
    """An LSTM written out over its time steps, as sequence models and tutorials write it: the four gates
    from one projection, split by `chunk` (which AOTAutograd replays as `as_strided`), sigmoid and tanh."""

    def __init__(self, dim: int = 6, hidden: int = 8) -> None:
        super().__init__()
        self.input_proj, self.hidden_proj = nn.Linear(dim, 4 * hidden), nn.Linear(hidden, 4 * hidden, bias=False)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = c = x.new_zeros(x.shape[0], self.hidden)
        outputs = []
        for t in range(x.shape[1]):
            i, f, g, o = (self.input_proj(x[:, t]) + self.hidden_proj(h)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, 1), c


class TimestepEmbedding(nn.Module):
    """A diffusion model's sinusoidal timestep embedding and its MLP, with the frequencies written over a
    float range, a GLU's halves by `chunk`, and `torch.lerp` toward the input."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.dim = dim
        self.fc = nn.Linear(dim, 2 * dim)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = self.dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(0.0, 1.0, 1 / half, dtype=torch.float32))
        args = t[:, None].float() * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(x.dtype)
        value, gate = self.fc(embedding).chunk(2, -1)
        h = value * F.silu(gate)
        return torch.lerp(h, x, 0.3), torch.arange(-1.5, 2.5, 0.5, dtype=x.dtype) * h[:, :8]


def timestep_inputs(g: torch.Generator, batch: int = 4) -> tuple:
    return torch.randint(0, 1000, (batch,), generator=g), torch.randn(batch, 16, generator=g)


class ShiftedWindows(nn.Module):
    """Swin's cyclic shift of a feature map by `torch.roll` before its windows and back after, a roll of
    the flattened map, and `index_select` of positions by a 1-d and a 0-d index."""

    def __init__(self, dim: int = 4, shift: int = 2) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.shift = shift

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> tuple:
        shifted = torch.roll(self.fc(x), shifts=(-self.shift, -self.shift), dims=(1, 2))
        h = torch.roll(F.gelu(shifted), shifts=(self.shift, self.shift), dims=(1, 2))
        return h, torch.roll(h, 5), h.index_select(1, index), h.index_select(-1, index[0] % h.shape[-1])


def shifted_window_inputs(g: torch.Generator, batch: int = 2, side: int = 6) -> tuple:
    return torch.randn(batch, side, side, 4, generator=g), torch.tensor([3, 0, 0, side - 1])


class PointNetMaxPool(nn.Module):
    """PointNet's shared per-point MLP and its global feature, the max over points by `torch.max(h, 1)` (ReLU's
    zeros tie), a min over the batch kept, and a classifier's accuracy from `logits.max(1)[1]`."""

    def __init__(self, dim: int = 3, hidden: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.point_mlp, self.head = nn.Linear(dim, hidden), nn.Linear(hidden, classes)

    def forward(self, points: torch.Tensor, labels: torch.Tensor) -> tuple:
        h = F.relu(self.point_mlp(points))
        feature, critical = torch.max(h, 1)
        lowest, _ = h.min(0, keepdim=True)
        logits = self.head(feature)
        accuracy = (logits.max(1)[1] == labels).float().mean()
        return logits, lowest, accuracy, critical


def point_inputs(g: torch.Generator, batch: int = 4, points: int = 6) -> tuple:
    points_ = torch.randn(batch, points, 3, generator=g)
    points_[0] = -5.0  # every feature of the first cloud is ReLU's zero: a tie at each
    return points_, torch.randint(0, 5, (batch,), generator=g)


class UpsampleAndPad(nn.Module):
    """A U-Net decoder's nearest and bilinear upsampling, an image generator's reflect and replicate padding
    before a convolution (all advanced indexing, `aten.index`), and CLIP's text pooling: the feature at each
    sequence's end-of-text token, `x[torch.arange(batch), tokens.argmax(-1)]`."""

    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3)
        self.proj = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor, tokens: torch.Tensor) -> tuple:
        up = F.interpolate(x, scale_factor=2, mode="nearest") + F.interpolate(x, scale_factor=2, mode="bilinear")
        h = self.conv(F.pad(F.silu(up), (1, 1, 1, 1), mode="reflect")) + F.pad(up, (0, 0, 1, 1), mode="replicate")[
            :, :, 1:-1]
        sequence = self.proj(h.flatten(2).transpose(1, 2))[:, :tokens.shape[1]]
        return h, sequence[torch.arange(sequence.shape[0]), tokens.argmax(-1)]


def upsample_inputs(g: torch.Generator, batch: int = 2, side: int = 4) -> tuple:
    return torch.randn(batch, 3, side, side, generator=g), torch.randint(0, 100, (batch, 5), generator=g)


class BertEmbeddings(nn.Module):
    """BERT's word (with a padding row), position and token-type embeddings and their LayerNorm, the position
    ids counted from the attention mask as RoBERTa does (`mask.cumsum(-1) - 1`, padding at 1 by
    `masked_fill_`), and the extended attention mask `(1 - mask) * finfo.min`."""

    def __init__(self, vocab: int = 50, dim: int = 8, positions: int = 16) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab, dim, padding_idx=0)
        self.positions, self.types = nn.Embedding(positions, dim), nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> tuple:
        position_ids = mask.cumsum(-1) - 1
        position_ids.masked_fill_(mask == 0, 1)
        h = self.norm(self.words(ids) + self.positions(position_ids) + self.types(types))
        extended = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        return h, extended


def bert_embedding_inputs(g: torch.Generator, batch: int = 3, length: int = 7) -> tuple:
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[1, length - 3:] = 0
    ids = torch.randint(1, 50, (batch, length), generator=g) * mask  # padding is token 0
    return ids, torch.randint(0, 2, (batch, length), generator=g), mask


class PatchesAndFrames(nn.Module):
    """A ViT's patches cut by `unfold` on both image axes and projected, and an audio model's overlapping frames
    by `unfold` under a Hann window."""

    def __init__(self, channels: int = 2, patch: int = 4, dim: int = 8) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(channels * patch * patch, dim)

    def forward(self, image: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.patch
        patches = image.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)
        frames = audio.unfold(-1, 6, 3) * torch.hann_window(6, dtype=audio.dtype)
        return self.proj(patches), frames.pow(2).mean(-1)


def patch_inputs(g: torch.Generator) -> tuple:
    return torch.randn(2, 2, 8, 12, generator=g), torch.randn(2, 20, generator=g)
