"""Elementwise ops: unary, binary and ternary entries of the op table, and `cast`.

Each table row names the dtype kinds an op accepts, how its result type follows from the
promoted operand type, and the NumPy function of its reference rule. The reference computes in
`compute_dtype` (float32 for the half types) and rounds once to the result type, as a fused
kernel does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import FusionDefinitionError
from braze.ir.fusion import FusionGraph, NarrowedNumber, active_fusion, defining_any
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView
from braze.ops.broadcast import align_ranks, broadcast_domains, broadcast_one_element_slices
from braze.ops.table import OpDef, RefContext, apply, register, reject_kinds

Operand = TensorView | Scalar | bool | int | float  # a Scalar: an extent used as a value

# Result-type rules: promoted operand dtype -> result dtype.
SAME: Callable[[DType], DType] = lambda d: d
TO_FLOAT: Callable[[DType], DType] = lambda d: d if d.is_floating else dt.float32
TO_BOOL: Callable[[DType], DType] = lambda d: dt.bool_
TO_INT64: Callable[[DType], DType] = lambda d: dt.int64

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise erf (NumPy has none); exact to the double rounding of `math.erf`."""
    return np.asarray(_erf(x), dtype=x.dtype)  # asarray: on a 0-d array frompyfunc gives a Python float


def erfc(x: np.ndarray) -> np.ndarray:
    """Elementwise 1 - erf(x) without the cancellation: accurate where erf(x) is near 1 (`math.erfc`)."""
    return np.asarray(_erfc(x), dtype=x.dtype)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        inner = np.sqrt(x.dtype.type(2 / math.pi)) * (x + x.dtype.type(0.044715) * x * x * x)
        return x.dtype.type(0.5) * x * (1 + np.tanh(inner))
    # 1 + erf(x / sqrt 2) as erfc(-x / sqrt 2): the same for x >= 0, and no cancellation in the tail x < 0
    return x.dtype.type(0.5) * x * erfc(-x / x.dtype.type(math.sqrt(2)))


def int_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Integer power with wrap-around; a negative exponent gives 0 except for bases 1 and -1."""
    base, exponent = np.broadcast_arrays(base, exponent)
    result = np.ones_like(base)
    b, e = base.copy(), np.maximum(exponent, 0)
    while np.any(e > 0):  # square-and-multiply: at most 64 rounds
        result = np.where(e & 1 == 1, result * b, result)
        b, e = b * b, e >> 1
    negative = exponent < 0
    odd = (exponent & 1) == 1
    at_negative = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0)).astype(base.dtype)
    return np.where(negative, at_negative, result)


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return int_power(a, b) if a.dtype.kind in "iu" else np.power(a, b)


def shift(direction: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Shifts that are defined for every amount: past the bit width, left gives 0, right gives the sign."""

    def shifted(a: np.ndarray, s: np.ndarray) -> np.ndarray:
        bits = a.dtype.itemsize * 8
        in_range = (s >= 0) & (s < bits)
        safe = np.where(in_range, s, 0).astype(a.dtype)
        zero = np.zeros_like(a)  # a Python 0 or -1 would promote uint64 to float64
        if direction == "left":
            return np.where(in_range, np.left_shift(a, safe), zero)
        return np.where(in_range, np.right_shift(a, safe), np.where(a < zero, ~zero, zero))

    return shifted


def _bool_is(fn: Callable) -> Callable:
    """Runs `fn` on bool arrays as on their truth values (logical ops take any dtype)."""
    return lambda *xs: fn(*[x.astype(bool) for x in xs])


