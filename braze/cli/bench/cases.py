"""The fusions of braze/cli/bench/suite.py, each written three ways: a braze fusion (the explicit
`bz.Fusion` API), array math shared by the float64 reference, NumPy and JAX (`xp` is `numpy` or
`jax.numpy`), and its inputs. The torch versions are in braze/cli/bench/torch_peers.py.

Shapes: "gpu" is LLM-sized, "cpu" smaller for the llvm backend, "quick" small and odd (a smoke test),
"models" the shapes well-known models give each fusion (MODEL_SHAPES).
Nothing here imports torch or JAX.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import braze as bz

GELU_K = math.sqrt(2 / math.pi)
DROPOUT_P, DROPOUT_SEED = 0.1, 1234
ADAM = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
ATTENTION_SCALE = 1 / math.sqrt(128)
GROUPS = 32
BN_MOMENTUM, EPS = 0.1, 1e-5


@dataclass(frozen=True)
class Case:
    """One fusion of the suite."""

    name: str  # the key --cases selects
    title: str  # what the table prints
    dtype: str  # the dtype of its floating tensors: float32 or bfloat16
    shapes: dict[str, tuple[int, ...]]  # "gpu", "cpu", "quick"
    build: Callable  # (f, shape, dtype) -> None: defines the braze fusion's inputs and outputs
    inputs: Callable  # (rng, shape, numpy dtype) -> arrays (numpy) and Python floats, in input order
    math: Callable  # (xp, *inputs, **extra) -> outputs, computed in the inputs' floating type
    dropout: bool = False  # the math takes `keep`, the mask of braze's rand(seed=DROPOUT_SEED) >= p

    def shape(self, mode: str) -> tuple[int, ...]:
        return MODEL_SHAPES[self.name] if mode == "models" else self.shapes[mode]

    def has(self, mode: str) -> bool:
        """Whether the case has a shape for `mode` (every case has "gpu", "cpu" and "quick")."""
        return self.name in MODEL_SHAPES if mode == "models" else mode in self.shapes


# --- inputs -------------------------------------------------------------------------------------------
def normal(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    values = rng.standard_normal(shape, dtype=np.float32)
    return (values * np.float32(scale) if scale != 1 else values).astype(dtype)


def normals(count: int, vectors: int = 0, scale: float = 1.0) -> Callable:
    """`count` tensors of the case's shape, then `vectors` of its last extent."""
    def make(rng, shape, dtype):
        return [normal(rng, shape, dtype, scale) for _ in range(count)] + \
               [normal(rng, shape[-1:], dtype) for _ in range(vectors)]
    return make


def _input(f: bz.Fusion, rank_or_shape, dtype, name: str) -> bz.TensorView:
    shape = (-1,) * rank_or_shape if isinstance(rank_or_shape, int) else rank_or_shape
    return f.define_tensor(shape, dtype=dtype, name=name)


def _f32(t):
    return bz.ops.cast(t, bz.float32)


