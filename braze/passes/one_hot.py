"""A sum of `where(r == t, v(r), 0)` over a row is its one term v(t): a cross-entropy's picked
log-probability, a gather of one index a row. Both backends read that element instead of the row
(`rewrite_rows` also serves the GPU's online softmax: codegen/cuda_online.py)."""

from __future__ import annotations

import dataclasses

from braze import dtypes as dt
from braze.kir import nodes as k


def gather_one_hot_sums(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with each loop that sums `where(r == t, v(r), 0)` over r (cross_entropy's picked
    log-probability) replaced by the one term it adds: `where(begin <= t < end, v(t), 0)`. The
    sum added zeros to that term, so the result is the same, without a pass over the row."""
    return rewrite_rows(kernel, _with_one_hot_terms)


def _with_one_hot_terms(stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...]:
    """`stmts` with each one-hot sum loop replaced by its term, in loops nested among them too (a gather of
    several indices a row sums once for each, inside the loop over them)."""
    rewritten = []
    for stmt in stmts:
        term = _one_hot_term(stmt)
        if term is not None:
            rewritten.extend(term)
        elif isinstance(stmt, k.For) and (body := _with_one_hot_terms(stmt.body)) != stmt.body:
            rewritten.append(dataclasses.replace(stmt, body=body))
        else:
            rewritten.append(stmt)
    return tuple(rewritten)


def rewrite_rows(kernel: k.Kernel, rewrite) -> k.Kernel:
    """`rewrite` applied to the statements of each row: a range_for task's body, or in a serial
    task, the body inside each top-level loop and the loops that are its whole body (batched rows,
    as codegen/cuda_plan.row_nest finds them)."""
    def inside(loop: k.For) -> k.For:
        if len(loop.body) == 1 and isinstance(loop.body[0], k.For):
            return dataclasses.replace(loop, body=(inside(loop.body[0]),))
        return dataclasses.replace(loop, body=rewrite(loop.body))

    tasks = []
    for task in kernel.tasks:
        if task.kind == "range_for":
            body = rewrite(task.body)
        else:
            body = tuple(inside(s) if isinstance(s, k.For) else s for s in task.body)
        tasks.append(dataclasses.replace(task, body=body) if body != task.body else task)
    return dataclasses.replace(kernel, tasks=tuple(tasks))


def _one_hot_term(loop: k.Stmt) -> tuple[k.Stmt, ...] | None:
    """The statements replacing a one-hot sum loop (see gather_one_hot_sums): the loop's Lets that do
    not read its index (a target's position from the row's, as a torch graph's sliced targets
    give), then the one term of each sum it folds (several: a value and its sign, picked alike); or
    None."""
    if not isinstance(loop, k.For) or loop.step != 1 or not loop.body:
        return None
    updates = tuple(s for s in loop.body if isinstance(s, k.Assign))
    lets = loop.body[:len(loop.body) - len(updates)]
    if not updates or loop.body[len(lets):] != updates:
        return None
    if not all(isinstance(s, k.Let) and not _reads(s.value, loop.var) for s in lets):
        return None
    accumulators = [u.var for u in updates]
    if len(set(accumulators)) != len(accumulators) or any(_reads(s.value, acc) for s in lets for acc in accumulators):
        return None
    terms = tuple(_picked_term(loop, update, accumulators) for update in updates)
    return None if None in terms else (*lets, *terms)


def _picked_term(loop: k.For, update: k.Assign, accumulators: list[k.Var]) -> k.Assign | None:
    """`acc += where(begin <= t < end, v(t), 0)` for the loop's `acc += where(r == t, v(r), 0)`, or None."""
    acc, fold = update.var, update.value
    if not (isinstance(fold, k.Binary) and fold.op == "reduce_add" and fold.a == acc):
        return None
    pick = fold.b
    if not (isinstance(pick, k.Ternary) and pick.op == "where" and isinstance(pick.a, k.Binary)
            and pick.a.op == "eq" and isinstance(pick.c, k.Const) and pick.c.value == 0):
        return None
    r = loop.var
    sides = [pick.a.a, pick.a.b]
    index = [e for e in sides if e == r or isinstance(e, k.Cast) and e.x == r]
    target = [e for e in sides if not _reads(e, r)]
    if len(index) != 1 or len(target) != 1 or any(_reads(pick, other) for other in accumulators):
        return None
    t = target[0]
    if not t.dtype.is_integer:
        return None
    in_range = k.Binary("logical_and", k.Binary("ge", t, k.Cast(loop.begin, t.dtype), dt.bool_),
                        k.Binary("lt", t, k.Cast(loop.end, t.dtype), dt.bool_), dt.bool_)
    term = k.substitute(pick.b, r, k.Cast(t, r.dtype))  # read only in range: `where` evaluates one side
    return k.Assign(acc, k.Binary("reduce_add", acc, k.Ternary("where", in_range, term, pick.c, pick.dtype),
                                  fold.dtype))


def _reads(e: k.Expr, var: k.Var) -> bool:
    """Whether `e` reads `var` (substituting it changes `e`)."""
    return k.substitute(e, var, k.Var(f"{var.name}_not_read", var.dtype)) != e
