"""Calls in a `@bz.kernel` body: conversions, `bz.math`, builtins, atomics and inlined `@bz.func` helpers.

Each callee the language knows has a rule here, looked up by identity; any other callee is an
error naming the function.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import Error, KernelTypeError
from braze.frontend import kernel_lang as lang
from braze.frontend import kernel_math as km
from braze.frontend import kernel_types as ty
from braze.frontend import kernel_vectors as vec
from braze.frontend.kernel_loop_returns import without_loop_returns
from braze.frontend.kernel_random import RandomFunction
from braze.frontend.kernel_scope import (
    ArrayHandle,
    FunctionScope,
    Local,
    LocalArray,
    ShapeHandle,
    Source,
    VectorValue,
    assignments,
    reads_no_memory,
)
from braze.kir import nodes as k
from braze.ops.elementwise import BINARY, TERNARY, UNARY

if TYPE_CHECKING:
    from braze.frontend.kernel_ast import Translator

# Builtins that run at compile time on compile-time arguments (for bz.static loops and constants);
# bz.ndrange among them, as Taichi's `for i, j in ti.static(ti.ndrange(3, 3))` unrolls a stencil.
_FOLDABLE = (range, enumerate, zip, reversed, tuple, list, len, min, max, abs, int, float, bool, round, sum, divmod,
             lang.ndrange, lang.grouped)
_ATOMICS = {lang.atomic_add: "add", lang.atomic_sub: "sub", lang.atomic_min: "min", lang.atomic_max: "max"}
MAX_INLINE_DEPTH = 32  # nested @bz.func calls; deeper is taken for recursion
def call(tr: Translator, node: ast.Call):
    receiver = _vector_receiver(tr, node)
    if receiver is not None:
        return _vector_method(tr, node, receiver)
    callee = tr.resolve_callee(node.func)
    name = ast.unparse(node.func)
    if callee is None:
        tr.error(node, f"call to unknown function '{name}'{_instead(name)}")
    if _lookup(_ATOMICS, callee):
        return _atomic(tr, node, _ATOMICS[callee])
    if callee is lang.static:
        return tr.compile_time(node.args[0])
    if callee is lang.serial:
        tr.error(node, "bz.serial(...) marks a loop, as in `for i in bz.serial(range(n))`; it is not a value")
    if callee is lang.cast:
        return _cast(tr, node)
    if isinstance(callee, lang.KernelFunc):
        return inline(tr, node, callee)
    if isinstance(callee, RandomFunction):
        return _random(tr, node, callee)
    if callee is lang.local:
        return _local(tr, node)
    if node.keywords:
        tr.error(node, f"{name}: keyword arguments are not supported here")
    args = [tr.expr(a) for a in node.args]
    tr.widen_literal_locals(args)  # math.atan2(w, x[i]) with a float64 x and `w = 0.5`
    if callee is lang.grouped and any(isinstance(a, (k.Expr, VectorValue)) or _is_handle(a) for a in args):
        tr.error(node, "bz.grouped(...) is iterated by a loop, as in `for I in bz.grouped(bz.ndrange(n, m))`; it is "
                       "not a value")
    if any(isinstance(a, (k.Expr, VectorValue)) for a in args):  # bz.math.min(p, UPPER) of a global UPPER vector
        args = [vec.constant_vector(a) or a for a in args]
    if _lookup(_ROUNDINGS, callee) and len(args) == 2:
        return tr.checked(node, lambda: _rounded_to(callee, args))
    vector_rule = _vector_rule(callee, args)
    if vector_rule is not None:
        return tr.checked(node, lambda: vector_rule(name, args))
    # By identity: a dtype equals the Python type it stands for (bz.float64 == float), and is no function.
    if all(not isinstance(a, k.Expr) and not _is_handle(a) for a in args) and (
            any(callee is f for f in _FOLDABLE) or _constant_array_method(callee)):
        try:
            return callee(*args)
        except Exception as error:  # noqa: BLE001  (any Python error of a constant expression)
            tr.error(node, f"{name}: {error}", KernelTypeError)
    rule = _rule_for(callee)
    if rule is None:
        tr.error(node, f"call to unknown function '{name}'{_callee_hint(callee)}")
    return tr.checked(node, lambda: rule(tr, node, args))


def _constant_array_method(callee) -> bool:
    """A method of a constant vector: a `bz.static` loop's offset (`(off == 0).all()` in an unrolled
    stencil) or a module-level vector (`UPPER.sum()`), which Python computes at compile time."""
    return isinstance(getattr(callee, "__self__", None), np.ndarray)


_PYTHON_BUILTINS = ("min", "max", "abs", "round", "len", "divmod", "pow", "int", "float")


def _callee_hint(callee) -> str:
    """What to write instead of a call to a Python function, `print` or another kernel."""
    if callee is print:
        return " (a kernel prints nothing: write the values into an array, or check them with `assert` under " \
               "debug=True)"
    if hasattr(callee, "kernel_ir"):  # a @bz.kernel
        return " (a @bz.kernel is launched from Python, not called from a kernel: put the shared code in a @bz.func)"
    return " (decorate it with @bz.func to call it from a kernel)" if inspect.isfunction(callee) else ""


_NO_STATE = "; bz.random.uniform(seed, counter, offset) and bz.random.normal(...) are functions of their arguments, " \
            "with no state to make or advance: give each draw a counter of its own"
_NO_SWAP = "; braze's atomics are bz.atomic_add, atomic_sub, atomic_min and atomic_max: it has no compare-and-swap " \
           "or exchange"
# Warp's names (`wp.tid()`, `wp.mod`, ...) for what braze writes otherwise, or has not.
_WARP_INSTEAD = {
    "tid": "; a top-level `for i in range(n)` (or `for i, j in bz.ndrange(n, m)`) is the launch, and its index "
           "the thread's",
    "mod": "; write bz.math.fmod(a, b) (the sign of a, as C's fmod and Warp's wp.mod) or a % b (Python's)",
    "atomic_cas": _NO_SWAP, "atomic_exch": _NO_SWAP,
    "rand_init": _NO_STATE, "randf": _NO_STATE, "randn": _NO_STATE, "randi": _NO_STATE,
}


def _instead(name: str) -> str:
    """What to write for an unknown `bz.sqrt`, `ti.min` or `wp.tid`: the builtin, the `bz.math` function of
    that name, or braze's way of saying what Warp says with it."""
    last = name.rsplit(".", 1)[-1]
    if last in _WARP_INSTEAD:
        return _WARP_INSTEAD[last]
    if last in _PYTHON_BUILTINS:
        return f"; write Python's {last}(...)"
    if last == "select":
        return "; write `a if condition else b`, or bz.math.where(condition, a, b)"
    if hasattr(lang.math, last) and not name.startswith("bz.math."):
        return f"; write bz.math.{last}(...)"
    return ""


