"""A loop's `else` clause, written as Python runs it: the clause runs when the loop ends without a `break`.

`for j in range(n): ... break ... else: found = -1` becomes a flag set false before the loop, set true by
each `break` of that loop (not the `break`s of loops nested in it), and an `if not flag:` after the loop,
so the code generators see only loops, branches and locals."""

from __future__ import annotations

import ast
import copy

_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def without_else(loop: ast.For | ast.While) -> list[ast.stmt]:
    """`loop` and its `else` clause as statements with no `else` on the loop."""
    flag = f"_bz_broke_{loop.lineno}_{loop.col_offset}"
    bare = copy.copy(loop)
    bare.body, bare.orelse = _flagging_breaks(loop.body, flag), []
    before = _assign(flag, False, loop)
    after = ast.If(test=ast.UnaryOp(ast.Not(), ast.Name(flag, ast.Load())), body=loop.orelse, orelse=[])
    return [before, bare, ast.fix_missing_locations(ast.copy_location(after, loop))]


def _assign(name: str, value: bool, at: ast.AST) -> ast.Assign:
    node = ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.Constant(value))
    return ast.fix_missing_locations(ast.copy_location(node, at))


def _flagging_breaks(stmts: list[ast.stmt], flag: str) -> list[ast.stmt]:
    """`stmts` with each `break` that leaves this loop preceded by `flag = True`."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Break):
            out.append(_assign(flag, True, stmt))
            out.append(stmt)
        elif isinstance(stmt, _LOOPS):  # a `break` in its body leaves it; one in its `else` leaves this loop
            nested = copy.copy(stmt)
            nested.orelse = _flagging_breaks(stmt.orelse, flag)
            out.append(nested)
        elif isinstance(stmt, _FUNCTIONS):
            out.append(stmt)
        else:
            out.append(_with_blocks_flagged(stmt, flag))
    return out


def _with_blocks_flagged(stmt: ast.stmt, flag: str) -> ast.stmt:
    """A copy of a compound statement (`if`, `with`, `try`, `match`) with its blocks' breaks flagged."""
    blocks = [field for field in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, field, None), list)]
    handlers, cases = getattr(stmt, "handlers", None), getattr(stmt, "cases", None)
    if not blocks and not handlers and not cases:
        return stmt
    flagged = copy.copy(stmt)
    for field in blocks:
        setattr(flagged, field, _flagging_breaks(getattr(stmt, field), flag))
    for field, parts in (("handlers", handlers), ("cases", cases)):
        if parts:
            setattr(flagged, field, [_part_flagged(part, flag) for part in parts])
    return flagged


def _part_flagged(part: ast.AST, flag: str) -> ast.AST:
    flagged = copy.copy(part)
    flagged.body = _flagging_breaks(part.body, flag)
    return flagged
