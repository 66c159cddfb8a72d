"""The math functions a `@bz.kernel` body may call, by the names users know them under: Python's `math`
module, NumPy's ufuncs (as Numba users write them) and `bz.math`. Each is an op of the op table, or a
composition of such ops where the table has none (`math.acos`, `np.hypot`, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from braze import dtypes as dt
from braze.frontend import kernel_types as ty
from braze.ops.math_compositions import NUMPY_NAMES, Builders, compositions
from braze.ops.math_compositions import REFERENCES as COMPOSED_REFERENCES

# Python's math functions and NumPy's ufuncs that are one op of the table.
_SAME_OP = ("sqrt", "exp", "log2", "log1p", "expm1", "sin", "cos", "tan", "tanh", "floor", "ceil", "trunc",
            "exp2", "isnan", "isinf", "isfinite", "sign")
OP_OF: dict[Callable, str] = {
    **{getattr(math, name): name for name in _SAME_OP if hasattr(math, name)},
    **{getattr(np, name): name for name in _SAME_OP},
    math.fabs: "abs", math.erf: "erf", math.erfc: "erfc", math.atan2: "atan2", math.pow: "pow",
    np.abs: "abs", np.fabs: "abs", np.arctan2: "atan2", np.power: "pow", np.minimum: "minimum",
    np.maximum: "maximum", np.where: "where", np.clip: "clamp", np.round: "round", np.rint: "round",
    np.log: "log",
}
# Python's math.floor, ceil and trunc give an int, as Python's do (NumPy's give a float).
INTEGER_RESULT = frozenset({math.floor, math.ceil, math.trunc})


def _fmod(x, y):
    """C's fmod (the sign of the dividend): Python's remainder of the magnitudes, which is exact and is C's
    there, given x's sign."""
    r = ty.binary("remainder", ty.unary("abs", x), ty.unary("abs", y))
    return ty.ternary("where", ty.binary("lt", x, 0), ty.unary("neg", r), r)


def _copysign(x, y):
    """|x| with the sign of y (-0.0 counts as negative, as C's copysign has it); integers are taken as
    float64, as Python's math.copysign takes them."""
    return ty.binary("copysign", _as_float(x), _as_float(y))


def _as_float(x):
    """An integer as float64, as Python's math functions take it; floats as they are."""
    return x if ty.type_of(x)[0].is_floating else ty.convert(x, dt.float64)


def _log(x, base=None):
    """`math.log(x)`, or `math.log(x, base)`: log(x) / log(base)."""
    if base is None:
        return ty.unary("log", x)
    return ty.binary("truediv", ty.unary("log", x), ty.unary("log", base))


# Functions the op table has no op for (or not for Python's argument types), by name, composed of ops
# that it has.
COMPOSED: dict[str, Callable] = {
    **compositions(Builders(ty.unary, ty.binary, ty.ternary)),  # braze/ops/math_compositions.py
    "fmod": _fmod,
    "copysign": _copysign,
    "log": _log,
}
# NumPy's names for them.
_NUMPY_NAMES = {**{name: name for name in COMPOSED if hasattr(np, name) and name != "log"}, **NUMPY_NAMES}
COMPOSED_OF: dict[Callable, str] = {
    **{getattr(math, name): name for name in COMPOSED if hasattr(math, name)},  # math has no erfinv
    **{getattr(np, name): composed for name, composed in _NUMPY_NAMES.items()},
}
# NumPy references of the composed functions, for `bz.math.acos` and friends called outside a kernel.
REFERENCES: dict[str, Callable] = {**COMPOSED_REFERENCES, "fmod": np.fmod, "copysign": np.copysign}


def composed(name: str, args: list):
    """The composition `name` of ops over `args`, with its arity checked."""
    fn = COMPOSED[name]
    arity = fn.__code__.co_argcount
    least = arity - len(fn.__defaults__ or ())
    if not least <= len(args) <= arity:
        expected = str(arity) if least == arity else f"{least} or {arity}"
        raise ty.TypeProblem(f"{name}: expected {expected} argument(s), got {len(args)}")
    return fn(*args)
