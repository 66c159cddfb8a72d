"""torch.nn.functional's losses, distances and the activations it has beyond `braze/ops/activations.py`,
each a composition of braze's ops under torch's names, arguments and defaults, installed by
`braze/ops/torch_functions.py`. A loss's `reduction` is torch's: "mean" over every element, "sum",
or "none" (the elementwise loss); `kl_div` has "batchmean" too. torch's deprecated `size_average=` and
`reduce=` are refused with what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable

from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import activations, composites
from braze.ops import broadcast as bc
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.composites import composite
from braze.ops.elementwise import cast, elementwise, not_a_tensor
from braze.ops.torch_math import xlogy

_REDUCTIONS: dict[str, Callable[[TensorView], TensorView]] = {
    "none": lambda loss: loss, "sum": red.sum, "mean": red.mean}


def _reduced(op: str, loss: TensorView, reduction: str, size_average: object = None, reduce: object = None,
             extra: dict[str, Callable[[TensorView], TensorView]] | None = None) -> TensorView:
    if size_average is not None or reduce is not None:
        raise UnsupportedError(f"F.{op}: size_average= and reduce= (deprecated in torch): use reduction=")
    rules = {**_REDUCTIONS, **(extra or {})}
    if reduction not in rules:
        raise FusionDefinitionError(f"F.{op}: reduction: expected one of {', '.join(map(repr, rules))}, "
                                    f"got {reduction!r}")
    return rules[reduction](loss)


def _weighted(loss: TensorView, weight: TensorView | None) -> TensorView:
    return loss if weight is None else elementwise("mul", loss, weight)


def _difference(op: str, input: TensorView, target: TensorView) -> TensorView:  # noqa: A002  (torch's names)
    if not isinstance(input, TensorView):
        raise not_a_tensor(op, input)
    return elementwise("sub", input, target)


# --- regression losses -------------------------------------------------------------------------------
@composite
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):  # noqa: A002
    difference = _difference("mse_loss", input, target)
    loss = _weighted(elementwise("mul", difference, difference), weight)
    return _reduced("mse_loss", loss, reduction, size_average, reduce)


@composite
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):  # noqa: A002
    loss = _weighted(elementwise("abs", _difference("l1_loss", input, target)), weight)
    return _reduced("l1_loss", loss, reduction, size_average, reduce)


def _piecewise_quadratic(op: str, input, target, threshold: float, linear_scale: float,
                         quadratic_scale: float) -> TensorView:
    """quadratic_scale * d**2 where d = |input - target| < threshold, else linear_scale * (d - threshold / 2)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
        raise FusionDefinitionError(f"F.{op}: expected a non-negative number for beta/delta, got {threshold!r}")
    distance = elementwise("abs", _difference(op, input, target))
    if threshold == 0:
        return distance
    quadratic = elementwise("mul", elementwise("mul", distance, distance), quadratic_scale)
    linear = elementwise("mul", elementwise("sub", distance, threshold / 2), linear_scale)
    return elementwise("where", elementwise("lt", distance, threshold), quadratic, linear)


@composite
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):  # noqa: A002
    loss = _piecewise_quadratic("smooth_l1_loss", input, target, beta, 1.0, 0.5 / beta if beta else 0.0)
    return _reduced("smooth_l1_loss", loss, reduction, size_average, reduce)


@composite
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):  # noqa: A002
    loss = _piecewise_quadratic("huber_loss", input, target, delta, delta, 0.5)
    return _reduced("huber_loss", _weighted(loss, weight), reduction)


# --- probability losses ------------------------------------------------------------------------------
@composite
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                                     reduction="mean", pos_weight=None):
    """(1 - target) * input - log_weight * logsigmoid(input), log_weight = 1 + (pos_weight - 1) * target:
    torch's formula, which neither overflows nor loses the tail."""
    if not isinstance(input, TensorView):
        raise not_a_tensor("binary_cross_entropy_with_logits", input)
    log_sigmoid = activations.logsigmoid(input)
    if pos_weight is not None:
        log_weight = elementwise("add", elementwise("mul", elementwise("sub", pos_weight, 1), target), 1)
        log_sigmoid = elementwise("mul", log_weight, log_sigmoid)
    loss = elementwise("sub", elementwise("mul", elementwise("sub", 1, target), input), log_sigmoid)
    return _reduced("binary_cross_entropy_with_logits", _weighted(loss, weight), reduction, size_average, reduce)


def _clamped_log(x: TensorView) -> TensorView:
    """log(x), at least -100 (torch's bound, so that a probability of 0 gives a finite loss)."""
    return elementwise("maximum", elementwise("log", x), -100.0)


@composite
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):
    """-(target * log(input) + (1 - target) * log(1 - input)), each log at least -100 (torch's)."""
    if not isinstance(input, TensorView):
        raise not_a_tensor("binary_cross_entropy", input)
    positive = elementwise("mul", target, _clamped_log(input))
    negative = elementwise("mul", elementwise("sub", 1, target), _clamped_log(elementwise("sub", 1, input)))
    loss = elementwise("neg", elementwise("add", positive, negative))
    return _reduced("binary_cross_entropy", _weighted(loss, weight), reduction, size_average, reduce)


