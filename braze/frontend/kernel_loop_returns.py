"""A `return` inside a loop of a `@bz.func` helper, written as Python runs it: it leaves the loops it is in
and the helper.

    for k in range(3):                        found = 0
        if x > k:                             for k in range(3):
            return 10 + k          becomes        if x > k:
    return 0                                          value_1 = 10 + k; found = 1; break
                                              if found == 1:
                                                  return value_1
                                              return 0

Each loop it is nested in breaks after it (`if found != 0: break`), and each `return value_k` after the
outermost loop is an early return like any other, which braze/frontend/kernel_calls.py folds into a branch. Returns
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
    return [_assign(_FOUND, ast.Constant(0), stmts[0]), *_lifted(stmts)]


def _lifted(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """`stmts` (not in a loop) with each loop that returns followed by the returns it may have taken."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, _LOOPS) and _returns_inside(stmt):
            sites: list[ast.Return] = []
            loop = copy.copy(stmt)
            loop.body = _breaking(stmt.body, sites)
            out.append(loop)
            for number, site in enumerate(sites, start=1):  # `if found == k: return value_k`, an early return
                returned = _node(ast.Return(None if site.value is None else _name(_value_name(site))), site)
                out.append(_node(ast.If(test=_found_is(ast.Eq(), number), body=[returned], orelse=[]), site))
        elif isinstance(stmt, ast.If):
            branch = copy.copy(stmt)
            branch.body, branch.orelse = _lifted(stmt.body), _lifted(stmt.orelse)
            out.append(branch)
        else:
            out.append(stmt)
    return out


def _breaking(stmts: list[ast.stmt], sites: list[ast.Return]) -> list[ast.stmt]:
    """A loop body with each `return v` as `value_k = v; found = k; break` (k numbers the return among
    `sites`, and each has a local of its own: two returns may give values of two types, which the returns
    after the loop then combine as any early returns), and each loop nested in it that returns followed by
    `if found != 0: break`."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            sites.append(stmt)
            if stmt.value is not None:
                out.append(_assign(_value_name(stmt), stmt.value, stmt))
            out += [_assign(_FOUND, ast.Constant(len(sites)), stmt), _node(ast.Break(), stmt)]
        elif isinstance(stmt, ast.If):
            branch = copy.copy(stmt)
            branch.body = _breaking(stmt.body, sites)
            branch.orelse = _breaking(stmt.orelse, sites)
            out.append(branch)
        elif isinstance(stmt, _LOOPS) and _returns_inside(stmt):
            loop = copy.copy(stmt)
            loop.body = _breaking(stmt.body, sites)
            out += [loop, _node(ast.If(test=_found_is(ast.NotEq(), 0), body=[_node(ast.Break(), stmt)], orelse=[]),
                                stmt)]
        else:
            out.append(stmt)
    return out


def _value_name(site: ast.Return) -> str:
    return f"{_VALUE}_{site.lineno}_{site.col_offset}"


def _found_is(op: ast.cmpop, number: int) -> ast.Compare:
    return ast.Compare(left=_name(_FOUND), ops=[op], comparators=[ast.Constant(number)])


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