# name: (accepted kinds, result rule, reference function)
UNARY: dict[str, tuple[str, Callable, Callable]] = {
    "set": ("bif", SAME, np.copy),  # a copy: an output of its own layout, or one that is not an input
    "neg": ("if", SAME, np.negative),
    "abs": ("if", SAME, np.abs),
    "exp": ("bif", TO_FLOAT, np.exp),
    "exp2": ("bif", TO_FLOAT, np.exp2),
    "expm1": ("bif", TO_FLOAT, np.expm1),
    "log": ("bif", TO_FLOAT, np.log),
    "log2": ("bif", TO_FLOAT, np.log2),
    "log1p": ("bif", TO_FLOAT, np.log1p),
    "sqrt": ("bif", TO_FLOAT, np.sqrt),
    "rsqrt": ("bif", TO_FLOAT, lambda x: 1 / np.sqrt(x)),
    "reciprocal": ("bif", TO_FLOAT, lambda x: 1 / x),
    "sin": ("bif", TO_FLOAT, np.sin),
    "cos": ("bif", TO_FLOAT, np.cos),
    "tan": ("bif", TO_FLOAT, np.tan),
    "tanh": ("bif", TO_FLOAT, np.tanh),
    "sigmoid": ("bif", TO_FLOAT, sigmoid),
    "relu": ("if", SAME, lambda x: np.where((x > 0) | (x != x), x, 0)),  # keeps NaN; -inf gives 0 (torch)
    "gelu": ("bif", TO_FLOAT, gelu),
    "silu": ("bif", TO_FLOAT, lambda x: x * sigmoid(x)),
    "erf": ("bif", TO_FLOAT, erf),
    "erfc": ("bif", TO_FLOAT, erfc),
    "floor": ("if", SAME, lambda x: np.floor(x) if x.dtype.kind == "f" else x),
    "ceil": ("if", SAME, lambda x: np.ceil(x) if x.dtype.kind == "f" else x),
    "round": ("if", SAME, lambda x: np.round(x) if x.dtype.kind == "f" else x),  # halves to even
    "trunc": ("if", SAME, lambda x: np.trunc(x) if x.dtype.kind == "f" else x),
    "sign": ("if", SAME, np.sign),
    "isnan": ("bif", TO_BOOL, np.isnan),
    "isinf": ("bif", TO_BOOL, np.isinf),
    "isfinite": ("bif", TO_BOOL, np.isfinite),
    "logical_not": ("bif", TO_BOOL, _bool_is(np.logical_not)),
    "bitwise_not": ("bi", SAME, np.invert),
}

BINARY: dict[str, tuple[str, Callable, Callable]] = {
    "add": ("bif", SAME, np.add),
    "sub": ("if", SAME, np.subtract),
    "mul": ("bif", SAME, np.multiply),
    "truediv": ("bif", TO_FLOAT, np.true_divide),
    "floordiv": ("if", SAME, np.floor_divide),  # integer division by zero gives 0
    "remainder": ("if", SAME, np.remainder),  # the sign of the divisor, as in Python
    "pow": ("if", SAME, power),
    "maximum": ("bif", SAME, np.maximum),  # NaN-propagating
    "minimum": ("bif", SAME, np.minimum),
    "atan2": ("bif", TO_FLOAT, np.arctan2),
    "copysign": ("bif", TO_FLOAT, np.copysign),  # the magnitude of a with the sign of b, zeros and NaN too
    "eq": ("bif", TO_BOOL, np.equal),
    "ne": ("bif", TO_BOOL, np.not_equal),
    "lt": ("bif", TO_BOOL, np.less),
    "le": ("bif", TO_BOOL, np.less_equal),
    "gt": ("bif", TO_BOOL, np.greater),
    "ge": ("bif", TO_BOOL, np.greater_equal),
    "logical_and": ("bif", TO_BOOL, _bool_is(np.logical_and)),
    "logical_or": ("bif", TO_BOOL, _bool_is(np.logical_or)),
    "logical_xor": ("bif", TO_BOOL, _bool_is(np.logical_xor)),
    "bitwise_and": ("bi", SAME, np.bitwise_and),
    "bitwise_or": ("bi", SAME, np.bitwise_or),
    "bitwise_xor": ("bi", SAME, np.bitwise_xor),
    "left_shift": ("i", SAME, shift("left")),
    "right_shift": ("i", SAME, shift("right")),
}

TERNARY: dict[str, tuple[str, Callable, Callable]] = {
    "where": ("bif", SAME, lambda c, a, b: np.where(c.astype(bool), a, b)),
    "clamp": ("bif", SAME, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)),
    "lerp": ("bif", TO_FLOAT, lambda a, b, w: a + w * (b - a)),
    "fma": ("if", SAME, lambda a, b, c: a * b + c),
}

ARITY = {**dict.fromkeys(UNARY, 1), **dict.fromkeys(BINARY, 2), **dict.fromkeys(TERNARY, 3)}


def operand_type(tensors: Sequence[TensorView]) -> DType:
    """The promoted type of an op's value operands (weak scalars never widen it)."""
    return dt.result_type(*[t.promotion for t in tensors])


def compute_type(promoted: DType, result: DType) -> DType:
    """The type an op computes in: a float result's, even from integer or bool operands (NumPy
    would compute exp(int8) in float16 and refuses `-x` on bools)."""
    return dt.compute_dtype(result if result.is_floating else promoted)


