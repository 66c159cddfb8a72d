"""Row-invariant work out of the loops of a task (for the GPU code generator).

A normalization's last loop computes `(x - sum / n) * rsqrt(var / n + eps)` for every element,
though only `x` changes along the row. `hoist_invariants` computes such parts once, before the loop,
into `Let`s: the same operations on the same values, so the same bits. Only pure expressions move
(no loads), out of the top-level loops of a task (the loops a GPU row spreads over its lanes).

`reciprocal_divisions` goes one step further and is not bit-exact: a float32 quotient by a row
invariant that is only stored (softmax's `e / sum`) becomes a product with the reciprocal, computed
once. That is one rounding more (at most about 1.5 units in the last place, against the four or more
of float32 results' tolerance) for a multiply instead of a division per element. Rows whose divisor
has no normal reciprocal (|d| below 2**-126 or above 2**126: the reciprocal would be infinite or
lose bits) divide as before.
"""

from __future__ import annotations

import dataclasses
import itertools

from braze import dtypes as dt
from braze.kir import nodes as k

_PURE = (k.Unary, k.Binary, k.Ternary, k.Cast)


def _children(e: k.Expr) -> list[k.Expr]:
    found = []
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, k.Expr):
                found.append(v)
    return found


def _map(e: k.Expr, fn) -> k.Expr:
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, k.Expr):
            changes[f.name] = fn(value)
        elif isinstance(value, tuple) and any(isinstance(v, k.Expr) for v in value):
            changes[f.name] = tuple(fn(v) if isinstance(v, k.Expr) else v for v in value)
    return dataclasses.replace(e, **changes) if changes else e


def _stmt_exprs(s: k.Stmt, fn) -> k.Stmt:
    """`s` with `fn` applied to each of its expressions, and to those of the statements it holds."""
    changes = {}
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if isinstance(value, k.Expr) and f.name != "var":
            changes[f.name] = fn(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], k.Expr):
            changes[f.name] = tuple(fn(v) for v in value)
        elif isinstance(value, tuple) and value and isinstance(value[0], k.Stmt):
            changes[f.name] = tuple(_stmt_exprs(v, fn) for v in value)
    return dataclasses.replace(s, **changes) if changes else s


def _walk(stmts):
    for s in stmts:
        yield s
        for name in ("body", "then", "orelse"):
            yield from _walk(getattr(s, name, ()))


def _variant_vars(loop: k.For) -> set[k.Var]:
    """The variables that may change from one iteration of `loop` to the next."""
    found = {loop.var}
    for s in _walk(loop.body):
        if isinstance(s, (k.Let, k.Assign, k.Alloc)):
            found.add(s.var)
        elif isinstance(s, k.For):
            found.add(s.var)
        elif isinstance(s, k.AtomicRMW) and s.result is not None:
            found.add(s.result)
    return found


def _invariant(e: k.Expr, variant: set[k.Var]) -> bool:
    if isinstance(e, k.Var):
        return e not in variant
    if isinstance(e, (k.Load, k.LoadLocal, k.Philox)):
        return False
    return all(_invariant(c, variant) for c in _children(e))


class _Hoister:
    """Moves invariant pure expressions of one loop into `Let`s before it (one per distinct value)."""

    def __init__(self, loop: k.For, names) -> None:
        self.variant = _variant_vars(loop)
        self.names = names
        self.lets: dict[k.Expr, k.Var] = {}

    def expr(self, e: k.Expr) -> k.Expr:
        if isinstance(e, _PURE) and _invariant(e, self.variant):
            if e not in self.lets:
                self.lets[e] = k.Var(next(self.names), e.dtype)
            return self.lets[e]
        return _map(e, self.expr)

    def loop(self, loop: k.For) -> list[k.Stmt]:
        moved = self.invariant_lets(loop)
        body = tuple(_stmt_exprs(s, self.expr) for s in loop.body if s not in moved)
        if not self.lets and not moved:
            return [loop]
        lets = [*moved, *(k.Let(var, value) for value, var in self.lets.items())]
        return [*lets, dataclasses.replace(loop, body=body)]

    def invariant_lets(self, loop: k.For) -> list[k.Let]:
        """The loop's own `Let`s of invariant values (never reassigned): they move out whole, and
        their variables become invariant."""
        assigned = {s.var for s in _walk(loop.body) if isinstance(s, k.Assign)}
        moved = []
        for s in loop.body:
            if isinstance(s, k.Let) and s.var not in assigned and _invariant(s.value, self.variant - {s.var}):
                moved.append(s)
                self.variant.discard(s.var)
        return moved


