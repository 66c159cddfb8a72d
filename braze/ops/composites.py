"""Composites: ops built from primitives, so the schedulers see (and fuse) their parts.

Half-precision inputs are computed in float32 and rounded once at the end, as torch does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from braze import dtypes as dt
from braze.errors import FusionDefinitionError
from braze.ir.fusion import defining
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import reductions as red
from braze.ops.creation import arange
from braze.ops.elementwise import cast, elementwise, float_of_integers, not_a_tensor
from braze.ops.views import permute, unsqueeze


def composite(fn: Callable[..., TensorView]) -> Callable[..., TensorView]:
    """Marks the ops `fn` adds as parts of it, so a run-time error names the op the user wrote
    (`cross_entropy`, not the `max` inside it). The outermost composite's name wins."""

    @functools.wraps(fn)
    def named(x: object, *args, **kwargs) -> TensorView:
        fusion = x.fusion if isinstance(x, TensorView) else None
        first = len(fusion.exprs) if fusion is not None else 0
        out = fn(x, *args, **kwargs)
        for expr in fusion.exprs[first:] if fusion is not None else ():
            expr.origin = fn.__name__
        return out

    return named


def in_compute_type(x: TensorView, op: str) -> tuple[TensorView, dt.DType]:
    """x in its compute type, and the type to return (floats keep theirs, integers become float32, or
    NumPy's float in a trace of NumPy arrays)."""
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    result = x.dtype if x.dtype.is_floating else float_of_integers(x.fusion, x.dtype)
    return cast(x, dt.compute_dtype(result)), result


def _shifted(x: TensorView, axis: int) -> TensorView:
    """x - max(x) along axis: exp of it cannot overflow."""
    return elementwise("sub", x, red.max(x, axis, keepdim=True))


@composite
@red.keyword_aliases(axis=("dim", "axes"))
def softmax(x: TensorView, axis: int = -1, dtype: object = None) -> TensorView:
    """exp(x) / sum(exp(x)) along `axis`, computed stably. `dtype=` (a floating one) casts x to it
    first, as torch's does."""
    xf, result = in_compute_type(red.cast_first(x, dtype, "softmax", floating=True), "softmax")
    e = elementwise("exp", _shifted(xf, axis))
    return cast(elementwise("truediv", e, red.sum(e, axis, keepdim=True)), result)


@composite
@red.keyword_aliases(axis=("dim", "axes"))
def log_softmax(x: TensorView, axis: int = -1, dtype: object = None) -> TensorView:
    """x - log(sum(exp(x))) along `axis`, computed stably; `dtype=` as for `softmax`."""
    xf, result = in_compute_type(red.cast_first(x, dtype, "log_softmax", floating=True), "log_softmax")
    shifted = _shifted(xf, axis)
    total = red.sum(elementwise("exp", shifted), axis, keepdim=True)
    return cast(elementwise("sub", shifted, elementwise("log", total)), result)


def _affine(y: TensorView, weight: TensorView | None, bias: TensorView | None) -> TensorView:
    if weight is not None:
        y = elementwise("mul", y, weight)
    if bias is not None:
        y = elementwise("add", y, bias)
    return y


@composite
def layer_norm(x: TensorView, weight: TensorView | None = None, bias: TensorView | None = None,
               eps: float = 1e-5, axes=-1) -> TensorView:
    """(x - mean) / sqrt(var + eps) over `axes` (the last by default), then `* weight + bias`."""
    xf, result = in_compute_type(x, "layer_norm")
    centered = elementwise("sub", xf, red.mean(xf, axes, keepdim=True))
    variance = red.var(xf, axes, keepdim=True)
    y = elementwise("mul", centered, elementwise("rsqrt", elementwise("add", variance, eps)))
    return cast(_affine(y, weight, bias), result)


@composite
def rms_norm(x: TensorView, weight: TensorView | None = None, eps: float = 1e-6, axes=-1) -> TensorView:
    """x / sqrt(mean(x^2) + eps) over `axes` (the last by default), then `* weight`."""
    xf, result = in_compute_type(x, "rms_norm")
    mean_square = red.mean(elementwise("mul", xf, xf), axes, keepdim=True)
    y = elementwise("mul", xf, elementwise("rsqrt", elementwise("add", mean_square, eps)))
    return cast(_affine(y, weight, None), result)


@composite
def cross_entropy(logits: TensorView, target: TensorView, reduction: str = "mean", *,
                  weight: TensorView | None = None, ignore_index: int = -100,
                  label_smoothing: float = 0.0, class_axis: int = -1) -> TensorView:
    """Negative log-likelihood of integer class `target` under softmax(logits) over the classes, with
    torch's `F.cross_entropy` options for class indices:

    - the classes lie along `class_axis` of the logits, the last by default; `class_axis=1` takes
      torch's layout, logits (N, C, d1, ...) with target (N, d1, ...). The target has the logits'
      shape without that axis;

    - `reduction` is "mean", "sum" or "none" (one loss per row);
    - rows whose target is `ignore_index` (-100 by default, the padding label of language models)
      lose nothing and do not count in the mean: a mean over no counted row is NaN, as torch's;
    - `weight` (one per class) scales each row's loss by its target's weight, and the mean divides
      by the sum of those weights instead of the number of rows;
    - `label_smoothing` in [0, 1] mixes the target with the uniform distribution over the classes.
    """
    _check_cross_entropy(logits, target, reduction, weight, ignore_index, label_smoothing)
    logits = _classes_last(logits, target, class_axis)
    return _target_loss(log_softmax(logits, -1), target, reduction, weight, ignore_index, label_smoothing)