_OWN_METHODS = ("fill", "cast")  # methods beside kernel_vectors.METHODS: v.fill(x) assigns v, v.cast(int) converts


def _vector_receiver(tr: Translator, node: ast.Call) -> VectorValue | None:
    """The vector or matrix `v` of a method call `v.norm()`, `x[i].dot(w)`, `(a - b).normalized()`,
    `UPPER.norm()` of a global `UPPER = bz.vec3d(...)`; None for any other call (`bz.math.dot(a, b)`,
    `np.max(x)`: a function reached through a module)."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return None
    known = func.attr in vec.METHODS or func.attr in _OWN_METHODS
    if isinstance(func.value, (ast.Name, ast.Attribute)):
        constant = vec.constant_vector(tr.resolve_callee(func.value)) if known else None
        if constant is not None:
            return constant
        if tr.resolve_callee(func) is not None or tr.resolve_callee(func.value) is None:
            return None
    receiver = tr.expr(func.value)
    if isinstance(receiver, (k.Expr, Local)) and known:
        tr.error(node, f"'.{func.attr}()' is a method of vectors and matrices; '{ast.unparse(func.value)}' is a "
                       f"{vec.describe(receiver)}", KernelTypeError)
    return receiver if isinstance(receiver, VectorValue) else None


def _vector_method(tr: Translator, node: ast.Call, receiver: VectorValue):
    """`v.<name>(args)`: `bz.math.<name>(v, args)` by kernel_vectors.METHODS; `v.fill(x)` assigns v, and
    `v.cast(dtype)` is `bz.cast(v, dtype)`."""
    name = node.func.attr
    if node.keywords:
        tr.error(node, f".{name}(): keyword arguments are not supported here")
    if name not in vec.METHODS and name not in _OWN_METHODS:
        tr.error(node, f"{vec.describe(receiver)} has no method '{name}'; its methods are "
                       f"{', '.join(sorted([*vec.METHODS, *_OWN_METHODS]))}", KernelTypeError)
    if name == "cast":
        if len(node.args) != 1:
            tr.error(node, f".cast(): expected one dtype, as in v.cast(int), got {len(node.args)} argument(s)",
                     KernelTypeError)
        dtype = _dtype_argument(tr, node.args[0], "cast")
        return tr.checked(node, lambda: vec.cast(receiver, dtype))
    args = [tr.expr(a) for a in node.args]
    if name == "fill":
        tr.assign(node.func.value, tr.checked(node, lambda: vec.filled(receiver.type, args)), node)
        return None
    return tr.checked(node, lambda: vec.METHODS[name].in_kernel([receiver, *args]))


def _dtype_argument(tr: Translator, e: ast.expr, what: str) -> DType:
    """A dtype given at compile time (`int`, `float`, `bz.int32`, `np.float32`)."""
    try:
        return dt.as_dtype(tr.compile_time(e))
    except (Error, TypeError, ValueError):
        tr.error(e, f"{what}: expected a dtype (int, float, bz.int32, ...), got {ast.unparse(e)}", KernelTypeError)


def _cast(tr: Translator, node: ast.Call):
    """`bz.cast(x, dtype)`: a number converted as `bz.int32(x)` converts it; a vector component by component."""
    if len(node.args) != 2 or node.keywords:
        tr.error(node, "bz.cast: expected (value, dtype), as in bz.cast(x, bz.int32)", KernelTypeError)
    value = tr.expr(node.args[0])
    value = vec.constant_vector(value) or value
    dtype = _dtype_argument(tr, node.args[1], "bz.cast")
    if isinstance(value, VectorValue):
        return tr.checked(node, lambda: vec.cast(value, dtype))
    return tr.checked(node, lambda: ty.convert(value, dtype))


_ROUNDINGS = {getattr(lang.math, op): op for op in lang.ROUNDINGS}  # bz.math.floor(p, int), ...


def _rounded_to(callee, args: list):
    """`bz.math.floor(p, int)`: floor(p) converted to int64, for a number or a vector (an integer vector)."""
    value, target = args
    try:
        dtype = dt.as_dtype(target)
    except (Error, TypeError, ValueError):
        raise ty.TypeProblem(f"{callee!r}: the second argument is a dtype, as in {callee!r}(x, int), got "
                             f"{vec.describe(target)}") from None
    value = vec.constant_vector(value) or value
    if isinstance(value, VectorValue):
        return vec.cast(vec.elementwise(repr(callee), lambda x: ty.unary(_ROUNDINGS[callee], x), [value]), dtype)
    return ty.convert(ty.unary(_ROUNDINGS[callee], value), dtype)


def _vector_rule(callee, args: list) -> Callable | None:
    """The rule of a call that makes or takes vectors: a constructor (`bz.vec3(...)`), `bz.mat33.identity()`,
    a vector function (`bz.dot`), or a scalar function applied to each component (`bz.math.sqrt(v)`)."""
    if isinstance(callee, vec.VectorType):
        return lambda name, args: vec.construct(callee, args)
    if getattr(callee, "__func__", None) is vec.VectorType.identity and callee.__self__.is_matrix and not args:
        return lambda name, args: vec.identity(callee.__self__)
    if getattr(callee, "__func__", None) is vec.VectorType.zero and not args:
        return lambda name, args: vec.zero(callee.__self__)
    if isinstance(callee, vec.VectorFunction):
        return lambda name, args: callee.in_kernel([vec.constant_vector(a) or a for a in args])
    if not any(isinstance(a, VectorValue) for a in args):
        return None
    if len(args) == 1 and _lookup(_REDUCTION_OF, callee):  # max(v): the largest component, as Python's max
        return lambda name, args: _REDUCTION_OF[callee].in_kernel(args)
    if callee is len and len(args) == 1:
        return lambda name, args: args[0].type.shape[0]
    scalar_rule = _rule_for(callee)
    if scalar_rule is None or isinstance(callee, DType) or isinstance(callee, type) or callee in (int, float, bool):
        return lambda name, args: _no_vectors(name, args)
    return lambda name, args: vec.elementwise(name, lambda *parts: scalar_rule(None, None, list(parts)), args)


# Python's builtins and bz.math's elementwise max and min, given one vector: its components combined.
_REDUCTION_OF = {sum: vec.component_sum, max: vec.component_max, min: vec.component_min, any: vec.any_nonzero,
                 all: vec.all_nonzero, lang.math.max: vec.component_max, lang.math.min: vec.component_min}


def _no_vectors(name: str, args: list):
    got = ", ".join(vec.describe(a) for a in args)
    raise ty.TypeProblem(f"{name}: expected scalar arguments, got {got}; apply it to the components")


def _is_handle(value) -> bool:
    return isinstance(value, (ArrayHandle, ShapeHandle))


def _lookup(table, callee) -> bool:
    """Whether `callee` is in `table` (a callee may be unhashable, a list say: then it is in none)."""
    try:
        return callee in table
    except TypeError:
        return False


def _rule_for(callee) -> Callable | None:
    if isinstance(callee, DType) or isinstance(callee, type) and issubclass(callee, np.generic):
        try:
            target = dt.as_dtype(callee)  # bz.float32(x), np.float32(x)
        except Error:  # a NumPy type braze has no dtype for
            return None
        return lambda tr, node, args: ty.convert(_one(node, args), target)
    if isinstance(callee, lang.MathFunction):
        if callee.op in km.COMPOSED:
            return lambda tr, node, args: km.composed(callee.op, args)
        return lambda tr, node, args: _op(callee.op, args)
    if _lookup(_BUILTIN_RULES, callee):
        return _BUILTIN_RULES[callee]
    if _lookup(km.OP_OF, callee):
        op = km.OP_OF[callee]
        if callee in km.INTEGER_RESULT:  # Python's math.floor(x) is an int
            return lambda tr, node, args: _integer_result(_op(op, args))
        return lambda tr, node, args: _op(op, args)
    if _lookup(km.COMPOSED_OF, callee):
        return lambda tr, node, args: km.composed(km.COMPOSED_OF[callee], args)
    return None


def _integer_result(value):
    return value if ty.type_of(value)[0].is_integer else ty.convert(value, dt.int64)


def _one(node: ast.Call, args: list):
    if len(args) != 1:
        raise ty.TypeProblem(f"{ast.unparse(node.func)}: expected 1 argument, got {len(args)}")
    return args[0]


_ARITIES = ((1, UNARY, ty.unary), (2, BINARY, ty.binary), (3, TERNARY, ty.ternary))


def _op(op: str, args: list):
    """The op `op` of the table for as many arguments as `args` has; the arity it takes if another."""
    for count, table, apply in _ARITIES:
        if op in table and len(args) == count:
            return apply(op, *args)
    expected = " or ".join(str(count) for count, table, _ in _ARITIES if op in table)
    raise ty.TypeProblem(f"{op}: expected {expected} argument(s), got {len(args)}")


def _extreme(op: str):
    def rule(tr, node, args):
        if len(args) < 2:
            raise ty.TypeProblem(f"{op}: expected at least 2 arguments in a kernel")
        return functools.reduce(lambda a, b: ty.binary(op, a, b), args)
    return rule


def _len(tr, node, args):
    value = _one(node, args)
    if isinstance(value, ArrayHandle):
        return k.ArrayExtent(value.param, 0)
    raise ty.TypeProblem("len: expected an array")


def _round(tr, node, args):
    """Python's `round`: `round(x)` an int64, halves to even; `round(x, n)` (n a constant) a float
    rounded as NumPy's `round(x, n)` is, x * 10**n to the nearest even integer, then scaled back."""
    if len(args) == 1:
        return ty.convert(ty.unary("round", args[0]), dt.int64)
    if len(args) != 2 or isinstance(args[1], bool) or not isinstance(args[1], int):
        digits = "" if len(args) != 2 else f", digits {ast.unparse(node.args[1]) if node else args[1]}"
        raise ty.TypeProblem(f"round: expected a value and an optional constant int of digits, got {len(args)} "
                             f"argument(s){digits}")
    scale = 10.0 ** args[1]
    return ty.binary("truediv", ty.unary("round", ty.binary("mul", args[0], scale)), scale)


