"""torch's functions on the tensors of a fusion being defined: `torch.rsqrt(x)`, `torch.where(m, x, 0.0)`,
`torch.cat([x, y], dim=-1)`, `F.silu(x)`, `F.layer_norm(x, (d,), w, b)`, so torch code traces under
`@bz.jit` as it is written. TensorView takes torch's `__torch_function__` protocol, installed by
`braze/ops/methods.py`: a `torch.<name>` function is the TensorView method of that name (torch.exp(x)
is x.exp()) unless the table below says otherwise, and `torch.nn.functional` has a table of its own.
What has no braze op, and a torch tensor captured from outside (a fusion takes no constants), raises
UnsupportedError naming it, never torch's "argument 'input' must be Tensor". torch is not imported here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.fusion import active_fusion, defining_any
from braze.ir.scalar import Scalar, caller_site, forget_type_probe
from braze.ir.tensor import TensorView
from braze.ops import activations, composites, creation, losses, torch_nn, views
from braze.ops import reductions as red
from braze.ops import torch_math as tm
from braze.ops import view_composites as vc
from braze.ops.elementwise import cast, elementwise
from braze.ops.numpy_einsum import einsum
from braze.ops.torch_methods import cumulative_extreme

# torch's keywords that mean nothing for a fusion's values: where they live and how they are stored.
_PLACEMENT = ("device", "layout", "requires_grad", "memory_format", "pin_memory", "inplace")


def _like(make: Callable[..., TensorView]) -> Callable[..., TensorView]:
    """torch.zeros_like(x, dtype=...) and friends; torch.empty_like gives zeros (a fusion has no garbage)."""
    return lambda input, *args, dtype=None, **placement: make(input, *args, dtype=dt.as_dtype(dtype) if dtype else None)


def _torch_moment(method: str) -> Callable[..., TensorView]:
    """torch.var and torch.std (and var_mean, std_mean) remove one degree of freedom unless told otherwise
    (`x.var(1)` follows NumPy's population default, so the function says which it means)."""
    moment = _MOMENTS[method]

    def torch_moment(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):  # torch.var(x, False): the older spelling of unbiased
            dim, unbiased = None, dim
        if unbiased is None and correction is None:
            correction = 1
        return moment(input, dim, keepdim, correction=correction, unbiased=unbiased)

    return torch_moment


def _std_mean(x, axes, keepdim, correction=None, unbiased=None):
    var, mean = red.var_mean(x, axes, keepdim, correction, unbiased)
    return elementwise("sqrt", var), mean


_MOMENTS = {"var": red.var, "std": red.std, "var_mean": red.var_mean, "std_mean": _std_mean}


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


def _norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm: the vector p-norm (the method's), of the input cast to `dtype` first where given."""
    return (input if dtype is None else cast(input, dt.as_dtype(dtype))).norm(p, dim, keepdim)


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002  (torch's names)
    return _norm(x, ord, dim, keepdim, dtype=dtype)


def _linalg_norm(input, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: vector norms over one dim (or of a vector) and the Frobenius norm; a matrix
    norm of another `ord` has no braze op."""
    matrix = (dim is None and input.ndim >= 2) or (isinstance(dim, (tuple, list)) and len(dim) == 2)
    if matrix and ord not in (None, "fro"):
        raise UnsupportedError(f"torch.linalg.norm: ord={ord!r} over two dims is a matrix norm: braze has none "
                               "(vector norms over one dim, and the Frobenius norm, it has)")
    return _norm(input, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def _cdist(x1, x2, p=2.0, compute_mode=None):
    """torch.cdist: the p-norm distance of every row of x1 (..., P, M) to every row of x2 (..., R, M)."""
    difference = elementwise("sub", views.unsqueeze(x1, -2), views.unsqueeze(x2, -3))
    return _vector_norm(difference, p, -1)


def _torch_einsum(equation, *operands):
    """torch.einsum(equation, a, b) and torch.einsum(equation, [a, b])."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return einsum(equation, *operands)


_TORCH: dict[str, Callable[..., TensorView]] = {  # torch.<name> that is not the method of its name
    "where": _where,
    "cat": lambda tensors, dim=0: views.cat(list(tensors), dim),
    "concat": lambda tensors, dim=0: views.cat(list(tensors), dim),
    "concatenate": lambda tensors, axis=0: views.cat(list(tensors), axis),
    "stack": lambda tensors, dim=0: vc.stack(list(tensors), dim),
    "zeros_like": _like(creation.zeros_like), "empty_like": _like(creation.zeros_like),
    "ones_like": _like(creation.ones_like), "full_like": _like(creation.full_like),
    **{name: _torch_moment(name) for name in _MOMENTS},
    "max": _torch_extreme("max"), "min": _torch_extreme("min"),
    "cummax": lambda input, dim: cumulative_extreme("cummax", input, dim),
    "cummin": lambda input, dim: cumulative_extreme("cummin", input, dim),
    "norm": _norm,
    "pow": lambda input, exponent: elementwise("pow", input, exponent),  # torch.pow(2.0, x) too
    "rsub": tm.rsub, "xlogy": tm.xlogy, "float_power": tm.float_power,  # a number first too
    "cosine_similarity": losses.cosine_similarity, "pairwise_distance": losses.pairwise_distance,
    "einsum": _torch_einsum, "cdist": _cdist, "entr": tm.entr,
    **{name: pool for name, pool in torch_nn.FUNCTIONAL.items() if "pool" in name},  # torch.avg_pool1d is F's
}
_TORCH_MODULES = ("torch", "torch.functional")  # torch.norm is torch.functional's
_LINALG = {"vector_norm": _vector_norm, "norm": _linalg_norm}  # torch.linalg.<name>
_SPECIAL_RENAMED = {"expit": "sigmoid"}  # torch.special.<name> whose torch.<name> is spelled otherwise


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


_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}  # torch's -> NumPy's names


def _pad(input, pad, mode="constant", value=None):
    """torch's pad lists (before, after) pairs from the last dimension backwards."""
    if mode != "constant" and mode not in _PAD_MODES:
        raise UnsupportedError(f"F.pad: mode={mode!r}: expected 'constant', 'reflect', 'replicate' or 'circular'")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise FusionDefinitionError(f"F.pad: pad: expected pairs for at most {input.ndim} dimensions, got {tuple(pad)}")
    pairs = [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)]
    widths = [(0, 0)] * (input.ndim - len(pairs)) + pairs[::-1]
    if mode != "constant":
        return vc.pad_from_slices(input, widths, _PAD_MODES[mode])
    return views.pad(input, widths, 0 if value is None else value)


def _nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    if size_average is not None or reduce is not None:
        raise UnsupportedError("F.nll_loss: size_average= and reduce= (deprecated in torch): use reduction=")
    return composites.nll_loss(input, target, reduction, weight=weight, ignore_index=ignore_index,
                               class_axis=1 if input.ndim > 1 else 0)


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


def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
               sparse=False):
    """F.embedding: the rows of `weight` the ids name (padding_idx only matters to a gradient)."""
    if max_norm is not None:
        raise UnsupportedError("F.embedding with max_norm: it renormalizes the weight's rows in place; call it "
                               "outside the fusion")
    return vc.take(weight, input, 0)


_FUNCTIONAL: dict[str, Callable[..., TensorView]] = {  # torch.nn.functional.<name>
    **{name: _activation(getattr(activations, name)) for name in (
        "softplus", "logsigmoid", "mish", "relu6", "hardsigmoid", "hardswish", "leaky_relu", "elu", "celu", "selu",
        "softsign")},
    **{name: _unary(name) for name in ("relu", "silu", "sigmoid", "tanh")},
    "gelu": _gelu,
    "softmax": _softmax(composites.softmax), "log_softmax": _softmax(composites.log_softmax),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "cross_entropy": _cross_entropy, "one_hot": _one_hot,
    "pad": _pad, "normalize": _normalize, "dropout": _dropout, "embedding": _embedding, "nll_loss": _nll_loss,
    **torch_nn.FUNCTIONAL,
    **{name: getattr(losses, name) for name in (
        "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits",
        "binary_cross_entropy", "kl_div", "cosine_similarity", "pairwise_distance", "glu", "hardtanh", "softmin",
        "tanhshrink", "softshrink", "hardshrink", "threshold", "prelu")},
}
_FUNCTIONAL["log_sigmoid"] = _FUNCTIONAL["logsigmoid"]  # F.logsigmoid's own name, which torch dispatches under
_FUNCTIONAL["_threshold"] = _FUNCTIONAL["threshold"]  # F.threshold's dispatch name
_FUNCTIONAL_MODULES = ("torch.nn.functional", "torch._C._nn")


def torch_function(cls: type, func: Callable, types: tuple, args: tuple = (), kwargs: dict | None = None) -> object:
    """torch's `__torch_function__`: `torch.exp(x)`, `torch.cat([x, y], 1)`, `F.silu(x)`, ..."""
    what, handler = _handler(func, args)
    kwargs = kwargs or {}
    capture = _capturing_fusion()
    if capture is not None:  # a @bz.jit trace: torch's own tensors are data the fusion takes in
        forget_type_probe(caller_site())  # torch checked an extent's type: the handler says if it needs its number
        if handler is None and not _holds_tensor_views((*args, *kwargs.values())):
            # torch.arange(n), torch.ones(n, n): a tensor of sizes alone, made at their sizes in this call
            # (each extent its int in the call traced, which the trace then serves alone: braze/frontend/jit.py)
            return func(*_each_item(_size_as_int, args), **_each_item(_size_as_int, kwargs))
        captured = functools.partial(_captured, capture)
        args, kwargs = _each_item(captured, args), _each_item(captured, kwargs)
        what, handler = _handler(func, args)  # `torch.ones(4) * x`: the method of a tensor first now
    else:
        _refuse_captured_tensors(what, args, kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k not in _PLACEMENT}
    if kwargs.get("out") is not None:
        raise UnsupportedError(f"{what}: out=: a fusion's values are not buffers; use the result")
    kwargs.pop("out", None)
    if handler is None:
        raise UnsupportedError(f"{what} on a traced tensor: braze has no op for it in a fusion (the ops braze "
                               "has: braze.ops)")
    if what.removeprefix("torch.") in _EMPTY_DIM_IS_EVERY_DIM:
        args, kwargs = _every_dim_for_empty(args, kwargs)
    return handler(*args, **kwargs)


# torch's reductions whose empty `dim` (`torch.sum(x, dim=())`, `dim=[]`) reduces every dimension, where
# NumPy's empty `axis=()` reduces none (braze's methods and ops read it as NumPy does).
_EMPTY_DIM_IS_EVERY_DIM = frozenset({"sum", "mean", "nansum", "nanmean", "var", "std", "var_mean", "std_mean",
                                     "amax", "amin", "count_nonzero"})


def _every_dim_for_empty(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with an empty `dim` (second positional or keyword) made None: every dimension."""
    empty = lambda dim: isinstance(dim, (tuple, list)) and len(dim) == 0  # noqa: E731
    if len(args) > 1 and empty(args[1]):
        return (args[0], None, *args[2:]), kwargs
    if empty(kwargs.get("dim")):
        return args, {**kwargs, "dim": None}
    return args, kwargs


def _handler(func: Callable, args: tuple) -> tuple[str, Callable[..., object] | None]:
    """The name torch code calls `func` by (torch.special.expit, not its dispatch name special_expit) and
    braze's handler for it, or None."""
    module, name = getattr(func, "__module__", None), func.__name__
    if module in _FUNCTIONAL_MODULES:
        return f"torch.nn.functional.{name}", _FUNCTIONAL.get(name)
    if module == "torch._C._linalg":
        name = name.removeprefix("linalg_")
        return f"torch.linalg.{name}", _LINALG.get(name)
    what = f"torch.{name}"
    if module == "torch._C._special":  # torch.special.<name> is torch.<name>, where torch has one
        what, name = f"torch.special.{name.removeprefix('special_')}", name.removeprefix("special_")
        name, module = _SPECIAL_RENAMED.get(name, name), "torch"
    handler = _TORCH.get(name) if module in _TORCH_MODULES else None
    if handler is None and module in _TORCH_MODULES and args and isinstance(args[0], TensorView) \
            and hasattr(TensorView, name) and not name.startswith("_"):
        handler = getattr(TensorView, name)  # torch.exp(x, ...) is x.exp(...)
    return what, handler


def _capturing_fusion() -> Callable[[object], TensorView] | None:
    """The capture of the fusion a @bz.jit trace defines (None for a `with bz.Fusion()` block)."""
    return getattr(active_fusion("torch function"), "capture_array", None) if defining_any() else None


def _holds_tensor_views(values: tuple) -> bool:
    return any(isinstance(item, TensorView) for value in values
               for item in (value if isinstance(value, (list, tuple)) else (value,)))


def _is_torch_tensor(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def _each_item(fn: Callable[[object], object], values: tuple | dict) -> tuple | dict:
    """`fn` of each argument, and of each item of a list or tuple argument."""
    def one(value):
        return type(value)(map(fn, value)) if isinstance(value, (list, tuple)) else fn(value)
    return {k: one(v) for k, v in values.items()} if isinstance(values, dict) else tuple(map(one, values))


def _size_as_int(value: object) -> object:
    return int(value) if isinstance(value, Scalar) else value  # torch would hand an extent back to braze


def _captured(capture: Callable[[object], TensorView], value: object) -> object:
    """A torch tensor made outside the fusion as an input of the fusion that holds it."""
    return capture(value) if _is_torch_tensor(value) else value


def _refuse_captured_tensors(what: str, args: tuple, kwargs: dict) -> None:
    """A torch tensor from outside the function (a module's buffer, a mask made once) is data the fusion
    would have to capture: it takes arrays only as arguments."""
    for value in (*args, *kwargs.values()):
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if _is_torch_tensor(item):
                raise UnsupportedError(
                    f"{what}: a torch tensor of shape {tuple(item.shape)} inside a traced function: a fusion does "
                    "not capture tensors as constants; pass it as an argument")


def install(cls: type = TensorView) -> None:
    cls.__torch_function__ = classmethod(torch_function)
