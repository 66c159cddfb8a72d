"""The LLVM rules of the op table: how each op becomes LLVM IR on the CPU.

Operands arrive in their compute type (float32 for half types: the lowering casts first), so
the float rules see float32 or float64 only. Semantics match the reference rules: NaN-propagating
maximum/minimum, Python-style floor division, integer division by zero giving 0, shifts defined
for every amount, saturating float-to-int casts. Unsigned integers share the signed rules' LLVM
types (i8 to i64); their rules pick the unsigned instructions (udiv, urem, lshr, icmp u*, uitofp,
fptoui.sat, zext).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from braze import dtypes as dt
from braze.codegen import llvm_math
from braze.codegen.llvm_types import F32, F64, I1, I16, I32, I64, register_type
from braze.dtypes import DType
from braze.ops.table import OPS

if TYPE_CHECKING:
    from braze.codegen.llvm import TaskEmitter

# An op rule: (emitter, operand values, operand dtypes, result dtype, attrs) -> value.
LLVMRule = Callable[["TaskEmitter", list, list[DType], DType, dict], ir.Value]
RULES: dict[str, LLVMRule] = {}


def callee(cg: TaskEmitter, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The function `name` of the kernel's module, declared on first use (intrinsics and libm alike)."""
    return llvm_math.declare(cg.module, name, ret, args)


def _suffix(ty: ir.Type) -> str:
    return {F32: "f32", F64: "f64"}[ty]


def intrinsic(name: str):
    """A float rule calling `llvm.<name>.f32|f64`."""
    return lambda cg, a, dts, out, attrs: cg.b.call(
        callee(cg, f"llvm.{name}.{_suffix(a[0].type)}", a[0].type, [x.type for x in a]), a)


def libm(name: str):
    """A float rule calling the C library: `namef` for float32, `name` for float64."""
    def rule(cg, a, dts, out, attrs):
        symbol = name + ("f" if a[0].type == F32 else "")
        return cg.b.call(callee(cg, symbol, a[0].type, [x.type for x in a]), a)
    return rule


def fconst(value: float, like: ir.Value) -> ir.Constant:
    return ir.Constant(like.type, value)


def by_kind(floating, integer, boolean=None):
    """Picks a rule by the operands' kind."""
    def rule(cg, a, dts, out, attrs):
        chosen = floating if dts[0].is_floating else boolean if dts[0].is_bool and boolean else integer
        return chosen(cg, a, dts, out, attrs)
    return rule


def _fb(method: str):
    """A builder method over two float operands, honouring the fast-math knob."""
    return lambda cg, a, dts, out, attrs: getattr(cg.b, method)(a[0], a[1], flags=cg.fast_flags)


def _ib(method: str):
    return lambda cg, a, dts, out, attrs: getattr(cg.b, method)(a[0], a[1])


# --- float32 exp, sin, cos, tanh, log, erf, erfc, ...: inline and branch-free (llvm_math), so loops vectorize ------
def inline_math(name: str, fallback):
    """A float rule: the inline float32 function `name` of llvm_math, or `fallback` for float64 and
    for an inline function's result (nesting them made LLVM's optimizer exponential)."""
    def rule(cg, a, dts, out, attrs):
        x = a[0]
        if x.type != F32 or llvm_math.nesting_depth(x, cg.__dict__.setdefault("math_depths", {})) >= 1:
            return fallback(cg, a, dts, out, attrs)
        return cg.b.call(llvm_math.inline_function(cg.module, name), [x])
    return rule


def _exp(cg: TaskEmitter, x: ir.Value) -> ir.Value:
    return UNARY_RULES["exp"](cg, [x], [], None, {})


def _sigmoid(cg: TaskEmitter, x: ir.Value) -> ir.Value:
    denominator = cg.b.fadd(fconst(1.0, x), _exp(cg, cg.b.fneg(x)))
    return cg.b.fdiv(fconst(1.0, x), denominator)