_BUILTIN_RULES: dict[Callable, Callable] = {
    round: _round,
    int: lambda tr, node, args: ty.convert(_one(node, args), dt.int64),
    float: lambda tr, node, args: ty.convert(_one(node, args), dt.float64),
    bool: lambda tr, node, args: ty.convert(_one(node, args), dt.bool_),
    abs: lambda tr, node, args: ty.unary("abs", _one(node, args)),
    min: _extreme("minimum"),
    max: _extreme("maximum"),
    len: _len,
    divmod: lambda tr, node, args: _divmod(args),
    pow: lambda tr, node, args: _pow(tr, node, args),
}


def _pow(tr: Translator, node: ast.Call, args: list):
    """Python's `pow(a, b)`, as Taichi code writes `pow(1 - cos_i, 2)`: `a ** b`, vectors and debug checks
    alike. The three-argument form (a power modulo m) is not a kernel's."""
    if len(args) != 2:
        raise ty.TypeProblem(f"pow: expected 2 arguments (pow(a, b) is a ** b), got {len(args)}")
    if tr is None:  # a component of a vector (vec.elementwise): a float, with no debug check to make
        return ty.binary("pow", *args)
    return tr.binary(node, "pow", *args)


def _divmod(args: list) -> tuple:
    """Python's `divmod(a, b)`: (a // b, a % b), floored as Python floors them."""
    if len(args) != 2:
        raise ty.TypeProblem(f"divmod: expected 2 arguments, got {len(args)}")
    return ty.binary("floordiv", *args), ty.binary("remainder", *args)


