"""A task that writes rows folded into the next task, when that task reads those rows (both backends).

braze lowers one task per written tensor (braze/lower/fusion_kernel.py). A pre-norm transformer
block returns `h = x + residual` and normalizes it: one task writes h, then the normalization's task
reads h back. That is five passes over memory where four do (read x and r, write h and y), and two
launches. After this pass it is one task: the consumer's first loop over the row computes h[i, j]
from x and r, stores it and uses that value; its later loops read h[i, j] back, an element this task
index stored itself just before (on the CPU, from cache; on a GPU, from the row cache holding the
stored row, see RowCache.stored in braze/codegen/cuda_plan.py, or from memory the same thread wrote).

Why a Kernel-IR pass, not the segmenter or the lowering: whether the fold is safe depends only on what
the two tasks read and write, which the Kernel IR states exactly, and each tensor keeps the schedule
its scheduler gave it. The pass checks two adjacent tasks over the same range:
- the producer is one loop over a row storing tensors at [row, j] (computed from j and the row alone),
  reading nothing it writes;
- the consumer writes nothing the producer reads or writes, and reads the producer's tensors only in
  its own row, [row, x], where x is the index of a top-level loop over the producer's range;
- the first consumer statement reading them is such a loop: the producer's body moves into it.
Every element the consumer reads was then stored earlier by the same task index, so no thread reads
another's element: no barrier, no second launch. Anything else keeps the two tasks.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from braze.kir import nodes as k
from braze.passes.fuse_tasks import (
    _merged_name,
    _single_assignment_defs,
    _uniform,
    _unique_names,
    injective,
    normalized,
)
from braze.passes.simplify import _BODY_FIELDS, _STMT_EXPRESSIONS, _subexpressions, _walk, map_children


@dataclass(frozen=True)
class _Producer:
    """A task of definitions and then one loop over a row whose body defines values and stores them."""

    task: k.Task
    lets: tuple[k.Let, ...]  # the task-level definitions before the loop (the row's indices)
    loop: k.For
    stores: dict[str, k.Store]  # by array name: one store each
    reads: frozenset[str]


def _loads(stmts: tuple[k.Stmt, ...]) -> Iterator[k.Load]:
    for s in _walk(stmts):
        for e in _expressions(s):
            yield from (x for x in _subexpressions(e) if isinstance(x, k.Load))


def _expressions(s: k.Stmt) -> Iterator[k.Expr]:
    for name in _STMT_EXPRESSIONS.get(type(s), ()):
        value = getattr(s, name)
        yield from value if isinstance(value, tuple) else (value,)


def _written(stmts: tuple[k.Stmt, ...]) -> set[str]:
    return {s.param.name for s in _walk(stmts) if isinstance(s, (k.Store, k.AtomicRMW))}


def _producer(task: k.Task, pinned: frozenset[str]) -> _Producer | None:
    """`task` as a producer (see the module docstring), or None."""
    if task.kind != "range_for" or not task.body or not isinstance(loop := task.body[-1], k.For):
        return None
    lets = task.body[:-1]
    if loop.step != 1 or not all(isinstance(s, k.Let) for s in lets) or \
            not all(isinstance(s, (k.Let, k.Store)) for s in loop.body):
        return None
    stores = [s for s in loop.body if isinstance(s, k.Store)]
    by_name = {s.param.name: s for s in stores}
    if not stores or len(by_name) != len(stores) or set(by_name) & pinned:
        return None
    reads = frozenset(load.param.name for load in _loads(task.body))
    for store in stores:  # one element per j, at the row's own indices, of the store's own dtype
        along = [i for i in store.indices if loop.var in set(_subexpressions(i))]
        if along != [loop.var] or store.value.dtype != store.param.dtype or store.param.name in reads:
            return None
    return _Producer(task, lets, loop, by_name, reads)


def _rebuilt(e: k.Expr, fn: Callable[[k.Expr], k.Expr | None], memo: dict) -> k.Expr:
    """`e` with each node `fn` gives a replacement for replaced (each shared node rebuilt once)."""
    done = memo.get(e)
    if done is None:
        found = fn(e)
        done = memo[e] = found if found is not None else map_children(e, lambda c: _rebuilt(c, fn, memo))
    return done


def _renamed(e: k.Expr, mapping: dict[k.Var, k.Expr], memo: dict) -> k.Expr:
    return _rebuilt(e, lambda n: mapping.get(n) if isinstance(n, k.Var) else None, memo)


def _stmt_rebuilt(s: k.Stmt, fn: Callable[[k.Expr], k.Expr]) -> k.Stmt:
    """`s` with `fn` applied to each of its expressions and those of the statements it holds."""
    changes = {}
    for name in _STMT_EXPRESSIONS.get(type(s), ()):
        value = getattr(s, name)
        changes[name] = tuple(map(fn, value)) if isinstance(value, tuple) else fn(value)
    for name in _BODY_FIELDS.get(type(s), ()):
        changes[name] = tuple(_stmt_rebuilt(x, fn) for x in getattr(s, name))
    return dataclasses.replace(s, **changes) if changes else s


class _Rows:
    """Index expressions of both tasks in one form: locals defined once replaced by their values,
    the producer's task index by the consumer's, normalized (fuse_tasks.normalized)."""

    def __init__(self, producer: _Producer, consumer: k.Task) -> None:
        self.producer, self.consumer = producer, consumer
        self.producer_defs = _single_assignment_defs(producer.task.body)
        self.consumer_defs = _single_assignment_defs(consumer.body)
        self.memo: dict = {}

    def _inlined(self, e: k.Expr, defs: dict[k.Var, k.Expr]) -> k.Expr:
        return _rebuilt(e, lambda n: self._inlined(defs[n], defs) if isinstance(n, k.Var) and n in defs else None,
                        {})

    def consumer_form(self, e: k.Expr) -> k.Expr:
        return normalized(self._inlined(e, self.consumer_defs))

    def producer_form(self, e: k.Expr, along: k.Expr) -> k.Expr:
        """A producer expression with its loop index replaced by `along` (a consumer expression)."""
        mapping = {self.producer.task.var: self.consumer.var, self.producer.loop.var: along}
        return normalized(_renamed(self._inlined(e, self.producer_defs), mapping, {}))

    def element(self, store: k.Store, along: k.Expr) -> tuple[k.Expr, ...]:
        """The indices of the element of `store`'s row at `along`, as the consumer writes them."""
        return tuple(self.producer_form(i, along) for i in store.indices)

    def same_range(self, loop: k.For) -> bool:
        theirs = self.producer.loop
        return loop.step == 1 and (self.consumer_form(loop.begin), self.consumer_form(loop.end)) == \
            (self.producer_form(theirs.begin, theirs.var), self.producer_form(theirs.end, theirs.var))