def _gelu(cg, a, dts, out, attrs):
    x, b = a[0], cg.b
    if attrs.get("approximate", "none") == "tanh":
        cube = b.fmul(b.fmul(x, x), x)
        inner = b.fmul(fconst(math.sqrt(2 / math.pi), x), b.fadd(x, b.fmul(fconst(0.044715, x), cube)))
        tanh = UNARY_RULES["tanh"](cg, [inner], dts, out, attrs)
        return b.fmul(b.fmul(fconst(0.5, x), x), b.fadd(fconst(1.0, x), tanh))
    # 1 + erf(x / sqrt 2) as erfc(-x / sqrt 2): no cancellation in the tail x < 0, where gelu is tiny
    erfc = UNARY_RULES["erfc"](cg, [b.fmul(x, fconst(-1 / math.sqrt(2), x))], dts, out, attrs)
    return b.fmul(b.fmul(fconst(0.5, x), x), erfc)


def icmp(cg: TaskEmitter, dtype: DType, predicate: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """An integer comparison, unsigned for unsigned dtypes (and bools)."""
    unsigned = dtype.is_unsigned or dtype.is_bool
    return (cg.b.icmp_unsigned if unsigned else cg.b.icmp_signed)(predicate, x, y)


def _sign(cg, a, dts, out, attrs):
    x, b = a[0], cg.b
    if dts[0].is_floating:
        positive = b.uitofp(b.fcmp_ordered(">", x, fconst(0.0, x)), x.type)
        negative = b.uitofp(b.fcmp_ordered("<", x, fconst(0.0, x)), x.type)
        return b.select(b.fcmp_unordered("uno", x, x), x, b.fsub(positive, negative))
    zero = ir.Constant(x.type, 0)
    return b.sub(b.zext(icmp(cg, dts[0], ">", x, zero), x.type), b.zext(icmp(cg, dts[0], "<", x, zero), x.type))


def truth(cg: TaskEmitter, x: ir.Value, dtype: DType) -> ir.Value:
    """x as an i1: nonzero (NaN counts as true, as in NumPy)."""
    if dtype.is_bool:
        return x
    if dtype.is_floating:
        return cg.b.fcmp_unordered("!=", x, fconst(0.0, x))
    return cg.b.icmp_signed("!=", x, ir.Constant(x.type, 0))


def _int_abs(cg, a, dts, out, attrs):
    x = a[0]
    if dts[0].is_unsigned:
        return x
    return cg.b.select(cg.b.icmp_signed("<", x, ir.Constant(x.type, 0)), cg.b.neg(x), x)


def _float_classify(test: str):
    def rule(cg, a, dts, out, attrs):
        x, b = a[0], cg.b
        if not dts[0].is_floating:
            return ir.Constant(I1, 1 if test == "isfinite" else 0)
        if test == "isnan":
            return b.fcmp_unordered("uno", x, x)
        magnitude = b.call(callee(cg, f"llvm.fabs.{_suffix(x.type)}", x.type, [x.type]), [x])
        is_inf = b.fcmp_ordered("==", magnitude, fconst(math.inf, x))
        if test == "isinf":
            return is_inf
        return b.and_(b.not_(is_inf), b.fcmp_ordered("ord", x, x))
    return rule


def _identity(cg, a, dts, out, attrs):
    return a[0]


def _rounding(name: str):
    return by_kind(intrinsic(name), _identity)


UNARY_RULES = {
    "set": _identity,
    "neg": by_kind(lambda cg, a, d, o, t: cg.b.fneg(a[0]), lambda cg, a, d, o, t: cg.b.neg(a[0])),
    "abs": by_kind(intrinsic("fabs"), _int_abs),
    "exp": inline_math("exp", intrinsic("exp")), "exp2": intrinsic("exp2"),
    "expm1": inline_math("expm1", libm("expm1")),
    "log": inline_math("log", intrinsic("log")),
    "log2": intrinsic("log2"), "log1p": inline_math("log1p", libm("log1p")), "sqrt": intrinsic("sqrt"),
    "rsqrt": lambda cg, a, d, o, t: cg.b.fdiv(fconst(1.0, a[0]), intrinsic("sqrt")(cg, a, d, o, t)),
    "reciprocal": lambda cg, a, d, o, t: cg.b.fdiv(fconst(1.0, a[0]), a[0]),
    "sin": inline_math("sin", intrinsic("sin")), "cos": inline_math("cos", intrinsic("cos")), "tan": libm("tan"),
    "tanh": inline_math("tanh", libm("tanh")),
    "sigmoid": lambda cg, a, d, o, t: _sigmoid(cg, a[0]),
    # x > 0 or NaN keeps x (unordered compare); everything else, -inf and -0.0 included, gives +0.
    "relu": by_kind(lambda cg, a, d, o, t: cg.b.select(cg.b.fcmp_unordered(">", a[0], fconst(0.0, a[0])), a[0],
                                                       fconst(0.0, a[0])),
                    lambda cg, a, d, o, t: cg.b.select(icmp(cg, d[0], ">", a[0], ir.Constant(a[0].type, 0)),
                                                       a[0], ir.Constant(a[0].type, 0))),
    "gelu": _gelu,
    "silu": lambda cg, a, d, o, t: cg.b.fmul(a[0], _sigmoid(cg, a[0])),
    "erf": inline_math("erf", libm("erf")),
    "erfc": inline_math("erfc", libm("erfc")),
    "floor": _rounding("floor"), "ceil": _rounding("ceil"), "round": _rounding("roundeven"),
    "trunc": _rounding("trunc"),
    "sign": _sign,
    "isnan": _float_classify("isnan"), "isinf": _float_classify("isinf"), "isfinite": _float_classify("isfinite"),
    "logical_not": lambda cg, a, d, o, t: cg.b.not_(truth(cg, a[0], d[0])),
    "bitwise_not": lambda cg, a, d, o, t: cg.b.not_(a[0]),
}


# --- integer division and remainder: Python semantics, and never a trap -----------------------
def _safe_divisor(cg: TaskEmitter, b_: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(divisor with 0 and -1 replaced by 1, is_zero, is_minus_one): sdiv traps on x/0 and MIN/-1."""
    zero, minus_one = ir.Constant(b_.type, 0), ir.Constant(b_.type, -1)
    is_zero, is_minus_one = cg.b.icmp_signed("==", b_, zero), cg.b.icmp_signed("==", b_, minus_one)
    safe = cg.b.select(cg.b.or_(is_zero, is_minus_one), ir.Constant(b_.type, 1), b_)
    return safe, is_zero, is_minus_one


def _unsigned_divide(method: str):
    """udiv or urem, where floor and truncation agree; by zero gives 0 (udiv traps)."""
    def rule(cg, a, dts, out, attrs):
        x, y, b = a[0], a[1], cg.b
        zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
        is_zero = b.icmp_unsigned("==", y, zero)
        return b.select(is_zero, zero, getattr(b, method)(x, b.select(is_zero, one, y)))
    return rule


def _int_floordiv(cg, a, dts, out, attrs):
    if dts[0].is_unsigned:
        return _unsigned_divide("udiv")(cg, a, dts, out, attrs)
    x, y, b = a[0], a[1], cg.b
    safe, is_zero, is_minus_one = _safe_divisor(cg, y)
    quotient, remainder = b.sdiv(x, safe), b.srem(x, safe)
    zero = ir.Constant(x.type, 0)
    signs_differ = b.icmp_signed("!=", b.icmp_signed("<", remainder, zero), b.icmp_signed("<", y, zero))
    adjust = b.and_(b.icmp_signed("!=", remainder, zero), signs_differ)
    floored = b.sub(quotient, b.zext(adjust, x.type))
    return b.select(is_zero, zero, b.select(is_minus_one, b.neg(x), floored))


def _int_remainder(cg, a, dts, out, attrs):
    if dts[0].is_unsigned:
        return _unsigned_divide("urem")(cg, a, dts, out, attrs)
    x, y, b = a[0], a[1], cg.b
    safe, is_zero, is_minus_one = _safe_divisor(cg, y)
    remainder = b.srem(x, safe)
    zero = ir.Constant(x.type, 0)
    signs_differ = b.icmp_signed("!=", b.icmp_signed("<", remainder, zero), b.icmp_signed("<", y, zero))
    adjust = b.and_(b.icmp_signed("!=", remainder, zero), signs_differ)
    return b.select(b.or_(is_zero, is_minus_one), zero, b.select(adjust, b.add(remainder, y), remainder))


def _float_divmod(cg: TaskEmitter, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """NumPy's floor division and remainder for floats (npy_divmod)."""
    b = cg.b
    zero = fconst(0.0, x)
    mod = b.frem(x, y)
    div = b.fdiv(b.fsub(x, mod), y)
    fix = b.and_(b.fcmp_ordered("!=", mod, zero),
                 b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
    copysign = callee(cg, f"llvm.copysign.{_suffix(x.type)}", x.type, [x.type, x.type])
    # A zero remainder takes the divisor's sign, as Python's and NumPy's (-1.0 % 1.0 is 0.0, not -0.0).
    mod = b.select(fix, b.fadd(mod, y), b.select(b.fcmp_ordered("==", mod, zero), b.call(copysign, [zero, y]), mod))
    div = b.select(fix, b.fsub(div, fconst(1.0, x)), div)
    floor = b.call(callee(cg, f"llvm.floor.{_suffix(x.type)}", x.type, [x.type]), [div])
    floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), fconst(0.5, x)), b.fadd(floor, fconst(1.0, x)), floor)
    # Division by zero: NumPy gives x / 0 (inf or nan) for the quotient and nan for the remainder.
    by_zero = b.fcmp_ordered("==", y, zero)
    quotient = b.select(by_zero, b.fdiv(x, y), b.select(b.fcmp_ordered("==", div, zero),
                                                        b.call(copysign, [zero, b.fdiv(x, y)]), floor))
    return quotient, mod


