"""The ATen ops braze fuses, one rule each: how the op becomes braze ops, and when it cannot.

`RULES[op]` is a `Rule`. The partitioner (`support.py`) offers braze exactly the nodes whose op has
a rule that accepts them; the region builder (`region_builder.py`) calls `convert`. Every rule
computes in the dtype torch's type promotion gives and rounds to the dtype torch recorded for the
node, so a region gives the values eager PyTorch gives, op by op. Views, reductions and creation
ops are in `rules_shapes.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from braze import dtypes as dt
from braze import ops as bz_ops
from braze.frontend.torch.region_builder import RegionBuilder, bind, braze_dtype, meta
from braze.ir.tensor import TensorView
from braze.ops import torch_math

aten = torch.ops.aten
Convert = Callable[[RegionBuilder, fx.Node], object]
Accepts = Callable[[fx.Node], str | None]  # None when braze can take the node, else why not


@dataclass(frozen=True)
class Rule:
    convert: Convert
    accepts: Accepts | None = None


RULES: dict[object, Rule] = {}


def rule(*ops: object, accepts: Accepts | None = None) -> Callable[[Convert], Convert]:
    def register(convert: Convert) -> Convert:
        for op in ops:
            RULES[op] = Rule(convert, accepts)
        return convert

    return register


# --- dtypes -----------------------------------------------------------------------------------------
def finish(node: fx.Node, tv: TensorView) -> TensorView:
    """The op's result in the dtype torch recorded for the node."""
    value = meta(node)
    return torch_cast(tv, braze_dtype(value.dtype), value.device.type)


# The integer type eager PyTorch takes a float through on its way to a narrower integer type, per
# device type: the float is truncated to it, then wrapped to the narrow type's width. braze's own cast
# saturates instead. c10's TypeCast takes floats to uint8 through int64 on every device, as NumPy does
# (-1.0 gives 255, 256.0 gives 0); PyTorch's CPU kernels convert to int8 and int16 as C++ compilers do
# on x86 and Arm alike, through int32 (300.0 gives int8 44, 70000.0 int16 4464), where its CUDA kernels
# saturate (PTX's cvt clamps), as braze does. (A float beyond int32's range has no defined int8 value
# in C++: x86 and Arm give different ones, and braze gives Arm's.)
FLOAT_TO_INT_THROUGH: dict[str, dict[dt.DType, dt.DType]] = {
    "cpu": {dt.uint8: dt.int64, dt.int8: dt.int32, dt.int16: dt.int32},
    "cuda": {dt.uint8: dt.int64},
}


def torch_cast(tv: TensorView, dtype: dt.DType, device_type: str) -> TensorView:
    """`tv` cast to `dtype` as eager PyTorch casts on `device_type` (`FLOAT_TO_INT_THROUGH`)."""
    through = FLOAT_TO_INT_THROUGH.get(device_type, {}).get(dtype)
    if through is not None and tv.dtype.is_floating:
        tv = bz_ops.cast(tv, through)
    return bz_ops.cast(tv, dtype)


def _dtype_stand_in(arg: object) -> object:
    """What torch's type promotion needs of an operand: a tensor's dtype and whether it has
    dimensions, a number's kind."""
    value = meta(arg)
    if isinstance(value, torch.Tensor):
        return torch.empty((0,) if value.dim() else (), dtype=value.dtype)
    stand_ins = {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}
    return stand_ins.get(type(value), value)


