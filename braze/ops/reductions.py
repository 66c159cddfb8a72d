"""Reductions. The output keeps reduced dimensions in its logical domain as reduction dimensions
(as nvFuser does); `keepdim` adds broadcast dimensions back after the reduction."""

from __future__ import annotations

import builtins
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import FusionDefinitionError, InputError, UnsupportedError
from braze.ir.domain import IterType
from braze.ir.fusion import Expr, FusionGraph
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops.broadcast import broadcast
from braze.ops.elementwise import SAME, TO_BOOL, TO_FLOAT, TO_INT64, cast, elementwise, not_a_tensor
from braze.ops.table import OpDef, RefContext, apply, register, reject_kinds

# NumPy's accumulation types: floats keep theirs, unsigned integers sum into uint64, others into int64.
_SUM_TYPE: Callable[[DType], DType] = lambda d: d if d.is_floating else dt.uint64 if d.is_unsigned else dt.int64


def _argreduce(fn: Callable) -> Callable:
    def reduce(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
        # argmax over several axes indexes them flattened, row-major, like torch on a reshape.
        kept = [a for a in range(x.ndim) if a not in axis]
        moved = np.transpose(x, kept + list(axis))
        # An explicit extent, not -1: NumPy cannot infer it when a kept dimension is empty.
        flat = moved.reshape(moved.shape[: len(kept)] + (math.prod(moved.shape[len(kept) :]),))
        return fn(flat, axis=-1)

    return reduce


def _var(x: np.ndarray, axis: tuple[int, ...], correction: float = 0) -> np.ndarray:
    return np.var(x, axis=axis, ddof=correction)


# name: (accepted kinds, result rule, reference, whether an empty reduction has no value)
REDUCTIONS: dict[str, tuple[str, Callable, Callable, bool]] = {
    "sum": ("bif", _SUM_TYPE, np.sum, False),
    "prod": ("bif", _SUM_TYPE, np.prod, False),
    "max": ("bif", SAME, np.max, True),
    "min": ("bif", SAME, np.min, True),
    "mean": ("bif", TO_FLOAT, np.mean, False),
    "var": ("bif", TO_FLOAT, _var, False),
    "any": ("bif", TO_BOOL, np.any, False),
    "all": ("bif", TO_BOOL, np.all, False),
    "argmax": ("bif", TO_INT64, _argreduce(np.argmax), True),
    "argmin": ("bif", TO_INT64, _argreduce(np.argmin), True),
}


def _accumulator(name: str, result: DType) -> DType | None:
    """Floats accumulate in their compute type (float32 for half types), integer sums in their
    result type (int64 or uint64)."""
    if result.is_floating:
        return dt.compute_dtype(result)
    return result if name in ("sum", "prod") else None


def _reduction_shape(inputs: Sequence[TensorView], attrs: dict):
    axes = attrs["axes"]
    return [d.clone(IterType.REDUCTION) if i in axes else d.clone() for i, d in enumerate(inputs[0].visible)]


def _reduction_entry(name: str, kinds: str, result: Callable, fn: Callable, needs_values: bool) -> OpDef:
    def dtype_rule(inputs: Sequence[TensorView], attrs: dict) -> DType:
        reject_kinds(name, inputs[0], kinds)
        integers = not inputs[0].dtype.is_floating
        if result is TO_FLOAT and integers and getattr(inputs[0].fusion, "numpy_promotion", False):
            return dt.float64  # NumPy's mean and var of integers, whatever their width
        return result(inputs[0].dtype)

    def reference(ctx: RefContext, args: Sequence[np.ndarray], out: TensorView, attrs: dict) -> np.ndarray:
        x, axes = args[0], attrs["axes"]
        if needs_values and 0 in (x.shape[a] for a in axes):  # this module's `any` is the op
            # No output element reads it (check_empty_reductions ran first): any value will do.
            return np.zeros(ctx.shape(out.logical), out.dtype.numpy)
        accumulator = _accumulator(name, out.dtype)
        x = x if accumulator is None else x.astype(accumulator.numpy)
        extra = {"correction": attrs["correction"]} if "correction" in attrs else {}
        # An empty mean or a correction >= n is NaN or inf by definition, not a warning to the user.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.asarray(fn(x, axis=axes, **extra)).astype(out.dtype.numpy, copy=False)

    return OpDef(name, "reduction", _reduction_shape, dtype_rule, reference)


for _name, _row in REDUCTIONS.items():
    register(_reduction_entry(_name, *_row))


# --- reductions over nothing ---------------------------------------------------------------------
NO_VALUE_OVER_NOTHING = frozenset(name for name, row in REDUCTIONS.items() if row[3])  # max, min, argmax, argmin


def reductions_without_identity(fusion: FusionGraph) -> list[Expr]:
    """The reductions (max, min, argmax, argmin) that have no value over an empty axis."""
    return [e for e in fusion.exprs if e.op in NO_VALUE_OVER_NOTHING]


def check_empty_reductions(fusion: FusionGraph, empty: Sequence[Expr], bindings: dict[str, int]) -> None:
    """Raises `InputError` for the first of `empty` (reductions without identity whose reduced axes
    hold nothing) that an output element reads. Sums of nothing are their identity; a max of nothing
    has no value, unless no element needs it: softmax over an empty axis has an empty result and
    reads no max, so it gives that empty result as NumPy and torch do. The error names the op the
    user wrote (a composite's name when the reduction is part of one)."""
    if not empty:
        return
    read = _read_tensors(fusion, bindings)
    for expr in empty:
        if id(expr.outputs[0]) in read:
            user, x = expr.origin or expr.op, expr.inputs[0]
            part = "" if user == expr.op else f" (its {expr.op})"
            raise InputError(f"{user}{part}: {x.describe()} has an empty dimension among the reduced axes "
                             f"{expr.attrs['axes']}: the {expr.op} of nothing has no value")


def _read_tensors(fusion: FusionGraph, bindings: dict[str, int]) -> set[int]:
    """ids of the tensors that some element of a non-empty output is computed from: a tensor is
    read when it holds elements and a consumer that is read uses it (nothing flows through an
    empty tensor)."""
    extents: dict[object, int] = {}

    def holds_elements(tv: TensorView) -> bool:
        for d in tv.visible:
            if d.extent not in extents:
                extents[d.extent] = d.extent.evaluate(bindings)
            if extents[d.extent] == 0:
                return False
        return True

    read = {id(o.tv) for o in fusion.outputs if holds_elements(o.tv)}
    for expr in reversed(fusion.exprs):  # every consumer of a tensor comes after its definition
        if builtins.any(id(out) in read for out in expr.outputs):  # this module's `any` is the op
            read.update(id(tv) for tv in expr.inputs if holds_elements(tv))
    return read


def normalize_axes(x: TensorView, axes: int | Sequence[int] | None, op: str) -> tuple[int, ...]:
    """Axes as sorted non-negative ints; None means all. Duplicates are an error."""
    if axes is None:
        return tuple(range(x.ndim))
    # One axis is any other value (np.int64(1) too); normalize_axis names what is not an int.
    listed = list(axes) if isinstance(axes, (tuple, list, range)) else [axes]
    normalized = [normalize_axis(a, x.ndim, f"{op} axes") for a in listed]
    if len(set(normalized)) != len(normalized):
        raise FusionDefinitionError(f"{op}: expected distinct axes, got {listed}")
    return tuple(sorted(normalized))


def keyword_aliases(**aliases: tuple[str, ...]) -> Callable[[Callable], Callable]:
    """Lets a parameter also be passed by the names NumPy, torch and nvFuser users write (`axis=`,
    `dim=` and `dims=` for `axes=`, `keepdims=` for `keepdim=`); one parameter given under two names is
    an error that names both."""

    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        # Every name a keyword may take here: the parameters' and the aliases of this wrapper and the
        # ones it wraps (`var` takes `axis=` from one and `ddof=` from another).
        accepted = [*signature.parameters, *getattr(fn, "accepted_keywords", ()),
                    *(n for names in aliases.values() for n in names)]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                positional = signature.bind_partial(*args).arguments
            except TypeError:
                names = _positional_names(signature)
                raise FusionDefinitionError(
                    f"{fn.__name__}: expected at most {len(names)} positional arguments ({', '.join(names)}), "
                    f"got {len(args)}; pass the others by keyword") from None
            for primary, names in aliases.items():
                written = [n for n in (primary, *names) if n in kwargs or n in positional]
                if len(written) > 1:
                    raise FusionDefinitionError(
                        f"{fn.__name__}: expected one of {', '.join(f'{n}=' for n in (primary, *names))}, got "
                        f"both {written[0]}= and {written[1]}=")
                if written and written[0] != primary:
                    kwargs[primary] = kwargs.pop(written[0])
                if written == ["dim"] and primary == "axes" and _empty_sequence(kwargs[primary]):
                    kwargs[primary] = None  # torch's `x.sum(dim=())` reduces every dimension; NumPy's axis=() none
            unknown = [n for n in kwargs if n not in accepted]
            if unknown:
                raise FusionDefinitionError(
                    f"{fn.__name__}: unexpected keyword argument(s) {', '.join(f'{n}=' for n in unknown)}; expected "
                    f"some of {', '.join(f'{n}=' for n in dict.fromkeys(accepted) if not n.startswith('_'))}")
            return fn(*args, **kwargs)

        call.accepted_keywords = tuple(accepted)
        return call

    return wrap


def _empty_sequence(value: object) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 0


def _positional_names(signature: inspect.Signature) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


_AXES_ALIASES = keyword_aliases(axes=("axis", "dim", "dims"), keepdim=("keepdims",))


def reduce(op: str, x: TensorView, axes=None, keepdim: bool = False, **attrs) -> TensorView:
    """Reduces x over `axes` with op; `keepdim` keeps them as size-1 dimensions."""
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    check_keepdim(op, keepdim)
    normalized = normalize_axes(x, axes, op)
    out = apply(op, [x], axes=normalized, **attrs)
    return broadcast(out, [i in normalized for i in range(x.ndim)]) if keepdim else out


def check_keepdim(op: str, keepdim: object) -> None:
    """keepdim is a bool, as torch requires: nvFuser's `var(x, dims, correction, keepdim)` and torch's
    `var(x, dim, unbiased)` put other parameters third, and an int there would silently keep dims."""
    if not isinstance(keepdim, (bool, np.bool_)):
        raise FusionDefinitionError(
            f"{op}: keepdim: expected a bool, got {type(keepdim).__name__} {keepdim!r} (braze's reductions take "
            f"(x, axes, keepdim); pass correction= and other options by keyword)")


def cast_first(x: TensorView, dtype: object, op: str, floating: bool = False) -> TensorView:
    """x cast to `dtype` before `op` reduces it, as torch's `dtype=` does (`x.sum(1, dtype=torch.float32)`
    sums half inputs into a float32 result); None keeps x. `floating`: the op has no integer result."""
    if dtype is None:
        return x
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    try:
        target = dt.as_dtype(dtype)
    except UnsupportedError as e:
        raise UnsupportedError(f"{op}: {e}") from None
    if floating and not target.is_floating:
        raise FusionDefinitionError(f"{op}: dtype: expected a floating dtype, got {target.name}")
    return cast(x, target)


def _as_asked(result: TensorView, dtype: object) -> TensorView:
    """The result in the `dtype=` asked for: an int32 sum is int32 in torch, though integers accumulate
    in int64 (the cast is a no-op where the reduction's own type is that dtype)."""
    return result if dtype is None else cast(result, dt.as_dtype(dtype))


@_AXES_ALIASES
def sum(x: TensorView, axes=None, keepdim: bool = False, dtype: object = None) -> TensorView:  # noqa: A001
    """Sum over axes; bools and signed integers accumulate in int64, unsigned integers in uint64 (as
    NumPy does), half types in float32. `dtype=` casts
    x to it first (torch's), so the result has that dtype."""
    return _as_asked(reduce("sum", cast_first(x, dtype, "sum"), axes, keepdim), dtype)


@_AXES_ALIASES
def prod(x: TensorView, axes=None, keepdim: bool = False, dtype: object = None) -> TensorView:
    """Product over axes; `dtype=` as for `sum`."""
    return _as_asked(reduce("prod", cast_first(x, dtype, "prod"), axes, keepdim), dtype)


@_AXES_ALIASES
def max(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:  # noqa: A001
    return reduce("max", x, axes, keepdim)


@_AXES_ALIASES
def min(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:  # noqa: A001
    return reduce("min", x, axes, keepdim)


@_AXES_ALIASES
def mean(x: TensorView, axes=None, keepdim: bool = False, dtype: object = None) -> TensorView:
    """Mean over axes (integers give float32); `dtype=` (a floating one) casts x to it first."""
    return reduce("mean", cast_first(x, dtype, "mean", floating=True), axes, keepdim)


def _correction(op: str, correction: float | None, unbiased: bool | None) -> float:
    """`correction=` (the array API's), or torch's `unbiased=` (True: 1, False: 0); not both.
    Neither is NumPy's default, 0."""
    if unbiased is None:
        return 0 if correction is None else correction
    if correction is not None:
        raise FusionDefinitionError(f"{op}: expected one of correction=, unbiased=, got both")
    if not isinstance(unbiased, bool):
        raise FusionDefinitionError(f"{op}: unbiased: expected a bool, got {type(unbiased).__name__} {unbiased!r}")
    return 1 if unbiased else 0


@_AXES_ALIASES
@keyword_aliases(correction=("ddof",))
def var(x: TensorView, axes=None, keepdim: bool = False, correction: float | None = None,
        unbiased: bool | None = None) -> TensorView:
    """Variance with `correction` degrees of freedom removed (0, the default: population; 1: sample);
    torch's `unbiased=True` is `correction=1`."""
    return reduce("var", x, axes, keepdim, correction=_correction("var", correction, unbiased))


@_AXES_ALIASES
def any(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:  # noqa: A001
    return reduce("any", x, axes, keepdim)


@_AXES_ALIASES
def all(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:  # noqa: A001
    return reduce("all", x, axes, keepdim)


@_AXES_ALIASES
def argmax(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:
    """Index of the first maximum; several axes are indexed as one flattened, row-major axis."""
    return reduce("argmax", x, axes, keepdim)


@_AXES_ALIASES
def argmin(x: TensorView, axes=None, keepdim: bool = False) -> TensorView:
    return reduce("argmin", x, axes, keepdim)


@_AXES_ALIASES
@keyword_aliases(correction=("ddof",))
def std(x: TensorView, axes=None, keepdim: bool = False, correction: float | None = None,
        unbiased: bool | None = None) -> TensorView:
    """Standard deviation: sqrt(var(x, axes, correction=correction)), `unbiased=` as in `var`."""
    return elementwise("sqrt", var(x, axes, keepdim, _correction("std", correction, unbiased)))


@_AXES_ALIASES
@keyword_aliases(correction=("ddof",))
def var_mean(x: TensorView, axes=None, keepdim: bool = False, correction: float | None = None,
             unbiased: bool | None = None) -> tuple[TensorView, TensorView]:
    """(var, mean) over axes, as nvFuser's and torch's `var_mean` return them; `correction` and
    `unbiased` as in `var` (0, NumPy's population variance, unless given)."""
    return var(x, axes, keepdim, correction, unbiased), mean(x, axes, keepdim)
