"""Expressions of a `@bz.kernel` body: Python AST -> typed Kernel IR expressions.

A mixin of the Translator (braze.frontend.kernel_ast): names, attributes, subscripts (with the
debug bounds checks), operators, short-circuit `and`/`or`, conditional expressions and calls.
"""

from __future__ import annotations

import ast
import itertools

import numpy as np

from braze import dtypes as dt
from braze.errors import KernelTypeError
from braze.frontend import kernel_types as ty
from braze.frontend import kernel_vector_components as parts
from braze.frontend import kernel_vectors as vec
from braze.frontend.kernel_calls import call
from braze.frontend.kernel_scope import (
    ArrayHandle,
    Local,
    LocalArray,
    LocalTuple,
    ShapeHandle,
    TableRow,
    VectorLocal,
    VectorValue,
)
from braze.kir import nodes as k

_NO_CONTAINERS = "a kernel holds numbers, vectors and fixed-size arrays (`bz.local(dtype, n)`) only"
# What a Taichi, Warp or NumPy habit becomes in a kernel, for the constructs braze does not take.
MAX_TABLE_ENTRIES = 1024  # a chain of selects per read: a longer table belongs in an array
INSTEAD = {
    "NamedExpr": "assign the value on a line of its own, then test it",
    "ListComp": "for a per-thread array write `v = bz.local(bz.float32, n)` and fill it in a `for` loop",
    "Dict": _NO_CONTAINERS,
    "Set": _NO_CONTAINERS,
    "DictComp": _NO_CONTAINERS,
    "SetComp": _NO_CONTAINERS,
    "GeneratorExp": "write the loop out with `for`, accumulating into a local",
    "Lambda": "define the function at module level with @bz.func and call it",
    "FunctionDef": "define the function at module level with @bz.func and call it",
    "JoinedStr": "a kernel computes numbers; check values with `assert` under debug=True, or return them in an array",
    "Try": "a kernel raises nothing to catch; `assert` checks a condition under debug=True",
    "Raise": "use `assert condition` (checked under debug=True or BRAZE_DEBUG=1)",
    "With": "a kernel has no context managers; call the kernel inside the `with` instead",
}


def unsupported(kind: str, what: str) -> str:
    """The message for a construct braze does not take, with what to write instead where there is a habit."""
    hint = INSTEAD.get(kind)
    return f"unsupported construct: {kind} {what}" + (f"; {hint}" if hint else "")


