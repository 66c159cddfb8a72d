"""Kernel IR simplification: constant folding, identities, index arithmetic, common subexpressions.

Every rewrite gives the same bits on every input, so the pass can run before any code generator:
- constant folding evaluates exact ops (add, mul, compares, ...) in the node's own dtype with NumPy,
  which rounds and wraps as the generated code does; transcendental ops and casts are left alone
  (their generated code may round differently from NumPy);
- identities hold for every value of x, NaN, infinities and -0.0 included: x * 1.0 and x - 0.0
  become x, but x + 0.0 does not (-0.0 + 0.0 is +0.0), nor x * 0.0 (NaN * 0.0 is NaN); `c and x`
  and `c or x` with c a constant are x or c;
- integer constants of an add or mul chain are combined (two's complement arithmetic is associative,
  wrap-around included): (i + 1) + 2 is i + 3;
- a compound expression used twice in one statement is computed once into a `Let`. Only statements
  without side effects between the uses qualify, and never an expression that reads a variable
  assigned more than once (an accumulator), so reduction loops keep their shape. Expressions are DAGs
  (a value the lowering uses twice is one node, see braze/kir/nodes.py): the pass visits each distinct
  node once. After it a shared node is written out more than once only within a `where` branch (or
  the right side of `and`/`or`), when it holds no shared node itself or reads memory the statement
  does not read otherwise, so later stages may walk expressions as trees (this part runs under
  BRAZE_DISABLE=simplify too);
- an accumulator computing what an earlier one of the same block computed, with nothing written in
  between, is dropped for the earlier one (the same operations in the same order: the same bits).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from braze import config
from braze import dtypes as dt
from braze.kir import nodes as k

# Exact ops NumPy evaluates as the generated code does (in the operands' dtype, wrapping integers).
_FOLD_BINARY: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}
_FOLD_FLOAT_BINARY: dict[str, Callable] = {"truediv": np.divide}
# Not for floats: NumPy's maximum(0.0, -0.0) is -0.0, the code generators' is 0.0.
_FOLD_INTEGER_BINARY: dict[str, Callable] = {"minimum": np.minimum, "maximum": np.maximum}
_FOLD_UNARY: dict[str, Callable] = {"neg": np.negative, "abs": np.abs, "logical_not": np.logical_not,
                                    "bitwise_not": np.invert}
# bfloat16 and float16 values are computed in float32 by the code generators, and bfloat16 constants
# travel as bits: their constants are left as they are.
_FOLDABLE = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                       "float32", "float64"})
_COMPOUND = (k.Unary, k.Binary, k.Ternary, k.Cast, k.Philox)


# --- expressions ----------------------------------------------------------------------------------
def _children(e: k.Expr) -> dict[str, object]:
    """The fields of `e` holding sub-expressions (tuples of them for indices)."""
    match e:
        case k.Unary() | k.Cast():
            return {"x": e.x}
        case k.Binary():
            return {"a": e.a, "b": e.b}
        case k.Ternary():
            return {"a": e.a, "b": e.b, "c": e.c}
        case k.Load():
            return {"indices": e.indices}
        case k.LoadLocal():
            return {"index": e.index}
        case k.Philox():
            return {"seed": e.seed, "offset": e.offset, "group": e.group, "word": e.word}
    return {}


def map_children(e: k.Expr, fn: Callable[[k.Expr], k.Expr]) -> k.Expr:
    """`e` with `fn` applied to each direct sub-expression."""
    fields = _children(e)
    if not fields:
        return e
    changes = {name: tuple(map(fn, v)) if isinstance(v, tuple) else fn(v) for name, v in fields.items()}
    if all(_same(changes[name], v) for name, v in fields.items()):
        return e
    return dataclasses.replace(e, **changes)


def _same(new: object, old: object) -> bool:
    if isinstance(old, tuple):
        return len(new) == len(old) and all(a is b for a, b in zip(new, old))
    return new is old


def _array(c: k.Const) -> np.ndarray:
    value = dt.wrap_int(c.value, c.dtype) if c.dtype.is_integer else c.value
    return np.asarray(value, dtype=c.dtype.numpy)


def fold_constants(e: k.Expr) -> k.Expr:
    """An exact op of constant operands as one constant (`e` itself when it is not one)."""
    operands = list(_children(e).values())
    if not operands or not all(isinstance(o, k.Const) and o.dtype.name in _FOLDABLE for o in operands) \
            or e.dtype.name not in _FOLDABLE:
        return e
    if isinstance(e, k.Binary) and e.a.dtype == e.b.dtype:
        fn = _FOLD_BINARY.get(e.op) or (_FOLD_FLOAT_BINARY if e.a.dtype.is_floating else _FOLD_INTEGER_BINARY).get(e.op)
    elif isinstance(e, k.Unary) and not e.attrs:
        fn = _FOLD_UNARY.get(e.op)
        fn = None if e.op == "bitwise_not" and e.x.dtype.is_bool else fn  # ~True is not False in NumPy's ints
    else:
        fn = None
    if fn is None:
        return e
    try:
        with np.errstate(all="ignore"):
            value = np.asarray(fn(*map(_array, operands))).astype(e.dtype.numpy)
    except TypeError:  # an op NumPy refuses for the dtype (bool - bool): left to the code generator
        return e
    return k.Const(value.item(), e.dtype)


def _is_const(e: k.Expr, value: float) -> bool:
    """`e` is the constant `value` (0.0 and -0.0 told apart)."""
    return isinstance(e, k.Const) and not isinstance(e.value, bool) and e.value == value and (
        value != 0 or math.copysign(1.0, float(e.value)) == math.copysign(1.0, value))


def apply_identities(e: k.Expr) -> k.Expr:
    """Rewrites that hold for every operand value, NaN, infinities and -0.0 included."""
    if isinstance(e, k.Ternary) and e.op == "where" and isinstance(e.a, k.Const):
        return e.b if bool(e.a.value) or e.a.value != e.a.value else e.c  # NaN is true
    if not isinstance(e, k.Binary) or e.a.dtype != e.dtype or e.b.dtype != e.dtype:
        return e
    a, b = e.a, e.b
    if e.dtype.is_bool and e.op in ("logical_and", "logical_or"):
        return _logical_identity(e)
    if e.dtype.is_integer:
        if e.op == "add" and _is_const(a, 0) or e.op == "mul" and _is_const(a, 1):
            return b
        if e.op in ("add", "sub") and _is_const(b, 0) or e.op in ("mul", "floordiv") and _is_const(b, 1):
            return a
        if e.op == "mul" and (_is_const(a, 0) or _is_const(b, 0)):
            return k.Const(0, e.dtype)  # expressions have no side effects
        return _combine_integer_constants(e)
    if e.dtype.is_floating and e.dtype.name in _FOLDABLE:
        if e.op == "mul" and _is_const(a, 1.0) or e.op == "add" and _is_const(a, -0.0):
            return b
        if e.op in ("mul", "truediv") and _is_const(b, 1.0) or e.op == "sub" and _is_const(b, 0.0) \
                or e.op == "add" and _is_const(b, -0.0):
            return a
    return e


def _logical_identity(e: k.Binary) -> k.Expr:
    """`x and True` is x, `x and False` is False (and the same for `or`, either side): expressions
    have no side effects, so the operand a constant decides is not needed."""
    decides = e.op == "logical_or"  # the constant that decides the result alone
    for constant, other in ((e.a, e.b), (e.b, e.a)):
        if isinstance(constant, k.Const):
            return k.Const(decides, e.dtype) if bool(constant.value) == decides else other
    return e


def _combine_integer_constants(e: k.Binary) -> k.Expr:
    """(x + c1) + c2 -> x + (c1 + c2) and (x * c1) * c2 -> x * (c1 * c2), constants kept on the right."""
    if e.op not in ("add", "mul"):
        return e
    a, b = (e.b, e.a) if isinstance(e.a, k.Const) and not isinstance(e.b, k.Const) else (e.a, e.b)
    if isinstance(b, k.Const) and isinstance(a, k.Binary) and a.op == e.op and a.dtype == e.dtype \
            and isinstance(a.b, k.Const):
        constant = fold_constants(k.Binary(e.op, a.b, b, e.dtype))
        return _simplify_node(k.Binary(e.op, a.a, constant, e.dtype))
    return k.Binary(e.op, a, b, e.dtype) if (a, b) != (e.a, e.b) else e


def _simplify_node(e: k.Expr) -> k.Expr:
    """`e`, whose children are simplified already, with constants folded and identities applied."""
    folded = fold_constants(e)
    return folded if folded is not e else apply_identities(e)


def simplify_expr(e: k.Expr, memo: dict[k.Expr, k.Expr] | None = None) -> k.Expr:
    """`e` with constants folded and identities applied, bottom-up. `memo` (node -> simplified) makes a
    DAG cost its distinct nodes, not its paths: pass one dict to the calls of one pass."""
    memo = {} if memo is None else memo
    done = memo.get(e)
    if done is None:
        done = memo[e] = _simplify_node(map_children(e, lambda c: simplify_expr(c, memo)))
    return done


# --- common subexpressions ----------------------------------------------------------------------
def _flat_children(e: k.Expr) -> tuple[k.Expr, ...]:
    return tuple(c for child in _children(e).values() for c in (child if isinstance(child, tuple) else (child,)))


def _subexpressions(e: k.Expr):
    """`e` and its sub-expressions, each distinct node once (a shared one is not walked again)."""
    seen, stack = {e}, [e]
    while stack:
        node = stack.pop()
        yield node
        for c in _flat_children(node):
            if c not in seen:
                seen.add(c)
                stack.append(c)


def _always_children(e: k.Expr) -> tuple[k.Expr, ...]:
    """The children of `e` every evaluation of `e` computes: not the branches of a `where` nor the
    right side of `logical_and`/`logical_or`, which the CUDA C++ of `?:`, `&&` and `||` may skip."""
    lazy = (isinstance(e, k.Ternary) and e.op == "where"
            or isinstance(e, k.Binary) and e.op in ("logical_and", "logical_or"))
    return (e.a,) if lazy else _flat_children(e)


def _reads_any(e: k.Expr, variables: frozenset[k.Var]) -> bool:
    return any(isinstance(s, k.Var) and s in variables for s in _subexpressions(e))


def _replace(e: k.Expr, target: k.Expr, var: k.Expr, memo: dict | None = None) -> k.Expr:
    """`e` with every `target` in it replaced by `var` (each shared node rewritten once)."""
    memo = {} if memo is None else memo
    done = memo.get(e)
    if done is None:
        done = memo[e] = var if e == target else map_children(e, lambda c: _replace(c, target, var, memo))
    return done


_EXPRESSION_FIELDS = {k.Let: ("value",), k.Assign: ("value",), k.Store: ("indices", "value"),
                      k.StoreLocal: ("index", "value"), k.AtomicRMW: ("indices", "value")}


class _Namer:
    """Fresh variable names, how often each variable is assigned, and the memos of the pass (the pass's
    shared state): expressions are DAGs, and each distinct node is simplified and inspected once."""

    def __init__(self, taken: set[str], assigned: frozenset[k.Var] = frozenset(), rewrite: bool = True) -> None:
        self.taken, self.count = taken, 0
        self.rewrite = rewrite  # fold and rewrite expressions, and reuse reductions (else: only share values)
        self.assignments: Counter = Counter()
        self.assigned = assigned  # variables an `Assign` changes after their `Let`: accumulators
        self.simplified: dict[k.Expr, k.Expr] = {}
        self._reads_assigned: dict[k.Expr, bool] = {}

    def fresh(self) -> str:
        while f"cse{self.count}" in self.taken:
            self.count += 1
        self.taken.add(f"cse{self.count}")
        return f"cse{self.count}"

    def reads_assigned(self, e: k.Expr) -> bool:
        """Whether `e` reads an accumulator (so its value changes along a loop)."""
        found = self._reads_assigned.get(e)
        if found is None:
            found = e in self.assigned if isinstance(e, k.Var) else \
                any(self.reads_assigned(c) for c in _flat_children(e))
            self._reads_assigned[e] = found
        return found


def _parents_first(roots: list[k.Expr], children: Callable[[k.Expr], tuple[k.Expr, ...]]) -> list[k.Expr]:
    """The distinct nodes below the roots along `children`, each before its children (a reversed post-order)."""
    order: list[k.Expr] = []
    seen: set[k.Expr] = set()

    def visit(e: k.Expr) -> None:
        seen.add(e)
        for c in children(e):
            if c not in seen:
                visit(c)
        order.append(e)

    for root in roots:
        if root not in seen:
            visit(root)
    return order[::-1]


class _Sharing:
    """What a statement's expressions evaluate, for choosing the nodes worth a `Let`."""

    def __init__(self, roots: list[k.Expr]) -> None:
        self.order = _parents_first(roots, _flat_children)
        self.always = set(_parents_first(roots, _always_children))
        self.parents = Counter(c for node in self.order for c in _flat_children(node))
        self._holds_shared: dict[k.Expr, bool] = {}
        self._speculable: dict[k.Expr, bool] = {}

    def holds_shared(self, e: k.Expr) -> bool:
        """Whether a compound node below `e` has several users: `e` is a DAG, not a tree (or shares a
        node with the rest of the statement)."""
        found = self._holds_shared.get(e)
        if found is None:
            found = self._holds_shared[e] = any(
                isinstance(c, _COMPOUND) and self.parents[c] > 1 or self.holds_shared(c) for c in _flat_children(e))
        return found

    def speculable(self, e: k.Expr) -> bool:
        """Whether computing `e` up front is safe: every memory read in it is one the statement makes
        anyway (a branch of a `where` may guard a read that is out of bounds otherwise)."""
        found = self._speculable.get(e)
        if found is None:
            found = e in self.always or not isinstance(e, (k.Load, k.LoadLocal)) and \
                all(map(self.speculable, _flat_children(e)))
            self._speculable[e] = found
        return found

    def hoistable(self, e: k.Expr) -> bool:
        """A node the statement always computes, or, in a branch only, one holding shared nodes: left
        in place, each use would be written out again, exponentially in the depth of the reuse. A plain
        expression used twice in a branch stays there (the branch may not be taken)."""
        return e in self.always or self.holds_shared(e) and self.speculable(e)


