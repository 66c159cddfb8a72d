"""The CUDA rules of the op table: how each op becomes a C++ expression.

As for LLVM, operands arrive in their compute type (float32 for half types), so math rules see
float32 or float64. The semantics live in the prelude (`prelude.cuh`) as templates over the
operand type; a rule mostly names the prelude function or the CUDA math function to call.
"""

from __future__ import annotations

from collections.abc import Callable

from braze import dtypes as dt
from braze.codegen.cuda_rows import c_type
from braze.dtypes import DType
from braze.ops.table import OPS

# An op rule: (operand texts, operand dtypes, result dtype, attrs) -> C++ expression text.
CudaRule = Callable[[list[str], list[DType], DType, dict], str]
RULES: dict[str, CudaRule] = {}


def call(function: str) -> Callable:
    """A rule calling a prelude template with the operands."""
    return lambda a, d, o, t: f"{function}({', '.join(a)})"


def math(name: str) -> Callable:
    """A rule calling CUDA's math library: `namef` for float32, `name` for float64."""
    return lambda a, d, o, t: f"{name}{'f' if d[0].name == 'float32' else ''}({', '.join(a)})"


def _spaced(operand: str) -> str:
    """An operand after a prefix minus: a negative literal in parentheses, since `--x` is a decrement."""
    return f"({operand})" if operand.startswith("-") else operand


def by_kind(floating, integer, boolean=None) -> Callable:
    def rule(a, d, o, t):
        chosen = floating if d[0].is_floating else boolean if d[0].is_bool and boolean else integer
        return chosen(a, d, o, t)
    return rule


def truth(x: str, dtype: DType) -> str:
    return x if dtype.is_bool else f"bz_truth({x})"


def _classify(test: str) -> Callable:
    """CUDA's isnan and friends return int for double: cast, so a bool operand of a template (clamp,
    where) deduces one type."""
    constant = "true" if test == "isfinite" else "false"
    return lambda a, d, o, t: f"((bool){test}({a[0]}))" if d[0].is_floating else constant


def _gelu(a, d, o, t):
    if t.get("approximate", "none") == "tanh":
        return f"bz_gelu_tanh{_narrow_suffix(d, t)}({a[0]})"
    return f"bz_gelu_erf({a[0]})"


# --- results that only a 2-byte float keeps ----------------------------------------------------------
# A float32 value computed only to be rounded to bfloat16 or float16 (codegen/cuda_narrow.py says
# which) keeps 8 or 11 of its 24 bits. There, exp is the approximate exp2 instruction of x * log2(e)
# (at most 2 + 1.16|x| ulp of float32, about 2^-16 relative, where a bfloat16 rounding step is 2^-8),
# and the logistic function takes the approximate reciprocal of 1 + e^-x (1 ulp); both flush results
# below 2^-126 to zero. The tanh-GELU becomes x * sigmoid(2u), the same function without
# 1 + tanh(u)'s cancellation. Each is about a tenth of the instructions of the correctly rounded
# call, which SwiGLU and GELU rows of bfloat16 are bound by. tanh itself stays exact: its
# approximate instruction errs by 2^-11 absolute, which 1 + tanh(u) would turn into a large
# relative error.
def _narrow(d: list[DType], t: dict) -> bool:
    return bool(t.get("narrow")) and d[0].name == "float32"


def _narrow_suffix(d: list[DType], t: dict) -> str:
    return "_narrow" if _narrow(d, t) else ""


def _exp(a, d, o, t):
    return f"bz_exp_narrow({a[0]})" if _narrow(d, t) else math("exp")(a, d, o, t)


def _one_over(inner: Callable) -> Callable:
    return lambda a, d, o, t: f"({c_type(d[0])}(1) / {inner(a, d, o, t)})"


_identity = lambda a, d, o, t: a[0]

UNARY_RULES = {
    "set": _identity,
    "neg": by_kind(lambda a, d, o, t: f"(-{_spaced(a[0])})", call("bz_neg")),  # floats: -x, not 0 - x (-0.0)
    "abs": call("bz_abs"),
    "exp": _exp, "exp2": math("exp2"), "expm1": math("expm1"),
    "log": math("log"), "log2": math("log2"), "log1p": math("log1p"),
    "sqrt": math("sqrt"), "rsqrt": _one_over(math("sqrt")), "reciprocal": _one_over(_identity),
    "sin": math("sin"), "cos": math("cos"), "tan": math("tan"), "tanh": math("tanh"),
    "sigmoid": lambda a, d, o, t: f"bz_sigmoid{_narrow_suffix(d, t)}({a[0]})",
    "relu": call("bz_relu"), "gelu": _gelu,
    "silu": lambda a, d, o, t: f"({a[0]} * bz_sigmoid{_narrow_suffix(d, t)}({a[0]}))",
    "erf": math("erf"), "erfc": math("erfc"),
    "floor": by_kind(math("floor"), _identity), "ceil": by_kind(math("ceil"), _identity),
    "round": by_kind(math("rint"), _identity), "trunc": by_kind(math("trunc"), _identity),
    "sign": call("bz_sign"),
    "isnan": _classify("isnan"), "isinf": _classify("isinf"), "isfinite": _classify("isfinite"),
    "logical_not": lambda a, d, o, t: f"(!{truth(a[0], d[0])})",
    "bitwise_not": by_kind(None, lambda a, d, o, t: f"({c_type(o)})(~{a[0]})", lambda a, d, o, t: f"(!{a[0]})"),
}


def _infix(op: str) -> Callable:
    return lambda a, d, o, t: f"({a[0]} {op} {a[1]})"


