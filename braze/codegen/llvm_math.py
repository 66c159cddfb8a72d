"""Inline float32 math for the CPU: exp, expm1, sin, cos, tanh, log, log1p, erf and erfc as branch-free LLVM IR.

A call to the C library stays scalar, so a loop that contains one does not vectorize; these
functions are internal `alwaysinline` functions of the kernel's module, built only from
arithmetic, bit operations, selects and one table load, which LLVM's loop vectorizer turns into
vector code. Each is within a few ulps of the correctly rounded result over the whole float32
range and gives NaN, the infinities and signed zeros as the C library does. float64 keeps calling
the C library.

One inline function of another (exp(exp(x)), sin(tanh(x))) calls the C library instead:
nesting them made LLVM's optimizer take time exponential in the depth (`nesting_depth`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

F32, F64 = ir.FloatType(), ir.DoubleType()
I32, I64 = ir.IntType(32), ir.IntType(64)
PREFIX = "braze_math_"


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The function `name` of the module, declared on first use (intrinsics and libm alike)."""
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, ir.FunctionType(ret, args), name=name)


class Math:
    """An IRBuilder with float32 helpers, inside one inline math function."""

    def __init__(self, fn: ir.Function) -> None:
        self.module = fn.module
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def call(self, intrinsic: str, *args: ir.Value) -> ir.Value:
        return self.b.call(declare(self.module, intrinsic, args[0].type, [a.type for a in args]), list(args))

    def inline(self, name: str, x: ir.Value) -> ir.Value:
        return self.b.call(inline_function(self.module, name), [x])

    def fabs(self, x: ir.Value) -> ir.Value:
        return self.call("llvm.fabs.f32", x)

    def poly(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        """Horner's scheme, highest degree first; fmuladd lets LLVM use FMA where the CPU has it."""
        result = f32(coefficients[0])
        for c in coefficients[1:]:
            result = self.call("llvm.fmuladd.f32", result, x, f32(c))
        return result

    def bits(self, x: ir.Value) -> ir.Value:
        return self.b.bitcast(x, I32)

    def from_bits(self, bits: ir.Value) -> ir.Value:
        return self.b.bitcast(bits, F32)


def f32(value: float) -> ir.Constant:
    return ir.Constant(F32, value)


def i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


# --- exp: Cephes' expf, 2^n * p(r) with x = n ln2 + r, |r| <= ln2 / 2; about one ulp ------------------
_EXPF_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


_ROUNDING_SHIFT = 1.5 * 2.0**23


def _pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2**n as float32, for n in [-126, 127]."""
    return b.bitcast(b.shl(b.add(n, i32(127)), i32(23)), F32)


def _build_exp(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    # Clamping with NaN-propagating min/max keeps the code free of selects: 89 overflows to inf and
    # -104 underflows to 0 by themselves, and NaN flows through.
    clamped = m.call("llvm.maximum.f32", m.call("llvm.minimum.f32", x, f32(89.0)), f32(-104.0))
    # n = round(x / ln2) by adding 1.5 * 2**23: the sum's low mantissa bits hold n as an integer. Cheaper
    # than floor and a float-to-int conversion, and defined for NaN (whose p is NaN anyway).
    shifted = m.call("llvm.fmuladd.f32", clamped, f32(1.44269504088896341), f32(_ROUNDING_SHIFT))
    n_float = b.fsub(shifted, f32(_ROUNDING_SHIFT))
    n = b.sub(m.bits(shifted), m.bits(f32(_ROUNDING_SHIFT)))
    r = b.fsub(b.fsub(clamped, b.fmul(n_float, f32(0.693359375))), b.fmul(n_float, f32(-2.12194440e-4)))
    p = m.poly(r, _EXPF_POLY)
    p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), f32(1.0))
    half = b.ashr(n, i32(1))  # two steps, so results down to 2**-149 scale exactly
    return b.fmul(b.fmul(p, _pow2(b, half)), _pow2(b, b.sub(n, half)))


# --- sin and cos: exact Payne-Hanek reduction by pi/2 in integers, then Cephes' polynomials ------------
def two_over_pi_bits(n: int) -> int:
    """floor(2/pi * 2**n), from Machin's formula in exact integer arithmetic with guard bits."""
    guard = 64
    one = 1 << (n + guard)

    def arctan_inverse(k: int) -> int:  # atan(1/k) * one
        total, power, j = 0, one // k, 0
        while power:
            total += (-1) ** j * (power // (2 * j + 1))
            power //= k * k
            j += 1
        return total

    pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
    return (2 * one << n) // pi  # pi holds the scale `one`, which the quotient cancels


# The reduction multiplies the 24-bit mantissa m of |x| = m * 2**(e - 150) by 96 bits of 2/pi: those
# of weights 2**1 down to 2**-94 once scaled by 2**(e - 150). Bits above weight 2 only add multiples
# of 4 (whole turns), bits below 2**-94 move the result by less than 2**-70. Indexed by the biased
# exponent e, as three 32-bit words, most significant first.
_TWO_OVER_PI = two_over_pi_bits(300)


def reduction_table_row(exponent: int) -> tuple[int, int, int]:
    shift = exponent - 56  # 2/pi * 2**(e - 150) * 2**94
    window = (_TWO_OVER_PI >> (300 - shift) if shift <= 300 else 0) % (1 << 96) if 0 < exponent < 255 else 0
    return (window >> 64) & 0xFFFFFFFF, (window >> 32) & 0xFFFFFFFF, window & 0xFFFFFFFF


def _reduction_table(module: ir.Module) -> ir.GlobalVariable:
    name = PREFIX + "two_over_pi"
    if name in module.globals:
        return module.globals[name]
    row_type = ir.ArrayType(I32, 3)
    table_type = ir.ArrayType(row_type, 256)
    table = ir.GlobalVariable(module, table_type, name=name)
    table.global_constant, table.linkage = True, "internal"
    table.initializer = ir.Constant(table_type, [ir.Constant(row_type, [i32(w) for w in reduction_table_row(e)])
                                                 for e in range(256)])
    return table


def _table_scope(module: ir.Module) -> ir.MDValue:
    """The alias scope of braze's constant tables: `isolate_tables` says no kernel access touches it."""
    domain = module.add_metadata([ir.MetaDataString(module, "braze.math")])
    return module.add_metadata([module.add_metadata([ir.MetaDataString(module, "braze.math.tables"), domain])])


def _table_load(m: Math, pointer: ir.Value) -> ir.Value:
    load = m.b.load(pointer)
    load.set_metadata("alias.scope", _table_scope(m.module))
    return load


def isolate_tables(module: ir.Module) -> None:
    """Marks every other load and store of the module as not touching the constant tables.

    Kernels reach their arrays through integers (inttoptr), which LLVM must assume may point
    anywhere, the tables included; a table load then needs a runtime overlap check that LLVM
    cannot build for a gather, and the loop stays scalar."""
    if PREFIX + "two_over_pi" not in module.globals:
        return
    scope = _table_scope(module)
    for fn in module.functions:
        for block in fn.blocks:
            for instruction in block.instructions:
                if isinstance(instruction, (ir.LoadInstr, ir.StoreInstr)) and "alias.scope" not in instruction.metadata:
                    instruction.set_metadata("noalias", scope)


def _reduce_by_half_pi(m: Math, magnitude_bits: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(q, r) with |x| = (4k + q) * pi/2 + r, |r| <= pi/4, for any finite |x| (given as bits).

    The product m * window holds |x| * 2/pi mod 4 as a fixed-point number with 2 integer bits and 62
    fraction bits, exact to about 2**-62: r keeps its full precision even when |x| is huge or close
    to a multiple of pi/2. Every step is integer arithmetic, so it vectorizes (the table load
    becomes a gather)."""
    b = m.b
    exponent = b.lshr(magnitude_bits, i32(23))
    mantissa = b.zext(b.or_(b.and_(magnitude_bits, i32(0x7FFFFF)), i32(0x800000)), I64)
    table = _reduction_table(m.module)
    words = [b.zext(_table_load(m, b.gep(table, [i32(0), exponent, i32(w)], inbounds=True)), I64) for w in range(3)]
    high = b.shl(b.mul(mantissa, words[0]), ir.Constant(I64, 32))
    low = b.lshr(b.mul(mantissa, words[2]), ir.Constant(I64, 32))
    turns = b.add(b.add(high, b.mul(mantissa, words[1])), low)  # |x| * 2/pi mod 4, times 2**62
    quadrant = b.lshr(b.add(turns, ir.Constant(I64, 1 << 61)), ir.Constant(I64, 62))  # rounded, mod 4
    fraction = b.sub(turns, b.shl(quadrant, ir.Constant(I64, 62)))  # in [-2**61, 2**61), signed
    r = b.fmul(b.sitofp(fraction, F64), ir.Constant(F64, math.pi / 2 * 2.0**-62))
    return b.trunc(quadrant, I32), b.fptrunc(r, F32)


_SINF_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COSF_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _sin_quadrant(m: Math, quadrant: ir.Value, r: ir.Value, flip_sign: ir.Value) -> ir.Value:
    """sin(q * pi/2 + r), |r| <= pi/4: sin or cos of r by q's parity, negated in quadrants 2 and 3."""
    b = m.b
    z = b.fmul(r, r)
    sine = b.fadd(b.fmul(b.fmul(m.poly(z, _SINF_POLY), z), r), r)
    cosine = b.fadd(b.fsub(b.fmul(b.fmul(m.poly(z, _COSF_POLY), z), z), b.fmul(z, f32(0.5))), f32(1.0))
    odd = b.trunc(quadrant, ir.IntType(1))
    value = b.select(odd, cosine, sine)
    sign = b.xor(b.shl(b.and_(quadrant, i32(2)), i32(30)), flip_sign)
    return m.from_bits(b.xor(m.bits(value), sign))


def _build_sin(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    bits = m.bits(x)
    quadrant, r = _reduce_by_half_pi(m, b.and_(bits, i32(0x7FFFFFFF)))
    value = _sin_quadrant(m, quadrant, r, b.and_(bits, i32(-0x80000000)))  # sin(-x) = -sin(x)
    value = b.fadd(value, b.fsub(x, x))  # NaN for NaN and the infinities (never zero otherwise)
    # Below 2**-12, sin(x) rounds to x (and -0.0 stays -0.0); the table has no bits for tiny x.
    return b.select(b.fcmp_ordered("<", m.fabs(x), f32(2.0**-12)), x, value)


def _build_cos(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    quadrant, r = _reduce_by_half_pi(m, b.and_(m.bits(x), i32(0x7FFFFFFF)))
    value = _sin_quadrant(m, b.add(quadrant, i32(1)), r, i32(0))  # cos(x) = sin(|x| + pi/2)
    return b.fadd(value, b.fsub(x, x))  # cos is never zero at a float: adding 0.0 changes nothing


# --- tanh: Cephes' tanhf, an odd polynomial below 0.625 and 1 - 2 / (exp(2|x|) + 1) above ---------------
_TANHF_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)


def _build_tanh(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    z = b.fmul(x, x)
    near_zero = b.fadd(b.fmul(b.fmul(m.poly(z, _TANHF_POLY), z), x), x)
    near_zero = m.call("llvm.copysign.f32", near_zero, x)  # -0.0 + (+0.0) would give +0.0
    magnitude = m.fabs(x)
    grown = m.inline("exp", b.fadd(magnitude, magnitude))  # inf above 44: the quotient gives exactly 1
    far = b.fsub(f32(1.0), b.fdiv(f32(2.0), b.fadd(grown, f32(1.0))))
    far = m.call("llvm.copysign.f32", far, x)  # NaN stays NaN
    return b.select(b.fcmp_ordered("<", magnitude, f32(0.625)), near_zero, far)


# --- log: Cephes' logf, log(2**e * f) = e ln2 + log(f) with f in [sqrt(1/2), sqrt(2)) -------------------
_LOGF_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
              -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)


def _build_log(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    subnormal = b.fcmp_ordered("<", x, f32(2.0**-126))
    scaled = b.select(subnormal, b.fmul(x, f32(2.0**23)), x)  # so the exponent field holds the exponent
    bits = m.bits(scaled)
    exponent = b.sub(b.lshr(bits, i32(23)), b.select(subnormal, i32(126 + 23), i32(126)))
    fraction = m.from_bits(b.or_(b.and_(bits, i32(0x7FFFFF)), i32(0x3F000000)))  # in [0.5, 1)
    low = b.fcmp_ordered("<", fraction, f32(0.707106781186547524))
    exponent = b.sub(exponent, b.zext(low, I32))
    f = b.fsub(b.select(low, b.fadd(fraction, fraction), fraction), f32(1.0))  # in [sqrt(1/2) - 1, sqrt(2) - 1)
    e = b.sitofp(exponent, F32)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(m.poly(f, _LOGF_POLY), f), z)
    y = b.fadd(y, b.fmul(e, f32(-2.12194440e-4)))
    y = b.fsub(y, b.fmul(z, f32(0.5)))
    value = b.fadd(b.fadd(f, y), b.fmul(e, f32(0.693359375)))
    # log(0) = -inf, log(inf) = inf, log(x < 0) = NaN, NaN stays NaN.
    special = b.select(b.fcmp_ordered("==", x, f32(0.0)), f32(-math.inf),
                       b.select(b.fcmp_ordered("==", x, f32(math.inf)), x, f32(math.nan)))
    regular = b.and_(b.fcmp_ordered(">", x, f32(0.0)), b.fcmp_ordered("<", x, f32(math.inf)))
    return b.select(regular, value, special)


# --- erf: x * P(x**2) below 1; above, 1 - exp(-x**2) * Q(1/x) with x clamped to 4 (erf(4) rounds to 1) ----
# Least-squares fits (on Chebyshev nodes) of erf(x) / x in x**2 on [0, 1], relative error 1.4e-9, and of
# erfc(x) * exp(x**2) in 1/x on [1, 4], relative error 4.4e-9.
_ERF_SMALL_POLY = (7.88250399637036e-05, -0.0008018863154575229, 0.005189313553273678, -0.02685433067381382,
                   0.11283597350120544, -0.3761262595653534, 1.1283791065216064)
_ERFC_SCALED_POLY = (-0.03335406258702278, 0.2344886213541031, -0.7280771732330322, 1.2931346893310547,
                     -1.3909673690795898, 0.8089084029197693, -0.02753361128270626, -0.2980285882949829,
                     0.005539102014154196, 0.5634334087371826, 4.012743374914862e-05)


def _build_erf(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    magnitude = m.fabs(x)
    near_zero = b.fmul(x, m.poly(b.fmul(x, x), _ERF_SMALL_POLY))  # keeps -0.0
    clamped = m.call("llvm.minimum.f32", magnitude, f32(4.0))  # NaN stays NaN
    tail = b.fmul(m.inline("exp", b.fneg(b.fmul(clamped, clamped))),
                  m.poly(b.fdiv(f32(1.0), clamped), _ERFC_SCALED_POLY))
    far = m.call("llvm.copysign.f32", b.fsub(f32(1.0), tail), x)
    return b.select(b.fcmp_ordered("<", magnitude, f32(1.0)), near_zero, far)


# --- erfc: 1 - erf(x) below 0.5, where it is at least 0.47; above, exp(-x**2) * R(|x|) down to the last
# subnormal (erfc(10.125) rounds to 0), and 2 minus that for x < 0. R: least-squares fits (Chebyshev nodes,
# float32 coefficients fitted one at a time) of erfc(x) * exp(x**2) in x on [0.5, 1], relative error 1.9e-8,
# and in 1/x on [1, 10.125], relative error 4.1e-8.
_ERFC_NEAR = 0.5
_ERFC_TAIL_CLAMP = 10.125
_ERFC_MIDDLE_POLY = (0.014457376673817635, -0.09762349724769592, 0.31089556217193604, -0.6353538036346436,
                     0.9544645547866821, -1.1182878017425537, 0.9990311861038208)
_ERFC_TAIL_POLY = (-0.049913398921489716, 0.33713510632514954, -1.0082119703292847, 1.735710620880127,
                   -1.838511347770691, 1.1111167669296265, -0.16533449292182922, -0.25618648529052734,
                   -0.0025496582966297865, 0.5643318295478821, -3.4091476663888898e-06)


def _exp_minus_square(m: Math, x: ir.Value) -> ir.Value:
    """exp(-x**2) to float32 accuracy up to x = 10.125: x**2 rounded to float32 would be off by up to 2**-24
    of 100, that is 6e-6 of the result; in float64 it is exact, and its float32 rounding error lo
    (under 8e-6) is put back as the factor 1 - lo."""
    b = m.b
    wide = b.fpext(x, F64)
    square = b.fmul(wide, wide)  # exact: 48 significant bits
    high = b.fptrunc(square, F32)
    low = b.fptrunc(b.fsub(square, b.fpext(high, F64)), F32)
    return b.fmul(m.inline("exp", b.fneg(high)), b.fsub(f32(1.0), low))


def _build_erfc(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    magnitude = m.fabs(x)
    near_zero = b.fsub(f32(1.0), b.fmul(x, m.poly(b.fmul(x, x), _ERF_SMALL_POLY)))
    clamped = m.call("llvm.minimum.f32", magnitude, f32(_ERFC_TAIL_CLAMP))  # NaN stays NaN
    scaled = b.select(b.fcmp_ordered("<", magnitude, f32(1.0)), m.poly(magnitude, _ERFC_MIDDLE_POLY),
                      m.poly(b.fdiv(f32(1.0), clamped), _ERFC_TAIL_POLY))
    tail = b.fmul(_exp_minus_square(m, clamped), scaled)
    far = b.select(b.fcmp_ordered("<", x, f32(0.0)), b.fsub(f32(2.0), tail), tail)  # erfc(-x) = 2 - erfc(x)
    return b.select(b.fcmp_ordered("<", magnitude, f32(_ERFC_NEAR)), near_zero, far)


# --- expm1 and log1p: accurate near 0, where exp(x) - 1 and log(1 + x) cancel ------------------------
_EXPM1_TAYLOR = tuple(1 / math.factorial(n + 1) for n in range(9, -1, -1))  # expm1(x) / x up to x**9 / 10!


def _build_expm1(m: Math, x: ir.Value) -> ir.Value:
    b = m.b
    near_zero = b.fmul(x, m.poly(x, _EXPM1_TAYLOR))  # below 0.5, the series' tail is under 1e-9 of it
    far = b.fsub(m.inline("exp", x), f32(1.0))  # -1 below -104, inf above 89, NaN stays NaN
    return b.select(b.fcmp_ordered("<", m.fabs(x), f32(0.5)), near_zero, far)


def _build_log1p(m: Math, x: ir.Value) -> ir.Value:
    """log(u) * x / (u - 1) with u = 1 + x (Goldberg): the quotient undoes the rounding of u."""
    b = m.b
    u = b.fadd(x, f32(1.0))
    corrected = b.fmul(m.inline("log", u), b.fdiv(x, b.fsub(u, f32(1.0))))
    exact_one = b.fcmp_ordered("==", u, f32(1.0))  # tiny x (and -0.0): log1p(x) rounds to x
    huge = b.fcmp_ordered("==", u, f32(math.inf))  # inf / inf would be NaN
    return b.select(b.or_(exact_one, huge), x, corrected)


BUILDERS: dict[str, Callable[[Math, ir.Value], ir.Value]] = {
    "exp": _build_exp, "sin": _build_sin, "cos": _build_cos, "tanh": _build_tanh, "log": _build_log,
    "erf": _build_erf, "erfc": _build_erfc, "expm1": _build_expm1, "log1p": _build_log1p,
}


def inline_function(module: ir.Module, name: str) -> ir.Function:
    """The module's internal, always-inlined float32 `name` (a key of BUILDERS), built on first use."""
    symbol = PREFIX + name + "f"
    fn = module.globals.get(symbol)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(F32, [F32]), name=symbol)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        m = Math(fn)
        m.b.ret(BUILDERS[name](m, fn.args[0]))
    return fn


def nesting_depth(value: ir.Value, memo: dict[int, int]) -> int:
    """How many inline math functions `value` is computed through (sin(exp(x)) gives 2).

    Iterative, so a long chain of ops does not exhaust Python's recursion limit."""
    stack = [value]
    while stack:
        top = stack[-1]
        if id(top) in memo:
            stack.pop()
            continue
        operands = list(top.operands) if isinstance(top, ir.Instruction) else []
        pending = [v for v in operands if id(v) not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        is_inline = isinstance(top, ir.CallInstr) and getattr(top.callee, "name", "").startswith(PREFIX)
        memo[id(top)] = max((memo[id(v)] for v in operands), default=0) + is_inline
    return memo[id(value)]