# --- generic math (NumPy and jax.numpy) --------------------------------------------------------------
def softmax(xp, x, axis=-1):
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(xp, x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


def gelu_tanh(xp, h):
    return 0.5 * h * (1 + xp.tanh(GELU_K * (h + 0.044715 * h * h * h)))


def layer_norm(xp, x, w=None, b=None, axis=-1):
    mean = x.mean(axis=axis, keepdims=True)
    centered = x - mean
    y = centered / xp.sqrt((centered * centered).mean(axis=axis, keepdims=True) + EPS)
    return y * w + b if w is not None else y


def rms_norm(xp, x, w, eps=1e-6):
    return x / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


# --- the cases ----------------------------------------------------------------------------------------
CASES: list[Case] = []


def case(name: str, title: str, dtype: str, gpu, cpu, quick, inputs: Callable, math: Callable,
         dropout: bool = False) -> Callable:
    """Registers the decorated build function as a case."""
    def register(build):
        CASES.append(Case(name, title, dtype, {"gpu": gpu, "cpu": cpu, "quick": quick}, build, inputs, math,
                          dropout))
        return build
    return register


@case("column_sum", "column sum x.sum(0)", "float32", (8192, 4096), (2048, 2048), (67, 130),
      normals(1), lambda xp, x: [x.sum(axis=0)])
def _column_sum(f, shape, dtype):
    f.add_output(_input(f, 2, dtype, "x").sum(0))


def _offset_normal(rng, shape, dtype):
    """1 + N(0, 1): a sum with little cancellation, so its error is measured against its own size."""
    return [(normal(rng, shape, np.float32) + 1).astype(dtype)]


@case("full_sum", "full sum x.sum()", "float32", (8192, 4096), (2048, 2048), (67, 130),
      _offset_normal, lambda xp, x: [x.sum()])
def _full_sum(f, shape, dtype):
    f.add_output(_input(f, 2, dtype, "x").sum())


@case("middle_sum", "sum over the middle axis x.sum(1)", "float32", (32, 2048, 1024), (16, 512, 256),
      (5, 33, 40), normals(1), lambda xp, x: [x.sum(axis=1)])
def _middle_sum(f, shape, dtype):
    f.add_output(_input(f, 3, dtype, "x").sum(1))


@case("param_grads", "weight and bias gradients (g*xhat).sum((0,1)), g.sum((0,1))", "float32",
      (8, 1024, 4096), (4, 512, 1024), (3, 33, 40), normals(2),
      lambda xp, g, xhat: [(g * xhat).sum(axis=(0, 1)), g.sum(axis=(0, 1))])
def _param_grads(f, shape, dtype):
    g, xhat = _input(f, 3, dtype, "g"), _input(f, 3, dtype, "xhat")
    f.add_output((g * xhat).sum((0, 1)))
    f.add_output(g.sum((0, 1)))


def _transposed_pair(rng, shape, dtype):
    return [normal(rng, shape, dtype), normal(rng, shape[::-1], dtype)]


@case("add_transpose", "x + y.T", "float32", (8192, 4096), (2048, 2048), (67, 130),
      _transposed_pair, lambda xp, x, y: [x + y.T])
def _add_transpose(f, shape, dtype):
    x, y = _input(f, 2, dtype, "x"), _input(f, 2, dtype, "y")
    f.add_output(x + y.T)


@case("relu_fma", "relu(x*y+z)", "float32", (1 << 26,), (1 << 23,), (1001,),
      normals(3), lambda xp, x, y, z: [xp.maximum(x * y + z, 0)])
def _relu_fma(f, shape, dtype):
    x, y, z = (_input(f, 1, dtype, n) for n in "xyz")
    f.add_output(bz.ops.relu(x * y + z))


@case("cast_bf16", "cast float32 -> bfloat16", "float32", (8192, 8192), (2048, 2048), (67, 130),
      normals(1), lambda xp, x: [x])
def _cast_bf16(f, shape, dtype):
    f.add_output(bz.ops.cast(_input(f, 2, dtype, "x"), bz.bfloat16))


@case("bias_gelu", "bias + tanh-GELU", "bfloat16", (16384, 8192), (2048, 2048), (67, 130),
      normals(1, vectors=1), lambda xp, x, b: [gelu_tanh(xp, x + b)])
def _bias_gelu(f, shape, dtype):
    x, b = _input(f, 2, dtype, "x"), _input(f, 1, dtype, "bias")
    f.add_output(bz.ops.gelu(x + b, approximate="tanh"))


def _gelu_backward(xp, dy, x):
    inner = GELU_K * (x + 0.044715 * x * x * x)
    t = xp.tanh(inner)
    slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * x * x)
    return [dy * slope]


@case("gelu_backward", "tanh-GELU backward", "bfloat16", (16384, 8192), (2048, 2048), (67, 130),
      normals(2), _gelu_backward)
def _gelu_backward_fusion(f, shape, dtype):
    dy, x = _input(f, 2, dtype, "dy"), _input(f, 2, dtype, "x")
    (dx,) = _gelu_backward(bz.ops, _f32(dy), _f32(x))
    f.add_output(bz.ops.cast(dx, dtype))


@case("swiglu", "SwiGLU silu(gate) * up", "bfloat16", (8192, 14336), (2048, 2048), (67, 130),
      normals(2), lambda xp, g, u: [g / (1 + xp.exp(-g)) * u])
def _swiglu(f, shape, dtype):
    g, u = _input(f, 2, dtype, "gate"), _input(f, 2, dtype, "up")
    f.add_output(bz.ops.cast(bz.ops.silu(_f32(g)) * _f32(u), dtype))


def _rope_math(xp, x, cos, sin):
    half = x.shape[-1] // 2
    rotated = xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return [x * cos + rotated * sin]


