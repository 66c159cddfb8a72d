"""The model zoo of the `torch.compile` backend tests: small configurations of real architectures with
random weights (nothing is downloaded). Each builder returns a module and a function making inputs.

The benchmark `benchmarks/torch_models.py` builds the same models at larger sizes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    dim: int = 32
    heads: int = 4
    hidden: int = 64  # the MLP's inner width
    dropout: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, seq, dim = x.shape
    return x.view(batch, seq, heads, dim // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)


class GPT2Block(nn.Module):
    """Pre-norm transformer block of GPT-2: LayerNorm, causal attention through SDPA, GELU (tanh) MLP."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.ln_1, self.ln_2 = nn.LayerNorm(c.dim), nn.LayerNorm(c.dim)
        self.c_attn, self.c_proj = nn.Linear(c.dim, 3 * c.dim), nn.Linear(c.dim, c.dim)
        self.c_fc, self.mlp_proj = nn.Linear(c.dim, c.hidden), nn.Linear(c.hidden, c.dim)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(self.ln_1(x)).split(self.c.dim, dim=2)
        q, k, v = (_split_heads(t, self.c.heads) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.c_proj(_merge_heads(attn)))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.drop(self.mlp_proj(h))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary embedding, (seq, head_dim), halves repeated as LLaMA lays them out."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class LlamaBlock(nn.Module):
    """LLaMA block: RMSNorm, rotary position embedding, causal SDPA, SwiGLU MLP, no biases."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.attn_norm, self.mlp_norm = RMSNorm(c.dim), RMSNorm(c.dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(c.dim, c.dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(c.dim, c.hidden, bias=False), nn.Linear(c.dim, c.hidden, bias=False)
        self.w2 = nn.Linear(c.hidden, c.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = self.attn_norm(x)
        q, k, v = (_split_heads(w(h), self.c.heads) for w in (self.wq, self.wk, self.wv))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(_merge_heads(attn))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class BertLayer(nn.Module):
    """BERT encoder layer: post-norm, attention with an additive padding mask and explicit softmax, GELU."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.query, self.key, self.value = (nn.Linear(c.dim, c.dim) for _ in range(3))
        self.attn_out, self.ln_attn = nn.Linear(c.dim, c.dim), nn.LayerNorm(c.dim, eps=1e-12)
        self.inter, self.out, self.ln_out = nn.Linear(c.dim, c.hidden), nn.Linear(c.hidden, c.dim), \
            nn.LayerNorm(c.dim, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(f(x), self.c.heads) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.c.head_dim)
        scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * torch.finfo(scores.dtype).min
        probs = self.drop(torch.softmax(scores, dim=-1))
        x = self.ln_attn(x + self.drop(self.attn_out(_merge_heads(probs @ v))))
        return self.ln_out(x + self.drop(self.out(F.gelu(self.inter(x)))))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with batch norm, ReLU, and the identity shortcut."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)


class MLP(nn.Module):
    def __init__(self, inputs: int = 16, hidden: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(inputs, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.gelu(self.fc1(x)))))