# --- random numbers -------------------------------------------------------------------------------
def _random(tr: Translator, node: ast.Call, fn: RandomFunction) -> k.Expr:
    """`bz.random.uniform(seed, counter, offset=0, dtype=bz.float32)`: arguments bound as Python binds them."""
    args = [tr.expr(a) for a in node.args]
    kwargs = {kw.arg: tr.expr(kw.value) for kw in node.keywords}
    try:
        bound = inspect.signature(fn.build).bind(*args, **kwargs)
    except TypeError as error:
        tr.error(node, f"bz.random.{fn.kind}: {error}", KernelTypeError)
    return tr.checked(node, lambda: fn.build(*bound.args, **bound.kwargs))


# --- local arrays ---------------------------------------------------------------------------------
MAX_LOCAL_ELEMENTS = 4096  # per thread: more would not fit a GPU thread's stack


def _local(tr: Translator, node: ast.Call) -> LocalArray:
    """`bz.local(dtype, size)`: declared at the top of the task, zeroed here."""
    if len(node.args) != 2 or node.keywords:
        tr.error(node, "bz.local: expected (dtype, size), e.g. bz.local(bz.float32, 8)")
    element = tr.compile_time(node.args[0])
    vector = element if isinstance(element, vec.VectorType) else None
    try:
        dtype = vector.dtype if vector is not None else dt.as_dtype(element)
    except (Error, TypeError, ValueError):
        tr.error(node, f"bz.local: expected a dtype or a vector or matrix type, got {ast.unparse(node.args[0])}",
                 KernelTypeError)
    size = tr.expr(node.args[1])
    components = vector.size if vector is not None else 1
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size * components <= MAX_LOCAL_ELEMENTS:
        most = MAX_LOCAL_ELEMENTS // components
        tr.error(node, f"bz.local: the size must be an integer constant in [1, {most}]"
                       f"{f' ({MAX_LOCAL_ELEMENTS} scalars)' if vector is not None else ''}, got "
                       f"{ast.unparse(node.args[1])}", KernelTypeError)
    var = tr.new_var("local", dtype)
    scalars = size * components
    tr.prologue.append(k.Alloc(var, dtype, scalars))
    j = tr.new_var("j", dt.int64)
    tr.emit(k.For(j, k.Const(0, dt.int64), k.Const(scalars, dt.int64), (k.StoreLocal(var, j, ty.as_expr(0, dtype)),)))
    return LocalArray(var, size, vector)