def _shared(roots: list[k.Expr], namer: _Namer) -> list[k.Expr]:
    """The compound nodes worth a `Let`, parents first: those the statement would compute more than
    once. A node's count is the sum over its parents' edges of 1 for a parent given a `Let` (computed
    once) and the parent's own count otherwise, so one pass over the DAG gives what repeatedly hoisting
    the largest repeated expression would."""
    sharing = _Sharing(roots)
    counts: Counter = Counter(roots)
    shared = []
    for node in sharing.order:
        bound = counts[node] > 1 and isinstance(node, _COMPOUND) and not namer.reads_assigned(node) \
            and sharing.hoistable(node)
        if bound:
            shared.append(node)
            sharing.always.add(node)  # its `Let` computes it, and what it always computes, on every path
        if node in sharing.always:
            sharing.always.update(_always_children(node))
        for c in _flat_children(node):
            counts[c] += 1 if bound else counts[node]
    return shared


def _eliminate_in_statement(s: k.Stmt, namer: _Namer) -> list[k.Stmt]:
    """`s`, preceded by a `Let` for each compound expression it computes twice (largest first named,
    each defined before its users). Linear in the distinct nodes of the statement's expressions."""
    fields = _EXPRESSION_FIELDS.get(type(s))
    if fields is None:
        return [s]
    roots = [v for f in fields for v in (getattr(s, f) if isinstance(getattr(s, f), tuple) else (getattr(s, f),))]
    # Hoisting computes the expression up front: only what the statement computes anyway qualifies,
    # and, in a branch, a DAG whose reads the statement makes anyway (see _Sharing.hoistable).
    shared = _shared(roots, namer)
    if not shared:
        return [s]
    variables = {node: k.Var(namer.fresh(), node.dtype) for node in shared}
    memo: dict[k.Expr, k.Expr] = dict(variables)

    def rebuild(e: k.Expr) -> k.Expr:
        done = memo.get(e)
        if done is None:
            done = memo[e] = map_children(e, rebuild)
        return done

    lets = [k.Let(var, map_children(node, rebuild)) for node, var in reversed(variables.items())]
    changes = {f: tuple(map(rebuild, v)) if isinstance(v, tuple) else rebuild(v)
               for f in fields for v in (getattr(s, f),)}
    return [*lets, dataclasses.replace(s, **changes)]