def _tokens(c: Config, batch: int, seq: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(batch, seq, c.dim, generator=generator)



def check_step_against_eager(model: nn.Module, reference: nn.Module, x: torch.Tensor, loss: torch.Tensor) -> None:
    """`loss` (the compiled `model`'s on `x`, after its backward) and the gradients of every parameter
    against an eager `reference` copy of the model, which this runs forward and backward on `x`."""
    expected = reference(x)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")

Inputs = Callable[[int, int, torch.Generator], tuple]


def gpt2(c: Config = Config()) -> tuple[nn.Module, Inputs]:
    return GPT2Block(c), lambda batch, seq, g: (_tokens(c, batch, seq, g),)


def llama(c: Config = Config()) -> tuple[nn.Module, Inputs]:
    def inputs(batch: int, seq: int, g: torch.Generator) -> tuple:
        return (_tokens(c, batch, seq, g), *rope_tables(seq, c.head_dim))

    return LlamaBlock(c), inputs


def bert(c: Config = Config()) -> tuple[nn.Module, Inputs]:
    def inputs(batch: int, seq: int, g: torch.Generator) -> tuple:
        mask = torch.ones(batch, seq)
        mask[:, seq - seq // 4:] = 0  # the last quarter is padding
        return _tokens(c, batch, seq, g), mask

    return BertLayer(c), inputs


def resnet_block(channels: int = 8) -> tuple[nn.Module, Inputs]:
    return BasicBlock(channels), lambda batch, size, g: (torch.randn(batch, channels, size, size, generator=g),)


ZOO: dict[str, Callable[[], tuple[nn.Module, Inputs]]] = {
    "gpt2": gpt2, "llama": llama, "bert": bert, "resnet_block": resnet_block,
}


def mlp() -> tuple[nn.Module, Inputs]:
    return MLP(), lambda batch, _, g: (torch.randn(batch, 16, generator=g),)


ZOO["mlp"] = mlp


# --- a language model whose output projection is tied to its embedding ---------------------------------------
class TiedLM(nn.Module):
    """Token embedding, a GELU MLP with a residual, a final LayerNorm and the output projection tied to
    the embedding (`logits = ln_f(x) @ wte.weight.t()`), then the cross-entropy of the next token: the
    head of GPT-2. An odd `vocab` breaks the alignment of the head's three matrix multiplies."""

    def __init__(self, vocab: int = 37, dim: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens)
        x = x + self.fc2(F.gelu(self.fc1(x)))
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


@dataclass(frozen=True)
class MatmulCall:
    """One matrix multiply a compiled graph ran: its ATen op and (shape, strides) of each operand and the result."""

    op: str
    tensors: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    itemsize: int

    def touches(self, extent: int) -> bool:
        return any(extent in shape for shape, _ in self.tensors)

    def aligned(self) -> bool:
        """Whether cuBLAS can take every matrix as it is with 16-byte-aligned leading dimensions."""
        return all(_leading_dimension(shape, strides) * self.itemsize % 16 == 0
                   for shape, strides in self.tensors if len(shape) >= 2)


def _leading_dimension(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The leading dimension cuBLAS sees for the last two dimensions (1: not a row- or column-major matrix)."""
    (rows, cols), (row_stride, col_stride) = shape[-2:], strides[-2:]
    if col_stride == 1 or cols == 1:
        return max(row_stride, cols)
    if row_stride == 1 or rows == 1:
        return max(col_stride, rows)
    return 1


@contextlib.contextmanager
def recording_matmuls() -> Iterator[list[MatmulCall]]:
    """Within it, every `aten.mm`, `aten.addmm` and `aten.bmm` that the graphs braze's backend compiles
    run (in PyTorch, between braze's regions) is recorded, as it runs, in the list it yields."""
    import importlib

    backend_module = importlib.import_module("braze.frontend.torch.backend")  # not the `backend` function

    calls: list[MatmulCall] = []
    ops = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)

    def recorded(op: Callable) -> Callable:
        def run(*args: object, **kwargs: object) -> torch.Tensor:
            result = op(*args, **kwargs)
            tensors = [a for a in args if isinstance(a, torch.Tensor)] + [result]
            calls.append(MatmulCall(str(op), tuple((tuple(t.shape), t.stride()) for t in tensors),
                                    result.element_size()))
            return result

        return run

    fuse_graph = backend_module.fuse_graph

    def fuse_and_record(gm: torch.fx.GraphModule, *args: object) -> torch.fx.GraphModule:
        gm = fuse_graph(gm, *args)
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in ops:
                node.target = recorded(node.target)
        gm.recompile()
        return gm

    with mock.patch.object(backend_module, "fuse_graph", fuse_and_record):
        yield calls