def _rope_inputs(rng, shape, dtype):
    d = shape[3]
    angles = np.arange(shape[1])[:, None] * 10000.0 ** (-(np.arange(d) % (d // 2)) * 2 / d)
    table = lambda fn: fn(angles).astype(np.float32).astype(dtype).reshape(1, shape[1], 1, d)
    return [normal(rng, shape, dtype), table(np.cos), table(np.sin)]


@case("rope", "RoPE (slices, broadcast cos/sin, cat)", "bfloat16", (16, 2048, 32, 128), (4, 512, 16, 128),
      (2, 17, 3, 32), _rope_inputs, _rope_math)
def _rope(f, shape, dtype):
    d = shape[-1]
    x = _input(f, (-1, -1, -1, d), dtype, "x")
    cos, sin = _input(f, (1, -1, 1, d), dtype, "cos"), _input(f, (1, -1, 1, d), dtype, "sin")
    xf = _f32(x)
    rotated = bz.ops.cat([-xf[..., d // 2:], xf[..., :d // 2]], -1)
    f.add_output(bz.ops.cast(xf * _f32(cos) + rotated * _f32(sin), dtype))


def _cross_entropy_inputs(rng, shape, dtype):
    return [normal(rng, shape, dtype), rng.integers(0, shape[1], shape[0], dtype=np.int64)]


def _cross_entropy_math(xp, logits, target):
    picked = xp.take_along_axis(log_softmax(xp, logits), target[:, None], axis=-1)
    return [-picked.mean()]


@case("cross_entropy", "cross_entropy (int64 targets, mean)", "float32", (8192, 32000), (1024, 8000),
      (37, 1000), _cross_entropy_inputs, _cross_entropy_math)
def _cross_entropy(f, shape, dtype):
    logits, target = _input(f, 2, dtype, "logits"), _input(f, 1, bz.int64, "target")
    f.add_output(bz.ops.cross_entropy(logits, target))


@case("log_softmax", "log_softmax over the vocabulary", "float32", (8192, 32000), (1024, 8000), (37, 1000),
      normals(1), lambda xp, x: [log_softmax(xp, x)])
def _log_softmax(f, shape, dtype):
    f.add_output(bz.ops.log_softmax(_input(f, 2, dtype, "x"), -1))


@case("cumsum", "cumsum over the vocabulary (top-p)", "float32", (1024, 32000), (256, 8000), (7, 1001),
      normals(1), lambda xp, x: [x.cumsum(-1)])
def _cumsum(f, shape, dtype):
    f.add_output(bz.ops.cumsum(_input(f, 2, dtype, "x"), -1))


@case("argmax", "argmax over the vocabulary", "float32", (512, 128256), (64, 32000), (9, 1001),
      normals(1), lambda xp, x: [x.argmax(axis=-1)])
def _argmax(f, shape, dtype):
    f.add_output(bz.ops.argmax(_input(f, 2, dtype, "logits"), -1))


for _dtype, _suffix, _rows in (("float32", "", 8192), ("bfloat16", "_bf16", 8192)):
    @case(f"softmax{_suffix}", "softmax", _dtype, (_rows, 8192), (2048, 2048), (67, 130),
          normals(1), lambda xp, x: [softmax(xp, x)])
    def _softmax(f, shape, dtype):
        f.add_output(bz.ops.softmax(_input(f, 2, dtype, "x"), -1))

    @case(f"layer_norm{_suffix}", "layer_norm", _dtype, (8192, 4096), (2048, 2048), (67, 130),
          normals(1, vectors=2), lambda xp, x, w, b: [layer_norm(xp, x, w, b)])
    def _layer_norm(f, shape, dtype):
        x, w, b = _input(f, 2, dtype, "x"), _input(f, 1, dtype, "weight"), _input(f, 1, dtype, "bias")
        f.add_output(bz.ops.layer_norm(x, w, b, eps=EPS))


@case("rms_norm", "rms_norm", "bfloat16", (8192, 4096), (2048, 2048), (67, 130),
      normals(1, vectors=1), lambda xp, x, w: [rms_norm(xp, x, w)])
def _rms_norm(f, shape, dtype):
    x, w = _input(f, 2, dtype, "x"), _input(f, 1, dtype, "weight")
    f.add_output(bz.ops.rms_norm(x, w, eps=1e-6))


def _add_rms_norm_math(xp, x, r, w):
    h = x + r
    return [rms_norm(xp, h, w), h]


@case("add_rms_norm", "residual add + rms_norm (2 outputs)", "bfloat16", (8192, 4096), (2048, 2048),
      (67, 130), normals(2, vectors=1), _add_rms_norm_math)
def _add_rms_norm(f, shape, dtype):
    x, r, w = _input(f, 2, dtype, "x"), _input(f, 2, dtype, "residual"), _input(f, 1, dtype, "weight")
    h = x + r
    f.add_output(bz.ops.rms_norm(h, w, eps=1e-6))
    f.add_output(h)


def _softmax_backward_inputs(rng, shape, dtype):
    y = softmax(np, normal(rng, shape, np.float32))
    return [y.astype(dtype), normal(rng, shape, dtype)]


@case("softmax_backward", "softmax backward", "float32", (8192, 8192), (2048, 2048), (67, 130),
      _softmax_backward_inputs, lambda xp, y, dy: [y * (dy - (dy * y).sum(axis=-1, keepdims=True))])
def _softmax_backward(f, shape, dtype):
    y, dy = _input(f, 2, dtype, "y"), _input(f, 2, dtype, "dy")
    f.add_output(y * (dy - (dy * y).sum(-1, keepdim=True)))


def _norm_backward_inputs(with_mean: bool) -> Callable:
    """dy, x, weight and the statistics the forward saved: mean and rstd as [rows, 1] float32."""
    def make(rng, shape, dtype):
        dy, x, w = normal(rng, shape, dtype), normal(rng, shape, dtype), normal(rng, shape[-1:], dtype)
        xf = x.astype(np.float64)
        mean = xf.mean(-1, keepdims=True) if with_mean else 0.0
        second = ((xf - mean) ** 2).mean(-1, keepdims=True)
        rstd = (1 / np.sqrt(second + (EPS if with_mean else 1e-6))).astype(np.float32)
        return [dy, x, w] + ([np.asarray(mean, np.float32)] if with_mean else []) + [rstd]
    return make


def _layer_norm_backward(xp, dy, x, w, mean, rstd):
    xhat = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return [dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)]


@case("layer_norm_backward", "layer_norm backward (dx, dw, db)", "float32", (8192, 4096), (2048, 2048),
      (67, 130), _norm_backward_inputs(True), _layer_norm_backward)
def _layer_norm_backward_fusion(f, shape, dtype):
    dy, x, w = _input(f, 2, dtype, "dy"), _input(f, 2, dtype, "x"), _input(f, 1, dtype, "weight")
    mean, rstd = _input(f, (-1, 1), bz.float32, "mean"), _input(f, (-1, 1), bz.float32, "rstd")
    xhat = (x - mean) * rstd
    g = dy * w
    f.add_output(rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)))
    f.add_output((dy * xhat).sum(0))
    f.add_output(dy.sum(0))


def _rms_norm_backward(xp, dy, x, w, rstd):
    xhat = x * rstd
    g = dy * w
    return [rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)), (dy * xhat).sum(axis=0)]


@case("rms_norm_backward", "rms_norm backward (dx, dw)", "bfloat16", (8192, 4096), (2048, 2048), (67, 130),
      _norm_backward_inputs(False), _rms_norm_backward)
def _rms_norm_backward_fusion(f, shape, dtype):
    dy, x, w = (_f32(_input(f, 2 - (n == "weight"), dtype, n)) for n in ("dy", "x", "weight"))
    rstd = _input(f, (-1, 1), bz.float32, "rstd")
    xhat = x * rstd
    g = dy * w
    f.add_output(bz.ops.cast(rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True)), dtype))
    f.add_output(bz.ops.cast((dy * xhat).sum(0), dtype))


