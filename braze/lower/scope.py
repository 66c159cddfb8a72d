"""Scopes of the lowering: nested statement lists with the loop variables they define and the
values already computed in them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from braze.kir import nodes as k


@dataclass(eq=False)
class Scope:
    """A statement list under construction. `kind` is task, element (a loop over an output's
    dimension), reduction (a loop over reduced dimensions) or branch."""

    kind: str
    stmts: list[k.Stmt] = field(default_factory=list)
    defines: set[k.Var] = field(default_factory=set)
    iteration: set[k.Var] = field(default_factory=set)  # the indices of the output element being computed
    memo: dict = field(default_factory=dict)


def free_vars(e: k.Expr) -> set[k.Var]:
    """The variables an expression reads."""
    if isinstance(e, k.Var):
        return {e}
    found: set[k.Var] = set()
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        if isinstance(child, k.Expr):
            found |= free_vars(child)
        elif isinstance(child, tuple):
            for c in child:
                if isinstance(c, k.Expr):
                    found |= free_vars(c)
    return found


class ScopeStack:
    """The scopes from the task down to the current statement list."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []
        self._names = 0

    def fresh(self, prefix: str, dtype) -> k.Var:
        self._names += 1
        return k.Var(f"{prefix}{self._names}", dtype)

    @property
    def current(self) -> Scope:
        return self.scopes[-1]

    def emit(self, stmt: k.Stmt) -> None:
        self.current.stmts.append(stmt)
        if isinstance(stmt, k.Let):  # a value defined here is usable only here and deeper
            self.current.defines.add(stmt.var)

    def push(self, kind: str, defines: set[k.Var] = frozenset()) -> Scope:
        scope = Scope(kind, defines=set(defines))
        self.scopes.append(scope)
        return scope

    def pop(self) -> Scope:
        return self.scopes.pop()

    def lookup(self, key) -> k.Expr | None:
        for scope in reversed(self.scopes):
            if key in scope.memo:
                return scope.memo[key]
        return None

    def recomputed(self, exprs: tuple[k.Expr, ...], depth: int) -> bool:
        """Whether a value of `exprs`, emitted at `depth`, would run again for elements that differ
        only in an index it does not read (a per-element recomputation of a reduction)."""
        needed = set().union(*map(free_vars, exprs)) if exprs else set()
        return any(scope.iteration - needed for scope in self.scopes[: depth + 1])

    def home_of(self, exprs: tuple[k.Expr, ...]) -> int:
        """The depth of the innermost scope defining a variable that `exprs` read (0: the task)."""
        needed = set().union(*map(free_vars, exprs)) if exprs else set()
        for depth in range(len(self.scopes) - 1, -1, -1):
            if self.scopes[depth].defines & needed:
                return depth
        return 0


def substitute(e: k.Expr, old: k.Var, new: k.Expr) -> k.Expr:
    """`e` with every read of `old` replaced by `new`."""
    if e == old:
        return new
    fields = getattr(e, "__dataclass_fields__", {})
    changes = {}
    for name in fields:
        child = getattr(e, name)
        if isinstance(child, k.Expr):
            changes[name] = substitute(child, old, new)
        elif isinstance(child, tuple) and any(isinstance(c, k.Expr) for c in child):
            changes[name] = tuple(substitute(c, old, new) if isinstance(c, k.Expr) else c for c in child)
    return dataclasses.replace(e, **changes) if changes else e
