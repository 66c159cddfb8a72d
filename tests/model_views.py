"""One attention-shaped fusion built from the views of braze/ops/view_composites.py, and its NumPy float64
reference: shared by the CPU and NVRTC test (tests/ops/test_view_composites.py) and the GPU one
(tests/cuda/test_view_composites_gpu.py).

qkv (T, 3 * H * D) is chunked into q, k, v; k and v have H // 2 heads repeated to H (grouped-query
attention's repeat_interleave); q is rotated by a roll of each head's halves; scores get a causal
tril mask; the heads are stacked, tiled and narrowed."""

from __future__ import annotations

import numpy as np

import braze as bz

HEADS, DIM = 4, 6


def build(f: bz.Fusion, dtype: bz.DType = bz.float64) -> None:
    """Defines the inputs qkv (T, 2 * HEADS * DIM) and bias (T, T) and the outputs, on symbolic extents."""
    qkv = f.define_tensor(shape=(-1, 2 * HEADS * DIM), dtype=dtype, name="qkv")
    bias = f.define_tensor(shape=(-1, -1), dtype=dtype, name="bias")
    q, k, v = qkv.split([HEADS * DIM, HEADS * DIM // 2, HEADS * DIM // 2], dim=-1)
    q = q.view(-1, HEADS, DIM)
    k = bz.ops.repeat_interleave(k.view(-1, HEADS // 2, DIM), 2, axis=1)
    v = v.view(-1, HEADS // 2, DIM).repeat(1, 2, 1)
    rotated = bz.ops.cat([-q[..., DIM // 2:], q[..., : DIM // 2]], -1) + q.roll(1, dims=-1)
    f.add_output(rotated * k + v)
    f.add_output(bias.tril(-1).masked_fill(bias.triu() > 0.5, 0.0) + bias.mT)
    halves = bz.ops.stack(k.unbind(dim=2)[:2], axis=-1)  # DIM is static: unbind gives DIM slices
    f.add_output(bz.ops.tile(halves.flatten(1), (2, 1)).narrow(1, 1, HEADS))
    first, rest = qkv.chunk(2, dim=1)
    values, indices = first.max(dim=1)
    f.add_output(rest - values.unsqueeze(1))
    f.add_output(indices)


def inputs(tokens: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, (tokens, 2 * HEADS * DIM)), rng.uniform(0, 1, (tokens, tokens))]


def reference(qkv: np.ndarray, bias: np.ndarray) -> list[np.ndarray]:
    tokens = qkv.shape[0]
    q = qkv[:, : HEADS * DIM].reshape(tokens, HEADS, DIM)
    k = qkv[:, HEADS * DIM : HEADS * DIM * 3 // 2].reshape(tokens, HEADS // 2, DIM)
    v = qkv[:, HEADS * DIM * 3 // 2 :].reshape(tokens, HEADS // 2, DIM)
    k, v = np.repeat(k, 2, axis=1), np.tile(v, (1, 2, 1))
    rotated = np.concatenate([-q[..., DIM // 2:], q[..., : DIM // 2]], -1) + np.roll(q, 1, -1)
    masked = np.where(np.triu(bias) > 0.5, 0.0, np.tril(bias, -1)) + bias.T
    halves = np.stack([k[:, :, 0], k[:, :, 1]], -1).reshape(tokens, -1)
    first, rest = qkv[:, : HEADS * DIM], qkv[:, HEADS * DIM :]
    return [rotated * k + v, masked, np.tile(halves, (2, 1))[:, 1 : 1 + HEADS], rest - first.max(1)[:, None],
            first.argmax(1)]
