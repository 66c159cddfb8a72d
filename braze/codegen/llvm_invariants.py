"""Values every index of a CPU task computes alike, computed once before its loop.

A task's LLVM function loops over its index range; an expression of the body that reads neither the
index nor anything the task writes (a chain of ops on one broadcast element, `y * 0.5 + 0.25` in
bfloat16 six times over) is the same at every index. LLVM's own loop-invariant code motion would
hoist it, but its loop vectorizer meets it first and takes time exponential in the chain's length
(a second for four bfloat16 steps, a minute for six). Emitted before the loop, the value is one SSA
value the loop reads, and the vectorizer sees a plain loop.

Only the task's leading straight-line statements (`Let`s and `Store`s, before any branch or loop
that could skip the rest) are searched, so every hoisted value is one the loop computes at each
index anyway; and the loop's preheader computes them only when the range is not empty, so a hoisted
load reads nothing the loop would not have read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from braze.kir import nodes as k

_LEAVES = (k.Const, k.ScalarRef, k.ArrayExtent, k.ArrayStride)


def task_invariants(task: k.Task) -> list[k.Expr]:
    """The largest index-invariant expressions of the task's leading straight-line statements that do
    some work (an op, a cast or a load), each once, in the order they are met."""
    written = _written(task.body)
    invariant: dict[k.Expr, bool] = {}
    found: dict[k.Expr, None] = {}
    for s in task.body:
        if not isinstance(s, (k.Let, k.Store)):
            break
        for e in (s.value, *getattr(s, "indices", ())):
            _collect(e, written, invariant, found)
    return list(found)


def _collect(e: k.Expr, written: frozenset[str], invariant: dict, found: dict) -> None:
    if _is_invariant(e, written, invariant):
        if not isinstance(e, _LEAVES):
            found.setdefault(e)
        return
    for child in _children(e):
        _collect(child, written, invariant, found)


def _is_invariant(e: k.Expr, written: frozenset[str], memo: dict[k.Expr, bool]) -> bool:
    """Whether `e` reads no variable, no local array and no array the task writes."""
    if e not in memo:
        if isinstance(e, (k.Var, k.LoadLocal)):
            memo[e] = False
        elif isinstance(e, k.Load) and e.param.name in written:
            memo[e] = False
        else:
            memo[e] = all(_is_invariant(child, written, memo) for child in _children(e))
    return memo[e]


def _children(e: k.Expr) -> Iterator[k.Expr]:
    for field in dataclasses.fields(e):
        value = getattr(e, field.name)
        if isinstance(value, k.Expr):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, k.Expr))


def _written(stmts: tuple[k.Stmt, ...]) -> frozenset[str]:
    """The arrays any statement of the task stores to or updates atomically, at any depth."""
    names: set[str] = set()
    for s in stmts:
        if isinstance(s, (k.Store, k.AtomicRMW)):
            names.add(s.param.name)
        elif isinstance(s, k.If):
            names |= _written(s.then + s.orelse)
        elif isinstance(s, (k.For, k.While)):
            names |= _written(s.body)
    return frozenset(names)