class ExpressionTranslator:
    """The expression half of the Translator; it relies on the Translator's error, checked,
    lookup, compile_time, nested, declare, emit and condition methods."""

    def expr(self, node: ast.expr):
        handler = getattr(self, f"expr_{type(node).__name__}", None)
        if handler is None:
            self.error(node, unsupported(type(node).__name__, "expression"))
        return handler(node)

    def expr_Constant(self, node: ast.Constant):
        if not isinstance(node.value, (*ty.PYTHON_SCALARS, str)):
            self.error(node, f"unsupported constant {node.value!r}")
        return node.value

    def expr_Name(self, node: ast.Name):
        value = self.lookup(node)
        if isinstance(value, VectorLocal):
            return value.value()
        if isinstance(value, LocalTuple):
            return tuple(self.expr_Name(ast.copy_location(ast.Name(id=item, ctx=ast.Load()), node))
                         for item in value.names)
        return value.var if isinstance(value, Local) else value

    def expr_Tuple(self, node: ast.Tuple):
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node: ast.List):
        return tuple(self.expr(e) for e in node.elts)  # `w = [a, b, c]`, indexed by constants, as a tuple is

    def expr_Attribute(self, node: ast.Attribute):
        base = self.expr(node.value)
        if isinstance(base, ArrayHandle):
            if node.attr == "shape":
                return ShapeHandle(base.param, base.ndim)
            if node.attr == "ndim":
                return base.ndim
            self.error(node, f"unsupported array attribute '{node.attr}' (shape and ndim are supported)")
        base = vec.constant_vector(base) if node.attr in "xyzw" and isinstance(base, np.ndarray) else base
        if isinstance(base, VectorValue):
            return self.checked(node, lambda: base.items[parts.component_position(base.type, node.attr)])
        if isinstance(base, k.Expr):
            self.error(node, f"unsupported construct: attribute '{node.attr}' of a value")
        return self.compile_time(node)

    def expr_Subscript(self, node: ast.Subscript):
        base = self.expr(node.value)
        if isinstance(base, ShapeHandle):
            axis = self.expr(node.slice)
            if not isinstance(axis, int) or not -base.ndim <= axis < base.ndim:
                self.error(node, f"shape: expected a constant axis in [0, {base.ndim}), got {axis!r}",
                           KernelTypeError)
            return k.ArrayExtent(base.param, axis % base.ndim)
        if isinstance(base, ArrayHandle):
            handle, indices = self.subscript(node)
            return self.checked(node, lambda: element_value(handle.param, indices, handle.element))
        if isinstance(base, LocalArray):
            loads = tuple(k.LoadLocal(base.var, i, base.var.dtype)
                          for i in base.component_indices(self.local_index(node, base)))
            return loads[0] if base.element is None else VectorValue(base.element, loads)
        if isinstance(base, VectorValue):
            key = self.expr(node.slice)
            for part in key if isinstance(key, tuple) else (key,):
                base = self.component(node, base, part)
            return base
        if isinstance(base, TableRow):  # E[q][0]: the rest of the index of E[q, 0]
            position = self.expr(node.slice)
            return self.table_entry(node, base.table, base.keys + (position if isinstance(position, tuple)
                                                                   else (position,)))
        if isinstance(base, (tuple, list, np.ndarray)):
            position = self.expr(node.slice)
            if isinstance(position, k.Const) and position.dtype.is_integer:  # w[off[0]] of a constant offset
                position = int(position.value)
            if isinstance(base, (tuple, list)) and isinstance(position, int):
                return base[position]
            if isinstance(base, tuple) and any(isinstance(e, (k.Expr, VectorValue)) for e in base):
                self.error(node, "a tuple or list of values is indexed by constants (w[0], or in a bz.static loop); "
                                 "for an index known only at run time keep them in `bz.local(dtype, n)`")
            return self.table_entry(node, base, position)
        self.error(node, "unsupported construct: subscript of a value that is not an array")

    def table_entry(self, node: ast.Subscript, table, key):
        """`W[q]` of a constant table (a global or closure tuple of numbers, or a NumPy array) at an index
        known only at run time: a chain of selects over its entries. A tuple's entries are Python
        literals, weak as literals are; a NumPy array's have its dtype. Checked under `debug=True`."""
        values = np.asarray(table)
        keys = key if isinstance(key, tuple) else (key,)
        if values.dtype.kind in "biuf" and len(keys) < values.ndim:
            return TableRow(table, keys)
        if values.dtype.kind not in "biuf" or len(keys) != values.ndim:
            self.error(node, f"unsupported construct: subscript of a constant {type(table).__name__} of "
                             f"shape {values.shape} and dtype {values.dtype} by {len(keys)} index(es); a table "
                             "indexed at run time holds numbers and takes one index per axis (t[i, j] or t[i][j])",
                       KernelTypeError)
        if values.size > MAX_TABLE_ENTRIES:
            self.error(node, f"a constant table of {values.size} entries indexed at run time: more than "
                             f"{MAX_TABLE_ENTRIES}; pass it to the kernel as an array argument", KernelTypeError)
        if all(isinstance(i, int) and not isinstance(i, bool) for i in keys):
            if not all(-n <= i < n for i, n in zip(keys, values.shape)):
                self.error(node, f"index {key!r} is out of range for a constant table of shape {values.shape}",
                           KernelTypeError)
            entry = values[keys].item()
            return ty.literal(entry, dt.from_numpy(values.dtype)) if isinstance(table, np.ndarray) else entry
        indices = [self.checked(node, lambda i=i: ty.index(i, "index of a constant table")) for i in keys]
        if self.debug:
            place, text = self.frames[-1].source.where(node)
            for axis, (i, n) in enumerate(zip(indices, values.shape)):
                inside = ty.binary("logical_and", ty.binary("ge", i, -n), ty.binary("lt", i, n))
                self.emit(k.Assert(inside, f"{place}index out of bounds: axis {axis} of a constant table in {text}"))
        return self.checked(node, lambda: ty.table_entry(values, indices, isinstance(table, np.ndarray)))

    def subscript(self, node: ast.Subscript) -> tuple[ArrayHandle, tuple[k.Expr, ...]]:
        handle = self.expr(node.value)
        if not isinstance(handle, ArrayHandle):
            self.error(node, "unsupported construct: subscript of a value that is not an array")
        raw = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(r, ast.Slice) for r in raw):
            self.error(node, "unsupported construct: slices (index one element at a time)")
        param = handle.param
        values = self.index_values(node, raw, param)
        if not handle.ndim <= len(values) <= param.ndim or handle.element is None and len(values) != param.ndim:
            of = f" of {handle.element!r}" if handle.element is not None else ""
            self.error(node, f"wrong number of indices: '{param.name}' has {handle.ndim} dimension(s){of}, "
                             f"got {len(values)} index(es)", KernelTypeError)
        indices = tuple(self.checked(r, lambda r=r, v=v: ty.index(v, f"index of '{param.name}'"))
                        for r, v in zip(raw if len(raw) == len(values) else [node] * len(values), values))
        indices = tuple(_from_the_end(param, axis, i) for axis, i in enumerate(indices))
        if self.debug:
            self.bounds_check(node, param, indices)
        return handle, indices

    def index_values(self, node: ast.Subscript, raw: list, param: k.ArrayParam) -> tuple:
        """The values of an array's indices: `a[I]` with I a tuple of integers (`I = (i, j)`, Taichi's
        grid index) is `a[I[0], I[1]]`, as in NumPy."""
        values = tuple(self.expr(r) for r in raw)
        if len(values) == 1 and isinstance(values[0], tuple):
            return values[0]
        flat = []
        for v in values:  # a[I], a[I, k] of an integer vector I (a bz.grouped loop's index): its components
            v = vec.constant_vector(v) or v  # an offset of bz.static(bz.grouped(...))
            if isinstance(v, VectorValue) and (v.type.is_matrix or not v.type.dtype.is_integer):
                self.error(node, f"'{param.name}' is indexed by a {vec.describe(v)}: an index is one integer per "
                                 "axis, or an integer vector of them (a[I]); convert a float vector first, "
                                 "a[p.cast(int)] or a[bz.math.floor(p, int)]", KernelTypeError)
            flat.extend(v.items if isinstance(v, VectorValue) else (v,))
        return tuple(flat)

    def local_index(self, node: ast.Subscript, array: LocalArray) -> k.Expr:
        """The index of `buf[j]`: a constant is checked now (a negative one counts from the end), any
        other under `debug=True`."""
        if isinstance(node.slice, ast.Tuple):
            self.error(node, "a bz.local array has one dimension: index it with one integer", KernelTypeError)
        index = self.expr(node.slice)
        if isinstance(index, int) and not isinstance(index, bool):
            if not -array.size <= index < array.size:
                self.error(node, f"index {index} is out of range for a bz.local array of {array.size}", KernelTypeError)
            return k.Const(index % array.size, dt.int64)
        index = self.checked(node, lambda: ty.index(index, "index of a bz.local array"))
        if self.debug:
            place, text = self.frames[-1].source.where(node)
            inside = ty.binary("logical_and", ty.binary("ge", index, 0), ty.binary("lt", index, array.size))
            self.emit(k.Assert(inside, f"{place}index out of bounds: a bz.local array of {array.size} in {text}"))
        return index

    def bounds_check(self, node: ast.AST, param: k.ArrayParam, indices: tuple[k.Expr, ...]) -> None:
        place, text = self.frames[-1].source.where(node)
        for axis, i in enumerate(indices):
            inside = ty.binary("logical_and", ty.binary("ge", i, 0), ty.binary("lt", i, k.ArrayExtent(param, axis)))
            self.emit(k.Assert(inside, f"{place}index out of bounds: axis {axis} of '{param.name}' in {text}"))

    def expr_BinOp(self, node: ast.BinOp):
        op = BINARY_OPS.get(type(node.op))
        if op is None:
            self.error(node, f"unsupported operator {type(node.op).__name__}")
        a, b = self.expr(node.left), self.expr(node.right)
        return self.binary(node, op, a, b)

    def binary(self, node: ast.AST, op: str, a, b):
        """`a <op> b` of scalars or of vectors (component by component, or `@`); a constant vector (a global
        `bz.vec3d(...)`) meeting a value of the kernel is a vector too."""
        if isinstance(a, VectorValue) or isinstance(b, VectorValue) or _constant_meets_value(a, b):
            return self.checked(node, lambda: vec.binary(op, a, b))
        if op == "matmul":
            self.error(node, "a @ b: expected vectors or matrices (bz.vec3, bz.mat33, ...) on both sides",
                       KernelTypeError)
        self.widen_literal_locals((a, b))
        result = self.checked(node, lambda: ty.binary(op, a, b))
        if self.debug and op in ("floordiv", "remainder") and isinstance(b, k.Expr) and b.dtype.is_integer:
            # Integer `//` and `%` by zero give 0 on both backends; under debug=True, an error.
            place, text = self.frames[-1].source.where(node)
            self.emit(k.Assert(ty.binary("ne", b, 0), f"{place}integer division by zero in {text}"))
        if self.debug and op == "pow" and result.dtype.is_integer and isinstance(b, k.Expr) \
                and not b.dtype.is_unsigned:
            # An integer to a negative integer power gives 0 (a float in Python; NumPy raises): under
            # debug=True, an error.
            place, text = self.frames[-1].source.where(node)
            self.emit(k.Assert(ty.binary("ge", b, 0), f"{place}integer to a negative integer power in {text}"))
        return result

    def expr_UnaryOp(self, node: ast.UnaryOp):
        x = self.expr(node.operand)
        if isinstance(node.op, ast.UAdd):
            return x
        op = {ast.USub: "neg", ast.Invert: "bitwise_not", ast.Not: "logical_not"}[type(node.op)]
        if isinstance(x, VectorValue):
            return self.checked(node, lambda: vec.unary(op, x))
        return self.checked(node, lambda: ty.unary(op, x))

    def component(self, node: ast.AST, value: VectorValue, key):
        """`v[key]` for one index: a constant picks a component (a matrix's row); an index known only
        at run time loads from the array the value came from, or selects among a local's components."""
        if not isinstance(key, k.Expr):
            positions, shape = self.checked(node, lambda: parts.constant_positions(value.type, key))
            if not shape:
                return value.items[positions[0]]
            origin = (value.origin[0], (*value.origin[1], k.Const(key % value.type.shape[0], dt.int64))) \
                if value.origin else None
            return VectorValue(vec.type_of_shape(shape, value.type.dtype), tuple(value.items[p] for p in positions),
                               origin)
        index = self.checked(node, lambda: ty.index(key, f"index of a {value.type_name}"))
        if self.debug:
            place, text = self.frames[-1].source.where(node)
            inside = ty.binary("logical_and", ty.binary("ge", index, 0), ty.binary("lt", index, value.type.shape[0]))
            self.emit(k.Assert(inside, f"{place}index out of bounds: a {value.type_name} component in {text}"))
        if value.origin is not None:
            param, prefix = value.origin
            return self.checked(node, lambda: element_value(param, (*prefix, index), value.type))
        return self.checked(node, lambda: parts.select_component(value, index))

    def expr_Compare(self, node: ast.Compare):
        result, left = None, self.expr(node.left)
        for op_node, right_node in zip(node.ops, node.comparators):
            op = _COMPARE_OPS.get(type(op_node))
            if op is None:
                self.error(node, f"unsupported comparison {type(op_node).__name__}")
            right = self.expr(right_node)
            self.widen_literal_locals((left, right))
            test = self.binary(node, op, left, right)  # of vectors, a vector of bools
            result = test if result is None else self.binary(node, "logical_and", result, test)
            left = right
        return result

    def expr_BoolOp(self, node: ast.BoolOp):
        """`and`/`or` short-circuit: a right side that reads memory runs only when it must. As in Python,
        the value is an operand's (`x or 1.0` is x where x is nonzero, else 1.0), not a bool."""
        op = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        result = self.expr(node.values[0])
        for value_node in node.values[1:]:
            if not isinstance(result, k.Expr):  # a constant left side decides statically
                if bool(result) == (op == "logical_or"):
                    return result
                result = self.expr(value_node)
                continue
            result = self.short_circuit(op, result, value_node)
        return result

    def short_circuit(self, op: str, left: k.Expr, right_node: ast.expr) -> k.Expr:
        right_box = []
        stmts = self.nested(lambda: right_box.append(self.expr(right_node)))
        right = right_box[0]
        dtype = self.checked(right_node, lambda: ty.common_type(left, right))
        if dtype.is_bool and not stmts and not _reads_memory(right):
            return self.checked(right_node, lambda: ty.binary(op, left, right))
        # `a or b` is a where a is true, else b; `a and b` is b where a is true, else a.
        keep_left = ty.as_expr(ty.truth(left), dt.bool_)
        if not stmts and not _reads_memory(right):
            chosen = (right, left) if op == "logical_and" else (left, right)
            return self.checked(right_node, lambda: ty.ternary("where", keep_left, *(ty.as_expr(v, dtype)
                                                                                     for v in chosen)))
        var = self.declare("cond" if dtype.is_bool else "either", dtype)
        self.emit(k.Assign(var, ty.as_expr(left, dtype)))
        evaluate = stmts + (k.Assign(var, ty.as_expr(right, dtype)),)
        self.emit(k.If(keep_left, evaluate) if op == "logical_and" else k.If(keep_left, (), evaluate))
        return var

    def expr_IfExp(self, node: ast.IfExp):
        static = self.static_condition(node.test)
        if static is not None:
            return self.expr(node.body if static else node.orelse)
        cond = self.condition(node.test)
        boxes: list = [[], []]
        branches = [self.nested(lambda b=b, box=box: box.append(self.expr(b))) for b, box in
                    zip((node.body, node.orelse), boxes)]
        a, b = boxes[0][0], boxes[1][0]
        if isinstance(a, VectorValue) or isinstance(b, VectorValue):
            return self.vector_choice(node, cond, branches, a, b)
        self.widen_literal_locals((a, b))
        dtype = self.checked(node, lambda: ty.common_type(a, b))
        if not any(branches) and ty.type_of(a)[1] == ty.type_of(b)[1] == 2:
            return self.checked(node, lambda: ty.ternary("where", cond, a, b))  # between literals: weak as they are
        if not any(branches) and not _reads_memory(a) and not _reads_memory(b):
            return self.checked(node, lambda: ty.ternary("where", cond, ty.as_expr(a, dtype), ty.as_expr(b, dtype)))
        var = self.declare("select", dtype)
        self.emit(k.If(cond, branches[0] + (k.Assign(var, ty.as_expr(a, dtype)),),
                       branches[1] + (k.Assign(var, ty.as_expr(b, dtype)),)))
        return var

    def vector_choice(self, node: ast.IfExp, cond: k.Expr, branches: list, a, b) -> VectorValue:
        """`a if c else b` of two vectors of one shape: one local per component, set in an `if`."""
        if not (isinstance(a, VectorValue) and isinstance(b, VectorValue) and a.type.shape == b.type.shape):
            self.error(node, f"the two branches differ: {vec.describe(a)} and {vec.describe(b)}", KernelTypeError)
        vtype = vec.type_of_shape(a.type.shape, vec.common_dtype([a.type.dtype, b.type.dtype]))
        local = [self.declare("select", vtype.dtype) for _ in a.items]
        then, orelse = ([k.Assign(v, ty.as_expr(x, vtype.dtype)) for v, x in zip(local, value.items)]
                        for value in (a, b))
        self.emit(k.If(cond, branches[0] + tuple(then), branches[1] + tuple(orelse)))
        return VectorValue(vtype, tuple(local))

    def expr_Call(self, node: ast.Call):
        return call(self, node)