def _dropout_math(xp, x, r, w, b, keep):
    h = xp.where(keep, x * (1 / (1 - DROPOUT_P)), 0) + r
    return [layer_norm(xp, h, w, b), h]


@case("dropout_residual_layer_norm", "dropout + residual + layer_norm", "bfloat16", (8192, 4096),
      (2048, 2048), (67, 130), normals(2, vectors=2), _dropout_math, dropout=True)
def _dropout_residual_layer_norm(f, shape, dtype):
    x, r = _input(f, 2, dtype, "x"), _input(f, 2, dtype, "residual")
    w, b = _input(f, 1, dtype, "weight"), _input(f, 1, dtype, "bias")
    keep = bz.ops.rand(x.shape, seed=DROPOUT_SEED) >= DROPOUT_P
    h = bz.ops.cast(bz.ops.where(keep, _f32(x) * (1 / (1 - DROPOUT_P)), 0.0) + _f32(r), dtype)
    f.add_output(bz.ops.layer_norm(h, w, b, eps=EPS))
    f.add_output(h)


def _adam_inputs(rng, shape, dtype):
    step = 10
    p, g, m = normal(rng, shape, dtype, 0.02), normal(rng, shape, dtype), normal(rng, shape, dtype, 0.1)
    v = (normal(rng, shape, np.float32, 0.1) ** 2).astype(dtype)
    return [p, g, m, v, 1e-3, 1 - ADAM["beta1"] ** step, 1 - ADAM["beta2"] ** step]