# --- statements -----------------------------------------------------------------------------------
_BODY_FIELDS = {k.If: ("then", "orelse"), k.For: ("body",), k.While: ("body",)}
_STMT_EXPRESSIONS = {**_EXPRESSION_FIELDS, k.If: ("cond",), k.For: ("begin", "end"), k.While: ("cond",),
                     k.Assert: ("cond",)}


def _simplify_stmt(s: k.Stmt, namer: _Namer) -> list[k.Stmt]:
    changes = {}
    simplify_one = (lambda e: simplify_expr(e, namer.simplified)) if namer.rewrite else (lambda e: e)
    for f in _STMT_EXPRESSIONS.get(type(s), ()):
        value = getattr(s, f)
        changes[f] = tuple(map(simplify_one, value)) if isinstance(value, tuple) else simplify_one(value)
    for f in _BODY_FIELDS.get(type(s), ()):
        changes[f] = _simplify_block(getattr(s, f), namer)
    s = dataclasses.replace(s, **changes) if changes else s
    return _eliminate_in_statement(s, namer)


def _simplify_block(stmts: tuple[k.Stmt, ...], namer: _Namer) -> tuple[k.Stmt, ...]:
    simplified = tuple(out for s in stmts for out in _simplify_stmt(s, namer))
    return _reuse_reductions(simplified, namer.assignments) if namer.rewrite else simplified