def _constant_meets_value(a, b) -> bool:
    """Whether a constant array of a vector's shape meets a value of the kernel in an operator (`p - UPPER`
    of a global `UPPER = bz.vec3d(...)`): it is then a vector, as it is in NumPy."""
    return any(isinstance(x, np.ndarray) and isinstance(y, k.Expr) and vec.constant_vector(x) is not None
               for x, y in ((a, b), (b, a)))


def _reads_memory(e) -> bool:
    if not isinstance(e, k.Expr):
        return False
    if isinstance(e, (k.Load, k.LoadLocal)):
        return True
    return any(_reads_memory(getattr(e, f)) for f in getattr(e, "__dataclass_fields__", {}))


def is_pure_constant(node: ast.expr) -> bool:
    """A condition made only of literals and names (resolved later): may be folded at compile time."""
    return all(isinstance(n, (ast.Constant, ast.Name, ast.Attribute, ast.Load, ast.Compare, ast.BoolOp, ast.UnaryOp,
                              ast.cmpop, ast.boolop, ast.unaryop, ast.BinOp, ast.operator)) for n in ast.walk(node))


def element_value(param: k.ArrayParam, indices: tuple[k.Expr, ...], element) -> k.Expr | VectorValue:
    """`param[indices]`: a scalar when every axis is indexed, else the vector (or matrix row) of the
    remaining axes, which are the last axes of the `element` type."""
    rest = param.ndim - len(indices)
    if rest == 0:
        return k.Load(param, indices)
    shape = element.shape[len(element.shape) - rest:]
    combos = itertools.product(*(range(n) for n in shape))
    items = tuple(k.Load(param, (*indices, *(k.Const(c, dt.int64) for c in combo))) for combo in combos)
    return VectorValue(vec.type_of_shape(shape, param.dtype), items, (param, indices))


def _from_the_end(param: k.ArrayParam, axis: int, index: k.Expr) -> k.Expr:
    """A constant negative index counts from the end, as in Python (`a[-1]` is the last element).
    Other indices are taken as they are: their sign is only known at run time."""
    if isinstance(index, k.Const) and index.value < 0:
        return ty.binary("add", k.ArrayExtent(param, axis), index)
    return index


BINARY_OPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
    ast.Mod: "remainder", ast.Pow: "pow", ast.LShift: "left_shift", ast.RShift: "right_shift",
    ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor", ast.MatMult: "matmul",
}
OPERATOR_SYMBOLS = {op: symbol for op, symbol in zip(BINARY_OPS.values(),
                                                     ("+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^",
                                                      "@"))}
_COMPARE_OPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