def _int_power(cg, a, dts, out, attrs):
    """Square-and-multiply in a helper function (wrap-around; negative exponents as the reference)."""
    ty, unsigned = a[0].type, dts[0].is_unsigned
    name = f"braze_ipow_{'u' if unsigned else 'i'}{ty.width}"
    fn = cg.module.globals.get(name)
    if fn is None:
        fn = ir.Function(cg.module, ir.FunctionType(ty, [ty, ty]), name=name)
        fn.linkage = "internal"
        _build_int_power(fn, ty, unsigned)
    return cg.b.call(fn, a)


def _build_int_power(fn: ir.Function, ty: ir.IntType, unsigned: bool) -> None:
    base, exponent = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    one, zero, minus_one = ir.Constant(ty, 1), ir.Constant(ty, 0), ir.Constant(ty, -1)
    odd_exponent = b.icmp_signed("!=", b.and_(exponent, one), zero)
    at_negative = b.select(b.icmp_signed("==", base, one), one,
                           b.select(b.icmp_signed("==", base, minus_one), b.select(odd_exponent, minus_one, one), zero))
    negative = ir.Constant(I1, 0) if unsigned else b.icmp_signed("<", exponent, zero)
    b.cbranch(negative, done, loop)
    b.position_at_end(loop)
    result, b_, e = b.phi(ty), b.phi(ty), b.phi(ty)
    odd = b.icmp_signed("!=", b.and_(e, one), zero)
    new_result = b.select(odd, b.mul(result, b_), result)
    new_e = b.lshr(e, one)
    result.add_incoming(one, entry), b_.add_incoming(base, entry), e.add_incoming(exponent, entry)
    result.add_incoming(new_result, loop), b_.add_incoming(b.mul(b_, b_), loop), e.add_incoming(new_e, loop)
    b.cbranch(b.icmp_signed("!=", new_e, zero), loop, done)
    b.position_at_end(done)
    final = b.phi(ty)
    final.add_incoming(new_result, loop)
    final.add_incoming(at_negative, entry)
    b.ret(final)