def _reads_only_own_rows(rows: _Rows) -> bool:
    """Whether every consumer read of a producer's tensor is in its own row, at the index of a
    top-level loop over the producer's range."""
    stores = rows.producer.stores
    for s in rows.consumer.body:
        loads = [load for load in _loads((s,)) if load.param.name in stores]
        if not loads:
            continue
        if not isinstance(s, k.For) or not rows.same_range(s):
            return False
        element = {name: rows.element(store, s.var) for name, store in stores.items()}
        if any(tuple(map(rows.consumer_form, load.indices)) != element[load.param.name] for load in loads):
            return False
    return True


def _owned(indices: tuple[k.Expr, ...], along: k.Var, row: k.Var) -> bool:
    """Whether the row part of an element's indices (all but `along`) names one task index `row`
    alone: then no two task indices store the same element, so none reads another's."""
    return _injective_tuple(tuple(i for i in indices if i != along), row)


def _injective_tuple(indices: tuple[k.Expr, ...], t: k.Var) -> bool:
    """Whether the tuple of `indices` is an injective function of `t`: one index is (by
    fuse_tasks.injective), or one is t % e and the others are, as a tuple, of t // e (the digits
    lowering decomposes a task index into, for rows of rank 3 and more)."""
    if any(injective(i, t) for i in indices):
        return True
    for n, index in enumerate(indices):
        if isinstance(index, k.Binary) and index.op == "remainder" and index.a == t and _uniform(index.b):
            digits = k.Var(f"{t.name}_digits", t.dtype)
            quotient = k.Binary("floordiv", t, index.b, t.dtype)
            as_digits = lambda e, q=quotient, d=digits: d if e == q else None  # noqa: E731
            rest = tuple(_rebuilt(i, as_digits, {}) for i in indices[:n] + indices[n + 1:])
            if _injective_tuple(rest, digits):
                return True
    return False


class _Names:
    """Fresh variable names for the kernel: none any task uses."""

    def __init__(self, kernel: k.Kernel) -> None:
        self.kernel = kernel
        self.taken: set[str] | None = None  # found on the first fold

    def fresh(self, base: str, dtype) -> k.Var:
        if self.taken is None:
            tasks = self.kernel.tasks
            self.taken = {v.name for t in tasks for s in _walk(t.body) for e in _expressions(s)
                          for v in _subexpressions(e) if isinstance(v, k.Var)}
            self.taken |= {s.var.name for t in tasks for s in _walk(t.body) if isinstance(s, (k.Let, k.For, k.Alloc))}
            self.taken |= {t.var.name for t in tasks if t.var is not None}
        base = re.sub(r"_\d+$", "", base)  # a name made here before: numbered again, not suffixed twice
        name = next(f"{base}_{n}" for n in itertools.count(1) if f"{base}_{n}" not in self.taken)
        self.taken.add(name)
        return k.Var(name, dtype)