# --- atomics --------------------------------------------------------------------------------------
def _atomic(tr: Translator, node: ast.Call, op: str) -> k.Var | VectorValue | None:
    """`old = bz.atomic_add(a[i, j], value)`: the element's value before the update (None for a call
    whose value nothing reads). Warp's spelling, `bz.atomic_add(a, i, j, value)`, is taken too."""
    args = _element_argument(node.args)
    # The element may be a component of an array of vectors: `v[i].y`, `v[i][1]`, `m[i][0, 1]`.
    places = tr.target_places(args[0]) if len(args) == 2 and isinstance(
        args[0], (ast.Subscript, ast.Attribute)) else None
    if places is None or not all(p.shared for p in places.items):
        tr.error(node, f"atomic_{op}: expected (array[index], value) or (array, index, ..., value), an element of "
                       f"an array argument or a component of one, got ({', '.join(ast.unparse(a) for a in node.args)})")
    param = places.items[0].param
    if param.dtype.name not in ty.ATOMIC_DTYPES:
        tr.error(node, f"atomic_{op}: expected an array of {', '.join(ty.ATOMIC_DTYPES)}, got {param.dtype.name}",
                 KernelTypeError)
    values = tr.evaluated(tr.checked(node, lambda: tr.component_values(tr.expr(args[1]), places,
                                                                       f"'{param.name}[...]'")))
    # A statement of its own (`bz.atomic_add(e[0], ke)`) reads no old value: the CPU may then add
    # into a private copy per thread (codegen/llvm_private.py), as it does for `e[0] += ke`.
    wanted = tr.discarded is not node
    olds = []
    for place, value in zip(places.items, values):
        value = tr.stored(node, value, param.dtype, f"'{param.name}'")
        old = tr.new_var(f"{param.name}_old", param.dtype) if wanted else None
        if wanted:
            tr.prologue.append(k.Let(old, ty.as_expr(0, param.dtype)))
        tr.emit(k.AtomicRMW(op, param, place.indices, value, old))
        olds.append(old)
    if not wanted:
        return None
    return olds[0] if places.type is None else VectorValue(places.type, tuple(olds))


