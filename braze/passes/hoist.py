"""Row-invariant work out of the loops of a task (for the GPU code generator).

A normalization's last loop computes `(x - sum / n) * rsqrt(var / n + eps)` for every element,
though only `x` changes along the row. `hoist_invariants` computes such parts once, before the loop,
into `Let`s: the same operations on the same values, so the same bits. Only pure expressions move
(no loads), out of the top-level loops of a task (the loops a GPU row spreads over its lanes).

`reciprocal_divisions` goes one step further and is not bit-exact: a float32 quotient by a row
invariant that is only stored (softmax's `e / sum`) becomes a product with the reciprocal, computed
once. That is one rounding more (at most about 1.5 units in the last place, against the four or more
of float32 results' tolerance) for a multiply instead of a division per element. A divisor whose
reciprocal is not a normal float32 (|d| below 2**-126 or above 2**126: it would be infinite or lose
bits) is first scaled by a power of two `s` into range, `x / d = (x * (1 / (d * s))) * s`; for the
others `s` is 1, which changes no bit. Two multiplies an element and no branch: choosing between the
product and a division per element cost a branch around each element's division.
"""

from __future__ import annotations

import dataclasses
import itertools

from braze import config
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

    def __init__(self, loop: k.For, names, earlier: dict[k.Expr, k.Var] | None = None) -> None:
        self.variant = _variant_vars(loop)
        self.names = names
        self.earlier = earlier or {}  # values an earlier loop's Let holds, still valid here
        self.lets: dict[k.Expr, k.Var] = {}

    def expr(self, e: k.Expr) -> k.Expr:
        if isinstance(e, _PURE) and _invariant(e, self.variant):
            if e in self.earlier:
                return self.earlier[e]
            if e not in self.lets:
                self.lets[e] = k.Var(next(self.names), e.dtype)
            return self.lets[e]
        return _map(e, self.expr)

    def stmt(self, s: k.Stmt) -> k.Stmt:
        """`s` with its invariant values hoisted, but for the bounds of a loop inside that read only
        parameters (batch_norm's H * W): the code generator walks such a nest as one flat range whose
        length the host computes from the bounds (cuda_plan.lane_nest)."""
        if not isinstance(s, k.For):
            return _stmt_exprs(s, self.expr)
        begin, end = (e if not _vars(e) else self.expr(e) for e in (s.begin, s.end))
        body = tuple(self.stmt(inner) for inner in s.body)
        return dataclasses.replace(s, begin=begin, end=end, body=body)

    def loop(self, loop: k.For) -> list[k.Stmt]:
        moved = self.invariant_lets(loop)
        body = tuple(self.stmt(s) for s in loop.body if s not in moved)
        if not self.lets and not moved:
            return [dataclasses.replace(loop, body=body) if body != loop.body else loop]
        lets = [*moved, *(k.Let(var, value) for value, var in self.lets.items())]
        hoisted = {let.var for let in lets} | set(self.earlier.values())
        return [*lets, dataclasses.replace(loop, body=_without_copies(body, hoisted))]

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


def _without_copies(stmts: tuple[k.Stmt, ...], hoisted: set[k.Var]) -> tuple[k.Stmt, ...]:
    """`stmts` with each `Let` left holding just a hoisted value (a nested loop's own `cse = inv`)
    dropped and its variable read as that value: indices then read only values defined before the
    loop, so the code generator may move the loop's accesses as vectors (cuda_plan.vector_accesses)."""
    assigned = {s.var for s in _walk(stmts) if isinstance(s, k.Assign)}
    copies = {s.var: s.value for s in _walk(stmts) if isinstance(s, k.Let) and s.value in hoisted
              and s.var not in assigned}
    if not copies:
        return stmts

    def read(e: k.Expr) -> k.Expr:
        return copies[e] if isinstance(e, k.Var) and e in copies else _map(e, read)
    return _dropped_lets(tuple(_stmt_exprs(s, read) for s in stmts), set(copies))


