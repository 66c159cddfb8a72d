"""Decompositions of ATen ops that PyTorch's tables keep whole, into the pointwise ops and reductions
braze fuses.

`aten._weight_norm_interface_backward`: `nn.utils.parametrizations.weight_norm` (wav2vec2's positional
convolution, HiFi-GAN and other vocoders) computes its weight by `_weight_norm_interface`, whose forward
PyTorch decomposes but whose backward it keeps whole, so every weight-normed layer's backward ran in
PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

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


def braze_decompositions() -> dict[object, Callable]:
    """The ATen ops above -> their decompositions."""
    return {aten._weight_norm_interface_backward.default: weight_norm_backward}