@composite
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):  # noqa: A002
    """target * (log(target) - input), input being log-probabilities (and target too with
    `log_target`); "batchmean" divides the sum by the batch size, input's first extent."""
    if not isinstance(input, TensorView):
        raise not_a_tensor("kl_div", input)
    if log_target:
        loss = elementwise("mul", elementwise("exp", target), elementwise("sub", target, input))
    else:
        loss = elementwise("sub", xlogy(target, target), elementwise("mul", target, input))
    batch = input.shape[0] if input.ndim else 1
    batchmean = {"batchmean": lambda total: elementwise("truediv", red.sum(total), batch)}
    return _reduced("kl_div", loss, reduction, size_average, reduce, extra=batchmean)


# --- distances ---------------------------------------------------------------------------------------
@composite
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)) over `dim`: each normalized first, as torch's."""
    if not isinstance(x1, TensorView):
        raise not_a_tensor("cosine_similarity", x1)
    if not isinstance(x2, TensorView):
        raise not_a_tensor("cosine_similarity", x2)
    unit = [elementwise("truediv", x, elementwise("maximum", x.norm(2, dim, True), eps))
            for x in _broadcast_together(x1, x2)]
    return red.sum(elementwise("mul", *unit), dim)


def _broadcast_together(x1: TensorView, x2: TensorView) -> tuple[TensorView, TensorView]:
    """Both expanded to their common shape, as torch's cosine_similarity takes them: its `dim` is one of
    that shape's, and a norm over a dimension x2 broadcasts along counts each of its copies."""
    rank = max(x1.ndim, x2.ndim)
    a, b = (bc.broadcast(x, [True] * (rank - x.ndim) + [False] * x.ndim) for x in (x1, x2))
    shape = [db.extent if da.is_broadcast else da.extent for da, db in zip(a.visible, b.visible)]
    return bc.expand(a, shape), bc.expand(b, shape)


@composite
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dimension (torch's)."""
    difference = elementwise("add", _difference("pairwise_distance", x1, x2), eps)
    return difference.norm(p, -1 if difference.ndim else None, keepdim)


# --- activations ---------------------------------------------------------------------------------------
@composite
def glu(input, dim=-1):  # noqa: A002
    """a * sigmoid(b), a and b the two halves of `input` along `dim`."""
    if not isinstance(input, TensorView):
        raise not_a_tensor("glu", input)
    axis = normalize_axis(dim, input.ndim, "glu dim")
    extent = input.shape[axis]
    if extent.is_const and extent.value % 2:
        raise FusionDefinitionError(f"F.glu: dimension {axis} of {input.describe()}: expected an even extent to "
                                    f"halve, got {extent.value}")
    first, second = vc.chunk(input, 2, axis)
    input.fusion.require_equal(first.shape[axis], second.shape[axis],
                               f"F.glu: dimension {axis} of {input.describe()}: expected an even extent to halve")
    return elementwise("mul", first, elementwise("sigmoid", second))


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):  # noqa: A002
    return elementwise("clamp", input, min_val, max_val)


def softmin(input, dim=None, _stacklevel=3, dtype=None):  # noqa: A002
    if dim is None:
        raise FusionDefinitionError("F.softmin: dim: expected the axis to normalize over, got None")
    if not isinstance(input, TensorView):
        raise not_a_tensor("softmin", input)
    return composites.softmax(elementwise("neg", input), dim, dtype)


def tanhshrink(input):  # noqa: A002
    return elementwise("sub", input, elementwise("tanh", input))


def softshrink(input, lambd=0.5):  # noqa: A002
    """x - lambd above lambd, x + lambd below -lambd, 0 between (NaN stays NaN)."""
    middle = elementwise("mul", input, 0)  # 0 with x's sign, and NaN for NaN, as torch's
    inner = elementwise("where", elementwise("lt", input, -lambd), elementwise("add", input, lambd), middle)
    return elementwise("where", elementwise("gt", input, lambd), elementwise("sub", input, lambd), inner)


def hardshrink(input, lambd=0.5):  # noqa: A002
    """x outside [-lambd, lambd], 0 inside (NaN stays NaN)."""
    inside = elementwise("logical_and", elementwise("ge", input, -lambd), elementwise("le", input, lambd))
    return elementwise("where", inside, 0, input)


def threshold(input, threshold, value, inplace=False):  # noqa: A002
    """`value` where x <= threshold, else x (NaN stays NaN)."""
    return elementwise("where", elementwise("le", input, threshold), value, input)


def prelu(input, weight):  # noqa: A002
    """x where x > 0, else weight * x; a weight of several values is one per channel, dimension 1."""
    if not isinstance(input, TensorView):
        raise not_a_tensor("prelu", input)
    if isinstance(weight, TensorView) and weight.ndim == 1 and input.ndim >= 2:
        weight = weight.reshape(weight.shape[0], *[1] * (input.ndim - 2))
    scaled = cast(elementwise("mul", input, weight), input.dtype)
    return elementwise("where", elementwise("gt", input, 0), input, scaled)