def _element_argument(args: list[ast.expr]) -> list[ast.expr]:
    """An atomic's arguments as (element, value): Warp writes the array, its indices and the value apart
    (`wp.atomic_add(f, i, fs)`, `wp.atomic_add(grid, i, j, m)`), which is `(f[i], fs)` and `(grid[i, j], m)`."""
    if len(args) < 3 or not isinstance(args[0], ast.Name):
        return args
    indices = args[1:-1]
    index = indices[0] if len(indices) == 1 else ast.Tuple(elts=indices, ctx=ast.Load())
    element = ast.Subscript(value=args[0], slice=index, ctx=ast.Load())
    ast.copy_location(element, args[0])
    ast.fix_missing_locations(element)
    element.end_lineno, element.end_col_offset = indices[-1].end_lineno, indices[-1].end_col_offset
    return [element, args[-1]]


# --- @bz.func helpers -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _source(fn: Callable):
    return Source.of(fn)


def inline(tr: Translator, node: ast.Call, helper: lang.KernelFunc):
    """The helper's body, translated in place with its parameters bound to the arguments."""
    if len(tr.frames) > MAX_INLINE_DEPTH:
        tr.error(node, f"{helper.__name__}: @bz.func calls nest too deeply (recursion is not supported)")
    source = _source(helper.fn)
    args = [tr.expr(a) for a in node.args]
    kwargs = {kw.arg: tr.expr(kw.value) for kw in node.keywords}
    try:
        bound = inspect.signature(helper.fn).bind(*args, **kwargs)
    except TypeError as error:
        tr.error(node, f"{helper.__name__}: {error}", KernelTypeError)
    bound.apply_defaults()
    frame = FunctionScope(source)
    reassigned = _assigned_names(helper.fn)
    for name, value in bound.arguments.items():
        if isinstance(value, VectorValue):  # copied, as a scalar argument is: the helper may reassign it
            frame.names[name] = tr.vector_local(name, value)
        elif isinstance(value, k.Expr) and name not in reassigned and reads_no_memory(value):
            # the argument itself (`i`, `n - 1 - i`), so that `o[j] *= v` of `helper(o, i, v)` is provably
            # the thread's own element, as `o[i] *= v` written in the loop is
            frame.names[name] = value
        elif isinstance(value, k.Expr) and not isinstance(value, k.Const):
            var = tr.new_var(name, value.dtype)  # a local of its own, so the helper may reassign it
            if tr.depth == 0:
                tr.emit(k.Let(var, value))
            else:
                _assign_declared(tr, var, value)
            frame.names[name] = Local(var)
        else:
            frame.names[name] = value
    tr.frames.append(frame)
    loops, tr.loops = tr.loops, []
    try:
        return _tail(tr, source.tree.body)
    finally:
        tr.frames.pop()
        tr.loops = loops


def _assigned_names(fn: Callable) -> frozenset[str]:
    """The names a helper's body assigns (`j += 1`, `for j in ...`): its parameters among them need a local."""
    return frozenset(assignments(_source(fn).tree))


