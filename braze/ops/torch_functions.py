"""torch's functions on the tensors of a fusion being defined: `torch.rsqrt(x)`, `torch.where(m, x, 0.0)`,
`torch.cat([x, y], dim=-1)`, `F.silu(x)`, `F.layer_norm(x, (d,), w, b)`, so torch code traces under
`@bz.jit` as it is written. TensorView takes torch's `__torch_function__` protocol, installed by
`braze/ops/methods.py`: a `torch.<name>` function is the TensorView method of that name (torch.exp(x)
is x.exp()) unless the table below says otherwise, and `torch.nn.functional` has a table of its own.
What has no braze op, and a torch tensor captured from outside (a fusion takes no constants), raises
UnsupportedError naming it, never torch's "argument 'input' must be Tensor". torch is not imported here.
"""

from __future__ import annotations

from collections.abc import Callable

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.tensor import TensorView
from braze.ops import activations, composites, creation, views
from braze.ops import reductions as red
from braze.ops import view_composites as vc
from braze.ops.elementwise import elementwise

# torch's keywords that mean nothing for a fusion's values: where they live and how they are stored.
_PLACEMENT = ("device", "layout", "requires_grad", "memory_format", "pin_memory", "inplace")


def _like(make: Callable[..., TensorView]) -> Callable[..., TensorView]:
    """torch.zeros_like(x, dtype=...) and friends; torch.empty_like gives zeros (a fusion has no garbage)."""
    return lambda input, *args, dtype=None, **placement: make(input, *args, dtype=dt.as_dtype(dtype) if dtype else None)


def _torch_moment(method: str) -> Callable[..., TensorView]:
    """torch.var and torch.std remove one degree of freedom unless told otherwise (the tensor methods
    follow NumPy's population default, so the function says which it means)."""
    def moment(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):  # torch.var(x, False): the older spelling of unbiased
            dim, unbiased = None, dim
        if unbiased is None and correction is None:
            correction = 1
        return getattr(red, method)(input, dim, keepdim, correction=correction, unbiased=unbiased)

    return moment


def _torch_extreme(method: str) -> Callable[..., TensorView]:
    """torch.max(x, 1) is torch's (values, indices), as x.max(dim=1) is; torch.max(x) and
    torch.max(x, y) as the method gives them."""
    def extreme(input, dim=None, keepdim=False, **kwargs):
        if isinstance(dim, int) and not isinstance(dim, bool):
            return getattr(input, method)(dim=dim, keepdim=keepdim, **kwargs)
        return getattr(input, method)(**kwargs) if dim is None else getattr(input, method)(dim, **kwargs)

    return extreme


def _where(condition, input=None, other=None):  # noqa: A002  (torch's names)
    if input is None or other is None:
        raise UnsupportedError("torch.where(condition) alone gives indices of data-dependent count: braze has no op "
                               "for it in a fusion; torch.where(condition, x, y) chooses per element")
    return elementwise("where", condition, input, other)


_TORCH: dict[str, Callable[..., TensorView]] = {  # torch.<name> that is not the method of its name
    "where": _where,
    "cat": lambda tensors, dim=0: views.cat(list(tensors), dim),
    "concat": lambda tensors, dim=0: views.cat(list(tensors), dim),
    "concatenate": lambda tensors, axis=0: views.cat(list(tensors), axis),
    "stack": lambda tensors, dim=0: vc.stack(list(tensors), dim),
    "zeros_like": _like(creation.zeros_like), "empty_like": _like(creation.zeros_like),
    "ones_like": _like(creation.ones_like), "full_like": _like(creation.full_like),
    "var": _torch_moment("var"), "std": _torch_moment("std"),
    "max": _torch_extreme("max"), "min": _torch_extreme("min"),
}


def _activation(op: Callable[..., TensorView]) -> Callable[..., TensorView]:
    return lambda input, *args, **kwargs: op(input, *args, **kwargs)


def _unary(op: str) -> Callable[..., TensorView]:
    return lambda input: elementwise(op, input)


def _softmax(op: Callable[..., TensorView]) -> Callable[..., TensorView]:
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dim is None:
            raise FusionDefinitionError(f"F.{op.__name__}: dim: expected the axis to normalize over, got None")
        return op(input, dim, dtype)

    return softmax


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return composites.layer_norm(input, weight, bias, eps, axes=_trailing_axes(normalized_shape))


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    # torch's default eps is the machine epsilon of the input's dtype
    eps = dt.finfo(input.dtype).eps if eps is None else eps
    return composites.rms_norm(input, weight, eps, axes=_trailing_axes(normalized_shape))


def _trailing_axes(normalized_shape) -> tuple[int, ...]:
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    return tuple(range(-count, 0))


