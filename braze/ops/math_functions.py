"""`bz.ops.asin`, `acos`, `atan`, `sinh`, `cosh`, `asinh`, `acosh`, `atanh`, `log10`, `hypot`, `degrees`,
`radians`, `lgamma` and `erfinv`: the compositions of braze/ops/math_compositions.py over a fusion's tensors. Integers
compute in float32 and half types in float32, rounded once at the end, as torch computes them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from braze.ir.tensor import TensorView
from braze.ops.activations import operands_in_compute_type
from braze.ops.composites import composite
from braze.ops.elementwise import Operand, cast, elementwise
from braze.ops.math_compositions import Builders, compositions

_NUMBER_ARITHMETIC = {"mul": operator.mul, "add": operator.add, "sub": operator.sub, "truediv": operator.truediv,
                      "abs": abs, "maximum": max, "minimum": min, "eq": operator.eq}


def _op(op: str, *operands: Operand) -> Operand:
    """The op over tensors; over numbers alone (`hypot(x, 2.0)` takes the 2.0's magnitude), Python's
    arithmetic."""
    if not any(isinstance(o, TensorView) for o in operands) and op in _NUMBER_ARITHMETIC:
        return _NUMBER_ARITHMETIC[op](*operands)
    return elementwise(op, *operands)


_FORMULAS = compositions(Builders(_op, _op, _op))


def _function(name: str) -> Callable[..., TensorView]:
    formula = _FORMULAS[name]

    def function(x: Operand, *rest: Operand) -> TensorView:
        operands, result = operands_in_compute_type(name, (x, *rest), floating=True)
        return cast(formula(*operands), result)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"Elementwise `{name}` (braze/ops/math_compositions.py), broadcast with NumPy's rules."
    return composite(function)


FUNCTIONS: dict[str, Callable[..., TensorView]] = {name: _function(name) for name in _FORMULAS}