def promoted_dtype(args: list[object]) -> torch.dtype:
    """torch's result dtype of an elementwise op over `args` (tensors, numbers and symbolic ones)."""
    stand_ins = [_dtype_stand_in(a) for a in args]
    return elementwise_dtypes(*stand_ins, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def promoted(b: RegionBuilder, args: list[object], node: fx.Node | None = None) -> list[object]:
    """The operands, tensors cast to their promoted dtype (numbers stay weak, as in torch). Of a `node`
    (an arithmetic, comparison or bitwise op): cast to float32 where its eager kernel reads a number
    operand in float32 (`_number_in_float32`), and a Python int wrapped into an integer dtype as its
    eager kernel reads it (`_int_as_eager_reads_it`)."""
    dtype = braze_dtype(promoted_dtype(args))
    if node is not None and dtype.is_floating and dtype.itemsize == 2 and _number_in_float32(node, args):
        dtype = dt.float32
    operands = [b.operand(a) for a in args]
    if node is not None and dtype.is_integer:
        operands = [_int_as_eager_reads_it(x, dtype) for x in operands]
    return [bz_ops.cast(x, dtype) if isinstance(x, TensorView) else x for x in operands]


def _int_as_eager_reads_it(value: object, dtype: dt.DType) -> object:
    """A Python int operand of an integer op converted to the op's dtype as eager PyTorch converts it,
    modulo 2^n: an int32 tensor plus 2**31 adds -2**31, a uint8 one plus -1 adds 255, and an int32
    tensor compared with 2**32 is compared with 0. braze's ops refuse an int out of the dtype's range.
    (A divisor that wraps to 0 never gets here: `integer_division_by_zero`.)"""
    return dt.wrap_int(value, dtype) if type(value) is int else value


# Ops whose second operand divides: eager PyTorch raises ZeroDivisionError for an integer divisor of 0.
DIVIDING = frozenset({"div", "floor_divide", "remainder", "fmod"})


def integer_division_by_zero(node: fx.Node) -> str | None:
    """Why braze leaves an integer op dividing by a Python int that is 0 in the op's dtype (`i // 0`, a
    uint8 tensor `% 256`) to PyTorch: eager raises ZeroDivisionError for it, and so does the compiled
    model then, where braze's integer division by 0 gives 0. (A tensor divisor's zeros are not known
    before the kernel runs: braze's kernels give 0 for them.)"""
    value, divisor = meta(node), node.args[1] if len(node.args) > 1 else None
    if type(divisor) is not int or node.target._schema.name.split("::")[-1] not in DIVIDING:
        return None
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype == torch.bool:
        return None  # a true division of integers gives floats: x / 0 is inf, as in eager
    if dt.wrap_int(divisor, braze_dtype(value.dtype)) != 0:
        return None
    return "an integer division by 0 (eager PyTorch raises ZeroDivisionError)"


# Eager PyTorch's kernels for a float16 or bfloat16 tensor and a Python number read the number in
# float32 (torch's "opmath" type) for some ops and round it to the tensor's dtype first for others, and
# its CPU and CUDA kernels differ in which. `x // 0.1` divides by float32(0.1) on both, so 1.0 // 0.1 is
# 9 (float16(0.1) would give 10); `x + 0.1` adds float16(0.1) on the CPU. Per device type, the ATen
# ops that read the number in float32 and compute in float32, with the operand positions where a
# number is read so (the CPU kernels look only at the second operand).
NUMBER_IN_FLOAT32: dict[str, dict[str, tuple[int, ...]]] = {
    "cpu": {"mul": (1,), "div": (1,), "floor_divide": (1,)},
    "cuda": {"mul": (0, 1), "div": (0, 1), "add": (0, 1), "sub": (0, 1), "remainder": (0, 1), "floor_divide": (1,)},
}


def _number_in_float32(node: fx.Node, args: list[object]) -> bool:
    value = meta(node)
    if not isinstance(value, torch.Tensor) or len(args) != 2:
        return False
    op = node.target._schema.name.removeprefix("aten::")
    positions = NUMBER_IN_FLOAT32.get(value.device.type, {}).get(op, ())
    is_tensor = [isinstance(meta(a), torch.Tensor) for a in args]
    return any(not is_tensor[p] and is_tensor[1 - p] for p in positions)


# --- pointwise ----------------------------------------------------------------------------------------
UNARY = {  # ATen op -> braze op
    "abs": "abs", "neg": "neg", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos",
    "tan": "tan", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "erf": "erf", "erfc": "erfc", "floor": "floor",
    "ceil": "ceil", "round": "round", "trunc": "trunc", "isnan": "isnan", "isinf": "isinf",
    "logical_not": "logical_not", "bitwise_not": "bitwise_not", "silu": "silu",
}

BINARY = {  # ATen op -> braze op; each with its .Tensor and .Scalar overloads where ATen has them
    "mul": "mul", "maximum": "maximum", "minimum": "minimum", "atan2": "atan2", "eq": "eq", "ne": "ne",
    "copysign": "copysign", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "logical_and": "logical_and",
    "logical_or": "logical_or",
    "logical_xor": "logical_xor", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "remainder": "remainder", "floor_divide": "floordiv",
}


def _overloads(name: str, *overloads: str) -> list[object]:
    packet = getattr(aten, name)
    return [getattr(packet, o) for o in overloads if o in packet.overloads()]


def _unary(braze_op: str) -> Convert:
    def convert(b: RegionBuilder, node: fx.Node) -> TensorView:
        return finish(node, bz_ops.elementwise(braze_op, b.tensor(node.args[0])))

    return convert


def _binary(braze_op: str) -> Convert:
    def convert(b: RegionBuilder, node: fx.Node) -> TensorView:
        return finish(node, bz_ops.elementwise(braze_op, *promoted(b, list(node.args[:2]), node)))

    return convert


for _name, _op in UNARY.items():
    rule(*_overloads(_name, "default"))(_unary(_op))
for _name, _op in BINARY.items():
    rule(*_overloads(_name, "Tensor", "Scalar", "default"),
         accepts=integer_division_by_zero if _name in DIVIDING else None)(_binary(_op))

# Shifts: `x << 2` is aten.__lshift__.Scalar, torch.bitwise_left_shift(x, 2) its .Tensor_Scalar. Past the
# bit width (or by a negative amount) torch and braze agree: left gives 0, right the sign.
SHIFTS = {"__lshift__": "left_shift", "bitwise_left_shift": "left_shift", "__rshift__": "right_shift",
          "bitwise_right_shift": "right_shift"}
for _name, _op in SHIFTS.items():
    rule(*_overloads(_name, "Tensor", "Scalar", "Tensor_Scalar", "Scalar_Tensor"))(_binary(_op))

# prims (some of PyTorch's decompositions, batch norm's among them, reach down to them): the same
# math without type promotion, so the same rules serve.
prims = torch.ops.prims
for _name, _op in UNARY.items():
    if hasattr(prims, _name):
        rule(getattr(prims, _name).default)(_unary(_op))
for _name, _op in {**BINARY, "add": "add", "sub": "sub"}.items():
    if hasattr(prims, _name) and _name not in ("remainder", "floor_divide"):
        rule(getattr(prims, _name).default)(_binary(_op))


# ATen ops that are compositions in braze (braze/ops/math_functions.py): the inverse trigonometric and
# hyperbolic functions, log10, hypot, the angle conversions, lgamma and erfinv.
MATH_FUNCTIONS = {"asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
                  "acosh": "acosh", "atanh": "atanh", "log10": "log10", "hypot": "hypot", "deg2rad": "radians",
                  "rad2deg": "degrees", "lgamma": "lgamma", "erfinv": "erfinv"}


def _math_function(name: str) -> Convert:
    def convert(b: RegionBuilder, node: fx.Node) -> TensorView:
        operands = [b.operand(a) for a in node.args[:2 if name == "hypot" else 1]]
        return finish(node, getattr(bz_ops, name)(*operands))

    return convert


for _name, _function in MATH_FUNCTIONS.items():
    rule(*_overloads(_name, "default"))(_math_function(_function))
    if hasattr(prims, _name):
        rule(getattr(prims, _name).default)(_math_function(_function))


@rule(*_overloads("signbit", "default"))
def _signbit(b: RegionBuilder, node: fx.Node) -> TensorView:
    """Whether the sign bit is set: -0.0 and -NaN too (braze/ops/torch_math.py)."""
    return finish(node, torch_math.signbit(b.tensor(node.args[0])))


@rule(*_overloads("fmax", "default"), *_overloads("fmin", "default"))
def _nan_ignoring_extreme(b: RegionBuilder, node: fx.Node) -> TensorView:
    """torch's fmax and fmin: the other operand where one is NaN (braze/ops/torch_math.py)."""
    extreme = torch_math.fmax if node.target.__name__.startswith("fmax") else torch_math.fmin
    return finish(node, extreme(*promoted(b, list(node.args[:2]), node)))


@rule(*_overloads("fmod", "Tensor", "Scalar"), accepts=integer_division_by_zero)
def _fmod(b: RegionBuilder, node: fx.Node) -> TensorView:
    """C's fmod: the remainder with the quotient rounded toward zero (the sign of the dividend)."""
    return finish(node, bz_ops.fmod(*promoted(b, list(node.args[:2]), node)))


@rule(*_overloads("sign", "default"), *_overloads("sgn", "default"), prims.sign.default)
def _sign(b: RegionBuilder, node: fx.Node) -> TensorView:
    """torch's sign of NaN is 0 ((x > 0) - (x < 0)); braze's `sign` keeps NumPy's NaN."""
    x = b.tensor(node.args[0])
    signed = bz_ops.elementwise("sign", x)
    if x.dtype.is_floating:
        signed = bz_ops.where(bz_ops.isnan(x), 0.0, signed)
    return finish(node, signed)


@rule(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def _add_sub(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x, y = promoted(b, [args["self"], args["other"]], node)
    if args["alpha"] is not None and args["alpha"] != 1:
        y = _times_alpha(y, b.operand(args["alpha"]), braze_dtype(meta(node).dtype))
    return finish(node, bz_ops.elementwise("add" if node.target._schema.name == "aten::add" else "sub", x, y))


def _times_alpha(other: object, alpha: object, dtype: dt.DType) -> object:
    """`other * alpha` of an add or sub. braze's ops take at least one tensor, so two numbers
    (`x.add_(0.5, alpha=lr)`) are multiplied here, an integer product wrapped into `dtype` as eager's
    integer kernel wraps it."""
    if isinstance(other, TensorView) or isinstance(alpha, TensorView):
        return bz_ops.mul(other, alpha)
    product = other * alpha
    return dt.wrap_int(product, dtype) if dtype.is_integer and isinstance(product, int) else product


def _known_mode_and_no_division_by_zero(node: fx.Node) -> str | None:
    mode = bind(node).get("rounding_mode")
    if mode not in (None, "trunc", "floor"):
        return f"rounding_mode={mode!r}"
    return integer_division_by_zero(node)


@rule(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, aten.true_divide.Tensor,
      torch.ops.prims.div.default,
      accepts=_known_mode_and_no_division_by_zero)
def _div(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x, y = promoted(b, [args.get("self", args.get("a")), args.get("other", args.get("b"))], node)
    is_int = not meta(node).dtype.is_floating_point and meta(node).dtype != torch.bool
    # prims.div divides floats truly and truncates integers, as C does
    mode = ("trunc" if is_int else None) if node.target is torch.ops.prims.div.default else args.get("rounding_mode")
    if mode is None:
        return finish(node, bz_ops.truediv(x, y))
    if mode == "floor":
        return finish(node, bz_ops.floordiv(x, y))  # for floats Python's rule, as torch's: 1.0 // 0.1 == 9
    if not is_int:
        return finish(node, bz_ops.trunc(bz_ops.truediv(x, y)))
    # Integer division toward zero: floor division, one up where the signs differ and it is inexact.
    q, r = bz_ops.floordiv(x, y), bz_ops.remainder(x, y)
    return finish(node, bz_ops.where(bz_ops.logical_and(r != 0, (x < 0) != (y < 0)), q + 1, q))


# The powers of a float tensor by a number that eager PyTorch computes without `pow`, per device type
# and dtype (`_OWN_OPS_POWERS` where neither is listed). Where they are not its own operations
# they round as eager's do: its CPU kernels multiply out x ** 3 and x ** -2 (each product rounded to the
# tensor's dtype), and take x ** -0.5 as rsqrt (-0.0 gives -inf and -inf NaN, where pow gives inf and
# 0), for float32, float64 and bfloat16; float16 has only its exact ones there (pow of -inf to 0.5 is
# inf, where sqrt gives NaN). The others compute in float32 and round once, as braze's pow.
_EXACT_POWERS: dict[float, Callable[[TensorView], TensorView]] = {
    2: lambda x: x * x, 1: lambda x: x, -1: bz_ops.reciprocal}
_OWN_OPS_POWERS = {**_EXACT_POWERS, 0.5: bz_ops.sqrt}
_CPU_POWERS = {**_OWN_OPS_POWERS, -0.5: bz_ops.rsqrt, 3: lambda x: x * x * x, -2: lambda x: bz_ops.reciprocal(x * x)}
POWERS_WITHOUT_POW: dict[str, dict[str, dict[float, Callable[[TensorView], TensorView]]]] = {
    "cpu": {"float32": _CPU_POWERS, "float64": _CPU_POWERS, "bfloat16": _CPU_POWERS, "float16": _EXACT_POWERS},
}


@rule(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(b: RegionBuilder, node: fx.Node) -> TensorView:
    base, exponent = promoted(b, list(node.args[:2]))
    if isinstance(base, TensorView) and base.dtype.is_floating and not isinstance(exponent, TensorView):
        special = POWERS_WITHOUT_POW.get(meta(node).device.type, {}).get(base.dtype.name, _OWN_OPS_POWERS)
        if exponent in special:
            return finish(node, special[exponent](base))
    return finish(node, bz_ops.pow(base, exponent))


@rule(aten.where.self, torch.ops.prims.where.default)
def _where(b: RegionBuilder, node: fx.Node) -> TensorView:
    condition = b.tensor(node.args[0])
    return finish(node, bz_ops.where(condition, *promoted(b, list(node.args[1:3]))))


@rule(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
      aten.clamp_min.Tensor, aten.clamp_max.Tensor)
def _clamp(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x, low_v, high_v = _promote_present(b, [args["self"], args.get("min"), args.get("max")])
    if low_v is not None:
        x = bz_ops.maximum(x, low_v)
    if high_v is not None:
        x = bz_ops.minimum(x, high_v)
    return finish(node, x)


def _promote_present(b: RegionBuilder, args: list[object]) -> list[object]:
    present = [a for a in args if a is not None]
    values = iter(promoted(b, present))
    return [next(values) if a is not None else None for a in args]


@rule(torch.ops.prims.fma.default)
def _fma(b: RegionBuilder, node: fx.Node) -> TensorView:
    return finish(node, bz_ops.fma(*promoted(b, list(node.args[:3]))))


@rule(aten.gelu.default)
def _gelu(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    return finish(node, bz_ops.gelu(b.tensor(args["self"]), approximate=args["approximate"]))


def _cast_keeps_device(node: fx.Node) -> str | None:
    args = bind(node)
    if args.get("device") is not None and not _same_device(torch.device(args["device"]), meta(args["self"]).device):
        return f"a copy to another device ({args['device']})"
    return None


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Equal devices, a device with no index (as a graph may spell it) taken as its type's current one."""
    return _indexed(a) == _indexed(b)


def _indexed(device: torch.device) -> torch.device:
    if device.index is None and device.type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return device


@rule(aten._to_copy.default, torch.ops.prims.convert_element_type.default, accepts=_cast_keeps_device)
def _cast(b: RegionBuilder, node: fx.Node) -> TensorView:
    return finish(node, b.tensor(node.args[0]))


@rule(aten.copy.default)
def _copy(b: RegionBuilder, node: fx.Node) -> TensorView:
    target, source = b.tensor(node.args[0]), b.tensor(node.args[1])
    source = torch_cast(source, target.dtype, meta(node).device.type)
    rank = len(meta(node).shape)
    source = bz_ops.broadcast(source, [True] * (rank - source.ndim) + [False] * source.ndim)
    return finish(node, bz_ops.expand(source, b.shape_of(node)))


@rule(aten.alias.default, aten.clone.default, aten.lift_fresh_copy.default, aten.detach.default)
def _same(b: RegionBuilder, node: fx.Node) -> TensorView:
    return finish(node, b.tensor(node.args[0]))