def _shift(direction: str):
    def rule(cg, a, dts, out, attrs):
        x, s, b = a[0], a[1], cg.b
        bits = ir.Constant(x.type, x.type.width)
        in_range = b.icmp_unsigned("<", s, bits)  # a negative amount, seen unsigned, is past the width
        safe = b.select(in_range, s, ir.Constant(x.type, 0))
        if direction == "left":
            return b.select(in_range, b.shl(x, safe), ir.Constant(x.type, 0))
        if dts[0].is_unsigned:  # logical: zeros come in
            return b.select(in_range, b.lshr(x, safe), ir.Constant(x.type, 0))
        sign_fill = b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), ir.Constant(x.type, -1),
                             ir.Constant(x.type, 0))
        return b.select(in_range, b.ashr(x, safe), sign_fill)
    return rule


def _compare(op: str):
    float_op = {"==": ("ordered", "=="), "!=": ("unordered", "!="), "<": ("ordered", "<"),
                "<=": ("ordered", "<="), ">": ("ordered", ">"), ">=": ("ordered", ">=")}[op]

    def rule(cg, a, dts, out, attrs):
        if dts[0].is_floating:
            method = cg.b.fcmp_ordered if float_op[0] == "ordered" else cg.b.fcmp_unordered
            return method(float_op[1], a[0], a[1])
        return icmp(cg, dts[0], op, a[0], a[1])
    return rule