def _logical(op: str) -> Callable:
    return lambda a, d, o, t: f"({truth(a[0], d[0])} {op} {truth(a[1], d[1])})"


def _bitwise(op: str) -> Callable:
    return lambda a, d, o, t: f"({c_type(o)})({a[0]} {op} {a[1]})"


BINARY_RULES = {
    "add": call("bz_add"), "sub": call("bz_sub"), "mul": call("bz_mul"), "truediv": call("bz_truediv"),
    "floordiv": call("bz_floordiv"), "remainder": call("bz_remainder"), "pow": call("bz_pow"),
    "maximum": call("bz_maximum"), "minimum": call("bz_minimum"), "atan2": math("atan2"), "copysign": math("copysign"),
    # C++ comparisons already are what NumPy's are: ordered, except != (true for NaN).
    "eq": _infix("=="), "ne": _infix("!="), "lt": _infix("<"), "le": _infix("<="), "gt": _infix(">"),
    "ge": _infix(">="),
    "logical_and": _logical("&&"), "logical_or": _logical("||"), "logical_xor": _logical("!="),
    "bitwise_and": _bitwise("&"), "bitwise_or": _bitwise("|"), "bitwise_xor": _bitwise("^"),
    "left_shift": call("bz_left_shift"), "right_shift": call("bz_right_shift"),
    # A reduction's combine (reassociation is the lane tree's business, not the expression's).
    "reduce_add": call("bz_add"), "reduce_mul": call("bz_mul"),
    "reduce_maximum": call("bz_maximum"), "reduce_minimum": call("bz_minimum"),
}


def index_division(op: str, a: str, b: str, divisor: int | None, dtype: DType) -> str:
    """`a // b` or `a % b` (op "floordiv" or "remainder") of integers known non-negative
    (braze/kir/signs.py), where floor and truncation agree: unsigned division, a shift or a mask by
    a power of two; `divisor`: b's value where it is a constant (> 0). A divisor known only not to
    be negative may be 0 and then gives 0, as the prelude's floor rule does: an index decomposition
    by a zero extent sits in an empty iteration space, but extent arithmetic divides too (a
    reshape's inferred extent, group_norm's group size, hoisted before the loops), so the test
    (a compare and a select) stays."""
    if divisor is None:
        return f"bz_index_{op}({a}, {b})"
    if divisor & (divisor - 1) == 0:
        shift, suffix = divisor.bit_length() - 1, "LL" if dtype.itemsize == 8 else ""
        return f"({a} >> {shift})" if op == "floordiv" else f"({a} & {divisor - 1}{suffix})"
    signed, unsigned, suffix = ("long long", "unsigned long long", "ULL") if dtype.itemsize == 8 else \
        ("int", "unsigned", "u")
    return f"(({signed})(({unsigned})({a}) {'/' if op == 'floordiv' else '%'} {divisor}{suffix}))"


TERNARY_RULES = {
    "where": lambda a, d, o, t: f"({truth(a[0], d[0])} ? {a[1]} : {a[2]})",
    "clamp": call("bz_clamp"),
    "lerp": call("bz_lerp"),
    "fma": lambda a, d, o, t: f"bz_add(bz_mul({a[0]}, {a[1]}), {a[2]})",
}


# --- casts ------------------------------------------------------------------------------------------
_TO_FLOAT32 = {"float16": "bz_half_bits_to_float(__half_as_ushort({}))",
               "bfloat16": "bz_bf16_bits_to_float(__bfloat16_as_ushort({}))"}
_FROM_FLOAT = {("float32", "float16"): "bz_float_to_half({})", ("float64", "float16"): "__double2half({})",
               ("float32", "bfloat16"): "__ushort_as_bfloat16(bz_float_to_bf16_bits({}))"}


def cast(x: str, source: DType, out: DType) -> str:
    if source == out:
        return x
    if source.name in _TO_FLOAT32:
        return cast(_TO_FLOAT32[source.name].format(x), dt.float32, out)
    if out.name in ("float16", "bfloat16"):
        if (source.name, out.name) in _FROM_FLOAT:
            return _FROM_FLOAT[(source.name, out.name)].format(x)
        return _FROM_FLOAT[("float32", out.name)].format(cast(x, source, dt.float32))
    if out.is_bool:
        return truth(x, source)
    if source.is_floating and out.is_integer:
        return f"bz_float_to_int<{c_type(out)}>({x})"
    return f"(({c_type(out)})({x}))"


RULES.update(UNARY_RULES)
RULES.update(BINARY_RULES)
RULES.update(TERNARY_RULES)


def _cast_rule(a, d, o, t) -> str:
    """A cast; attribute `arithmetic` (codegen/cuda.py sets it): the operand is a float32 that an add,
    subtract or multiply computed, no NaN with a payload (NVIDIA GPUs give such operations' NaN results
    as the one canonical NaN, which the conversion instruction turns into the bfloat16 bits
    bz_float_to_bf16_bits' payload rule gives it)."""
    if t.get("arithmetic") and (d[0].name, o.name) == ("float32", "bfloat16"):
        return f"__ushort_as_bfloat16(bz_arith_float_to_bf16_bits({a[0]}))"
    return cast(a[0], d[0], o)


RULES["cast"] = _cast_rule
RULES["online_softmax_add"] = call("bz_online_add")  # no op of the table: made by codegen/cuda_online.py
for _name in (*UNARY_RULES, *BINARY_RULES, *TERNARY_RULES, "cast"):
    if _name in OPS:
        OPS[_name].backend_rules["cuda"] = RULES[_name]
