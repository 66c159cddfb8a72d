"""Composites of elementwise ops that model code writes under torch's names: activations
(`softplus`, `mish`, `hardswish`, `elu`, ...), `logaddexp` and `logsumexp`, `nan_to_num`,
`addcmul` and `addcdiv`, `fmod`, and `one_hot`. Each is built from primitives, so the schedulers fuse its
parts with the rest of the fusion.

Half-precision inputs are computed in float32 and rounded once at the end, as torch does; integer
inputs of an op with a floating result compute in float32 (`composites.in_compute_type`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes

from braze import config
from braze import dtypes as dt
from braze.errors import FusionDefinitionError
from braze.ir.fusion import defining
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView
from braze.ops import reductions as red
from braze.ops import views
from braze.ops.composites import composite, in_compute_type
from braze.ops.creation import arange
from braze.ops.elementwise import (
    Operand,
    as_operand,
    cast,
    elementwise,
    float_of_integers,
    not_a_tensor,
    numpy_float_result,
    operand_type,
    owning_fusion,
)

# SELU's constants (Klambauer et al., 2017), as torch spells them.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _number(op: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FusionDefinitionError(f"{op}: {name}: expected a number, got {type(value).__name__} {value!r}")
    return value


def _scale(op: str, value: object) -> float | TensorView:
    """A number, or a scalar of the fusion (nvFuser's `addcmul(x, a, b, fd.define_scalar(0.1))`)."""
    if isinstance(value, TensorView) and value.ndim == 0:
        return value
    return _number(op, "value", value)


def _scaled(t: TensorView, value: float | TensorView) -> TensorView:
    return t if isinstance(value, (int, float)) and value == 1 else elementwise("mul", t, value)


def operands_in_compute_type(op: str, operands: Sequence[Operand], floating: bool
                              ) -> tuple[list[Operand], dt.DType]:
    """The operands with their tensors cast to the compute type of their promoted dtype, and the dtype
    to return: the promoted one (for integers when `floating`, float32, or NumPy's float in a trace of NumPy
    arrays). Python numbers stay weak."""
    tensors = [o for o in operands if isinstance(o, TensorView)]
    if not tensors:
        owning_fusion(op, operands)  # an array given by mistake: says what ops are for
        raise FusionDefinitionError(f"{op}: expected at least one TensorView operand, got "
                                    f"{', '.join(type(o).__name__ for o in operands)}")
    # the numbers as the weak operands they are: a Python float raises NumPy's integers to float64
    typed = [as_operand(op, tensors[0].fusion, o, i) for i, o in enumerate(operands)]
    promoted = dt.result_type(*[t.promotion for t in typed])
    result = float_of_integers(tensors[0].fusion, promoted) if floating and not promoted.is_floating else promoted
    result = numpy_float_result(op, typed, promoted, result)  # NumPy's, in a trace of NumPy arrays
    compute = dt.compute_dtype(result)
    return [cast(o, compute) if isinstance(o, TensorView) else o for o in operands], result


# --- softplus and its relatives ---------------------------------------------------------------------
def _softplus(xf: TensorView, beta: float, threshold: float) -> TensorView:
    scaled = elementwise("mul", xf, beta) if beta != 1 else xf
    # max(s, 0) + log1p(exp(-|s|)), not log1p(exp(s)): exp(s) overflows past 88.7 in float32, where a
    # threshold above it (or a large beta) still asks for log1p(exp(s)), which is s there
    tail = elementwise("log1p", elementwise("exp", elementwise("neg", elementwise("abs", scaled))))
    soft = elementwise("add", elementwise("maximum", scaled, 0.0), tail)
    soft = elementwise("truediv", soft, beta) if beta != 1 else soft
    return elementwise("where", elementwise("gt", scaled, threshold), xf, soft)


@composite
def softplus(x: TensorView, beta: float = 1, threshold: float = 20) -> TensorView:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (torch's)."""
    beta, threshold = _number("softplus", "beta", beta), _number("softplus", "threshold", threshold)
    if beta == 0:
        raise FusionDefinitionError("softplus: beta: expected a non-zero number, got 0")
    xf, result = in_compute_type(x, "softplus")
    return cast(_softplus(xf, beta, threshold), result)


def _log_sigmoid(xf: TensorView) -> TensorView:
    """min(x, 0) - log1p(exp(-|x|)): exp never overflows."""
    tail = elementwise("log1p", elementwise("exp", elementwise("neg", elementwise("abs", xf))))
    return elementwise("sub", elementwise("minimum", xf, 0.0), tail)


@composite
def logsigmoid(x: TensorView) -> TensorView:
    """log(sigmoid(x)) = -softplus(-x), computed so that it neither overflows nor loses the tail."""
    xf, result = in_compute_type(x, "logsigmoid")
    return cast(_log_sigmoid(xf), result)


@composite
def mish(x: TensorView) -> TensorView:
    """x * tanh(softplus(x))."""
    xf, result = in_compute_type(x, "mish")
    return cast(elementwise("mul", xf, elementwise("tanh", _softplus(xf, 1, 20))), result)


# --- piecewise activations ----------------------------------------------------------------------------
def _relu6(xf: TensorView) -> TensorView:
    return elementwise("clamp", xf, 0.0, 6.0)


@composite
def relu6(x: TensorView) -> TensorView:
    """min(max(x, 0), 6); NaN stays NaN."""
    xf, result = in_compute_type(x, "relu6")
    return cast(_relu6(xf), result)


def _hard_gate(xf: TensorView) -> TensorView:
    """relu6(x + 3) / 6: 0 below -3, 1 above 3, linear between."""
    return elementwise("truediv", _relu6(elementwise("add", xf, 3.0)), 6.0)


@composite
def hardsigmoid(x: TensorView) -> TensorView:
    """relu6(x + 3) / 6: 0 below -3, 1 above 3, linear between."""
    xf, result = in_compute_type(x, "hardsigmoid")
    return cast(_hard_gate(xf), result)


@composite
def hardswish(x: TensorView) -> TensorView:
    """x * relu6(x + 3) / 6."""
    xf, result = in_compute_type(x, "hardswish")
    return cast(elementwise("mul", xf, _hard_gate(xf)), result)


@composite
def leaky_relu(x: TensorView, negative_slope: float = 0.01) -> TensorView:
    """x where x > 0, else negative_slope * x."""
    slope = _number("leaky_relu", "negative_slope", negative_slope)
    xf, result = in_compute_type(x, "leaky_relu")
    return cast(elementwise("where", elementwise("gt", xf, 0.0), xf, elementwise("mul", xf, slope)), result)


def _exponential_tail(xf: TensorView, alpha: float) -> TensorView:
    """alpha * (exp(x) - 1) where x <= 0, x where x > 0 (ELU)."""
    tail = elementwise("mul", elementwise("expm1", xf), alpha)
    return elementwise("where", elementwise("gt", xf, 0.0), xf, tail)


@composite
def elu(x: TensorView, alpha: float = 1.0) -> TensorView:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    alpha = _number("elu", "alpha", alpha)
    xf, result = in_compute_type(x, "elu")
    return cast(_exponential_tail(xf, alpha), result)


@composite
def celu(x: TensorView, alpha: float = 1.0) -> TensorView:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    alpha = _number("celu", "alpha", alpha)
    if alpha == 0:
        raise FusionDefinitionError("celu: alpha: expected a non-zero number, got 0")
    xf, result = in_compute_type(x, "celu")
    tail = elementwise("mul", elementwise("expm1", elementwise("truediv", xf, alpha)), alpha)
    return cast(elementwise("where", elementwise("gt", xf, 0.0), xf, tail), result)


@composite
def selu(x: TensorView) -> TensorView:
    """scale * elu(x, alpha) with SELU's fixed alpha and scale."""
    xf, result = in_compute_type(x, "selu")
    return cast(elementwise("mul", _exponential_tail(xf, SELU_ALPHA), SELU_SCALE), result)


@composite
def softsign(x: TensorView) -> TensorView:
    """x / (1 + |x|)."""
    xf, result = in_compute_type(x, "softsign")
    return cast(elementwise("truediv", xf, elementwise("add", elementwise("abs", xf), 1.0)), result)


# --- remainders ------------------------------------------------------------------------------------------
@composite
def fmod(x: Operand, y: Operand) -> TensorView:
    """C's and torch's `fmod`: the remainder of x / y with the quotient rounded toward zero, so it has the
    sign of x (`remainder`, Python's `%`, has the sign of y). Exact, as C's: floats take the remainder of
    the magnitudes, which needs no correction, and give it x's sign; integers move `remainder` by y
    where the signs differ. A float divisor of 0 gives NaN; an integer one gives 0."""
    fusion = owning_fusion("fmod", (x, y))
    promoted = operand_type([as_operand("fmod", fusion, v, i) for i, v in enumerate((x, y))])
    if promoted.is_floating:
        magnitude = elementwise("remainder", _magnitude(x), _magnitude(y))
        sign = cast(x, promoted) if isinstance(x, TensorView) else x
        return cast(elementwise("copysign", magnitude, sign), promoted)
    rest = elementwise("remainder", x, y)
    signs_differ = elementwise("ne", elementwise("lt", rest, 0), elementwise("lt", x, 0))
    moved = elementwise("logical_and", elementwise("ne", rest, 0), signs_differ)
    return elementwise("where", moved, elementwise("sub", rest, y), rest)


def _magnitude(v: Operand) -> Operand:
    return elementwise("abs", v) if isinstance(v, TensorView) else abs(v)


# --- log-sum-exp ----------------------------------------------------------------------------------------
@composite
def logaddexp(x: Operand, y: Operand) -> TensorView:
    """log(exp(x) + exp(y)), from the larger of the two so that it cannot overflow; equal infinities
    give themselves (not NaN), NaN gives NaN."""
    (xf, yf), result = operands_in_compute_type("logaddexp", (x, y), floating=True)
    larger = elementwise("maximum", xf, yf)
    gap = elementwise("neg", elementwise("abs", elementwise("sub", xf, yf)))
    general = elementwise("add", larger, elementwise("log1p", elementwise("exp", gap)))
    same = elementwise("add", larger, math.log(2.0))  # x == y: also where both are the same infinity
    return cast(elementwise("where", elementwise("eq", xf, yf), same, general), result)


def _padded_for_an_empty_axis(xf: TensorView, axes: tuple[int, ...]) -> TensorView:
    """xf with one -inf appended along each reduced axis whose extent may be 0, so that its max
    always has a value: logsumexp over nothing is then log(0) = -inf, as torch gives."""
    maybe_empty = [a for a in axes if not (xf.shape[a].is_const and xf.shape[a].value > 0)]
    if not maybe_empty or config.disabled("logsumexp_pad"):
        return xf
    return views.pad(xf, [(0, 1) if a in maybe_empty else (0, 0) for a in range(xf.ndim)], float("-inf"))


@composite
@red.keyword_aliases(dim=("axis", "axes"), keepdim=("keepdims",))
def logsumexp(x: TensorView, dim=None, keepdim: bool = False) -> TensorView:
    """log(sum(exp(x))) over `dim` (every axis when None), computed from the row's maximum so that
    it cannot overflow; a row of -inf (every position masked) gives -inf, not NaN, and so does an
    empty axis, as in torch."""
    xf, result = in_compute_type(x, "logsumexp")
    axes = red.normalize_axes(x, dim, "logsumexp")
    top = red.max(_padded_for_an_empty_axis(xf, axes), axes, keepdim=True)
    shift = elementwise("where", elementwise("isinf", top), 0.0, top)  # -inf - -inf would be NaN
    total = red.sum(elementwise("exp", elementwise("sub", xf, shift)), axes, keepdim=True)
    out = elementwise("add", elementwise("log", total), shift)
    return cast(out if keepdim else views.squeeze(out, axes), result)


# --- cleaning and fused multiply-adds -------------------------------------------------------------------
def _largest_finite(dtype: dt.DType) -> float:
    return float(ml_dtypes.finfo(dtype.numpy).max)


@composite
def nan_to_num(x: TensorView, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> TensorView:
    """NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (None: the dtype's largest and
    smallest finite values, as torch). Integer and bool tensors have none of them and come back as
    they are."""
    for name, value in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
        if value is not None:
            _number("nan_to_num", name, value)
    if not isinstance(x, TensorView):
        raise not_a_tensor("nan_to_num", x)
    if not x.dtype.is_floating:
        return x
    big = _largest_finite(x.dtype)
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    y = elementwise("where", elementwise("isnan", x), nan, x)
    y = elementwise("where", elementwise("eq", x, float("inf")), posinf, y)
    return elementwise("where", elementwise("eq", x, float("-inf")), neginf, y)


@composite
def addcmul(x: Operand, a: Operand, b: Operand, value: float | TensorView = 1) -> TensorView:
    """x + value * a * b, in the promoted dtype of the three (half types computed in float32); `value` a
    number or a scalar of the fusion."""
    value = _scale("addcmul", value)
    (xf, af, bf), result = operands_in_compute_type("addcmul", (x, a, b), floating=False)
    product = elementwise("mul", af, bf)
    product = _scaled(product, value)
    return cast(elementwise("add", xf, product), result)


@composite
def addcdiv(x: Operand, a: Operand, b: Operand, value: float | TensorView = 1) -> TensorView:
    """x + value * a / b (a true division: integer operands give float32)."""
    value = _scale("addcdiv", value)
    (xf, af, bf), result = operands_in_compute_type("addcdiv", (x, a, b), floating=True)
    quotient = elementwise("truediv", af, bf)
    quotient = _scaled(quotient, value)
    return cast(elementwise("add", xf, quotient), result)


# --- one_hot ----------------------------------------------------------------------------------------------
@composite
def one_hot(ids: TensorView, num_classes: int | Scalar) -> TensorView:
    """int64 tensor of ids' shape plus a last axis of `num_classes`: 1 where the index equals the
    id, else 0 (torch's `F.one_hot`). `num_classes` is a Python int or an extent of the fusion
    (`logits.shape[-1]`): braze cannot infer it from the data. An id outside [0, num_classes) gives a
    row of zeros (torch raises)."""
    if not isinstance(ids, TensorView) or not ids.dtype.is_integer:
        got = ids.dtype.name if isinstance(ids, TensorView) else type(ids).__name__
        raise FusionDefinitionError(f"one_hot: ids: expected an integer tensor of class indices, got {got}")
    if not isinstance(num_classes, Scalar) and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0):
        raise FusionDefinitionError(
            f"one_hot: num_classes: expected a non-negative Python int or an extent of the fusion, got "
            f"{type(num_classes).__name__} {num_classes!r}")
    with defining(ids.fusion):
        classes = arange(num_classes, dtype=dt.int64)  # ids' own type might not hold every class
    return cast(elementwise("eq", views.unsqueeze(ids, -1), classes), dt.int64)