def _elementwise_entry(name: str, kinds: str, result: Callable, fn: Callable, value_operands: slice) -> OpDef:
    def dtype_rule(inputs: Sequence[TensorView], attrs: dict) -> DType:
        values = inputs[value_operands]
        for tv in values:
            reject_kinds(name, tv, kinds if not tv.weak else "bif")
        promoted = operand_type(values)
        reject_kinds(name, _Typed(promoted, f"the promoted type {promoted.name}"), kinds)
        for position, tv in enumerate(values, start=value_operands.start or 0):
            if tv.scalar == "literal":
                check_literal_fits(name, tv.value, promoted, position)
            elif tv.python_scalar and promoted.is_integer and promoted != dt.int64:
                # A runtime number (of @bz.jit) is known only at the call, which checks it fits
                tv.fusion.narrowed_numbers.append(NarrowedNumber(name, tv, promoted))
        return numpy_float_result(name, values, promoted, _python_precision(inputs, result(promoted)))

    def reference(ctx: RefContext, args: Sequence[np.ndarray], out: TensorView, attrs: dict) -> np.ndarray:
        promoted = operand_type(out.definition.inputs[value_operands])
        compute = compute_type(promoted, out.dtype).numpy
        with np.errstate(all="ignore"):  # casting a weak 1e300 to float32 overflows to inf, quietly
            # A Python literal takes the promoted type first: float16 x == 0.1 compares with
            # float16(0.1), as torch does.
            args = [a.astype(promoted.numpy) if tv.weak == 2 else a
                    for a, tv in zip(args, out.definition.inputs)]
            cast = [a if i < value_operands.start else a.astype(compute) for i, a in enumerate(args)]
            return np.asarray(fn(*cast, **attrs)).astype(out.dtype.numpy, copy=False)

    shape_rule = lambda inputs, attrs: broadcast_domains(name, inputs)
    return OpDef(name, "elementwise", shape_rule, dtype_rule, reference)


def _python_precision(inputs: Sequence[TensorView], result: DType) -> DType:
    """Arithmetic on Python numbers and extents alone is Python's, whose floats are doubles: `1.0 / x.shape[0]`
    and `T / x.shape[1]` are float64 (they were float32, the dtype a weak float takes alone, which rounded a
    float64 program's step to 7 digits). The result stays as weak as a Python number, so a float32 tensor
    times it stays float32."""
    if result.is_floating and inputs and all(tv.weak == 2 or tv.scalar == "extent" for tv in inputs):
        return dt.float64
    return result


def numpy_arrays_of_numbers(fusion: object, numbers: Sequence[object]) -> list[object]:
    """Python numbers that are all of an op's values (`np.where(c, 0.1, 0.3)`), in a trace of NumPy arrays,
    as the 0-d arrays NumPy makes of them, of their common dtype (float64 for floats: as weak literals
    alone they were float32, and 0.1 was rounded to 7 digits); anything else as it is."""
    python = (bool, int, float)
    if not getattr(fusion, "numpy_promotion", False) or not all(isinstance(v, python) for v in numbers):
        return list(numbers)
    dtype = dt.from_numpy(np.result_type(*numbers))
    return [TensorView(fusion, [], dtype, scalar="const", value=v) for v in numbers]


def float_of_integers(fusion: object, promoted: DType) -> DType:
    """The float a float function of integers or bools gives: NumPy's smallest exact one in a trace of
    NumPy arrays (`numpy_float_result`), torch's float32 elsewhere."""
    return dt.numpy_float_of(promoted) if getattr(fusion, "numpy_promotion", False) else dt.float32


def numpy_float_result(name: str, values: Sequence[TensorView], promoted: DType, result: DType) -> DType:
    """The float type of an op on integer tensors in a trace of NumPy arrays, which is NumPy's, not
    torch's float32: true division gives float64, a float ufunc the smallest float that holds the
    integers (np.sqrt of uint8 is float16, of int32 float64), a Python float raises integers to float64
    (NEP 50: int64 `k * 0.5`), an integer array beside a float one gives NumPy's promotion of the two
    (int32 or int64 with float32 is float64). float32 there lost the low digits of every count and index."""
    if not (result.is_floating and values and getattr(values[0].fusion, "numpy_promotion", False)):
        return result
    strong = [tv.dtype for tv in values if not tv.weak]
    if not strong:
        return result
    if any(d.is_floating for d in strong) and any(not d.is_floating for d in strong):
        # an integer array beside a float one: NumPy's promotion (int64 with float32 is float64)
        return dt.from_numpy(np.result_type(*[d.numpy for d in strong])) if dt.bfloat16 not in strong else result
    integral = strong[0]
    for d in strong[1:]:
        integral = dt.promote_types(integral, d)
    if integral.is_floating:
        return result
    if not promoted.is_floating:  # the op itself makes the float
        return dt.float64 if name == "truediv" else float_of_integers(values[0].fusion, promoted)
    raising = [dt.float64 if tv.weak == 2 else tv.dtype for tv in values if tv.weak and tv.dtype.is_floating]
    numpy_types = [d.numpy for d in (integral, *raising) if d != dt.bfloat16]
    return dt.from_numpy(np.result_type(*numpy_types)) if len(numpy_types) > 1 else result