def _adam(xp, p, g, m, v, lr, bias1, bias2):
    b1, b2 = ADAM["beta1"], ADAM["beta2"]
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return [p - lr * (m / bias1) / (xp.sqrt(v / bias2) + ADAM["eps"]), m, v]


@case("adam", "Adam update, flat buffer (p, m, v out)", "float32", (1 << 26,), (1 << 22,), (1001,),
      _adam_inputs, _adam)
def _adam_fusion(f, shape, dtype):
    tensors = [_input(f, 1, dtype, n) for n in ("param", "grad", "exp_avg", "exp_avg_sq")]
    scalars = [f.define_scalar(dtype=bz.float32, name=n) for n in ("lr", "bias_correction1", "bias_correction2")]
    for out in _adam(bz.ops, *tensors, *scalars):
        f.add_output(out)


def _masked_softmax_inputs(rng, shape, dtype):
    causal = np.tril(np.ones(shape[1:], bool))[None]
    return [normal(rng, shape, dtype, 4.0), causal]


def _masked_softmax(xp, x, mask):
    return [softmax(xp, xp.where(mask, x * ATTENTION_SCALE, -np.inf))]


@case("scaled_masked_softmax", "scaled causal-masked softmax", "bfloat16", (128, 1024, 1024), (16, 512, 512),
      (3, 33, 33), _masked_softmax_inputs, _masked_softmax)
def _scaled_masked_softmax(f, shape, dtype):
    x, mask = _input(f, 3, dtype, "scores"), _input(f, (1, -1, -1), bz.bool_, "mask")
    scores = bz.ops.where(mask, _f32(x) * ATTENTION_SCALE, float("-inf"))
    f.add_output(bz.ops.cast(bz.ops.softmax(scores, -1), dtype))


@case("var_mean", "var_mean over rows (2 outputs)", "float32", (8192, 4096), (2048, 2048), (67, 130),
      normals(1), lambda xp, x: [x.var(axis=-1, ddof=1), x.mean(axis=-1)])
def _var_mean(f, shape, dtype):
    x = _input(f, 2, dtype, "x")
    f.add_output(bz.ops.var(x, -1, correction=1))
    f.add_output(bz.ops.mean(x, -1))


def _channel_inputs(rng, shape, dtype, running: bool = False):
    c = shape[1]
    stats = [normal(rng, (c,), dtype, 0.1), (1 + normal(rng, (c,), np.float32, 0.1) ** 2).astype(dtype)]
    return [normal(rng, shape, dtype), normal(rng, (c,), dtype), normal(rng, (c,), dtype)] + (stats if running else [])


def _batch_norm(xp, x, w, b, running_mean, running_var):
    axes = (0, 2, 3)
    n = x.shape[0] * x.shape[2] * x.shape[3]
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    y = (x - mean) / xp.sqrt(var + EPS) * w[:, None, None] + b[:, None, None]
    m = BN_MOMENTUM
    return [y, (1 - m) * running_mean + m * mean.reshape(-1), (1 - m) * running_var + m * var.reshape(-1) * n / (n - 1)]


@case("batch_norm", "batch_norm forward, running stats (3 outputs)", "float32", (32, 256, 56, 56),
      (8, 64, 56, 56), (3, 8, 5, 7), lambda rng, shape, dtype: _channel_inputs(rng, shape, dtype, True),
      _batch_norm)
def _batch_norm_fusion(f, shape, dtype):
    x = _input(f, 4, dtype, "x")
    w, b, running_mean, running_var = (_input(f, 1, dtype, n) for n in ("weight", "bias", "running_mean",
                                                                      "running_var"))
    n = shape[0] * shape[2] * shape[3]  # extents are not values in braze: the sample count is baked in
    mean, var = x.mean((0, 2, 3), keepdim=True), x.var((0, 2, 3), keepdim=True)
    f.add_output((x - mean) * bz.ops.rsqrt(var + EPS) * w[:, None, None] + b[:, None, None])
    m = BN_MOMENTUM
    f.add_output((1 - m) * running_mean + m * mean.reshape([-1]))
    f.add_output((1 - m) * running_var + var.reshape([-1]) * (m * n / (n - 1)))


