"""Math functions the op table has no op for, as compositions of ops it has: the inverse trigonometric
and the hyperbolic functions, `log10`, `cbrt`, `hypot`, degrees and radians, `lgamma` and `erfinv`. One table
serves both frontends:
fusions (`bz.ops.asin`, torch's `aten.asin`, NumPy's `np.arcsin`: braze/ops/math_functions.py) and loop
kernels (`math.asin` in a `@bz.kernel`: braze/frontend/kernel_math.py), each passing the constructors of
its own values.

Each formula keeps float32 accurate to a few units in the last place where the direct one would not:
`1 - x*x` as `(1 - x)(1 + x)` near |x| = 1, `expm1` for small arguments of sinh, `log1p` near the
zeros of asinh, acosh and atanh (atanh as the difference of two, which never cancel), and `log(2|x|)`
where `x*x` would overflow. Nor does a finite result overflow or underflow on the way: sinh and cosh
square exp(|x|/2) where exp(|x|) alone would overflow, and hypot scales by the larger side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Builders(NamedTuple):
    """How a frontend makes values: `unary(op, x)`, `binary(op, a, b)`, `ternary(op, a, b, c)`."""

    unary: Callable
    binary: Callable
    ternary: Callable


_LARGE = 1e8  # past it sqrt(x*x +- 1) is |x| to float64's precision; below it x*x stays finite in float32
# Past it e^-|x| is below half an ulp of e^|x| even in float64 (past 19), and below it exp(|x|) stays
# finite in float32 (up to 88.7, where sinh and cosh are finite up to 89.4).
_EXP_HALVED = 80.0


def compositions(b: Builders) -> dict[str, Callable]:
    """The composed functions, by name, over the values `b` builds."""
    def mul(x, y):
        return b.binary("mul", x, y)

    def one_minus_square(x):
        return mul(b.binary("sub", 1.0, x), b.binary("add", 1.0, x))

    def log_of_double(magnitude):  # log(2|x|): asinh and acosh of large arguments
        return b.binary("add", b.unary("log", magnitude), math.log(2))

    def asinh(x):
        m = b.unary("abs", x)
        small = b.binary("minimum", m, _LARGE)  # its branch is not taken past _LARGE; keep it finite there
        near = b.unary("log1p", b.binary("add", small, b.binary("truediv", mul(small, small), b.binary(
            "add", 1.0, b.unary("sqrt", b.binary("add", 1.0, mul(small, small)))))))
        return b.binary("copysign", b.ternary("where", b.binary("gt", m, _LARGE), log_of_double(m), near), x)

    def acosh(x):
        t = b.binary("sub", x, 1.0)
        # sqrt(t) * sqrt(x + 1), not sqrt(t * (x + 1)): below -1 both factors are negative and their
        # product is not, where acosh is NaN
        root = mul(b.unary("sqrt", t), b.unary("sqrt", b.binary("add", x, 1.0)))
        near = b.unary("log1p", b.binary("add", t, root))
        return b.ternary("where", b.binary("gt", x, _LARGE), log_of_double(x), near)

    def cbrt(x):
        # |x|^(1/3) with x's sign (pow is NaN for a negative base and a fractional exponent), then one
        # Newton step: 1/3 rounded to float32 leaves up to 8 ulp at large |x|; 0, inf and NaN stay as they are
        m = b.unary("abs", x)
        guess = b.binary("pow", m, 1 / 3)
        refined = b.binary("sub", guess, mul(b.binary("sub", guess, b.binary("truediv", m, mul(guess, guess))), 1 / 3))
        finite_nonzero = b.binary("logical_and", b.binary("gt", m, 0.0), b.binary("lt", m, math.inf))
        return b.binary("copysign", b.ternary("where", finite_nonzero, refined, guess), x)

    return {
        "atan": lambda x: b.binary("atan2", x, 1.0),
        "asin": lambda x: b.binary("atan2", x, b.unary("sqrt", one_minus_square(x))),
        "acos": lambda x: b.binary("atan2", b.unary("sqrt", one_minus_square(x)), x),
        "asinh": asinh,
        "acosh": acosh,
        "atanh": lambda x: mul(b.binary("sub", b.unary("log1p", x), b.unary("log1p", b.unary("neg", x))), 0.5),
        "log10": lambda x: mul(b.unary("log", x), 1 / math.log(10)),
        **_without_overflow_on_the_way(b),
        **_special_functions(b),
        "cbrt": cbrt,
        "degrees": lambda x: mul(x, 180 / math.pi),
        "radians": lambda x: mul(x, math.pi / 180),
    }


def _without_overflow_on_the_way(b: Builders) -> dict[str, Callable]:
    """sinh, cosh and hypot, whose direct formulas overflow (or underflow) in between where the result
    does not: exp(|x|) before sinh and cosh, the squares of the sides before hypot."""
    def mul(x, y):
        return b.binary("mul", x, y)

    def half_exp_of_magnitude(x):  # e^|x| / 2 as (e^(|x|/2) / 2) * e^(|x|/2): finite wherever the result is
        root = b.unary("exp", mul(b.unary("abs", x), 0.5))
        return mul(mul(root, 0.5), root)

    def large(x):
        return b.binary("gt", b.unary("abs", x), _EXP_HALVED)

    def sinh(x):
        near = mul(b.binary("sub", b.unary("expm1", x), b.unary("expm1", b.unary("neg", x))), 0.5)
        return b.ternary("where", large(x), b.binary("copysign", half_exp_of_magnitude(x), x), near)

    def cosh(x):
        near = mul(b.binary("add", b.unary("exp", x), b.unary("exp", b.unary("neg", x))), 0.5)
        return b.ternary("where", large(x), half_exp_of_magnitude(x), near)

    def hypot(x, y):
        # big * sqrt(1 + (small / big)^2): the squares of the sides themselves overflow past 1.8e19 in
        # float32 and underflow below 1e-19
        big = b.binary("maximum", b.unary("abs", x), b.unary("abs", y))
        small = b.binary("minimum", b.unary("abs", x), b.unary("abs", y))
        ratio = b.binary("truediv", small, b.ternary("where", b.binary("eq", big, 0.0), 1.0, big))
        scaled = mul(big, b.unary("sqrt", b.binary("add", 1.0, mul(ratio, ratio))))
        # An infinite side gives inf, beside another (inf / inf) or a NaN too, as C's hypot
        return b.ternary("where", is_infinite(x), math.inf, b.ternary("where", is_infinite(y), math.inf, scaled))

    def is_infinite(x):
        return b.binary("eq", b.unary("abs", x), math.inf)

    return {"sinh": sinh, "cosh": cosh, "hypot": hypot}


# Lanczos's approximation of the gamma function, g = 7 and nine terms (as in Numerical Recipes' gammln
# and many libraries): about 1e-15 relative in float64 for x >= 0.5.
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
# Giles's single-precision erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011): a
# polynomial in w = -log(1 - y^2), one for the centre (w < 5) and one in sqrt(w) for the tails.
_ERFINV_CENTRE = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _special_functions(b: Builders) -> dict[str, Callable]:
    """lgamma (torch's, math's) and erfinv (torch's), which the op table has no op for."""
    def mul(x, y):
        return b.binary("mul", x, y)

    def horner(coefficients, w):
        p = coefficients[0]
        for c in coefficients[1:]:
            p = b.binary("add", mul(p, w), c)
        return p

    def lgamma_right(x):  # x >= 0.5
        z = b.binary("sub", x, 1.0)
        series = _LANCZOS[0]
        for i, c in enumerate(_LANCZOS[1:], 1):
            series = b.binary("add", series, b.binary("truediv", c, b.binary("add", z, float(i))))
        t = b.binary("add", z, _LANCZOS_G + 0.5)
        return b.binary("add", b.binary("sub", mul(b.binary("add", z, 0.5), b.unary("log", t)), t),
                        b.binary("add", b.unary("log", series), 0.5 * math.log(2 * math.pi)))

    def lgamma(x):
        # Below 0.5 the reflection Gamma(x) Gamma(1 - x) = pi / sin(pi x): log|Gamma| is
        # log(pi / |sin(pi x)|) - lgamma(1 - x); the poles (0, -1, -2, ...) are +inf, as torch and C have it.
        left = b.binary("lt", x, 0.5)
        mirrored = b.ternary("where", left, b.binary("sub", 1.0, x), x)  # each branch sees an argument >= 0.5
        right = lgamma_right(mirrored)
        sine = b.unary("abs", b.unary("sin", mul(x, math.pi)))
        reflected = b.binary("sub", b.unary("log", b.binary("truediv", math.pi, sine)), right)
        pole = b.binary("logical_and", b.binary("le", x, 0.0), b.binary("eq", b.unary("floor", x), x))
        infinite = b.binary("logical_or", pole, b.binary("eq", x, math.inf))  # inf - inf in Lanczos's terms
        return b.ternary("where", infinite, math.inf, b.ternary("where", left, reflected, right))

    def erfinv(y):
        # Giles's estimate (float32's precision), then three steps to float64's: Halley's on erf(x) = |y|
        # near 0 (erf'' = -2x erf'), Newton's on log(erfc(x)) = log(1 - |y|) from |y| = 0.5 on, which is
        # nearly linear in x out in the tails, where erf(x) rounds to 1 and erfc keeps its precision.
        a = b.unary("abs", y)
        w = b.unary("neg", b.unary("log", mul(b.binary("sub", 1.0, a), b.binary("add", 1.0, a))))
        centre = horner(_ERFINV_CENTRE, b.binary("sub", w, 2.5))
        tail = horner(_ERFINV_TAIL, b.binary("sub", b.unary("sqrt", w), 3.0))
        x = mul(b.ternary("where", b.binary("lt", w, 5.0), centre, tail), a)
        near_zero, log_rest = b.binary("lt", a, 0.5), b.unary("log", b.binary("sub", 1.0, a))
        for _ in range(3):
            slope = mul(b.unary("exp", b.unary("neg", mul(x, x))), 2 / math.sqrt(math.pi))
            d = b.binary("truediv", b.binary("sub", b.unary("erf", x), a), slope)
            halley = b.binary("sub", x, b.binary("truediv", d, b.binary("add", 1.0, mul(x, d))))
            rest = b.unary("erfc", x)
            newton = b.binary("add", x, b.binary("truediv", mul(b.binary("sub", b.unary("log", rest), log_rest), rest),
                                                  slope))
            x = b.ternary("where", near_zero, halley, newton)
        x = b.ternary("where", b.binary("gt", a, 1.0), math.nan, x)
        x = b.ternary("where", b.binary("eq", a, 1.0), math.inf, x)
        return b.binary("copysign", x, y)

    return {"lgamma": lgamma, "erfinv": erfinv}


def _erfinv_reference(y: np.ndarray) -> np.ndarray:
    """erfinv in float64 by bisection on math.erf (NumPy has none): a reference, not fast."""
    y = np.asarray(y, np.float64)
    lo, hi = np.full(y.shape, -7.0), np.full(y.shape, 7.0)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    for _ in range(80):
        mid = (lo + hi) / 2
        below = erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    x = (lo + hi) / 2
    return np.where(np.abs(y) == 1, np.copysign(np.inf, y), np.where((np.abs(y) > 1) | np.isnan(y), np.nan, x))


# NumPy's functions of the same names: the references the tests and `bz.math.<name>` outside a kernel use.
REFERENCES: dict[str, Callable] = {
    "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "log10": np.log10, "hypot": np.hypot,
    "degrees": np.degrees, "radians": np.radians, "cbrt": np.cbrt,
    "lgamma": np.vectorize(math.lgamma, otypes=[np.float64]), "erfinv": _erfinv_reference,
}
# NumPy's ufunc names for them, where they differ.
NUMPY_NAMES = {"arctan": "atan", "arcsin": "asin", "arccos": "acos", "arcsinh": "asinh", "arccosh": "acosh",
               "arctanh": "atanh", "rad2deg": "degrees", "deg2rad": "radians"}