class _Typed:
    """Stands in for a tensor in `reject_kinds` when checking a promoted type."""

    def __init__(self, dtype: DType, text: str) -> None:
        self.dtype, self.text = dtype, text

    def describe(self) -> str:
        return self.text


for _table in (UNARY, BINARY):
    for _name, (_kinds, _result, _fn) in _table.items():
        register(_elementwise_entry(_name, _kinds, _result, _fn, slice(0, None)))
for _name, (_kinds, _result, _fn) in TERNARY.items():
    # `where`'s condition is not a value operand: it neither promotes nor gets cast.
    register(_elementwise_entry(_name, _kinds, _result, _fn, slice(1 if _name == "where" else 0, None)))


# --- building elementwise ops from tensors and Python scalars -------------------------------------
def owning_fusion(op: str, operands: Sequence[Operand]) -> FusionGraph:
    tensors = [x for x in operands if isinstance(x, TensorView)]
    if tensors:
        fusion = tensors[0].fusion
        if all(x.fusion is fusion for x in tensors):  # else `apply` names the foreign tensor
            fusion.check_definable(op)  # before a Python scalar operand becomes a tensor of it
        return fusion
    if any(isinstance(x, Scalar) for x in operands):  # reciprocal(x.shape[1]): the fusion being defined
        return active_fusion(op)
    arrays = [x for x in operands if not isinstance(x, (bool, int, float, np.generic))]
    if arrays:
        raise not_a_tensor(op, arrays[0])
    raise FusionDefinitionError(f"{op}: expected at least one TensorView operand, got "
                                f"{', '.join(type(x).__name__ for x in operands)}")


def not_a_tensor(op: str, x: object) -> FusionDefinitionError:
    """The error for an argument `x` of `op` that should be a TensorView."""
    return FusionDefinitionError(f"{op}: expected a TensorView, got {type(x).__name__}{_operand_hint(x)}")


def as_operand(op: str, fusion: FusionGraph, x: Operand, position: int) -> TensorView:
    """Wraps a Python scalar as a weak constant of the fusion; passes tensors through."""
    if isinstance(x, TensorView):
        return x
    if isinstance(x, np.generic) and x.dtype == dt.bfloat16.numpy:  # ml_dtypes' scalars are no np.floating
        x = float(x)
    if isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
        value = x.item() if isinstance(x, np.generic) else x
        if isinstance(value, int) and not -(2**63) <= value < 2**64:  # no braze dtype holds it
            raise FusionDefinitionError(f"{op}: operand {position}: expected an int in [-2**63, 2**64), got {value}")
        return TensorView(fusion, [], dt.python_scalar_dtype(value), scalar="literal", value=value)
    if isinstance(x, Scalar):
        return extent_operand(op, fusion, x, position)
    capture = getattr(fusion, "capture_array", None)
    if capture is not None and _is_array(x):  # a @bz.jit trace takes arrays made outside it in as inputs
        return capture(x)
    raise FusionDefinitionError(
        f"{op}: operand {position}: expected a TensorView or a Python scalar, got {type(x).__name__}{_operand_hint(x)}"
    )


def _is_array(x: object) -> bool:
    return any(hasattr(x, protocol) for protocol in ("__array_interface__", "__cuda_array_interface__", "__dlpack__"))


def _operand_hint(x: object) -> str:
    """What users meant by the operands they most often give by mistake."""
    if hasattr(x, "__array_interface__") or hasattr(x, "__dlpack__"):
        shape = f" of shape {tuple(x.shape)}" if hasattr(x, "shape") else ""
        if not defining_any():  # bz.ops.gelu(array), as NumPy, torch or JAX would compute it at once
            return (f"{shape}: bz.ops functions build a fusion, they do not compute on arrays: call them in a "
                    "@bz.jit function, or on the tensors that a `with bz.Fusion() as f:` block defines")
        return f"{shape}: a fusion does not capture arrays made outside it as constants; pass it as an argument"
    owner = getattr(x, "__self__", None)
    if isinstance(owner, TensorView):  # x.size, NumPy's attribute, is torch's method here
        return (f" (a method of {owner.describe()}, not called): torch's x.size() gives the extents and "
                "x.numel() the element count")
    return ""