# --- repeated reductions ------------------------------------------------------------------------
def _perfect_nest(loop: k.For) -> list[k.For]:
    """`loop` and the loops nested in it each as the whole body of the one above (a batch_norm
    channel's statistics walk batch, rows and columns)."""
    nest = [loop]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], k.For):
        nest.append(nest[-1].body[0])
    return nest


def _loop_reductions(loop: k.For, initial: dict[k.Var, k.Expr], assignments: Counter,
                     copies: dict[k.Var, k.Var]) -> dict[k.Var, tuple]:
    """acc -> what it computes, for each `acc = combine(acc, x)` in the innermost body of `loop`'s
    perfect nest where acc is defined before the loop (`initial`: its value), assigned nowhere else,
    read nowhere else in the loop, and x reads nothing the loop defines or assigns but the nest's
    variables. What it computes leaves out the names of acc and of the nest's variables: (initial
    value, dtype, ranges, combine, x)."""
    nest = _perfect_nest(loop)
    statements = list(_walk(loop.body))
    placeholders = {x.var: k.Var(f"_{n}", x.var.dtype) for n, x in enumerate(nest)}
    defined = frozenset(x.var for x in statements if isinstance(x, (k.Let, k.Assign, k.For))) - set(placeholders)

    def anonymous(e: k.Expr) -> k.Expr:
        for var, placeholder in placeholders.items():
            e = _replace(e, var, placeholder)
        return e

    ranges = tuple(anonymous(e) for x in nest for e in (x.begin, x.end, k.Const(x.step, x.var.dtype)))
    # The body's own definitions, read through: a one-pass variance folds `d = float64(x - shift)` and
    # `d * d`, each named once in the body (codegen/cuda_variance.py).
    local = {x.var: x.value for x in nest[-1].body if isinstance(x, k.Let) and assignments[x.var] == 0}
    found = {}
    for s in nest[-1].body:
        if not (isinstance(s, k.Assign) and s.var in initial and assignments[s.var] == 1
                and isinstance(s.value, k.Binary) and s.value.a == s.var):
            continue
        x = _inlined(s.value.b, local)
        if _reads_any(x, defined) or any(_statement_reads(y, s.var) for y in statements if y is not s):
            continue
        found[s.var] = (initial[s.var], s.var.dtype, ranges, s.value.op, _through_copies(anonymous(x), copies))
    return found


