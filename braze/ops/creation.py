"""Creation ops: full, arange, and rand/randn from the Philox stream of `braze.ops.philox`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, InputError
from braze.ir.domain import IterDomain, IterType
from braze.ir.fusion import active_fusion, defining
from braze.ir.scalar import Scalar, as_scalar, ceildiv, smax
from braze.ir.tensor import TensorView
from braze.ops import philox
from braze.ops.elementwise import as_operand, check_fill, elementwise, not_a_tensor
from braze.ops.reductions import keyword_aliases
from braze.ops.table import OpDef, RefContext, apply, register, size_value

_attr_dtype = lambda ins, a: a["dtype"]


def _shape_domain(ins, a) -> list[IterDomain]:
    return [IterDomain(e, IterType.BROADCAST if as_scalar(e).same_as(1) else IterType.ITERATION) for e in a["shape"]]


def _full_reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
    with np.errstate(all="ignore"):  # 1e6 in float16 is inf, as a cast gives
        return np.full(ctx.shape(out.logical), args[0], dtype=out.dtype.numpy)


def _arange_reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
    n = ctx.extent(out.logical[0].extent)
    return (a["start"] + a["step"] * np.arange(n, dtype=np.int64)).astype(out.dtype.numpy)


def _random_reference(kind: str):
    draw = {"uniform": philox.uniform, "normal": philox.normal}[kind]

    def reference(ctx: RefContext, args, out: TensorView, a: dict) -> np.ndarray:
        if args:  # seed and offset read at run time: their int64 bits as uint64
            seed, offset = (int(np.asarray(v).astype(np.int64)) % 2**64 for v in args)
        else:
            seed, offset = (a["seed"], a["offset"]) if a["seed"] is not None else ctx.next_rng()
        return draw(ctx.shape(out.logical), out.dtype.numpy, seed, offset)

    return reference


register(OpDef("full", "creation", _shape_domain, _attr_dtype, _full_reference))
register(OpDef("arange", "creation", lambda ins, a: [IterDomain(a["extent"])], _attr_dtype, _arange_reference))
register(OpDef("rand", "creation", _shape_domain, _attr_dtype, _random_reference("uniform")))
register(OpDef("randn", "creation", _shape_domain, _attr_dtype, _random_reference("normal")))


def _shape_arg(shape: Sequence[int | Scalar] | int, op: str) -> tuple[Scalar, ...]:
    listed = [shape] if isinstance(shape, (int, np.integer, Scalar)) else list(shape)
    listed = [size_value(e, f"{op}: shape[{i}]") for i, e in enumerate(listed)]
    listed = [int(e) if isinstance(e, np.integer) else e for e in listed]  # NumPy's ints are sizes too
    for i, e in enumerate(listed):
        if not isinstance(e, (int, Scalar)) or isinstance(e, bool) or (isinstance(e, int) and e < 0):
            raise FusionDefinitionError(f"{op}: shape[{i}]: expected a non-negative int or extent, got {e!r}")
    return tuple(as_scalar(e) for e in listed)


def _float_dtype(dtype: object, op: str) -> dt.DType:
    d = dt.as_dtype(dtype)
    if not d.is_floating:
        raise FusionDefinitionError(f"{op}: dtype: expected a floating dtype, got {d.name}")
    return d


@keyword_aliases(value=("fill_value",))
def full(shape, value: bool | int | float, dtype: object = None, *, _op: str = "full") -> TensorView:
    """A tensor of `shape` filled with `value` (torch's and nvFuser's `fill_value=`; dtype defaults to
    the value's Python type)."""
    fusion = active_fusion(_op)
    fill = as_operand(_op, fusion, value, 1)
    target = dt.as_dtype(dtype) if dtype is not None else fill.dtype
    check_fill(_op, value, target)
    return apply("full", [fill], fusion, shape=_shape_arg(shape, _op), dtype=target)


def zeros(shape, dtype: object = dt.float32) -> TensorView:
    """A tensor of zeros."""
    return full(shape, 0, dtype, _op="zeros")


def ones(shape, dtype: object = dt.float32) -> TensorView:
    """A tensor of ones."""
    return full(shape, 1, dtype, _op="ones")


@keyword_aliases(value=("fill_value",))
def full_like(x: TensorView, value: bool | int | float, dtype: object = None) -> TensorView:
    """A tensor of x's shape filled with `value`, in x's dtype unless `dtype` is given (torch's)."""
    return _like("full_like", x, value, dtype)


def zeros_like(x: TensorView, dtype: object = None) -> TensorView:
    """Zeros of x's shape, in x's dtype unless `dtype` is given."""
    return _like("zeros_like", x, 0, dtype)


def ones_like(x: TensorView, dtype: object = None) -> TensorView:
    """Ones of x's shape, in x's dtype unless `dtype` is given."""
    return _like("ones_like", x, 1, dtype)


def _like(op: str, x: TensorView, value: bool | int | float, dtype: object) -> TensorView:
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    with defining(x.fusion):
        return full(x.shape, value, x.dtype if dtype is None else dtype, _op=op)


def arange(start: int | Scalar, stop: int | Scalar | None = None, step: int = 1, dtype: object = dt.int64):
    """`start, start + step, ...` below `stop` (or `0 .. start` with one argument)."""
    if stop is None:
        start, stop = 0, start
    start, step = _python_int(start, "start"), _python_int(step, "step")
    if step == 0:
        raise FusionDefinitionError("arange: step: expected a non-zero int, got 0")
    stop = size_value(stop, "arange: stop")  # an integer scalar input's value: a symbolic extent
    if not isinstance(stop, Scalar):
        stop = _python_int(stop, "stop")
    span = as_scalar(stop) - start if step > 0 else start - as_scalar(stop)
    extent = smax(ceildiv(span, abs(step)), 0)
    return apply("arange", [], active_fusion("arange"), start=start, step=step, extent=extent,
                 dtype=dt.as_dtype(dtype))


def _python_int(value: object, what: str) -> int:
    """An int (NumPy's too) fixed when the fusion is defined; a runtime number of `@bz.jit` is a value
    of the fusion, which no extent can depend on."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    got = (f"tensor {value.describe()} of type {value.type_text()}" if isinstance(value, TensorView)
           else f"{type(value).__name__} {value!r}")
    raise FusionDefinitionError(f"arange: {what}: expected an int{' or an extent' * (what == 'stop')}, got {got}")


def draws_from_the_global_generator(expr) -> bool:
    """Whether a rand/randn expression takes its (seed, offset) from the global generator at every
    run: it was given no seed, neither a fixed one nor a run-time one."""
    return expr.op in ("rand", "randn") and expr.attrs["seed"] is None and not expr.inputs


def _run_time_key(op: str, fusion, seed: TensorView, offset: int | TensorView) -> list[TensorView]:
    """seed and offset as int64 operands of the op (an int offset becomes a constant of its bits)."""
    if not isinstance(offset, TensorView):
        philox.check_seed_offset(0, offset)
        offset = as_operand(op, fusion, offset - 2**64 if offset >= 2**63 else offset, 1)
    for name, tv in (("seed", seed), ("offset", offset)):
        if tv.ndim != 0 or tv.dtype != dt.int64:
            raise FusionDefinitionError(f"{op}: {name}: expected an int64 scalar of the fusion, got "
                                        f"{tv.dtype.name} of rank {tv.ndim}")
    return [seed, offset]


def _random(op: str, shape, dtype, seed: int | TensorView | None, offset: int | TensorView,
            table_op: str | None = None) -> TensorView:
    """`table_op` (rand or randn) draws the numbers; `op` names the call in messages."""
    fusion = active_fusion(op)
    shape, dtype = _shape_arg(shape, op), _float_dtype(dtype, op)
    if isinstance(seed, TensorView) or isinstance(offset, TensorView):
        if not isinstance(seed, TensorView):
            raise FusionDefinitionError(f"{op}: offset: a run-time offset needs a run-time seed, got seed={seed!r}")
        try:
            key = _run_time_key(op, fusion, seed, offset)
        except InputError as e:
            raise FusionDefinitionError(f"{op}: {e}") from None
        return apply(table_op or op, key, fusion, shape=shape, dtype=dtype, seed=None, offset=None)
    if seed is not None:
        try:
            philox.check_seed_offset(seed, offset)
        except InputError as e:  # a seed fixed in the definition is a definition error, not an input's
            raise FusionDefinitionError(f"{op}: {e}") from None
    return apply(table_op or op, [], fusion, shape=shape, dtype=dtype, seed=seed, offset=offset)


def rand(shape, dtype: object = dt.float32, seed: int | TensorView | None = None,
         offset: int | TensorView = 0) -> TensorView:
    """Uniform [0, 1) numbers: element `i` of the Philox stream (seed, offset) of `braze.ops.philox`.

    `seed` is an int fixed in the definition, an int64 scalar of the fusion read at every run
    (`f.define_scalar(dtype=bz.int64)`; its bits as a uint64, and `offset` may be one too), or None:
    each execution then draws a fresh (seed, offset) from the global generator (`bz.manual_seed`)."""
    return _random("rand", shape, dtype, seed, offset)


def randn(shape, dtype: object = dt.float32, seed: int | TensorView | None = None,
          offset: int | TensorView = 0) -> TensorView:
    """Standard normal numbers (Box-Muller over Philox). `seed` and `offset` as for `rand`."""
    return _random("randn", shape, dtype, seed, offset)


def uniform(minval: float | TensorView, maxval: float | TensorView, shape, dtype: object = dt.float32,
            rng_seed: int | TensorView | None = None, rng_offset: int | TensorView = 0) -> TensorView:
    """nvFuser's `uniform`: numbers in [minval, maxval), `minval + (maxval - minval) * rand(...)`;
    `rng_seed` and `rng_offset` are `rand`'s `seed` and `offset`. A draw that rounds up to maxval in
    `dtype` gives minval instead, as torch's CUDA `uniform_` does."""
    value = minval + (maxval - minval) * _random("uniform", shape, dtype, rng_seed, rng_offset, table_op="rand")
    # 1 + (1 - 2**-11) is 2.0 in float16 (a tie, to even): about one draw in 2000 of uniform(1, 2)
    return elementwise("where", elementwise("ge", value, maxval), minval, value)


def normal(mean: float | TensorView, std: float | TensorView, shape, dtype: object = dt.float32,
           rng_seed: int | TensorView | None = None, rng_offset: int | TensorView = 0) -> TensorView:
    """nvFuser's `normal`: `mean + std * randn(...)`; `rng_seed` and `rng_offset` as for `uniform`."""
    return mean + std * _random("normal", shape, dtype, rng_seed, rng_offset, table_op="randn")
