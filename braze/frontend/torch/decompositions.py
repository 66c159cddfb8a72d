"""Decompositions of ATen ops that PyTorch's tables keep whole, into the pointwise ops and reductions
braze fuses.

`aten._weight_norm_interface_backward`: `nn.utils.parametrizations.weight_norm` (wav2vec2's positional
convolution, HiFi-GAN and other vocoders) computes its weight by `_weight_norm_interface`, whose forward
PyTorch decomposes but whose backward it keeps whole, so every weight-normed layer's backward ran in
PyTorch.

`aten.index_add` with a 0-d index: eager's kernel reads it as one index, but PyTorch's decomposition indexes
with it as given, which drops the dimension the source keeps, so the backward of `x.index_select(d, i[0])`
failed ("value tensor of shape [2, 5, 1] cannot be broadcast to indexing result of shape [2, 5]").

`aten.max.dim` and `aten.min.dim` (`logits.max(-1)`, an accuracy's `out.max(1)[1]`, PointNet's max over
points): core ATen keeps them whole, and a node of two results cannot join a region, so they ran in
PyTorch. They are `amax` and `argmax` (`amin`, `argmin`): the same values, NaN included, and the same
first index of the extreme (or of the first NaN). Autograd runs above the decomposition, so the gradient
still goes to that one index, as eager's does, not shared among ties as `amax`'s would be.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._decomp import decomposition_table

aten = torch.ops.aten


def weight_norm_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                         saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `v` and `g` of w = g * v / ||v||, the norm over every dimension of `v` but `dim`
    (kept, of size 1, in `g` and the norms), as eager's `_weight_norm_differentiable_backward` computes
    them: dg = sum(dw * v) / ||v||, dv = g / ||v|| * (dw - v * sum(dw * v) / ||v||^2)."""
    dim = dim % saved_v.dim()
    others = [d for d in range(saved_v.dim()) if d != dim]
    per_slice = (grad_w * saved_v).sum(others, keepdim=True)
    grad_v = saved_g / saved_norms * (grad_w - saved_v * (per_slice / (saved_norms * saved_norms)))
    return grad_v.to(saved_v.dtype), (per_slice / saved_norms).to(saved_g.dtype)


def _index_add_of_a_1d_index(op: object) -> Callable:
    """PyTorch's decomposition of `op` (index_add or index_add_), given its index as a 1-d tensor."""
    decomposition = decomposition_table[op]

    def index_add(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
                  alpha: object = 1) -> torch.Tensor:
        return decomposition(x, dim, index.reshape(-1), source, alpha=alpha)
    return index_add


def _extreme_and_its_index(values: Callable, index: Callable) -> Callable:
    """max.dim or min.dim as `values` (amax, amin) and `index` (argmax, argmin) over `dim`."""
    def extreme_and_index(x: torch.Tensor, dim: int, keepdim: bool = False) -> object:
        if x.dtype == torch.bool:  # argmax and argmin take no bools
            return NotImplemented
        return values(x, dim, keepdim), index(x, dim, keepdim)
    return extreme_and_index


def braze_decompositions() -> dict[object, Callable]:
    """The ATen ops above -> their decompositions."""
    return {aten._weight_norm_interface_backward.default: weight_norm_backward,
            **{op: _index_add_of_a_1d_index(op) for op in (aten.index_add.default, aten.index_add_.default)},
            aten.max.dim: _extreme_and_its_index(aten.amax.default, aten.argmax.default),
            aten.min.dim: _extreme_and_its_index(aten.amin.default, aten.argmin.default)}