def _int_extreme(predicate: str):
    return lambda cg, a, d, o, t: cg.b.select(icmp(cg, d[0], predicate, a[0], a[1]), a[0], a[1])


def _logical(method: str):
    return lambda cg, a, d, o, t: getattr(cg.b, method)(truth(cg, a[0], d[0]), truth(cg, a[1], d[1]))


BINARY_RULES = {
    "add": by_kind(_fb("fadd"), _ib("add"), _ib("or_")),
    "sub": by_kind(_fb("fsub"), _ib("sub")),
    "mul": by_kind(_fb("fmul"), _ib("mul"), _ib("and_")),
    "truediv": _fb("fdiv"),
    "floordiv": by_kind(lambda cg, a, d, o, t: _float_divmod(cg, a[0], a[1])[0], _int_floordiv),
    "remainder": by_kind(lambda cg, a, d, o, t: _float_divmod(cg, a[0], a[1])[1], _int_remainder),
    "pow": by_kind(intrinsic("pow"), _int_power),
    "maximum": by_kind(intrinsic("maximum"), _int_extreme(">"), _ib("or_")),
    "minimum": by_kind(intrinsic("minimum"), _int_extreme("<"), _ib("and_")),
    "atan2": libm("atan2"),
    "copysign": intrinsic("copysign"),
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "logical_and": _logical("and_"), "logical_or": _logical("or_"), "logical_xor": _logical("xor"),
    "bitwise_and": _ib("and_"), "bitwise_or": _ib("or_"), "bitwise_xor": _ib("xor"),
    "left_shift": _shift("left"), "right_shift": _shift("right"),
}


def freeze(cg: TaskEmitter, value: ir.Value) -> ir.Value:
    """`freeze value` (llvmlite's builder has no method for it): the same value, as no operand here is
    poison, but one InstCombine cannot fold the instruction that uses it into."""
    frozen = ir.Instruction(cg.b.block, value.type, "freeze", [value])
    cg.b._insert(frozen)
    return frozen


def _reassociating(method: str, intrinsic_name: str | None = None):
    """A reduction's combine: floats may be reassociated (and the sign of zero ignored), so LLVM can
    vectorize the loop; integers and bools combine as usual.

    The element of a max or min is frozen: InstCombine turns `maximum(acc, select(mask, x, -inf))`
    (a masked row max) into `select(mask, maximum(acc, x), acc)`, a conditional update that LLVM's
    loop vectorizer does not take for max and min, so the row loop would stay scalar."""
    def rule(cg, a, dts, out, attrs):
        if method in ("maximum", "minimum"):
            a = [a[0], freeze(cg, a[1])]
        if not dts[0].is_floating:
            return BINARY_RULES[{"fadd": "add", "fmul": "mul"}.get(method, method)](cg, a, dts, out, attrs)
        if intrinsic_name:
            return cg.b.call(callee(cg, f"llvm.{intrinsic_name}.{_suffix(a[0].type)}", a[0].type, [a[0].type] * 2), a,
                             fastmath=("nsz",))
        return getattr(cg.b, method)(a[0], a[1], flags=("reassoc", "nsz", *cg.fast_flags))
    return rule