def extent_operand(op: str, fusion: FusionGraph, extent: Scalar, position: int) -> TensorView:
    """An extent (`x.shape[1]`, or an expression of extents) used as a value: a weak int64 scalar of
    the fusion, evaluated from the input extents where it is used. Weak like a typed scalar, so
    `x.sum(1) / x.shape[1]` stays float32 and an int32 tensor plus an extent stays int32."""
    if extent.is_const:
        return as_operand(op, fusion, extent.value, position)
    known = {name for tv in fusion.inputs for d in tv.logical for name in d.extent.free_symbols()}
    unknown = sorted(extent.free_symbols() - known)
    if unknown:
        raise FusionDefinitionError(
            f"{op}: operand {position}: expected an extent of this fusion's tensors, got {extent} "
            f"(not an extent of its inputs: {', '.join(unknown)})")
    return TensorView(fusion, [], dt.int64, scalar="extent", value=extent)


def check_literal_fits(op: str, value: object, dtype: DType, position: int) -> None:
    """Raises unless a Python int operand fits the integer type the op computes in, as NumPy 2 asks
    (`uint8_array + 300` and `uint8_array - 1` are errors, not silent wrap-around)."""
    if not dtype.is_integer or isinstance(value, bool) or not isinstance(value, int):
        return
    lo, hi = dt.int_bounds(dtype)
    if not lo <= value <= hi:
        raise FusionDefinitionError(
            f"{op}: operand {position}: expected a Python int in [{lo}, {hi}] (the range of {dtype.name}), "
            f"got {value}; cast the tensor to a wider dtype first, or give the value as a tensor")


def check_fill(op: str, value: object, dtype: DType) -> None:
    """Raises unless `value` can fill a tensor of `dtype`: NaN and infinities have no integer value,
    and an int must be in the dtype's range (`full((3,), -1, bz.uint8)` is an error, as in NumPy 2)."""
    if dtype.is_integer and isinstance(value, float) and not math.isfinite(value):
        raise FusionDefinitionError(f"{op}: value: expected a finite number for {dtype.name}, got {value!r}")
    lo, hi = dt.int_bounds(dtype)
    if dtype.is_integer and isinstance(value, int) and not lo <= value <= hi:
        raise FusionDefinitionError(f"{op}: value: expected an int in [{lo}, {hi}] for {dtype.name}, got {value}")


# The keyword attributes an elementwise op takes; any other keyword is an error, never ignored
# (torch's `x.add(y, alpha=2)` and `x.div(y, rounding_mode="floor")` have methods of their own).
ATTRIBUTES: dict[str, frozenset[str]] = {"gelu": frozenset({"approximate"})}


def elementwise(op: str, *operands: Operand, **attrs) -> TensorView:
    """Applies elementwise op `op`, broadcasting its operands with NumPy's rules."""
    unknown = sorted(set(attrs) - ATTRIBUTES.get(op, frozenset()))
    if unknown:
        expected = ", ".join(sorted(ATTRIBUTES.get(op, ()))) or "none"
        raise FusionDefinitionError(f"{op}: unexpected keyword argument {', '.join(map(repr, unknown))} "
                                    f"(keywords it takes: {expected})")
    arity = ARITY.get(op)
    if arity is not None and len(operands) != arity:
        raise FusionDefinitionError(f"{op}: expected {arity} operand{'s' if arity > 1 else ''}, got {len(operands)}")
    fusion = owning_fusion(op, operands)
    tensors = align_ranks([as_operand(op, fusion, x, i) for i, x in enumerate(operands)])
    tensors = broadcast_one_element_slices(op, tensors)
    return apply(op, tensors, fusion, **attrs)


def cast(x: TensorView, dtype: object) -> TensorView:
    """Converts x to `dtype`: integers to integers wrap modulo 2^n (int8 -1 is uint8 255), floats to
    integers truncate toward zero and saturate (NaN gives 0, a negative float to an unsigned type 0,
    where C and NumPy leave both undefined), anything to bool is `!= 0`."""
    target = dt.as_dtype(dtype)
    if not isinstance(x, TensorView):
        raise not_a_tensor("cast", x)
    return x if x.dtype == target else apply("cast", [x], dtype=target)


def _cast_reference(ctx: RefContext, args, out: TensorView, attrs: dict) -> np.ndarray:
    return dt.cast_values(args[0], out.dtype)


register(OpDef("cast", "cast", lambda ins, a: [d.clone() for d in ins[0].visible], lambda ins, a: a["dtype"],
               _cast_reference))