def _inlined(e: k.Expr, local: dict[k.Var, k.Expr], memo: dict | None = None) -> k.Expr:
    """`e` with the variables `local` defines replaced by their values (theirs in turn first)."""
    memo = {} if memo is None else memo
    for var, value in reversed(local.items()):
        if _reads_any(e, frozenset({var})):
            if var not in memo:
                memo[var] = _inlined(value, local, memo)
            e = _replace(e, var, memo[var])
    return e


def _without_updates(loop: k.For, dropped) -> k.For:
    """`loop`'s perfect nest with the innermost updates of the `dropped` accumulators taken out."""
    if len(loop.body) == 1 and isinstance(loop.body[0], k.For):
        return dataclasses.replace(loop, body=(_without_updates(loop.body[0], dropped),))
    return dataclasses.replace(loop, body=tuple(x for x in loop.body
                                                if not (isinstance(x, k.Assign) and x.var in dropped)))


def _statement_reads(s: k.Stmt, var: k.Var) -> bool:
    return any(_reads_any(e, frozenset({var})) for f in _STMT_EXPRESSIONS.get(type(s), ())
               for e in (getattr(s, f) if isinstance(getattr(s, f), tuple) else (getattr(s, f),)))


def _writes(s: k.Stmt) -> bool:
    """Whether `s` stores to memory or reassigns a variable (so later reads may see other values)."""
    return _writes_besides(s, ())


