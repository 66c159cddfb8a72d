"""Output rows as caches (CPU): a value a reduction loop computes per element, and the loop writing
the output computes again, is stored by the first and loaded by the second.

softmax sums exp(x - max) over a row, then writes exp(x - max) / sum: the exps are computed twice.
After this pass the sum loop also stores each exp into the output row (the row is still in cache
when the output loop reads it back), so each exp is computed once. The stored value has the output's
dtype, so reading it back gives the same bits, and the output loop overwrites every element it
stored. For the CPU only: a GPU row loop is split across lanes that would read each other's stores.

An output narrower than the value (a bfloat16 softmax computes its exps in float32) cannot hold it
without rounding: rows up to LOCAL_ROW elements keep their values in a local array instead.
"""

from __future__ import annotations

import dataclasses
import itertools

from braze import dtypes as dt
from braze.kir import nodes as k
from braze.passes.simplify import _BODY_FIELDS, _COMPOUND, _replace, _subexpressions, _walk

LOCAL_ROW = 8192  # elements of the local row: 32 KiB of float32 on the task's stack


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


@dataclasses.dataclass(frozen=True)
class _Match:
    """A reduction loop whose per-element value `element` the output loop computes again (`again`)."""

    reduction: k.For
    update: k.Assign
    loop: k.For
    store: k.Store

    @property
    def element(self) -> k.Expr:
        return self.update.value.b

    @property
    def again(self) -> k.Expr:
        return _replace(self.element, self.reduction.var, self.loop.var)

    def reduction_storing(self, value: k.Var, store: k.Stmt) -> k.For:
        """The reduction loop computing its element into `value`, stored by `store` and then folded."""
        update = dataclasses.replace(self.update, value=dataclasses.replace(self.update.value, b=value))
        return dataclasses.replace(self.reduction, body=(k.Let(value, self.element), store, update))

    def loop_reading(self, cached: k.Expr) -> k.For:
        """The output loop with its recomputed element replaced by `cached`."""
        return dataclasses.replace(self.loop, body=(dataclasses.replace(
            self.store, value=_replace(self.store.value, self.again, cached)),))


def _match(block: tuple[k.Stmt, ...], r_at: int, out_at: int) -> _Match | None:
    reduction, update = _reduction_loop(block[r_at])
    loop, store = _output_loop(block[out_at])
    found = _Match(reduction, update, loop, store)
    if (reduction.begin, reduction.end, reduction.step) != (loop.begin, loop.end, loop.step) \
            or not isinstance(found.element, _COMPOUND) \
            or sum(i == loop.var for i in store.indices) != 1 or any(
                loop.var in set(_subexpressions(i)) for i in store.indices if i != loop.var):
        return None
    if not all(isinstance(s, k.Let) for s in block[r_at + 1:out_at]) \
            or update.var in set(_subexpressions(found.element)):
        return None  # what the element reads must not change before the output loop reads it again
    if found.again not in set(_subexpressions(store.value)) or _reads(block, store.param) \
            or _stores_to(block[:out_at], store.param):
        return None
    defined_later = {s.var for s in block[r_at:out_at] if isinstance(s, k.Let)}
    if any(isinstance(e, k.Var) and e in defined_later for i in store.indices for e in _subexpressions(i)):
        return None  # the reduction loop could not compute the output's index
    return found


def _rewrite(block: tuple[k.Stmt, ...], r_at: int, out_at: int, fresh) -> tuple[k.Stmt, ...] | None:
    """The block with block[r_at]'s element stored into block[out_at]'s output (or a local row, see
    `_rewrite_local`), or None."""
    found = _match(block, r_at, out_at)
    if found is None:
        return None
    if found.element.dtype != found.store.param.dtype:
        return _rewrite_local(block, r_at, out_at, found, fresh)
    value = k.Var(fresh(), found.element.dtype)
    row_index = tuple(found.reduction.var if i == found.loop.var else i for i in found.store.indices)
    return (*block[:r_at], found.reduction_storing(value, k.Store(found.store.param, row_index, value)),
            *block[r_at + 1:out_at], found.loop_reading(k.Load(found.store.param, found.store.indices)),
            *block[out_at + 1:])


def _from_begin(loop: k.For, index: k.Expr) -> k.Expr:
    begin = loop.begin
    return index if isinstance(begin, k.Const) and begin.value == 0 else k.Binary("sub", index, begin, loop.var.dtype)


def _rewrite_local(block: tuple[k.Stmt, ...], r_at: int, out_at: int, found: _Match,
                   fresh) -> tuple[k.Stmt, ...] | None:
    """An output narrower than the element (bfloat16 softmax, its exps in float32) cannot hold it: a
    row of up to LOCAL_ROW elements is cached in a local array instead; a longer one computes its
    elements twice, as before."""
    if r_at + 1 != out_at:
        return None
    loop = found.loop
    value, row = k.Var(fresh(), found.element.dtype), k.Var(fresh(), found.element.dtype)
    fits = k.Binary("le", _from_begin(loop, loop.end), k.Const(LOCAL_ROW, loop.var.dtype), dt.bool_)
    offset = _from_begin(loop, found.reduction.var)
    cached = k.LoadLocal(row, _from_begin(loop, loop.var), found.element.dtype)
    fast = (found.reduction_storing(value, k.StoreLocal(row, offset, value)), found.loop_reading(cached))
    return (*block[:r_at], k.Alloc(row, found.element.dtype, LOCAL_ROW),
            k.If(fits, fast, block[r_at:out_at + 1]), *block[out_at + 1:])


def _cache_block(block: tuple[k.Stmt, ...], fresh, settled: set[int]) -> tuple[k.Stmt, ...]:
    """`block` rewritten; `settled`: the ids of statements made here, never rewritten again (a local
    row's fallback keeps the loops it caches)."""
    for r_at, s in enumerate(block):
        if _reduction_loop(s) is None:
            continue
        for out_at in range(r_at + 1, len(block)):
            if _output_loop(block[out_at]) is not None:
                rewritten = _rewrite(block, r_at, out_at, fresh)
                if rewritten is not None:
                    settled.update(id(s) for s in rewritten if isinstance(s, k.If) and s not in block)
                    return _cache_block(rewritten, fresh, settled)
    def inner(s: k.Stmt) -> k.Stmt:
        if type(s) not in _BODY_FIELDS or id(s) in settled:
            return s
        return dataclasses.replace(s, **{f: _cache_block(getattr(s, f), fresh, settled) for f in _BODY_FIELDS[type(s)]})
    return tuple(inner(s) for s in block)


def cache_rows_in_outputs(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with each reduction's per-element value stored into the output row that recomputes it."""
    counter = itertools.count()
    taken = {s.var.name for t in kernel.tasks for s in _walk(t.body) if isinstance(s, (k.Let, k.For))}

    def fresh() -> str:
        name = next(f"row{n}" for n in counter if f"row{n}" not in taken)
        taken.add(name)
        return name

    return dataclasses.replace(kernel, tasks=tuple(dataclasses.replace(t, body=_cache_block(t.body, fresh, set()))
                                                   for t in kernel.tasks))
