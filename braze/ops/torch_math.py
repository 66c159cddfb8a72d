"""torch's elementwise functions and small reductions that are short compositions of braze's ops:
`sign` (0 for NaN), `logit`, `xlogy`, `sinc`, `signbit`, `isclose`, `frac`, `heaviside`, `float_power`, `logaddexp2`,
`fmax`/`fmin`, `rsub`, `outer`, `count_nonzero`, `nansum`, `nanmean`, `aminmax`, `fliplr` and
`flipud`. `braze/ops/torch_methods.py` installs them as TensorView methods, so `x.logit()` and
`torch.logit(x)` (through `braze/ops/torch_functions.py`) both work. Each follows torch's values at
0, the infinities and NaN, and torch's result dtype (integer inputs of a floating function give
float32).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from braze import dtypes as dt
from braze.errors import FusionDefinitionError
from braze.ir.tensor import TensorView
from braze.ops import creation, views
from braze.ops import reductions as red
from braze.ops.activations import operands_in_compute_type
from braze.ops.composites import composite, in_compute_type
from braze.ops.elementwise import Operand, cast, elementwise, not_a_tensor


def _number(op: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FusionDefinitionError(f"{op}: {name}: expected a number, got {type(value).__name__} {value!r}")
    return value


@composite
def logit(x: TensorView, eps: float | None = None) -> TensorView:
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] where `eps` is given (torch's)."""
    xf, result = in_compute_type(x, "logit")
    if eps is not None:
        eps = _number("logit", "eps", eps)
        # the bounds in the result's dtype, as torch's: in bfloat16 1 - 1e-3 is 1, and logit(1) is inf
        low, high = (float(result.numpy.type(bound)) for bound in (eps, 1.0 - eps))
        xf = elementwise("clamp", xf, low, high)
    return cast(elementwise("log", elementwise("truediv", xf, elementwise("sub", 1.0, xf))), result)


@composite
def xlogy(x: Operand, y: Operand) -> TensorView:
    """x * log(y), and 0 where x is 0 (even where log(y) is -inf), unless y is NaN."""
    (xf, yf), result = operands_in_compute_type("xlogy", (x, y), floating=True)
    if not isinstance(yf, TensorView):  # a number: a tensor of it, so that its log is the op's
        yf = creation.full_like(xf, _number("xlogy", "other", yf))
    if not isinstance(xf, TensorView):
        xf = creation.full_like(yf, _number("xlogy", "input", xf))
    product = elementwise("mul", xf, elementwise("log", yf))
    zero_x = elementwise("logical_and", elementwise("eq", xf, 0), elementwise("logical_not", elementwise("isnan", yf)))
    return cast(elementwise("where", zero_x, 0.0, product), result)


@composite
def entr(x: TensorView) -> TensorView:
    """torch.special.entr: -x * log(x), 0 at 0, -inf below 0 (NaN stays NaN)."""
    xf, result = in_compute_type(x, "entr")
    negative_log = elementwise("neg", elementwise("mul", xf, elementwise("log", xf)))
    out = elementwise("where", elementwise("eq", xf, 0), 0.0, negative_log)
    return cast(elementwise("where", elementwise("lt", xf, 0), -math.inf, out), result)


@composite
def sinc(x: TensorView) -> TensorView:
    """The normalized sinc, sin(pi x) / (pi x), and 1 at 0."""
    xf, result = in_compute_type(x, "sinc")
    scaled = elementwise("mul", xf, math.pi)
    quotient = elementwise("truediv", elementwise("sin", scaled), scaled)
    return cast(elementwise("where", elementwise("eq", xf, 0), 1.0, quotient), result)


def sign(x: TensorView) -> TensorView:
    """torch's sign, (x > 0) - (x < 0): 0 for NaN, where NumPy's (`np.sign`, `bz.ops.sign`) gives NaN."""
    if not isinstance(x, TensorView):
        raise not_a_tensor("sign", x)
    signed = elementwise("sign", x)
    return elementwise("where", elementwise("isnan", x), 0, signed) if x.dtype.is_floating else signed


