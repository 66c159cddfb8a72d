"""torch.nn.functional's pooling, nearest-neighbour upsampling and channel normalizations on traced tensors
(`F.avg_pool2d(x, 2)`, `F.interpolate(x, scale_factor=2)`, `F.group_norm(x, 8, w, b)`), as compositions
of braze's ops; braze/ops/torch_functions.py dispatches torch's calls to them.

A pooling window is a sum (or maximum) of strided slices, one per offset inside the window: a slice
`x[..., dy::stride]` holds the element at that offset of every window, so the pool fuses with what is
around it and reads each input element once per window that covers it.
"""

from __future__ import annotations

import itertools
import math
import operator

from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.scalar import concrete_value
from braze.ir.tensor import TensorView
from braze.ops import composites, creation, views
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.elementwise import cast, elementwise


# --- pooling ------------------------------------------------------------------------------------------
def _per_dim(op: str, value: object, dims: int, name: str) -> tuple[int, ...]:
    """An int or a tuple of `dims` ints (a kernel size, a stride, a padding), as torch takes them."""
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims or not all(isinstance(v, int) for v in values):
        raise FusionDefinitionError(f"F.{op}: {name}: expected an int or {dims} ints, got {value!r}")
    return values


def _windows(op: str, x: TensorView, dims: int, kernel, stride, padding, dilation, ceil_mode: bool,
             fill: float) -> tuple[list[TensorView], tuple[int, ...]]:
    """The strided slices of x, one per offset inside the window, padded with `fill` first; and the
    padding per pooled dimension."""
    if x.ndim not in (dims + 1, dims + 2):
        raise FusionDefinitionError(f"F.{op}: input: expected {dims + 1} or {dims + 2} dimensions, got "
                                    f"{x.describe()}")
    if ceil_mode:
        raise UnsupportedError(f"F.{op}: ceil_mode=True: braze pools windows that fit (ceil_mode=False)")
    kernel = _per_dim(op, kernel, dims, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _per_dim(op, stride, dims, "stride")
    padding = _per_dim(op, padding, dims, "padding")
    dilation = _per_dim(op, dilation, dims, "dilation")
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise FusionDefinitionError(f"F.{op}: padding {padding} must be at most half of kernel_size {kernel}")
    first = x.ndim - dims
    if any(padding):
        x = views.pad(x, [(0, 0)] * first + [(p, p) for p in padding], fill)
    counts = [_window_count(x.shape[first + d], kernel[d], stride[d], dilation[d]) for d in range(dims)]
    slices = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = [slice(None)] * first
        for d, offset in enumerate(offsets):
            start = offset * dilation[d]
            index.append(slice(start, start + (counts[d] - 1) * stride[d] + 1, stride[d]))
        slices.append(views.slice_tensor(x, index))
    return slices, padding


def _window_count(extent: object, kernel: int, stride: int, dilation: int) -> object:
    """Windows along one dimension: floor((extent - dilation * (kernel - 1) - 1) / stride) + 1."""
    reach = dilation * (kernel - 1) + 1
    value = concrete_value(extent)
    if value is None:
        return (extent - reach) // stride + 1
    if value < reach:
        raise FusionDefinitionError(f"pooling: a window of {reach} elements does not fit an extent of {value}")
    return (value - reach) // stride + 1


def _pool(kind: str, dims: int):
    def avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        op = f"avg_pool{dims}d"
        slices, padding = _windows(op, input, dims, kernel_size, stride, padding, 1, ceil_mode, 0.0)
        total = _fold("add", slices)
        if divisor_override is not None:
            return elementwise("truediv", total, divisor_override)
        if any(padding) and not count_include_pad:
            ones = creation.ones_like(input)
            counts = _fold("add", _windows(op, ones, dims, kernel_size, stride, padding, 1, False, 0.0)[0])
            return elementwise("truediv", total, counts)
        return elementwise("truediv", total, len(slices))

    def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        op = f"max_pool{dims}d"
        if return_indices:
            raise UnsupportedError(f"F.{op}: return_indices=True: braze gives the pooled values only")
        return _fold("maximum", _windows(op, input, dims, kernel_size, stride, padding, dilation, ceil_mode,
                                         -math.inf)[0])

    return avg_pool if kind == "avg" else max_pool


def _fold(op: str, values: list[TensorView]) -> TensorView:
    """The values joined pairwise, as a balanced tree (each level of rounding counts once)."""
    while len(values) > 1:
        values = [elementwise(op, a, b) for a, b in zip(values[::2], values[1::2])] + values[len(values) & ~1:]
    return values[0]


def _adaptive(kind: str, dims: int):
    """Adaptive pooling to an output size that divides the input (1: the whole map), as the even windows
    `kernel = stride = input // output`."""
    def adaptive(input, output_size, return_indices=False):
        op = f"adaptive_{kind}_pool{dims}d"
        sizes = _per_dim(op, output_size, dims, "output_size") if output_size is not None else None
        first = input.ndim - dims
        extents = [concrete_value(input.shape[first + d]) for d in range(dims)]
        if sizes is not None and all(s == 1 for s in sizes):
            reduce = red.mean if kind == "avg" else red.max
            return reduce(input, tuple(range(first, input.ndim)), keepdim=True)
        if sizes is None or None in extents or any(e % s for e, s in zip(extents, sizes)):
            raise UnsupportedError(f"F.{op}: output_size {output_size!r} of input {input.describe()}: braze pools "
                                   "to sizes that divide the input's (even windows)")
        kernel = tuple(e // s for e, s in zip(extents, sizes))
        if kind == "avg":
            return _pool("avg", dims)(input, kernel)
        return _pool("max", dims)(input, kernel, return_indices=return_indices)

    return adaptive


# --- upsampling -----------------------------------------------------------------------------------------
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """F.interpolate in mode 'nearest' (or 'nearest-exact') by whole factors: each element repeated."""
    if mode not in ("nearest", "nearest-exact"):
        raise UnsupportedError(f"F.interpolate: mode={mode!r}: braze upsamples by whole factors in mode 'nearest'")
    dims = input.ndim - 2
    if dims < 1:
        raise FusionDefinitionError(f"F.interpolate: input: expected (N, C, ...) of 3 to 5 dimensions, got "
                                    f"{input.describe()}")
    factors = _whole_factors(input, dims, size, scale_factor)
    out = input
    for d, factor in enumerate(factors):
        if factor != 1:
            out = vc.repeat_interleave(out, factor, 2 + d)
    return out


def _whole_factors(input: TensorView, dims: int, size, scale_factor) -> tuple[int, ...]:
    if (size is None) == (scale_factor is None):
        raise FusionDefinitionError("F.interpolate: expected one of size= and scale_factor=")
    if scale_factor is not None:
        factors = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
    else:
        sizes = (size,) * dims if isinstance(size, int) else tuple(size)
        extents = [concrete_value(input.shape[2 + d]) for d in range(dims)]
        if None in extents or any(s % e for s, e in zip(sizes, extents)):
            raise UnsupportedError(f"F.interpolate: size {size!r} of input {input.describe()}: braze upsamples by "
                                   "whole factors")
        factors = tuple(s // e for s, e in zip(sizes, extents))
    if len(factors) != dims or any(float(f) != int(f) or f < 1 for f in factors):
        raise UnsupportedError(f"F.interpolate: scale_factor {scale_factor!r}: braze upsamples by whole factors")
    return tuple(operator.index(int(f)) for f in factors)


# --- normalizations over channels -----------------------------------------------------------------------
def _channel_affine(x: TensorView, weight, bias) -> TensorView:
    """x * weight + bias with one value per channel (dimension 1)."""
    shape = [-1] + [1] * (x.ndim - 2)
    if weight is not None:
        x = elementwise("mul", x, views.reshape(weight, shape))
    if bias is not None:
        x = elementwise("add", x, views.reshape(bias, shape))
    return x


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """F.group_norm: each sample's channels in `num_groups` groups, each normalized over its channels
    and positions, then one weight and bias per channel."""
    channels = concrete_value(input.shape[1]) if input.ndim > 1 else None
    if channels is None or channels % num_groups:
        raise FusionDefinitionError(f"F.group_norm: input {input.describe()}: expected a static channel count "
                                    f"divisible by num_groups={num_groups}")
    grouped = views.reshape(input, [input.shape[0], num_groups, -1])
    normalized = views.reshape(composites.layer_norm(grouped, None, None, eps, axes=-1), input.shape)
    return _channel_affine(normalized, weight, bias)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """F.instance_norm: each sample's channel normalized over its positions (running statistics are
    refused: torch updates them in place)."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise UnsupportedError("F.instance_norm with running statistics: torch updates them in place, which a "
                               "fusion does not; normalize by the input's own statistics")
    normalized = composites.layer_norm(input, None, None, eps, axes=tuple(range(2, input.ndim)))
    return _channel_affine(normalized, weight, bias)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """F.batch_norm: in evaluation, by the running statistics; in training, by the batch's own, where
    running statistics (which torch would update in place) must be None."""
    axes = (0, *range(2, input.ndim))
    if training:
        if running_mean is not None or running_var is not None:
            raise UnsupportedError("F.batch_norm in training with running statistics: torch updates them in "
                                   "place, which a fusion does not; pass running_mean=None and running_var=None, "
                                   "or compute them outside")
        return _channel_affine(composites.layer_norm(input, None, None, eps, axes=axes), weight, bias)
    if running_mean is None or running_var is None:
        raise FusionDefinitionError("F.batch_norm: evaluation (training=False) needs running_mean and running_var")
    shape = [-1] + [1] * (input.ndim - 2)
    mean, var = views.reshape(running_mean, shape), views.reshape(running_var, shape)
    scale = elementwise("rsqrt", elementwise("add", var, eps))
    normalized = cast(elementwise("mul", elementwise("sub", input, mean), scale), input.dtype)
    return _channel_affine(normalized, weight, bias)


FUNCTIONAL: dict[str, object] = {
    **{f"avg_pool{d}d": _pool("avg", d) for d in (1, 2, 3)},
    **{f"max_pool{d}d": _pool("max", d) for d in (1, 2, 3)},
    **{f"max_pool{d}d_with_indices": _pool("max", d) for d in (1, 2, 3)},  # return_indices=True's dispatch
    **{f"adaptive_avg_pool{d}d": _adaptive("avg", d) for d in (1, 2, 3)},
    **{f"adaptive_max_pool{d}d": _adaptive("max", d) for d in (1, 2, 3)},
    "interpolate": interpolate, "upsample": interpolate, "upsample_nearest": interpolate,
    "group_norm": group_norm, "instance_norm": instance_norm, "batch_norm": batch_norm,
}
