"""The op surface: every op of the op table as a function over TensorViews and Python scalars.

`bz.ops.gelu(x + b)`, `bz.ops.sum(y, axes=[1])`, `bz.ops.where(x > 0, x, 0.0)`.
"""

from __future__ import annotations

from collections.abc import Callable

from braze.errors import FusionDefinitionError
from braze.ops import methods as _methods
from braze.ops.activations import (
    addcdiv,
    addcmul,
    celu,
    elu,
    fmod,
    hardsigmoid,
    hardswish,
    leaky_relu,
    logaddexp,
    logsigmoid,
    logsumexp,
    mish,
    nan_to_num,
    one_hot,
    relu6,
    selu,
    softplus,
    softsign,
)
from braze.ops.broadcast import broadcast, broadcast_in_dim, expand
from braze.ops.composites import cross_entropy, layer_norm, log_softmax, nll_loss, rms_norm, softmax
from braze.ops.creation import (
    arange,
    full,
    full_like,
    normal,
    ones,
    ones_like,
    rand,
    randn,
    uniform,
    zeros,
    zeros_like,
)
from braze.ops.elementwise import BINARY, TERNARY, UNARY, cast, elementwise
from braze.ops.math_functions import FUNCTIONS as _MATH_FUNCTIONS
from braze.ops.nvfuser_names import missing_op
from braze.ops.reductions import (  # noqa: A004
    all,
    any,
    argmax,
    argmin,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
    var_mean,
)
from braze.ops.scans import cummax, cummin, cumprod, cumsum, logcumsumexp
from braze.ops.table import OPS, OpDef
from braze.ops.view_composites import (
    chunk,
    diff,
    flatten,
    masked_fill,
    narrow,
    repeat,
    repeat_interleave,
    roll,
    select,
    split,
    stack,
    take,
    take_along_axis,
    tile,
    tril,
    triu,
    unbind,
    unflatten,
)
from braze.ops.views import cat, flip, pad, permute, reshape, slice_tensor, squeeze, transpose, unsqueeze


def _elementwise_function(name: str, arity: int) -> Callable:
    def op(*operands, **attrs):
        return elementwise(name, *operands, **attrs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise `{name}` over {arity} operand(s), broadcast with NumPy's rules."
    return op


_GENERATED = {name: _elementwise_function(name, arity)
              for table, arity in ((UNARY, 1), (BINARY, 2), (TERNARY, 3)) for name in table}
globals().update(_GENERATED)
globals().update(_MATH_FUNCTIONS)  # asin, sinh, log10, hypot, ...: braze/ops/math_functions.py
_methods.install()
_methods.install_extent_operators()


def gelu(x, approximate: str = "none"):
    """GELU: x * Phi(x) exactly (`approximate="none"`) or with the tanh approximation (`"tanh"`)."""
    if approximate not in ("none", "tanh"):
        raise FusionDefinitionError(f"gelu: approximate: expected 'none' or 'tanh', got {approximate!r}")
    return elementwise("gelu", x, approximate=approximate)


_ACTIVATIONS_MODULE = (  # braze/ops/activations.py
    "addcdiv", "addcmul", "celu", "elu", "fmod", "hardsigmoid", "hardswish", "leaky_relu", "logaddexp", "logsigmoid",
    "logsumexp", "mish", "nan_to_num", "one_hot", "relu6", "selu", "softplus", "softsign")
slice = slice_tensor  # noqa: A001  (bz.ops.slice(x, [...]) reads like the other ops)

__all__ = sorted(
    [*_GENERATED, "OPS", "OpDef", "all", "any", "arange", "argmax", "argmin", "broadcast", "broadcast_in_dim",
     "cast", "cat", "cross_entropy", "cummax", "cummin", "cumprod", "cumsum", "expand", "flip", "full",
     "layer_norm", "log_softmax", "logcumsumexp", "max", "mean", "min", "nll_loss", "normal", "ones", "pad",
     "permute", "prod",
     "rand", "randn", "reshape",
     "rms_norm", "slice", "softmax", "squeeze", "std", "sum", "transpose", "unsqueeze", "var", "var_mean",
     "zeros",
     "chunk", "diff", "flatten", "masked_fill", "narrow", "repeat", "repeat_interleave", "roll", "select", "split",
     "stack", "take", "take_along_axis", "tile", "tril", "triu", "unbind", "unflatten", "full_like", "ones_like",
     "zeros_like", "uniform",
     *_ACTIVATIONS_MODULE, *_MATH_FUNCTIONS]
)


def __getattr__(name: str) -> object:
    error = missing_op(name)
    if error is None:
        raise AttributeError(f"module 'braze.ops' has no attribute {name!r}")
    raise error
