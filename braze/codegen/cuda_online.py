"""Rewrites of a row's loops for rows too long to keep on chip (log_softmax, cross_entropy).

`fuse_online_softmax`: a row's maximum and its sum of exponentials in one pass.

The lowering computes them as two loops over the row:

    m = -inf;  for r: m = reduce_maximum(m, g(r))
    s = 0;     for r: s = reduce_add(s, exp(g(r) - m))

For rows too long to keep on chip (cross_entropy over 32000 classes) the second loop reads the row
from DRAM again. This rewrite makes them one loop with an online sum, rescaled whenever the maximum
grows (`bz_online_add` in prelude.cuh):

    s = 0;  for r: v = g(r); s = online_softmax_add(s, m, v); m = reduce_maximum(m, v)

and the lanes of a row combine the (m, s) pairs (`BzOnlineCombine`). Only loops along a unit-stride
axis are rewritten (rows spread over lanes), inside range_for tasks and inside the single loop of a
serial task (cross_entropy's rows); and not where a later loop reads the exponentials again (softmax:
see _exponentials_read_later).
"""

from __future__ import annotations

import dataclasses

from braze.codegen.cuda_plan import ONLINE_ADD, exprs_of, sub_exprs, walk, walks_unit_stride
from braze.kir import nodes as k
from braze.passes.one_hot import rewrite_rows


def fuse_online_softmax(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with each max loop and the sum-of-exponentials loop after it made one loop."""
    return rewrite_rows(kernel, _fuse)


def _max_fold(loop: k.Stmt) -> tuple[k.Var, k.Expr] | None:
    """(m, g) when `loop` is `for r: m = reduce_maximum(m, g(r))` over a unit-stride axis."""
    if not isinstance(loop, k.For) or loop.step != 1 or len(loop.body) != 1:
        return None
    s = loop.body[0]
    if not (isinstance(s, k.Assign) and isinstance(s.value, k.Binary) and s.value.op == "reduce_maximum"
            and s.value.a == s.var and s.var.dtype.is_floating and s.var not in set(sub_exprs(s.value.b))):
        return None
    return (s.var, s.value.b) if walks_unit_stride(loop) else None


def _sum_of_exponentials(loop: k.Stmt, first: k.For, m: k.Var, g: k.Expr) -> k.Var | None:
    """s when `loop` is `for r: s = reduce_add(s, exp(g(r) - m))` over the range of `first`."""
    if not isinstance(loop, k.For) or (loop.begin, loop.end, loop.step) != (first.begin, first.end, 1):
        return None
    if len(loop.body) != 1 or not isinstance(s := loop.body[0], k.Assign):
        return None
    v = s.value
    if not (isinstance(v, k.Binary) and v.op == "reduce_add" and v.a == s.var and s.var.dtype == m.dtype):
        return None
    e = v.b
    if not (isinstance(e, k.Unary) and e.op == "exp" and isinstance(e.x, k.Binary) and e.x.op == "sub"
            and e.x.b == m and k.substitute(e.x.a, loop.var, first.var) == g):
        return None
    return s.var


def _exponentials_read_later(stmts: list[k.Stmt], first: k.For, g: k.Expr, m: k.Var) -> bool:
    """Whether a later loop reads exp(g - m) (softmax's last loop). Two passes keep those values in
    the row cache for it (cuda_plan.RowCache.update), which rows that fit on chip are faster with;
    the online sum would compute them again."""
    for loop in (s for s in stmts if isinstance(s, k.For)):
        for e in (e for s in walk(loop.body) for x in exprs_of(s) for e in sub_exprs(x)):
            if (isinstance(e, k.Unary) and e.op == "exp" and isinstance(e.x, k.Binary) and e.x.op == "sub"
                    and e.x.b == m and k.substitute(e.x.a, loop.var, first.var) == g):
                return True
    return False


def _fuse(stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...]:
    out = list(stmts)
    n = 0
    while n < len(out):
        fused = _fuse_at(out, n)
        if fused is not None:
            out = fused
        n += 1
    return tuple(out)


def _fuse_at(stmts: list[k.Stmt], n: int) -> list[k.Stmt] | None:
    """The statements with the max loop at `n` and its sum loop fused, or None when they don't match:
    the sum loop follows with only definitions in between, `s` among them starting at 0, and `m`
    starts at -inf."""
    fold = _max_fold(stmts[n])
    if fold is None:
        return None
    m, g = fold
    starts = {s.var: s.value for s in stmts[:n] if isinstance(s, k.Let)}
    if starts.get(m) != k.Const(float("-inf"), m.dtype):
        return None
    after = n + 1
    while after < len(stmts) and isinstance(stmts[after], k.Let):
        after += 1
    if after == len(stmts):
        return None
    first = stmts[n]
    s = _sum_of_exponentials(stmts[after], first, m, g)
    between = stmts[n + 1:after]
    start = next((x for x in between if x.var == s), None)
    if s is None or start is None or start.value != k.Const(0, s.dtype):
        return None
    if any(s in set(sub_exprs(x.value)) for x in between) or _exponentials_read_later(stmts[after + 1:], first, g, m):
        return None
    v = k.Var(f"{first.var.name}_v", g.dtype)
    body = (k.Let(v, g), k.Assign(s, k.Ternary(ONLINE_ADD, s, m, v, s.dtype)),
            k.Assign(m, k.Binary("reduce_maximum", m, v, m.dtype)))
    loop = dataclasses.replace(first, body=body)
    rest = [x for x in between if x is not start]
    return [*stmts[:n], start, loop, *rest, *stmts[after + 1:]]