def _writes_besides(s: k.Stmt, accumulators) -> bool:
    """Whether `s` stores to memory or reassigns a variable other than `accumulators` (so later reads
    may see other values)."""
    return any(isinstance(x, (k.Store, k.StoreLocal, k.AtomicRMW)) or isinstance(x, k.Assign)
               and x.var not in accumulators for x in _walk((s,)))


def _reuse_reductions(stmts: tuple[k.Stmt, ...], assignments: Counter) -> tuple[k.Stmt, ...]:
    """Drops an accumulator that computes what an earlier one of the block computed, reading the
    earlier accumulator instead: var_mean sums its rows twice (for the variance's mean and for the
    mean), layer_norm once per mean, batch_norm twice in one loop nest. The later one may share its
    loop with others (the variance's sum of squares); a loop left with nothing to do goes. Definitions
    of a value an earlier one of the block defined go too (the merged tasks' row indices), so their
    sums compare equal. Only while nothing in between writes memory or reassigns a variable, and only
    accumulators assigned in their loop alone."""
    seen: dict[tuple, k.Var] = {}
    defined: dict[k.Expr, k.Var] = {}
    initial: dict[k.Var, k.Expr] = {}
    renamed: dict[k.Var, k.Var] = {}
    copies: dict[k.Var, k.Var] = {}  # compared as the variable they copy
    assigned = frozenset(assignments)
    out: list[k.Stmt] = []
    for s in stmts:
        for old, new in renamed.items():
            s = _substitute_stmt(s, old, new)
        if isinstance(s, k.Let):
            if _copies(s, assigned):  # `int i2 = p1`: one merged task names the row index, the other not
                copies[s.var] = copies.get(s.value, s.value)
            value = _through_copies(s.value, copies)
            earlier = defined.get(value) if assignments[s.var] == 0 else None
            if earlier is not None and earlier.dtype == s.var.dtype:
                renamed[s.var] = earlier
                continue
            initial[s.var] = s.value
            if assignments[s.var] == 0 and not _reads_any(s.value, assigned):
                defined.setdefault(value, s.var)
        if not isinstance(s, k.For):
            if _writes(s):
                seen.clear()
                defined.clear()
            out.append(s)
            continue
        found = _loop_reductions(s, initial, assignments, copies)
        again = {}
        for acc, computes in found.items():
            if computes in seen:
                again[acc] = seen[computes]
            else:
                seen[computes] = acc
        if _writes_besides(s, found):
            seen.clear()
            defined.clear()
        if again:
            renamed.update(again)
            out = [x for x in out if not (isinstance(x, k.Let) and x.var in again)]
            s = _without_updates(s, again)
            if not any(isinstance(x, (k.Assign, k.Store, k.StoreLocal, k.AtomicRMW)) for x in _walk(s.body)):
                continue
        out.append(s)
    return tuple(out)