def signbit(x: TensorView) -> TensorView:
    """Whether the sign bit is set: True for -0.0 too, which `x < 0` misses."""
    if not isinstance(x, TensorView):
        raise not_a_tensor("signbit", x)
    if not x.dtype.is_floating:
        return elementwise("lt", x, 0)
    return elementwise("lt", elementwise("copysign", 1.0, x), 0)


@composite
def isclose(x: TensorView, other: Operand, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> TensorView:
    """|x - other| <= atol + rtol * |other| where that difference is finite, or x == other (the same
    infinities); NaNs are close to each other only with `equal_nan`."""
    rtol, atol = _number("isclose", "rtol", rtol), _number("isclose", "atol", atol)
    close = elementwise("eq", x, other)
    if equal_nan:
        close = elementwise("logical_or", close,
                            elementwise("logical_and", elementwise("isnan", x), elementwise("isnan", other)))
    if rtol == 0 and atol == 0:
        return close
    if not isinstance(x, TensorView):
        raise not_a_tensor("isclose", x)
    # integers compare as torch's do, through a floating difference and tolerance
    xf = x if x.dtype.is_floating else cast(x, dt.float64)
    error = elementwise("abs", elementwise("sub", xf, other))
    allowed = elementwise("add", elementwise("mul", elementwise("abs", other), rtol), atol)
    within = elementwise("logical_and", elementwise("isfinite", error), elementwise("le", error, allowed))
    return elementwise("logical_or", close, within)


@composite
def frac(x: TensorView) -> TensorView:
    """x - trunc(x): the fraction with x's sign (NaN at the infinities, as torch)."""
    return elementwise("sub", x, elementwise("trunc", x))


@composite
def heaviside(x: TensorView, values: Operand) -> TensorView:
    """0 where x < 0, `values` where x == 0, 1 where x > 0 (and 0 at NaN, as torch)."""
    if not isinstance(x, TensorView):
        raise not_a_tensor("heaviside", x)
    step = cast(elementwise("gt", x, 0), x.dtype)
    return elementwise("where", elementwise("eq", x, 0), values, step)


def float_power(x: Operand, exponent: Operand) -> TensorView:
    """x ** exponent computed in float64, as torch's float_power (its result is float64)."""
    base = cast(x, dt.float64) if isinstance(x, TensorView) else float(x)
    power = cast(exponent, dt.float64) if isinstance(exponent, TensorView) else exponent
    if not isinstance(base, TensorView) and not isinstance(power, TensorView):
        raise not_a_tensor("float_power", x)
    return elementwise("pow", base, power)


@composite
def logaddexp2(x: Operand, y: Operand) -> TensorView:
    """log2(2**x + 2**y), from the larger of the two so that it cannot overflow; equal infinities give
    themselves, NaN gives NaN."""
    (xf, yf), result = operands_in_compute_type("logaddexp2", (x, y), floating=True)
    larger = elementwise("maximum", xf, yf)
    gap = elementwise("neg", elementwise("abs", elementwise("sub", xf, yf)))
    general = elementwise("add", larger, elementwise("truediv", elementwise("log1p", elementwise("exp2", gap)),
                                                     math.log(2.0)))
    same = elementwise("add", larger, 1.0)  # x == y: also where both are the same infinity
    return cast(elementwise("where", elementwise("eq", xf, yf), same, general), result)


def _nan_ignoring(op: str):
    """torch's fmax and fmin: the maximum (minimum) of the two, the other one where one is NaN."""
    @composite
    def extreme(x: Operand, other: Operand) -> TensorView:
        both = elementwise(op, x, other)
        if not any(isinstance(v, TensorView) and v.dtype.is_floating for v in (x, other)) \
                and not any(isinstance(v, float) for v in (x, other)):
            return both
        picked = elementwise("where", elementwise("isnan", x), other, both)
        return elementwise("where", elementwise("isnan", other), x, picked)

    extreme.__name__ = extreme.__qualname__ = "fmax" if op == "maximum" else "fmin"
    return extreme


fmax, fmin = _nan_ignoring("maximum"), _nan_ignoring("minimum")


def rsub(x: Operand, other: Operand, alpha: object = 1) -> TensorView:
    """torch's rsub: other - alpha * x."""
    if alpha != 1:
        x = elementwise("mul", x, _number("rsub", "alpha", alpha))
    return elementwise("sub", other, x)


def outer(x: TensorView, vec2: TensorView) -> TensorView:
    """The outer product of two vectors, x[i] * vec2[j]: a broadcast product, no matrix product."""
    for name, v in (("input", x), ("vec2", vec2)):
        if not isinstance(v, TensorView) or v.ndim != 1:
            got = f"{v.ndim} dimensions" if isinstance(v, TensorView) else type(v).__name__
            raise FusionDefinitionError(f"outer: {name}: expected a vector (1 dimension), got {got}")
    return elementwise("mul", views.unsqueeze(x, 1), views.unsqueeze(vec2, 0))


def _flip_axis(name: str, axis: int):
    def flip(x: TensorView) -> TensorView:
        if not isinstance(x, TensorView):
            raise not_a_tensor(name, x)
        if x.ndim <= axis:
            raise FusionDefinitionError(f"{name}: expected a tensor of at least {axis + 1} dimensions, got "
                                        f"{x.describe()} of {x.ndim}")
        return views.flip(x, axis)

    flip.__name__ = flip.__qualname__ = name
    flip.__doc__ = f"x reversed along dimension {axis} (torch's `{name}`)."
    return flip


fliplr, flipud = _flip_axis("fliplr", 1), _flip_axis("flipud", 0)


# --- reductions -------------------------------------------------------------------------------------------
@red.keyword_aliases(dim=("axis", "axes"))
def count_nonzero(x: TensorView, dim=None) -> TensorView:
    """The number of non-zero elements over `dim` (every axis when None), as int64."""
    if not isinstance(x, TensorView):
        raise not_a_tensor("count_nonzero", x)
    return red.sum(cast(elementwise("ne", x, 0), dt.int64), dim)


def _without_nan(x: TensorView, op: str) -> TensorView:
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    return elementwise("where", elementwise("isnan", x), 0, x) if x.dtype.is_floating else x


@composite
@red.keyword_aliases(dim=("axis", "axes"), keepdim=("keepdims",))
def nansum(x: TensorView, dim=None, keepdim: bool = False, *, dtype: object = None) -> TensorView:
    """The sum over `dim`, NaNs counted as 0."""
    return red.sum(_without_nan(x, "nansum"), dim, keepdim, dtype=dtype)


@composite
@red.keyword_aliases(dim=("axis", "axes"), keepdim=("keepdims",))
def nanmean(x: TensorView, dim=None, keepdim: bool = False, *, dtype: object = None) -> TensorView:
    """The mean over `dim` of the elements that are not NaN (NaN where all are)."""
    x = red.cast_first(x, dtype, "nanmean", floating=True)
    if not x.dtype.is_floating:
        raise FusionDefinitionError(f"nanmean: expected a floating tensor (or dtype=), got {x.dtype.name}")
    xf, result = in_compute_type(x, "nanmean")
    count = red.sum(cast(elementwise("logical_not", elementwise("isnan", xf)), xf.dtype), dim, keepdim)
    return cast(elementwise("truediv", red.sum(_without_nan(xf, "nanmean"), dim, keepdim), count), result)


class MinMax(NamedTuple):
    """What torch's `aminmax` returns."""

    min: TensorView
    max: TensorView


def aminmax(x: TensorView, *, dim: int | None = None, keepdim: bool = False) -> MinMax:
    """torch's `aminmax`: the minimum and the maximum over `dim` (every axis when None)."""
    if not isinstance(x, TensorView):
        raise not_a_tensor("aminmax", x)
    return MinMax(red.min(x, dim, keepdim), red.max(x, dim, keepdim))
