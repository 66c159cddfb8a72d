"""The torch version of every fusion of braze/cli/bench/cases.py, written as a torch user would (the
library's own kernels where it has one: F.layer_norm, F.cross_entropy, aten's backward ops).
braze/cli/bench/suite.py runs each eagerly and under torch.compile. Each returns a tuple of outputs.
Imported only where torch is installed."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812

from braze.cli.bench.cases import ADAM, ATTENTION_SCALE, BN_MOMENTUM, DROPOUT_P, EPS, GROUPS

aten = torch.ops.aten

def _float(*tensors):
    return [t.float() for t in tensors]

def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    xf, c, s = _float(x, cos, sin)
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], -1)
    return ((xf * c + rotated * s).to(x.dtype),)

def _gelu_backward(dy, x):
    return (aten.gelu_backward(dy, x, approximate="tanh"),)

def _layer_norm_backward(dy, x, w, mean, rstd):
    dx, dw, db = aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, torch.zeros_like(w),
                                                 [True, True, True])
    return dx, dw, db

def _rms_norm_backward(dy, x, w, rstd):
    dyf, xf, wf = _float(dy, x, w)
    xhat = xf * rstd
    g = dyf * wf
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).sum(0).to(x.dtype)

def _rms_norm(x, w):
    xf = x.float()
    return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype),)

def _add_rms_norm(x, r, w):
    h = x + r
    return _rms_norm(h, w)[0], h

def _dropout_residual_layer_norm(x, r, w, b, keep=None):
    dropped = F.dropout(x, DROPOUT_P) if keep is None else x * keep / (1 - DROPOUT_P)
    h = dropped + r
    return F.layer_norm(h, (h.shape[-1],), w, b, EPS), h

def _adam(p, g, m, v, lr, bias1, bias2):
    b1, b2 = ADAM["beta1"], ADAM["beta2"]
    m = torch.lerp(g, m, b1)  # b1 * m + (1 - b1) * g, as torch.optim.Adam writes it
    v = v * b2 + g * g * (1 - b2)
    return p - lr * (m / bias1) / ((v / bias2).sqrt() + ADAM["eps"]), m, v

def _scaled_masked_softmax(x, mask):
    scores = (x.float() * ATTENTION_SCALE).masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1).to(x.dtype),)

def _batch_norm(x, w, b, running_mean, running_var):
    running_mean, running_var = running_mean.clone(), running_var.clone()  # updated in place by torch
    y = F.batch_norm(x, running_mean, running_var, w, b, training=True, momentum=BN_MOMENTUM, eps=EPS)
    return y, running_mean, running_var

def _cross_entropy(logits, target):
    return (F.cross_entropy(logits, target),)

def _softmax_backward(y, dy):
    return (aten._softmax_backward_data(dy, y, -1, y.dtype),)

def _bias_gelu(x, b):
    return (F.gelu(x + b, approximate="tanh"),)

def _swiglu(g, u):
    return (F.silu(g) * u,)

def _layer_norm(x, w, b):
    return (F.layer_norm(x, (x.shape[-1],), w, b, EPS),)

PEERS = {
    "column_sum": lambda x: (x.sum(0),),
    "full_sum": lambda x: (x.sum(),),
    "middle_sum": lambda x: (x.sum(1),),
    "param_grads": lambda g, xhat: ((g * xhat).sum((0, 1)), g.sum((0, 1))),
    "add_transpose": lambda x, y: (x + y.T,),
    "relu_fma": lambda x, y, z: (torch.relu(x * y + z),),
    "cast_bf16": lambda x: (x.to(torch.bfloat16),),
    "bias_gelu": _bias_gelu,
    "gelu_backward": _gelu_backward,
    "swiglu": _swiglu,
    "rope": _rope,
    "cross_entropy": _cross_entropy,
    "log_softmax": lambda x: (torch.log_softmax(x, -1),),
    "cumsum": lambda x: (x.cumsum(-1),),
    "argmax": lambda x: (x.argmax(-1),),
    "softmax": lambda x: (torch.softmax(x, -1),),
    "softmax_bf16": lambda x: (torch.softmax(x, -1),),
    "layer_norm": _layer_norm,
    "layer_norm_bf16": _layer_norm,
    "rms_norm": _rms_norm,
    "add_rms_norm": _add_rms_norm,
    "softmax_backward": _softmax_backward,
    "layer_norm_backward": _layer_norm_backward,
    "rms_norm_backward": _rms_norm_backward,
    "dropout_residual_layer_norm": _dropout_residual_layer_norm,
    "adam": _adam,
    "scaled_masked_softmax": _scaled_masked_softmax,
    "var_mean": lambda x: torch.var_mean(x, -1),
    "batch_norm": _batch_norm,
    "group_norm": lambda x, w, b: (F.group_norm(x, GROUPS, w, b, EPS),),
    "grad_norm": lambda g: (torch.linalg.vector_norm(g),),
}
