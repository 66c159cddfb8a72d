"""A `return` inside a loop of a `@bz.func` helper, written as Python runs it: it leaves the loops it is in
and the helper.

    for k in range(3):                        found = False
        if x > k:                             for k in range(3):
            return 10 + k          becomes        if x > k:
    return 0                                          value = 10 + k; found = True; break
                                              if found:
                                                  return value
                                              return 0

Each loop it is nested in breaks after it (`if found: break`), and the `return value` after the outermost
loop is an early return like any other, which braze/frontend/kernel_calls.py folds into a branch. Returns
in a `bz.static` loop (unrolled, where `break` has no meaning), a multi-dimensional `bz.ndrange` loop or a
loop's `else` clause are left as they are, and the translator says so."""

from __future__ import annotations

import ast
import copy

_LOOPS = (ast.For, ast.While)
_FOUND, _VALUE = "_bz_returned", "_bz_return_value"  # no helper's own name: a prefix braze keeps


def without_loop_returns(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """A helper body with each `return` inside a loop turned into a flag, a value and breaks."""
    if not any(_returns_inside(s) for s in stmts if isinstance(s, _LOOPS + (ast.If,))):
        return stmts
    return [_assign(_FOUND, ast.Constant(False), stmts[0]), *_lifted(stmts)]


def _lifted(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """`stmts` (not in a loop) with each loop that returns followed by the return it found."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, _LOOPS) and _returns_inside(stmt):
            value = f"{_VALUE}_{stmt.lineno}"  # a local per loop: two loops may return values of two types
            loop = copy.copy(stmt)
            loop.body = _breaking(stmt.body, value)
            out += [loop, _node(ast.If(test=_name(_FOUND), body=[_node(ast.Return(_name(value)
                                                                                   if _returns_value(stmt) else None),
                                                                         stmt)], orelse=[]), stmt)]
        elif isinstance(stmt, ast.If):
            branch = copy.copy(stmt)
            branch.body, branch.orelse = _lifted(stmt.body), _lifted(stmt.orelse)
            out.append(branch)
        else:
            out.append(stmt)
    return out


def _breaking(stmts: list[ast.stmt], value: str) -> list[ast.stmt]:
    """A loop body with each `return v` as `value = v; found = True; break`, and each loop nested in it
    that returns followed by `if found: break`."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                out.append(_assign(value, stmt.value, stmt))
            out += [_assign(_FOUND, ast.Constant(True), stmt), _node(ast.Break(), stmt)]
        elif isinstance(stmt, ast.If):
            branch = copy.copy(stmt)
            branch.body, branch.orelse = _breaking(stmt.body, value), _breaking(stmt.orelse, value)
            out.append(branch)
        elif isinstance(stmt, _LOOPS) and _returns_inside(stmt):
            loop = copy.copy(stmt)
            loop.body = _breaking(stmt.body, value)
            out += [loop, _node(ast.If(test=_name(_FOUND), body=[_node(ast.Break(), stmt)], orelse=[]), stmt)]
        else:
            out.append(stmt)
    return out


def _returns_inside(stmt: ast.stmt) -> bool:
    """Whether a loop's body (or an `if`'s branches) has a return inside a loop we can break out of."""
    if isinstance(stmt, _LOOPS):
        return not _is_static(stmt) and any(_has_return(s) for s in stmt.body)
    if isinstance(stmt, ast.If):
        return any(_returns_inside(s) for s in (*stmt.body, *stmt.orelse))
    return False


def _has_return(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Return):
        return True
    if isinstance(stmt, ast.If):
        return any(_has_return(s) for s in (*stmt.body, *stmt.orelse))
    return isinstance(stmt, _LOOPS) and _returns_inside(stmt)


def _returns_value(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(stmt))


def _is_static(loop: ast.stmt) -> bool:
    """`for v in bz.static(...)` (unrolled at compile time) or `for i, j in bz.ndrange(n, m)` (loops nested
    as one, which no `break` leaves): loops a return cannot break out of."""
    call = loop.iter if isinstance(loop, ast.For) else None
    func = call.func if isinstance(call, ast.Call) else None
    name = getattr(func, "attr", getattr(func, "id", "")) if isinstance(func, (ast.Attribute, ast.Name)) else ""
    return name == "static" or name == "ndrange" and len(call.args) > 1


def _name(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _assign(name: str, value: ast.expr, at: ast.AST) -> ast.Assign:
    return _node(ast.Assign(targets=[ast.Name(name, ast.Store())], value=value), at)


def _node(node: ast.AST, at: ast.AST) -> ast.AST:
    return ast.fix_missing_locations(ast.copy_location(node, at))