def _assign_declared(tr: Translator, var: k.Var, value: k.Expr) -> None:
    tr.prologue.append(k.Let(var, ty.as_expr(False if var.dtype.is_bool else 0, var.dtype)))
    tr.emit(k.Assign(var, value))


def _tail(tr: Translator, stmts: list[ast.stmt]):
    """Translates a helper body whose `return`s are all in tail position (once early returns are
    folded into branches); gives the returned value: a number, a vector, a tuple of them, or None."""
    docstrings = [s for s in stmts if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)]
    try:
        body = _fold_early_returns(without_loop_returns([s for s in stmts if s not in docstrings]))
    except _FoldTooLarge:
        tr.error(stmts[0], "unsupported construct: returns nested under ifs, each followed by more statements: "
                           "folding them copies the statements after each into both of its branches, here more "
                           f"than {FOLD_COPY_BUDGET} nodes of code; end each branch with its return (if/else), or "
                           "set a local and return it once at the end")
    if not body:
        return None
    tr.statements(body[:-1])
    last = body[-1]
    if isinstance(last, ast.Return):
        return _returned(tr, last.value)
    if isinstance(last, ast.If) and _returns(last):
        static = tr.static_condition(last.test)
        if static is not None:
            return _tail(tr, last.body if static else last.orelse)
        return _tail_if(tr, last)
    tr.statements([last])
    return None


def _returned(tr: Translator, value: ast.expr | None):
    """`return x` gives x's value; `return a, b` a tuple of values, each computed where the return is
    (a caller's `x, y = f(x, y)` then assigns them as Python would)."""
    if value is None:
        return None
    if isinstance(value, ast.Tuple):
        return tuple(tr.temporary(tr.expr(e)) for e in value.elts)
    return tr.expr(value)


def _ends_in_return(branch: list[ast.stmt]) -> bool:
    return bool(branch) and _returns(branch[-1])


# The most AST nodes folding a helper's early returns may copy: where neither branch of an `if` ends in
# its return (one returns further in), the statements after it go into both, so n such ifs in a row
# copy the rest 2^n times: eight copied 8,000 nodes and compiled in 0.5 s, twelve 135,000 in 100 s.
FOLD_COPY_BUDGET = 10_000


class _FoldTooLarge(Exception):
    """Folding a helper's early returns would copy more than FOLD_COPY_BUDGET nodes."""


def _fold_early_returns(stmts: list[ast.stmt], budget: list[int] | None = None) -> list[ast.stmt]:
    """`if c: return a` followed by more statements becomes `if c: return a / else: <the rest>` (and a
    branch that may return further in goes on to the rest inside it), so every return is in tail position.
    A helper that returns nothing gets a `return` at its end first, so `if i >= n: return` works in it too.
    `budget`: the nodes copies into both branches may still take (raises _FoldTooLarge past it)."""
    budget = [FOLD_COPY_BUDGET] if budget is None else budget
    if any(isinstance(s, ast.Return) and s.value is None for s in ast.walk(ast.Module(stmts, []))) \
            and not _ends_in_return(stmts):
        stmts = [*stmts, ast.copy_location(ast.Return(value=None), stmts[-1])]
    for index, stmt in enumerate(stmts[:-1]):
        if isinstance(stmt, ast.If) and (_may_return(stmt.body) or _may_return(stmt.orelse)):
            rest = stmts[index + 1:]  # copied into each branch that may go on to it
            body = stmt.body if _ends_in_return(stmt.body) else [*stmt.body, *rest]
            orelse = stmt.orelse if _ends_in_return(stmt.orelse) else [*stmt.orelse, *rest]
            if body is not stmt.body and orelse is not stmt.orelse:  # the rest goes into both
                budget[0] -= sum(1 for s in rest for _ in ast.walk(s))
                if budget[0] < 0:
                    raise _FoldTooLarge
            folded = ast.If(test=stmt.test, body=_fold_early_returns(body, budget),
                            orelse=_fold_early_returns(orelse, budget))
            return [*stmts[:index], ast.copy_location(folded, stmt)]
    return stmts


def _may_return(branch: list[ast.stmt]) -> bool:
    """Whether a branch returns somewhere in it, also under an `if` nested in it (`if c: return a` in a
    branch that goes on), never inside a loop."""
    return any(isinstance(s, ast.Return) or isinstance(s, ast.If) and (_may_return(s.body) or _may_return(s.orelse))
               for s in branch)