def _copies(s: k.Let, assigned: frozenset[k.Var]) -> bool:
    """Whether `s` only names another variable of its type, neither of them ever reassigned."""
    return (isinstance(s.value, k.Var) and s.value.dtype == s.var.dtype and s.var not in assigned
            and s.value not in assigned)


def _through_copies(e: k.Expr, copies: dict[k.Var, k.Var]) -> k.Expr:
    for var, copied in copies.items():
        e = _replace(e, var, copied)
    return e


def reuse_reductions(task: k.Task) -> k.Task:
    """`task` with accumulators that repeat an earlier one's sum dropped (`_reuse_reductions`): for
    tasks merged after `simplify` ran, whose loops then walk one range together."""
    assignments = Counter(s.var for s in _walk(task.body) if isinstance(s, k.Assign))
    body = _reuse_reductions(task.body, assignments)
    return task if body == task.body else dataclasses.replace(task, body=body)


def _substitute_stmt(s: k.Stmt, old: k.Var, new: k.Var) -> k.Stmt:
    changes = {}
    memo: dict[k.Expr, k.Expr] = {}
    for f in _STMT_EXPRESSIONS.get(type(s), ()):
        value = getattr(s, f)
        changes[f] = tuple(_replace(v, old, new, memo) for v in value) if isinstance(value, tuple) else \
            _replace(value, old, new, memo)
    for f in _BODY_FIELDS.get(type(s), ()):
        changes[f] = tuple(_substitute_stmt(x, old, new) for x in getattr(s, f))
    return dataclasses.replace(s, **changes) if changes else s


def _walk(stmts: tuple[k.Stmt, ...]):
    for s in stmts:
        yield s
        for f in _BODY_FIELDS.get(type(s), ()):
            yield from _walk(getattr(s, f))


def simplify(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with every task simplified (see the module docstring). `BRAZE_DISABLE=simplify` skips
    the rewrites but still gives each value a statement computes twice a `Let`: the lowering builds
    expressions as DAGs (a value used twice is one node), and every later stage walks expressions as
    trees, which would cost the number of paths through the DAG, exponential in the depth of reuse."""
    rewrite = not config.disabled("simplify")
    statements = [s for t in kernel.tasks for s in _walk(t.body)]
    assigned = frozenset(s.var for s in statements if isinstance(s, k.Assign)) | frozenset(
        s.result for s in statements if isinstance(s, k.AtomicRMW) and s.result is not None)
    names = {s.var.name for s in statements if isinstance(s, (k.Let, k.For, k.Alloc))}
    names |= {t.var.name for t in kernel.tasks if t.var is not None}
    namer = _Namer(names, assigned, rewrite)
    namer.assignments = Counter(s.var for s in statements if isinstance(s, k.Assign))
    bound = simplify_expr if rewrite else (lambda e: e)
    tasks = tuple(dataclasses.replace(t, begin=bound(t.begin), end=bound(t.end),
                                      body=_simplify_block(t.body, namer)) for t in kernel.tasks)
    return dataclasses.replace(kernel, tasks=tasks)