def _fold(producer: _Producer, consumer: k.Task, names: _Names) -> k.Task | None:
    """The two tasks as one (see the module docstring), or None."""
    task = producer.task
    if consumer.kind != "range_for" or (task.begin, task.end, task.var.dtype) != \
            (consumer.begin, consumer.end, consumer.var.dtype):
        return None
    if _written(consumer.body) & (set(producer.stores) | producer.reads):
        return None
    at = next((n for n, s in enumerate(consumer.body)
               if any(load.param.name in producer.stores for load in _loads((s,)))), None)
    if at is None:
        return None
    loop = consumer.body[at]
    rows = _Rows(producer, consumer)
    if not isinstance(loop, k.For) or any(isinstance(s, (k.Break, k.Continue)) for s in _walk(loop.body)) \
            or not _reads_only_own_rows(rows):
        return None
    element = {name: rows.element(store, loop.var) for name, store in producer.stores.items()}
    if not all(_owned(indices, loop.var, consumer.var) for indices in element.values()):
        return None
    lets, mapping = _row_definitions(producer, consumer, at, names)
    if lets is None:
        return None
    computed, values = _producer_body(producer, loop.var, mapping, names)
    if computed is None:
        return None

    def stored_value(e: k.Expr) -> k.Expr | None:
        if isinstance(e, k.Load) and e.param.name in values and \
                tuple(map(rows.consumer_form, e.indices)) == element[e.param.name]:
            return values[e.param.name]
        return None

    memo: dict = {}
    body = tuple(_stmt_rebuilt(s, lambda e: _rebuilt(e, stored_value, memo)) for s in loop.body)
    folded = dataclasses.replace(loop, body=(*computed, *body))
    return dataclasses.replace(consumer, name=_merged_name(task, consumer),
                               body=(*lets, *consumer.body[:at], folded, *consumer.body[at + 1:]))


def _row_definitions(producer: _Producer, consumer: k.Task, at: int,
                     names: _Names) -> tuple[tuple[k.Let, ...] | None, dict[k.Var, k.Expr]]:
    """The producer's task-level definitions in the consumer: each one the consumer defines too
    (before statement `at`, never changed) is read from there; the others are defined again first.
    Returns those definitions and the producer's variables -> the consumer's expressions."""
    reassigned = {s.var for s in _walk(consumer.body) if isinstance(s, k.Assign)}
    own = {normalized(s.value): s.var for s in consumer.body[:at] if isinstance(s, k.Let) and s.var not in reassigned}
    mapping: dict[k.Var, k.Expr] = {producer.task.var: consumer.var}
    lets = []
    for let in producer.lets:
        if not _free(let.value) <= set(mapping):
            return None, mapping
        value = _renamed(let.value, mapping, {})
        same = own.get(normalized(value))
        if same is None:
            same = names.fresh(let.var.name, let.var.dtype)
            lets.append(k.Let(same, value))
        mapping[let.var] = same
    return tuple(lets), mapping


def _producer_body(producer: _Producer, along: k.Var, mapping: dict[k.Var, k.Expr],
                   names: _Names) -> tuple[tuple[k.Stmt, ...] | None, dict[str, k.Var]]:
    """The producer's loop body at the consumer's loop index `along`, each stored value kept in a
    variable of its own (by array name) for the consumer's reads in the same loop."""
    mapping = {**mapping, producer.loop.var: along}
    body: list[k.Stmt] = []
    values: dict[str, k.Var] = {}
    for s in producer.loop.body:
        if not set().union(*map(_free, _expressions(s))) <= set(mapping):
            return None, values
        value = _renamed(s.value, mapping, {})
        if isinstance(s, k.Let):
            mapping[s.var] = names.fresh(s.var.name, s.var.dtype)
            body.append(k.Let(mapping[s.var], value))
            continue
        indices = tuple(_renamed(i, mapping, {}) for i in s.indices)
        if isinstance(value, k.Var):  # a value the body defines already (a chain folded before)
            values[s.param.name] = value
            body.append(k.Store(s.param, indices, value))
            continue
        kept = values[s.param.name] = names.fresh(f"{s.param.name}_value", s.param.dtype)
        body += [k.Let(kept, value), k.Store(s.param, indices, kept)]
    return tuple(body), values


def _free(e: k.Expr) -> set[k.Expr]:
    return {v for v in _subexpressions(e) if isinstance(v, k.Var)}


def fold_row_producers(kernel: k.Kernel, pinned: frozenset[str] = frozenset()) -> k.Kernel:
    """`kernel` with each task that writes rows folded into the next task where that one reads them
    (see the module docstring), repeatedly, so a chain of such tasks becomes one. `pinned`: arrays
    written in place into an input (schedule.in_place_outputs), whose tasks stay as they are."""
    names = _Names(kernel)
    tasks: list[k.Task] = []
    folds = []  # (producer, consumer) task names, for BRAZE_DUMP=segments
    for task in kernel.tasks:
        producer = _producer(tasks[-1], pinned) if tasks and not _written(task.body) & pinned else None
        folded = _fold(producer, task, names) if producer is not None else None
        if folded is not None:
            folds.append((tasks[-1].name, task.name))
            tasks[-1] = folded
        else:
            tasks.append(task)
    if not folds:
        return kernel
    return dataclasses.replace(kernel, tasks=tuple(_unique_names(tasks)), meta={**kernel.meta, "fold_rows": folds})
