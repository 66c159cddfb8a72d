"""Math functions the op table has no op for, as compositions of ops it has: the inverse trigonometric
and the hyperbolic functions, `log10`, `cbrt`, `hypot`, degrees and radians. One table serves both frontends:
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


# NumPy's functions of the same names: the references the tests and `bz.math.<name>` outside a kernel use.
REFERENCES: dict[str, Callable] = {
    "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "log10": np.log10, "hypot": np.hypot,
    "degrees": np.degrees, "radians": np.radians, "cbrt": np.cbrt,
}
# NumPy's ufunc names for them, where they differ.
NUMPY_NAMES = {"arctan": "atan", "arcsin": "asin", "arccos": "acos", "arcsinh": "asinh", "arccosh": "acosh",
               "arctanh": "atanh", "rad2deg": "degrees", "deg2rad": "radians"}