REDUCTION_RULES = {
    "reduce_add": _reassociating("fadd"),
    "reduce_mul": _reassociating("fmul"),
    "reduce_maximum": _reassociating("maximum", "maximum"),
    "reduce_minimum": _reassociating("minimum", "minimum"),
}


def _lerp(cg, a, d, o, t):
    start, end, weight = a
    return cg.b.fadd(start, cg.b.fmul(weight, cg.b.fsub(end, start)))


def _clamp(cg, a, d, o, t):
    low = BINARY_RULES["maximum"](cg, [a[0], a[1]], d[:2], o, t)
    return BINARY_RULES["minimum"](cg, [low, a[2]], d[1:], o, t)


TERNARY_RULES = {
    "where": lambda cg, a, d, o, t: cg.b.select(truth(cg, a[0], d[0]), a[1], a[2]),
    "clamp": _clamp,
    "lerp": _lerp,
    "fma": by_kind(lambda cg, a, d, o, t: cg.b.fadd(cg.b.fmul(a[0], a[1]), a[2]),
                   lambda cg, a, d, o, t: cg.b.add(cg.b.mul(a[0], a[1]), a[2])),
}


# --- casts ----------------------------------------------------------------------------------------
def bf16_to_float(cg: TaskEmitter, bits: ir.Value) -> ir.Value:
    return cg.b.bitcast(cg.b.shl(cg.b.zext(bits, I32), ir.Constant(I32, 16)), F32)


def float_to_bf16(cg, a, dts, out, attrs) -> ir.Value:
    """float32 -> bfloat16 bits, rounding to nearest even; NaN stays a (quiet) NaN."""
    x, b = a[0], cg.b
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb)), ir.Constant(I32, 16))
    quiet_nan = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
    return b.trunc(b.select(b.fcmp_unordered("uno", x, x), quiet_nan, rounded), I16)


def _cast(cg, a, dts, out, attrs):
    x, source = a[0], dts[0]
    if source == out:
        return x
    if source.name == "bfloat16":
        return _cast(cg, [bf16_to_float(cg, x)], [dt.float32], out, attrs)
    if out.name == "bfloat16":
        as_float = _cast(cg, [x], [source], dt.float32, attrs) if source != dt.float32 else x
        return float_to_bf16(cg, [as_float], [dt.float32], out, attrs)
    return _CASTS[(source.category, out.category)](cg, x, source, out)


def _float_to_int(cg: TaskEmitter, x: ir.Value, source: DType, out: DType) -> ir.Value:
    """Saturating: NaN gives 0, and (to an unsigned type) a negative value 0."""
    target = register_type(out)
    suffix = {"float16": "f16", "float32": "f32", "float64": "f64"}[source.name]
    name = f"llvm.fpto{'u' if out.is_unsigned else 's'}i.sat.i{target.width}.{suffix}"
    return cg.b.call(callee(cg, name, target, [x.type]), [x])


def _float_to_float(cg: TaskEmitter, x: ir.Value, source: DType, out: DType) -> ir.Value:
    target = register_type(out)
    if out.itemsize > source.itemsize:
        return cg.b.fpext(x, target)
    if source.name == "float64" and out.name == "float16":
        return cg.b.fptrunc(_float64_to_float32_round_to_odd(cg, x), target)
    return cg.b.fptrunc(x, target)


def _float64_to_float32_round_to_odd(cg: TaskEmitter, x: ir.Value) -> ir.Value:
    """float64 -> float32 rounded to odd: truncated toward zero, lowest bit set when inexact.

    x86 has no float64 -> float16 instruction: LLVM emits a call to `__truncdfhf2`, which the JIT
    cannot resolve (the kernel jumps to address 0). Rounding to odd into a format at least two bits
    wider than the target, then to nearest even, rounds correctly once (float32 has 24 bits, float16
    11), where plain float32 rounding first would round twice (1 + 2**-11 + 2**-40 gives 1.0, not
    1 + 2**-10)."""
    b = cg.b
    nearest = b.fptrunc(x, F32)
    back = b.fpext(nearest, F64)
    fabs = callee(cg, "llvm.fabs.f64", F64, [F64])
    away_from_zero = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [x]))
    bits = b.bitcast(nearest, I32)
    toward_zero = b.select(away_from_zero, b.sub(bits, ir.Constant(I32, 1)), bits)
    inexact = b.fcmp_ordered("!=", back, x)  # NaN compares unordered: it passes through unchanged
    odd = b.select(inexact, b.or_(toward_zero, ir.Constant(I32, 1)), toward_zero)
    return b.bitcast(odd, F32)