@composite
def nll_loss(log_probs: TensorView, target: TensorView, reduction: str = "mean", *,
             weight: TensorView | None = None, ignore_index: int = -100, class_axis: int = -1) -> TensorView:
    """Negative log-likelihood of integer class `target` given log-probabilities (torch's `F.nll_loss`):
    `cross_entropy` without its log_softmax, with the same options."""
    _check_cross_entropy(log_probs, target, reduction, weight, ignore_index, 0.0, "nll_loss", "log_probs")
    log_probs = _classes_last(log_probs, target, class_axis)
    return _target_loss(log_probs, target, reduction, weight, ignore_index, 0.0)


def _target_loss(log_probs: TensorView, target: TensorView, reduction: str, weight: TensorView | None,
                 ignore_index: int, label_smoothing: float) -> TensorView:
    """-log_probs at each row's target (classes last), reduced as cross_entropy says."""
    with defining(log_probs.fusion):
        classes = arange(log_probs.shape[-1], dtype=target.dtype)
    counted = elementwise("ne", target, ignore_index)
    chosen = elementwise("eq", classes, unsqueeze(target, -1))
    if ignore_index >= 0:  # a negative ignore_index never equals a class: the test above suffices
        chosen = elementwise("logical_and", chosen, unsqueeze(counted, -1))
    weighted = log_probs if weight is None else elementwise("mul", log_probs, weight)
    loss = elementwise("neg", red.sum(elementwise("where", chosen, weighted, 0.0), -1))
    if label_smoothing:
        uniform = elementwise("where", counted, elementwise("neg", red.mean(weighted, -1)), 0.0)
        loss = elementwise("add", elementwise("mul", loss, 1.0 - label_smoothing),
                           elementwise("mul", uniform, label_smoothing))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return red.sum(loss)
    # The mean divides by what counted: the rows not ignored, or the weights of their targets.
    counts = (cast(counted, dt.float32) if weight is None
              else elementwise("where", chosen, cast(weight, dt.float32), 0.0))
    total = red.sum(loss, dtype=dt.compute_dtype(loss.dtype))
    return cast(elementwise("truediv", total, red.sum(counts)), loss.dtype)


def _classes_last(logits: TensorView, target: TensorView, class_axis: int) -> TensorView:
    """The logits with their class axis moved last, each other extent checked against the target's."""
    axis = normalize_axis(class_axis, logits.ndim, "cross_entropy class_axis")
    order = [a for a in range(logits.ndim) if a != axis] + [axis]
    moved = permute(logits, order) if axis != logits.ndim - 1 else logits
    if class_axis == -1 and logits.ndim > 2 and _static_mismatch(moved, target) and not _static_mismatch(
            permute(logits, [0, *range(2, logits.ndim), 1]), target):
        raise FusionDefinitionError(
            f"cross_entropy: target {target.describe()} of shape {_shape_text(target)} fits logits "
            f"{logits.describe()} of shape {_shape_text(logits)} with the classes along axis 1, torch's layout "
            "(N, C, d1, ...); pass class_axis=1 (braze takes them along the last axis by default)")
    hint = "; torch's layout (N, C, d1, ...) is class_axis=1" if axis != 1 and logits.ndim > 2 else ""
    for position, (logit_extent, target_extent) in enumerate(zip(moved.shape[:-1], target.shape)):
        logits.fusion.require_equal(
            logit_extent, target_extent,
            f"cross_entropy: dimension {order[position]} of logits {logits.describe()} and dimension {position} "
            f"of target {target.describe()} must match (the target is the logits' shape without the class "
            f"axis {axis}{hint})")
    return moved


def _static_mismatch(logits: TensorView, target: TensorView) -> bool:
    return any(a.is_const and b.is_const and a.value != b.value for a, b in zip(logits.shape[:-1], target.shape))


def _shape_text(x: TensorView) -> str:
    return "(" + ", ".join(str(e) for e in x.shape) + ")"


def _check_cross_entropy(logits: object, target: object, reduction: object, weight: object,
                         ignore_index: object, label_smoothing: object, op: str = "cross_entropy",
                         scores: str = "logits") -> None:
    if reduction not in ("mean", "sum", "none"):
        raise FusionDefinitionError(f"{op}: reduction: expected 'mean', 'sum' or 'none', got {reduction!r}")
    if not isinstance(logits, TensorView):  # checked first: the rank checks below read logits.ndim
        raise not_a_tensor(f"{op}: {scores}", logits)
    if not isinstance(target, TensorView) or not target.dtype.is_integer:
        got = target.dtype.name if isinstance(target, TensorView) else type(target).__name__
        raise FusionDefinitionError(f"{op}: target: expected an integer tensor of class indices, got {got}")
    if target.ndim != logits.ndim - 1:
        raise FusionDefinitionError(
            f"{op}: target: expected rank {logits.ndim - 1} for {scores} of rank {logits.ndim} "
            f"(the {scores}' rank without the class axis), got {target.ndim}"
        )
    if weight is not None and (not isinstance(weight, TensorView) or weight.ndim != 1
                               or not weight.dtype.is_floating):
        got = f"{weight.dtype.name} of rank {weight.ndim}" if isinstance(weight, TensorView) else type(weight).__name__
        raise FusionDefinitionError(
            f"{op}: weight: expected a 1-D float tensor, one weight per class, got {got}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise FusionDefinitionError(f"{op}: ignore_index: expected an int, got {ignore_index!r}")
    if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float))
            or not 0.0 <= label_smoothing <= 1.0):
        raise FusionDefinitionError(
            f"cross_entropy: label_smoothing: expected a number in [0, 1], got {label_smoothing!r}")