def _dropped_lets(stmts: tuple[k.Stmt, ...], dropped: set[k.Var]) -> tuple[k.Stmt, ...]:
    kept = []
    for s in stmts:
        if isinstance(s, k.Let) and s.var in dropped:
            continue
        bodies = {name: _dropped_lets(getattr(s, name), dropped) for name in ("body", "then", "orelse")
                  if isinstance(getattr(s, name, None), tuple)}
        kept.append(dataclasses.replace(s, **bodies) if bodies else s)
    return tuple(kept)


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
    """Row-invariant pure expressions of the top-level loops of each task, computed once before them.
    A value an earlier loop of the task hoisted is read from its `Let` again where nothing it reads
    is ever reassigned: loops over one row then index it through one variable (a sliced row's start),
    as the rewrites that match loops against each other expect (cuda_online)."""
    names = _fresh_names(kernel, "inv")
    tasks = []
    for task in kernel.tasks:
        reassigned = {s.var for s in _walk(task.body) if isinstance(s, k.Assign)}
        earlier: dict[k.Expr, k.Var] = {}

        def hoist(loop: k.For, earlier=earlier, reassigned=reassigned) -> list[k.Stmt]:
            hoister = _Hoister(loop, names, earlier)
            stmts = hoister.loop(loop)
            if not config.disabled("shared_invariants"):
                earlier.update((value, var) for value, var in hoister.lets.items()
                               if not set(_vars(value)) & reassigned)
            return stmts

        tasks.append(_rewrite_loops(dataclasses.replace(kernel, tasks=(task,)), hoist).tasks[0])
    return dataclasses.replace(kernel, tasks=tuple(tasks))


def _vars(e: k.Expr) -> list[k.Var]:
    return [e] if isinstance(e, k.Var) else [v for child in _children(e) for v in _vars(child)]


def reciprocal_divisions(kernel: k.Kernel) -> k.Kernel:
    """Stored float32 quotients by a row invariant, as products with its reciprocal (see the module)."""
    names = _fresh_names(kernel, "rcp")

    def rewrite(loop: k.For) -> list[k.Stmt]:
        variant, reciprocals = _variant_vars(loop), {}
        body = tuple(new for s in loop.body for new in _reciprocal_store(s, variant, reciprocals, names))
        if not reciprocals:
            return [loop]
        lets = [let for d, (rcp, scale) in reciprocals.items() for let in _reciprocal_lets(d, rcp, scale)]
        return [*lets, dataclasses.replace(loop, body=body)]

    return _rewrite_loops(kernel, rewrite)


# Scaled by these powers of two, a divisor below 2**-126 (down to the smallest subnormal, 2**-149) or
# above 2**126 (up to the largest float32, below 2**128) has a normal reciprocal, exactly.
_SCALE_UP, _SCALE_DOWN = 2.0**64, 2.0**-64


def _reciprocal_lets(d: k.Expr, reciprocal: k.Var, scale: k.Var) -> list[k.Let]:
    """`scale`: 1 where `1 / d` is a normal float32, else the power of two that brings `d` into that
    range (NaN: 1); `reciprocal = 1 / (d * scale)`."""
    f32, size = dt.float32, k.Unary("abs", d, dt.float32)
    tiny = k.Binary("lt", size, k.Const(2.0**-126, f32), dt.bool_)
    huge = k.Binary("gt", size, k.Const(2.0**126, f32), dt.bool_)
    factor = k.Ternary("where", tiny, k.Const(_SCALE_UP, f32),
                       k.Ternary("where", huge, k.Const(_SCALE_DOWN, f32), k.Const(1.0, f32), f32), f32)
    scaled = k.Binary("mul", d, scale, f32)
    return [k.Let(scale, factor), k.Let(reciprocal, k.Binary("truediv", k.Const(1.0, f32), scaled, f32))]


def _reciprocal_store(s: k.Stmt, variant: set[k.Var], reciprocals: dict, names) -> list[k.Stmt]:
    """A store of `x / d` (through casts), float32 and `d` row-invariant, as `q = x` and a store of
    `(q * reciprocal) * scale` (_reciprocal_lets). `x` goes into a variable first so that its loads
    stay unconditional (the GPU code then reads them 16 bytes at a time, or from a row cache)."""
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
        reciprocals[value.b] = (k.Var(next(names), dt.float32), k.Var(next(names), dt.float32))
    reciprocal, scale = reciprocals[value.b]
    numerator = k.Var(next(names), dt.float32)
    quotient: k.Expr = k.Binary("mul", k.Binary("mul", numerator, reciprocal, dt.float32), scale, dt.float32)
    for dtype in reversed(casts):
        quotient = k.Cast(quotient, dtype)
    return [k.Let(numerator, value.a), dataclasses.replace(s, value=quotient)]