def _fresh_names(kernel: k.Kernel, prefix: str):
    taken = {s.var.name for t in kernel.tasks for s in _walk(t.body) if hasattr(s, "var") and s.var is not None}
    return (name for name in (f"{prefix}{n}" for n in itertools.count()) if name not in taken)


def _rewrite_loops(kernel: k.Kernel, rewrite) -> k.Kernel:
    """The kernel with each top-level loop of each task replaced by `rewrite(loop)` (statements)."""
    tasks = []
    for task in kernel.tasks:
        body = []
        for s in task.body:
            body.extend(rewrite(s) if isinstance(s, k.For) else [s])
        tasks.append(dataclasses.replace(task, body=tuple(body)))
    return dataclasses.replace(kernel, tasks=tuple(tasks))


def hoist_invariants(kernel: k.Kernel) -> k.Kernel:
    """Row-invariant pure expressions of the top-level loops of each task, computed once before them."""
    names = _fresh_names(kernel, "inv")
    return _rewrite_loops(kernel, lambda loop: _Hoister(loop, names).loop(loop))


def _reciprocal_store(s: k.Stmt, variant: set[k.Var], reciprocals: dict, names) -> list[k.Stmt]:
    """A store of `x / d` (through casts), float32 and `d` row-invariant, as `q = x` and a store of
    `q * (1 / d)` where that reciprocal is normal, else of `q / d`. `x` goes into a variable first so
    that its loads stay unconditional (the GPU code then reads them 16 bytes at a time, or from a row
    cache)."""
    if not isinstance(s, k.Store):
        return [s]
    casts, value = [], s.value
    while isinstance(value, k.Cast):
        casts.append(value.dtype)
        value = value.x
    if not (isinstance(value, k.Binary) and value.op == "truediv" and value.dtype == dt.float32
            and _invariant(value.b, variant) and not _invariant(value.a, variant)):
        return [s]
    if value.b not in reciprocals:
        reciprocals[value.b] = (k.Var(next(names), dt.float32), k.Var(next(names), dt.bool_))
    reciprocal, normal = reciprocals[value.b]
    numerator = k.Var(next(names), dt.float32)
    product = k.Binary("mul", numerator, reciprocal, dt.float32)
    quotient: k.Expr = k.Ternary("where", normal, product, k.Binary("truediv", numerator, value.b, dt.float32),
                                 dt.float32)
    for dtype in reversed(casts):
        quotient = k.Cast(quotient, dtype)
    return [k.Let(numerator, value.a), dataclasses.replace(s, value=quotient)]


def reciprocal_divisions(kernel: k.Kernel) -> k.Kernel:
    """Stored float32 quotients by a row invariant, as products with its reciprocal (see the module)."""
    names = _fresh_names(kernel, "rcp")

    def rewrite(loop: k.For) -> list[k.Stmt]:
        variant, reciprocals = _variant_vars(loop), {}
        body = tuple(new for s in loop.body for new in _reciprocal_store(s, variant, reciprocals, names))
        if not reciprocals:
            return [loop]
        lets = [let for d, (rcp, normal) in reciprocals.items() for let in _reciprocal_lets(d, rcp, normal)]
        return [*lets, dataclasses.replace(loop, body=body)]

    return _rewrite_loops(kernel, rewrite)


def _reciprocal_lets(d: k.Expr, reciprocal: k.Var, normal: k.Var) -> list[k.Let]:
    """`reciprocal = 1 / d`, and `normal`: whether that reciprocal is a normal float32."""
    f32, size = dt.float32, k.Unary("abs", d, dt.float32)
    in_range = k.Binary("logical_and", k.Binary("ge", size, k.Const(2.0**-126, f32), dt.bool_),
                        k.Binary("le", size, k.Const(2.0**126, f32), dt.bool_), dt.bool_)
    return [k.Let(reciprocal, k.Binary("truediv", k.Const(1.0, f32), d, f32)), k.Let(normal, in_range)]
