"""Scopes of the lowering: nested statement lists with the loop variables they define and the
values already computed in them."""

from __future__ import annotations

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
    condition: k.Expr | None = None  # a branch's: what decides whether it runs (its If's condition)


def _children(e: k.Expr):
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        yield from (c for c in (child if isinstance(child, tuple) else (child,)) if isinstance(c, k.Expr))


def _divisor_only(e: k.Expr):
    """A floor division's divisor alone (by anything but 1); any other node's children."""
    if isinstance(e, k.Binary) and e.op == "floordiv" and not (isinstance(e.b, k.Const) and e.b.value == 1):
        return (e.b,)
    return _children(e)


def _vars_read(e: k.Expr, memo: dict, children) -> frozenset[k.Var]:
    found = memo.get(e)
    if found is None:
        found = frozenset((e,)) if isinstance(e, k.Var) else \
            frozenset().union(*(_vars_read(c, memo, children) for c in children(e)))
        memo[e] = found
    return found


def free_vars(e: k.Expr, memo: dict | None = None) -> frozenset[k.Var]:
    """The variables an expression reads. `memo` (node -> its variables) makes a DAG cost its
    distinct nodes, not its paths: pass one dict to every call of a lowering."""
    return _vars_read(e, {} if memo is None else memo, _children)


def read_whole(e: k.Expr, memo: dict | None = None) -> frozenset[k.Var]:
    """The variables `e` reads other than through the dividend of a floor division. Under `v // n`
    neighbouring values of `v` share a result: a value whose index reads an element index only so
    (a group's statistics indexed through a reshape) is the same for a run of elements."""
    return _vars_read(e, {} if memo is None else memo, _divisor_only)


class ScopeStack:
    """The scopes from the task down to the current statement list."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []
        self._names = 0
        self._free_vars: dict[k.Expr, frozenset[k.Var]] = {}
        self._read_whole: dict[k.Expr, frozenset[k.Var]] = {}

    def needed(self, exprs: tuple[k.Expr, ...]) -> frozenset[k.Var]:
        """The variables `exprs` read."""
        return frozenset().union(*(free_vars(e, self._free_vars) for e in exprs))

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

    def push(self, kind: str, defines: set[k.Var] = frozenset(), condition: k.Expr | None = None) -> Scope:
        scope = Scope(kind, defines=set(defines), condition=condition)
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
        needed = self.needed(exprs)
        if any(scope.iteration - needed for scope in self.scopes[: depth + 1]):
            return True
        # An element index read only through a floor division: a run of elements shares the value.
        whole = frozenset().union(*(read_whole(e, self._read_whole) for e in exprs))
        return any(scope.iteration & needed - whole for scope in self.scopes[: depth + 1])

    def leaves_branch(self, depth: int) -> bool:
        """Whether a value emitted at `depth` from the current scope leaves a branch whose condition
        reads a variable defined at `depth` or above: an index the value may read too, which the
        branch kept in range (a pad's or cat's test of the row) and which, out of the branch, may not be."""
        outer = set().union(*(scope.defines for scope in self.scopes[: depth + 1]))
        return any(scope.condition is not None and self.needed((scope.condition,)) & outer
                   for scope in self.scopes[depth + 1:])

    def home_of(self, exprs: tuple[k.Expr, ...]) -> int:
        """The depth of the innermost scope defining a variable that `exprs` read (0: the task)."""
        needed = self.needed(exprs)
        for depth in range(len(self.scopes) - 1, -1, -1):
            if self.scopes[depth].defines & needed:
                return depth
        return 0


