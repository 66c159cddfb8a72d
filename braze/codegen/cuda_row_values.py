"""Values a row held in registers computes once and reads again: a float32 expression over the row
that a later loop of the row repeats (a softmax's `exp(x - max)`, summed by one loop and divided by
the sum in the next), kept per element in registers by the first loop that computes it.

Row caches (cuda_plan.RowCache) already keep an expression of a row's own type in the cache's place;
a bfloat16 row's exponentials are float32, so a bfloat16 softmax's last loop read the row back and
computed `where`, the scale, the subtraction and the exponential again for each element: 13 of the
29 instructions an element of a masked softmax's warp function took in that loop (NVRTC, sm_90).
Held in registers instead, the last loop takes a multiply and the conversion.

Only expressions worth their registers: those calling a transcendental function or dividing, and
only rows that hold at most REGISTER_VALUE_BYTES of them a thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from braze import dtypes as dt
from braze.codegen.cuda_plan import RowCache, exprs_of, normalized, occurrences, sub_exprs, walk
from braze.kir import nodes as k

# Per thread: 32 registers, what a warp's row of 1024 float32 takes, the budget of WARP_ROW_BYTES.
REGISTER_VALUE_BYTES = 128

# Operations costlier than the registers that keep their result (an exponential is ten instructions).
COSTLY_OPS = frozenset({"exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "sin",
                        "cos", "tan", "tanh", "sigmoid", "gelu", "silu", "erf", "erfc", "truediv", "pow", "atan2"})


@dataclass(frozen=True)
class RowValue:
    """An expression (`key`, the loop index marked as in cuda_plan.normalized) that the loop `writer`
    computes for each element and stores in registers, and the later loops `readers` read back."""

    key: k.Expr
    writer: int
    readers: tuple[int, ...]


def _costly(e: k.Expr) -> bool:
    return any(isinstance(x, (k.Unary, k.Binary)) and x.op in COSTLY_OPS for x in sub_exprs(e))


def _plain(loop: k.For) -> bool:
    """A loop whose statements run once an element (no nested control flow)."""
    return not any(isinstance(s, (k.If, k.For, k.While)) for s in walk(loop.body))


def _candidates(loop: k.For) -> list[tuple[k.Expr, k.Expr]]:
    """(normalized form, expression) of the loop's float32 expressions along the row worth keeping,
    largest first."""
    found = {}
    for s in walk(loop.body):
        for root in exprs_of(s):
            for e in sub_exprs(root):
                parts = list(sub_exprs(e))
                if e.dtype == dt.float32 and loop.var in parts and _costly(e) \
                        and not any(isinstance(x, (k.LoadLocal, k.Philox)) for x in parts):
                    found.setdefault(normalized(e, loop), e)
    return sorted(found.items(), key=lambda item: -sum(1 for _ in sub_exprs(item[1])))


def _assigned(stmts: list[k.Stmt]) -> set[k.Var]:
    return {s.var for s in walk(tuple(stmts)) if isinstance(s, (k.Assign, k.Let))}


def plan_row_values(task: k.Task, loops: list[k.For], caches: tuple[RowCache, ...],
                    elements: int) -> tuple[RowValue, ...]:
    """The values the register copy of `task`'s row keeps (see the module; at most one, the largest
    of the first loop that has one), for `loops` (the row's loops held in registers, in program
    order) and `elements` a thread. None where a row cache already keeps an updated value: that is
    the same saving, in the cache's registers."""
    if any(cache.update is not None for cache in caches) or 4 * elements > REGISTER_VALUE_BYTES:
        return ()
    body = list(task.body)
    position = {id(s): n for n, s in enumerate(body)}
    for n, writer in enumerate(loops):
        if not _plain(writer):
            continue
        defined_before = _assigned(body[:position[id(writer)]]) | ({task.var} if task.var is not None else set())
        for key, expression in _candidates(writer):
            readers = [loop for loop in loops[n + 1:] if _plain(loop) and occurrences(loop, key)]
            if not readers:
                continue
            # Every variable it reads holds the same value from the writer through the last reader.
            span = body[position[id(writer)]:position[id(readers[-1])] + 1]
            free = {v for v in sub_exprs(expression) if isinstance(v, k.Var)} - {writer.var}
            if free <= defined_before and not free & {s.var for s in walk(tuple(span)) if isinstance(s, k.Assign)}:
                return (RowValue(key, id(writer), tuple(map(id, readers))),)
    return ()