def _returns(node: ast.stmt) -> bool:
    if isinstance(node, ast.Return):
        return True
    return isinstance(node, ast.If) and bool(node.body) and bool(node.orelse) and _returns(node.body[-1]) \
        and _returns(node.orelse[-1])


def _tail_if(tr: Translator, node: ast.If):
    cond = tr.condition(node.test)
    values: list = []
    then = tr.nested(lambda: values.append(_tail(tr, node.body)))
    orelse = tr.nested(lambda: values.append(_tail(tr, node.orelse)))
    if all(v is None for v in values):  # a helper that returns nothing, early in one branch
        tr.emit(k.If(cond, then, orelse))
        return None
    if any(isinstance(v, (VectorValue, tuple)) for v in values):
        return _tail_if_values(tr, node, cond, then, orelse, values)
    if any(v is None or not ty.is_value(v) for v in values):
        tr.error(node, "a @bz.func that returns in both branches must return a number (or a vector) in both")
    dtype = tr.checked(node, lambda: ty.common_type(*values))
    # Literals alone on both paths (`return 0.5`, `return math.sqrt(2)`, or a nested if's result of them):
    # the helper returns a Python float, so its result is a local set from a literal, which widens where
    # it meets a wider value, and widens a nested if's result with it.
    from_literals = all(ty.type_of(v)[1] == 2 or v in tr.literal_locals for v in values)
    source = tr.frames[-1].source
    key = (source.file, source.first_line, f"return at {node.lineno}:{node.col_offset}")
    if from_literals:
        dtype = tr.widened.get(key, dtype)
    tr.widen_literal_locals(values, dtype)  # a literal local returned beside a wider value: Python's, not rounded
    result = tr.declare("result", dtype)
    if from_literals:
        tr.literal_locals[result] = key
    tr.emit(k.If(cond, then + (k.Assign(result, ty.as_expr(values[0], dtype)),),
                 orelse + (k.Assign(result, ty.as_expr(values[1], dtype)),)))
    return result


def _tail_if_values(tr: Translator, node: ast.If, cond: k.Expr, then: tuple, orelse: tuple, values: list):
    """Both branches return vectors or tuples: their items go into locals set at the end of each."""
    result, then_set, orelse_set = _joined(tr, node, *values)
    tr.emit(k.If(cond, then + tuple(then_set), orelse + tuple(orelse_set)))
    return result


def _joined(tr: Translator, node: ast.If, a, b) -> tuple[object, list[k.Stmt], list[k.Stmt]]:
    """The locals that hold what either branch returns (a number, a vector, or a tuple of these, as in
    `return q / n, 1`), with the assignments that set them at the end of each branch."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        joined = [_joined(tr, node, x, y) for x, y in zip(a, b)]
        return (tuple(j[0] for j in joined), [s for j in joined for s in j[1]], [s for j in joined for s in j[2]])
    if isinstance(a, VectorValue) and isinstance(b, VectorValue):
        if a.type.shape != b.type.shape:
            tr.error(node, f"the branches return a {a.type_name} and a {b.type_name}", KernelTypeError)
        vtype = vec.type_of_shape(a.type.shape, vec.common_dtype([a.type.dtype, b.type.dtype]))
        result = [tr.declare("result", vtype.dtype) for _ in a.items]
        then_set, orelse_set = ([k.Assign(r, ty.as_expr(x, vtype.dtype)) for r, x in zip(result, v.items)]
                                for v in (a, b))
        return VectorValue(vtype, tuple(result)), then_set, orelse_set
    if ty.is_value(a) and ty.is_value(b):
        dtype = tr.checked(node, lambda: ty.common_type(a, b))
        result = tr.declare("result", dtype)
        return result, [k.Assign(result, ty.as_expr(a, dtype))], [k.Assign(result, ty.as_expr(b, dtype))]
    tr.error(node, f"the branches return {_described(a)} and {_described(b)}: a @bz.func that returns in both "
                   "branches must return the same kind of value in each", KernelTypeError)


def _described(value) -> str:
    """What a branch returns, for an error: `2 values`, `a vec3`, `a number`."""
    if isinstance(value, tuple):
        return f"{len(value)} values"
    if isinstance(value, VectorValue):
        return f"a {value.type_name}"
    return "a number" if ty.is_value(value) else "something else"