def _cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                   reduction="mean", label_smoothing=0.0):
    if size_average is not None or reduce is not None:
        raise UnsupportedError("F.cross_entropy: size_average= and reduce= (deprecated in torch): use reduction=")
    return composites.cross_entropy(input, target, reduction, weight=weight, ignore_index=ignore_index,
                                    label_smoothing=label_smoothing, class_axis=1 if input.ndim > 1 else 0)


def _one_hot(tensor, num_classes=-1):
    if isinstance(num_classes, int) and num_classes < 0:
        raise UnsupportedError("F.one_hot: num_classes=-1 takes the count from the data (its largest id + 1): "
                               "a fusion's shapes cannot depend on values; give num_classes")
    return activations.one_hot(tensor, num_classes)


def _pad(input, pad, mode="constant", value=None):
    """torch's pad lists (before, after) pairs from the last dimension backwards."""
    if mode != "constant":
        raise UnsupportedError(f"F.pad: mode={mode!r}: braze pads with a constant only")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise FusionDefinitionError(f"F.pad: pad: expected pairs for at most {input.ndim} dimensions, got {tuple(pad)}")
    pairs = [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)]
    widths = [(0, 0)] * (input.ndim - len(pairs)) + pairs[::-1]
    return views.pad(input, widths, 0 if value is None else value)


def _gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise FusionDefinitionError(f"F.gelu: approximate: expected 'none' or 'tanh', got {approximate!r}")
    return elementwise("gelu", input, approximate=approximate)


def _normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    return elementwise("truediv", input, elementwise("maximum", input.norm(p, dim, True), eps))


def _dropout(input, p=0.5, training=True, inplace=False):
    if training and p != 0:
        raise UnsupportedError("F.dropout with training=True: draw the mask in the fusion instead, "
                               "x * (bz.ops.rand(x.shape) >= p) / (1 - p)")
    return input


_FUNCTIONAL: dict[str, Callable[..., TensorView]] = {  # torch.nn.functional.<name>
    **{name: _activation(getattr(activations, name)) for name in (
        "softplus", "logsigmoid", "mish", "relu6", "hardsigmoid", "hardswish", "leaky_relu", "elu", "celu", "selu",
        "softsign")},
    **{name: _unary(name) for name in ("relu", "silu", "sigmoid", "tanh")},
    "gelu": _gelu,
    "softmax": _softmax(composites.softmax), "log_softmax": _softmax(composites.log_softmax),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "cross_entropy": _cross_entropy, "one_hot": _one_hot,
    "pad": _pad, "normalize": _normalize, "dropout": _dropout,
}
_FUNCTIONAL_MODULES = ("torch.nn.functional", "torch._C._nn")


def torch_function(cls: type, func: Callable, types: tuple, args: tuple = (), kwargs: dict | None = None) -> object:
    """torch's `__torch_function__`: `torch.exp(x)`, `torch.cat([x, y], 1)`, `F.silu(x)`, ..."""
    module, name = getattr(func, "__module__", None), func.__name__
    functional = module in _FUNCTIONAL_MODULES
    what = f"{'torch.nn.functional' if functional else 'torch'}.{name}"
    _refuse_captured_tensors(what, args, kwargs or {})
    kwargs = {k: v for k, v in (kwargs or {}).items() if k not in _PLACEMENT}
    if kwargs.get("out") is not None:
        raise UnsupportedError(f"{what}: out=: a fusion's values are not buffers; use the result")
    kwargs.pop("out", None)
    handler = (_FUNCTIONAL if functional else _TORCH if module == "torch" else {}).get(name)
    if handler is None and module in ("torch", "torch.functional") and args and isinstance(args[0], TensorView) \
            and hasattr(TensorView, name) and not name.startswith("_"):
        handler = getattr(TensorView, name)  # torch.exp(x, ...) is x.exp(...)
    if handler is None:
        raise UnsupportedError(f"{what} on a traced tensor: braze has no op for it in a fusion (the ops braze "
                               "has: braze.ops)")
    return handler(*args, **kwargs)


def _refuse_captured_tensors(what: str, args: tuple, kwargs: dict) -> None:
    """A torch tensor from outside the function (a module's buffer, a mask made once) is data the fusion
    would have to capture: it takes arrays only as arguments."""
    for value in (*args, *kwargs.values()):
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if type(item).__module__.startswith("torch") and hasattr(item, "data_ptr"):
                raise UnsupportedError(
                    f"{what}: a torch tensor of shape {tuple(item.shape)} inside a traced function: a fusion does "
                    "not capture tensors as constants; pass it as an argument")


def install(cls: type = TensorView) -> None:
    cls.__torch_function__ = classmethod(torch_function)
