"""Output rows as caches (CPU): a value a reduction loop computes per element, and the loop writing
the output computes again, is stored by the first and loaded by the second.

softmax sums exp(x - max) over a row, then writes exp(x - max) / sum: the exps are computed twice.
After this pass the sum loop also stores each exp into the output row (the row is still in cache
when the output loop reads it back), so each exp is computed once. The stored value has the output's
dtype, so reading it back gives the same bits, and the output loop overwrites every element it
stored. For the CPU only: a GPU row loop is split across lanes that would read each other's stores.
"""

from __future__ import annotations

import dataclasses
import itertools

from braze.kir import nodes as k
from braze.passes.simplify import _BODY_FIELDS, _COMPOUND, _replace, _subexpressions, _walk


def _reads(stmts, param: k.ArrayParam) -> bool:
    expressions = (e for s in _walk(stmts) for f in _fields(s) for e in _subexpressions(f))
    return any(isinstance(e, k.Load) and e.param == param for e in expressions)


def _fields(s: k.Stmt):
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, k.Expr):
                yield v


def _stores_to(stmts, param: k.ArrayParam) -> bool:
    return any(isinstance(s, (k.Store, k.AtomicRMW)) and s.param == param for s in _walk(stmts))


def _output_loop(s: k.Stmt) -> tuple[k.For, k.Store] | None:
    if isinstance(s, k.For) and len(s.body) == 1 and isinstance(s.body[0], k.Store):
        return s, s.body[0]
    return None


def _reduction_loop(s: k.Stmt) -> tuple[k.For, k.Assign] | None:
    if isinstance(s, k.For) and len(s.body) == 1 and isinstance(s.body[0], k.Assign) \
            and isinstance(s.body[0].value, k.Binary) and s.body[0].value.a == s.body[0].var:
        return s, s.body[0]
    return None


def _rewrite(block: tuple[k.Stmt, ...], r_at: int, out_at: int, fresh) -> tuple[k.Stmt, ...] | None:
    """The block with block[r_at]'s element stored into block[out_at]'s output, or None."""
    reduction, update = _reduction_loop(block[r_at])
    loop, store = _output_loop(block[out_at])
    element = update.value.b
    if (reduction.begin, reduction.end, reduction.step) != (loop.begin, loop.end, loop.step) \
            or not isinstance(element, _COMPOUND) or element.dtype != store.param.dtype \
            or sum(i == loop.var for i in store.indices) != 1 or any(
                loop.var in set(_subexpressions(i)) for i in store.indices if i != loop.var):
        return None
    if not all(isinstance(s, k.Let) for s in block[r_at + 1:out_at]) or update.var in set(_subexpressions(element)):
        return None  # what the element reads must not change before the output loop reads it again
    again = _replace(element, reduction.var, loop.var)
    if again not in set(_subexpressions(store.value)) or _reads(block, store.param) \
            or _stores_to(block[:out_at], store.param):
        return None
    defined_later = {s.var for s in block[r_at:out_at] if isinstance(s, k.Let)}
    if any(isinstance(e, k.Var) and e in defined_later for i in store.indices for e in _subexpressions(i)):
        return None  # the reduction loop could not compute the output's index
    value = k.Var(fresh(), element.dtype)
    row_index = tuple(reduction.var if i == loop.var else i for i in store.indices)
    body = (k.Let(value, element), k.Store(store.param, row_index, value),
            dataclasses.replace(update, value=dataclasses.replace(update.value, b=value)))
    cached = k.Load(store.param, store.indices)
    new_store = dataclasses.replace(store, value=_replace(store.value, again, cached))
    return (*block[:r_at], dataclasses.replace(reduction, body=body), *block[r_at + 1:out_at],
            dataclasses.replace(loop, body=(new_store,)), *block[out_at + 1:])


def _cache_block(block: tuple[k.Stmt, ...], fresh) -> tuple[k.Stmt, ...]:
    for r_at, s in enumerate(block):
        if _reduction_loop(s) is None:
            continue
        for out_at in range(r_at + 1, len(block)):
            if _output_loop(block[out_at]) is not None:
                rewritten = _rewrite(block, r_at, out_at, fresh)
                if rewritten is not None:
                    return _cache_block(rewritten, fresh)
    return tuple(dataclasses.replace(s, **{f: _cache_block(getattr(s, f), fresh) for f in _BODY_FIELDS[type(s)]})
                 if type(s) in _BODY_FIELDS else s for s in block)


def cache_rows_in_outputs(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with each reduction's per-element value stored into the output row that recomputes it."""
    counter = itertools.count()
    taken = {s.var.name for t in kernel.tasks for s in _walk(t.body) if isinstance(s, (k.Let, k.For))}

    def fresh() -> str:
        name = next(f"row{n}" for n in counter if f"row{n}" not in taken)
        taken.add(name)
        return name

    return dataclasses.replace(kernel, tasks=tuple(dataclasses.replace(t, body=_cache_block(t.body, fresh))
                                                   for t in kernel.tasks))