def _int_to_int(cg: TaskEmitter, x: ir.Value, source: DType, out: DType) -> ir.Value:
    """Modulo 2^n, as C and NumPy: widening extends by the source's sign (int8 -1 is uint16 65535)."""
    target = register_type(out)
    if out.itemsize == source.itemsize:
        return x  # int32 <-> uint32: the same bits
    if out.itemsize < source.itemsize:
        return cg.b.trunc(x, target)
    return cg.b.zext(x, target) if source.is_unsigned else cg.b.sext(x, target)


def _int_to_float(cg: TaskEmitter, x: ir.Value, source: DType, out: DType) -> ir.Value:
    return (cg.b.uitofp if source.is_unsigned else cg.b.sitofp)(x, register_type(out))


_CASTS = {
    ("b", "i"): lambda cg, x, s, o: cg.b.zext(x, register_type(o)),
    ("b", "f"): lambda cg, x, s, o: cg.b.uitofp(x, register_type(o)),
    ("i", "b"): lambda cg, x, s, o: truth(cg, x, s),
    ("f", "b"): lambda cg, x, s, o: truth(cg, x, s),
    ("i", "i"): _int_to_int,
    ("i", "f"): lambda cg, x, s, o: _int_to_float(cg, x, s, o),
    ("f", "i"): _float_to_int,
    ("f", "f"): _float_to_float,
}


# --- Philox4x32-10 (braze.ops.philox), one word of one counter group ---------------------------
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def _mulhilo(b: ir.IRBuilder, m: int, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    product = b.mul(b.zext(x, I64), ir.Constant(I64, m))
    return b.trunc(b.lshr(product, ir.Constant(I64, 32)), I32), b.trunc(product, I32)


def _build_philox(fn: ir.Function) -> None:
    seed, offset, group, word = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lo = lambda v: b.trunc(v, I32)
    hi = lambda v: b.trunc(b.lshr(v, ir.Constant(I64, 32)), I32)
    c = [lo(group), hi(group), lo(offset), hi(offset)]
    k0, k1 = lo(seed), hi(seed)
    for round_index in range(10):
        hi0, lo0 = _mulhilo(b, PHILOX_M[0], c[0])
        hi1, lo1 = _mulhilo(b, PHILOX_M[1], c[2])
        c = [b.xor(b.xor(hi1, c[1]), k0), lo1, b.xor(b.xor(hi0, c[3]), k1), lo0]
        if round_index < 9:
            k0, k1 = b.add(k0, ir.Constant(I32, PHILOX_W[0])), b.add(k1, ir.Constant(I32, PHILOX_W[1]))
    chosen = c[3]
    for i in (2, 1, 0):
        chosen = b.select(b.icmp_unsigned("==", word, ir.Constant(I32, i)), c[i], chosen)
    b.ret(b.zext(chosen, I64))


def _philox(cg, a, dts, out, attrs):
    fn = cg.module.globals.get("braze_philox")
    if fn is None:
        fn = ir.Function(cg.module, ir.FunctionType(I64, [I64, I64, I64, I32]), name="braze_philox")
        fn.linkage = "internal"
        _build_philox(fn)
    seed, offset, group, word = (cg.to_i64(v, d) for v, d in zip(a, dts))
    return cg.b.call(fn, [seed, offset, group, cg.b.trunc(word, I32)])


RULES.update(UNARY_RULES)
RULES.update(BINARY_RULES)
RULES.update(TERNARY_RULES)
RULES.update(REDUCTION_RULES)
RULES.update({"cast": _cast, "__bf16_bits": float_to_bf16, "__philox": _philox})
for _name in (*UNARY_RULES, *BINARY_RULES, *TERNARY_RULES, "cast"):
    OPS[_name].backend_rules["llvm"] = RULES[_name]