def _group_norm(xp, x, w, b):
    grouped = x.reshape(x.shape[0], GROUPS, -1)
    y = layer_norm(xp, grouped).reshape(x.shape)
    return [y * w[:, None, None] + b[:, None, None]]


# tests/test_benchmark_suite.py::test_group_norm_through_a_reshape_runs_in_linear_time keeps this case
# linear in its size (the group statistics are computed once, not per element).
@case("group_norm", f"group_norm ({GROUPS} groups)", "float32", (16, 512, 64, 64), (8, 64, 32, 32),
      (2, 64, 3, 5), _channel_inputs, _group_norm)
def _group_norm_fusion(f, shape, dtype):
    x = _input(f, (-1, shape[1], -1, -1), dtype, "x")
    w, b = _input(f, 1, dtype, "weight"), _input(f, 1, dtype, "bias")
    grouped = bz.ops.reshape(x, [x.shape[0], GROUPS, -1])
    y = bz.ops.reshape(bz.ops.layer_norm(grouped, eps=EPS), x.shape)
    f.add_output(y * w[:, None, None] + b[:, None, None])


@case("grad_norm", "gradient norm sqrt(sum(g*g))", "float32", (1 << 26,), (1 << 22,), (1001,),
      normals(1), lambda xp, g: [xp.sqrt((g * g).sum())])
def _grad_norm(f, shape, dtype):
    g = _input(f, 1, dtype, "grad")
    f.add_output(bz.ops.sqrt((g * g).sum()))


# "models": each fusion at a shape a well-known model gives it, the awkward ones among them (GPT-2's
# 768-wide rows and 50,257-word vocabulary, ResNet-50's 7 x 7 maps, Stable Diffusion's 320 channels,
# a decode step's few rows): where a schedule tuned on the LLM-sized "gpu" shapes may fall behind.
MODEL_SHAPES: dict[str, tuple[int, ...]] = {
    "column_sum": (8192, 768),  # GPT-2 small: a bias gradient over batch 8 x 1024 tokens
    "full_sum": (8192, 768),
    "middle_sum": (8, 1024, 768),
    "param_grads": (8, 1024, 768),
    "add_transpose": (768, 3072),  # a GPT-2 MLP weight and its transpose
    "relu_fma": (8 * 1024 * 3072,),
    "cast_bf16": (50257, 768),  # GPT-2's embedding table
    "bias_gelu": (8192, 3072),
    "gelu_backward": (8192, 3072),
    "swiglu": (2048, 11008),  # LLaMA-2 7B
    "rope": (8, 1024, 16, 64),
    "cross_entropy": (8192, 50257),
    "log_softmax": (8192, 50257),
    "cumsum": (64, 128256),  # top-p over LLaMA-3's vocabulary, 64 sequences
    "argmax": (8, 50257),  # greedy decoding, batch 8
    "softmax": (8 * 12 * 1024, 1024),  # GPT-2 attention scores
    "layer_norm": (8192, 768),
    "softmax_bf16": (8 * 12 * 1024, 1024),
    "layer_norm_bf16": (8192, 768),
    "rms_norm": (2048, 5120),  # LLaMA-2 13B
    "add_rms_norm": (2048, 5120),
    "softmax_backward": (8 * 12 * 256, 1024),
    "layer_norm_backward": (8192, 768),
    "rms_norm_backward": (2048, 5120),
    "dropout_residual_layer_norm": (8192, 768),
    "adam": (124_439_808,),  # GPT-2 small's parameters
    "scaled_masked_softmax": (96, 512, 512),
    "var_mean": (8192, 768),
    "batch_norm": (32, 2048, 7, 7),  # ResNet-50's last stage
    "group_norm": (2, 320, 64, 64),  # a Stable Diffusion UNet block
    "grad_norm": (124_439_808,),
}


def selected(names: str | None, mode: str = "gpu") -> list[Case]:
    """The cases named in a comma list (all when None), in the suite's order."""
    if not names:
        return [c for c in CASES if c.has(mode)]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {c.name for c in CASES}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in CASES if c.name in wanted and c.has(mode)]
