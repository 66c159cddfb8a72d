"""How a task maps onto GPU threads, decided from its Kernel IR before any text is written:

- lane loops: the top-level loops of a row that the lanes of the row share, and the accumulators
  combined across lanes after each;
- row caches: loads that several lane loops repeat, kept in shared memory by the first;
- grid reductions: a reduction to one value spread over the whole grid;
- 16-byte accesses: lane loops whose memory traffic along the row can move four elements at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

from braze.dtypes import DType
from braze.kir import nodes as k
from braze.passes.simplify import map_children

# --- which loops a task may spread over the lanes of a row --------------------------------------
# The combine ops of braze.lower.reductions, as prelude functors: partial results of lanes merge.
LANE_COMBINES = {"reduce_add": "BzReduceAdd", "reduce_mul": "BzReduceMul", "reduce_maximum": "BzReduceMax",
                 "reduce_minimum": "BzReduceMin", "logical_or": "BzReduceOr", "logical_and": "BzReduceAnd"}
# A row's sum of exp(x - m) kept in one pass with its maximum m (cuda_online): `s = op(s, m, x)`,
# combined across lanes together with m's reduce_maximum.
ONLINE_ADD = "online_softmax_add"


@dataclass(frozen=True)
class LanePlan:
    """For a task: the top-level loops spread over lanes, the accumulators each one combines after
    it, and whether lanes help (the loops walk a unit-stride dimension, so lanes coalesce)."""

    loops: dict[int, tuple[tuple[k.Var, str], ...]] = field(default_factory=dict)  # id(For) -> (acc, combine)
    coalesces: bool = False


def _children(s: k.Stmt) -> Iterator[k.Stmt]:
    for name in ("body", "then", "orelse"):
        yield from getattr(s, name, ())


def walk(stmts: tuple[k.Stmt, ...]) -> Iterator[k.Stmt]:
    for s in stmts:
        yield s
        yield from walk(tuple(_children(s)))


def exprs_of(s: k.Stmt) -> Iterator[k.Expr]:
    for name in ("value", "cond", "begin", "end", "index"):
        e = getattr(s, name, None)
        if isinstance(e, k.Expr):
            yield e
    yield from getattr(s, "indices", ())


def sub_exprs(e: k.Expr) -> Iterator[k.Expr]:
    """Every expression under `e` (itself first) once per path to it: a tree walk of the DAG, for
    what counts them (a size). What asks only which expressions occur takes `distinct_exprs`."""
    yield e
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        if isinstance(child, k.Expr):
            yield from sub_exprs(child)
        elif isinstance(child, tuple):
            for c in child:
                if isinstance(c, k.Expr):
                    yield from sub_exprs(c)


def _expr_fields(cls: type) -> tuple[str, ...]:
    fields = _EXPR_FIELDS.get(cls)
    if fields is None:
        fields = _EXPR_FIELDS[cls] = tuple(getattr(cls, "__dataclass_fields__", ()))
    return fields


_EXPR_FIELDS: dict[type, tuple[str, ...]] = {}


def distinct_exprs(e: k.Expr) -> list[k.Expr]:
    """Every expression under `e` (itself first), each once, in the order `sub_exprs` first meets
    them. A value used twice is one node of the Kernel IR DAG, and a chain of such values has
    exponentially many paths: a walk that visits each node once stays linear."""
    seen: dict[k.Expr, None] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen[x] = None
        children = []
        for name in _expr_fields(type(x)):
            child = getattr(x, name)
            if isinstance(child, k.Expr):
                children.append(child)
            elif isinstance(child, tuple):
                children += [c for c in child if isinstance(c, k.Expr)]
        stack += reversed(children)
    return list(seen)


def vars_of(e: k.Expr) -> frozenset[k.Var]:
    """The variables `e` reads, kept on the node (each node's from its children's: linear in the DAG)."""
    found = e.__dict__.get("_vars")
    if found is None:
        if isinstance(e, k.Var):
            found = frozenset((e,))
        else:
            found = frozenset()
            for name in _expr_fields(type(e)):
                child = getattr(e, name)
                if isinstance(child, k.Expr):
                    found |= vars_of(child)
                elif isinstance(child, tuple):
                    for c in child:
                        if isinstance(c, k.Expr):
                            found |= vars_of(c)
        object.__setattr__(e, "_vars", found)
    return found


def _accumulation(s: k.Assign) -> str | None:
    """The combine op when `s` is `acc = combine(acc, x)` with x not reading acc (or the online
    sum `acc = online_softmax_add(acc, m, x)`)."""
    v = s.value
    if isinstance(v, k.Binary) and v.op in LANE_COMBINES and v.a == s.var and s.var not in vars_of(v.b):
        return v.op
    if (isinstance(v, k.Ternary) and v.op == ONLINE_ADD and v.a == s.var and isinstance(v.b, k.Var)
            and s.var not in vars_of(v.c) | {v.b}):
        return v.op
    return None


# argmax / argmin (braze.lower.reductions): `if better(v, best): best = v; at = i`. Lanes keep a pair
# each, combined by the prelude's bz_arg_lane_reduce: the value's combine, then the index's.
ARG_COMBINES = {"gt": "arg_max", "lt": "arg_min"}
ARG_INDEX = "arg_index"


def arg_update(s: k.Stmt) -> tuple[k.Var, k.Var, str] | None:
    """(best, at, combine) when `s` is an argmax or argmin update, else None."""
    if not isinstance(s, k.If) or s.orelse or len(s.then) != 2 or not all(isinstance(a, k.Assign) for a in s.then):
        return None
    best, at = s.then
    cond = s.cond
    compare = cond.a if isinstance(cond, k.Binary) and cond.op == "logical_or" else cond
    if not (isinstance(compare, k.Binary) and compare.op in ARG_COMBINES and compare.a == best.value
            and compare.b == best.var) or {best.var, at.var} & (_vars_of(best.value) | _vars_of(at.value)):
        return None
    return best.var, at.var, ARG_COMBINES[compare.op]


def has_arg_pairs(plan: LanePlan) -> bool:
    return any(combine == ARG_INDEX for accumulators in plan.loops.values() for _, combine in accumulators)


def _has_online_sums(plan: LanePlan) -> bool:
    """Whether a lane loop keeps an online sum of exponentials with its maximum (cuda_online). Such a
    row spans no blocks: its pairs combine across its lanes only (no program met so far takes the
    split path with them, so none is written for them)."""
    return any(combine == ONLINE_ADD for accumulators in plan.loops.values() for _, combine in accumulators)


def online_partner(accumulators: tuple[tuple[k.Var, str], ...]) -> dict[k.Var, k.Var]:
    """For a lane loop's accumulators: each online sum's maximum, and each such maximum's sum."""
    sums = [acc for acc, combine in accumulators if combine == ONLINE_ADD]
    maxima = [acc for acc, combine in accumulators if combine == "reduce_maximum"]
    if not sums:
        return {}
    return {sums[0]: maxima[0], maxima[0]: sums[0]}


def split_pairs(accumulators) -> tuple[list[tuple[k.Var, k.Var, str]], list[tuple[k.Var, str]]]:
    """The accumulators that combine two at a time, as (first, second, the prelude's functor for
    them): an argmax's or argmin's value and index (BzArgCombine), an online sum's maximum and sum
    (BzOnlineCombine); then the others, (acc, combine) each. Lanes combine the pairs so, and blocks
    and the workspace's slots an argmax's."""
    partner = online_partner(accumulators)
    pairs = []
    for n, (acc, combine) in enumerate(accumulators):
        if combine in ARG_COMBINES.values():  # its index is the next accumulator
            largest = "true" if combine == ARG_COMBINES["gt"] else "false"
            pairs.append((acc, accumulators[n + 1][0], f"BzArgCombine<{largest}>()"))
        elif combine == ONLINE_ADD:
            pairs.append((partner[acc], acc, "BzOnlineCombine()"))
    paired = {acc for first, second, _ in pairs for acc in (first, second)}
    return pairs, [(acc, combine) for acc, combine in accumulators if acc not in paired]


def _loop_accumulators(loop: k.For, task_vars: set[k.Var]) -> tuple[tuple[k.Var, str], ...] | None:
    """The (acc, combine) pairs a top-level loop folds into task-scope variables, or None when the
    loop does something lanes cannot split (another write to a task variable, an atomic, a sync).
    Kept on the loop by the task variables it assigns, the only ones the answer asks about: the loop
    recurs in every task merged from its task, each with more variables."""
    assigned = k.kept(loop, "_assigned", lambda loop: frozenset(
        s.var for s in walk(loop.body) if isinstance(s, (k.Assign, k.Let))))
    answers = k.kept(loop, "_accumulators", lambda loop: {})
    key = assigned & frozenset(task_vars)
    if key not in answers:
        answers[key] = _folded_accumulators(loop, key)
    return answers[key]


def _folded_accumulators(loop: k.For, task_vars: frozenset[k.Var]) -> tuple[tuple[k.Var, str], ...] | None:
    found: dict[k.Var, str] = {}
    pairs = {}  # id(If) -> the argmax / argmin pair it updates
    for s in walk(loop.body):
        arg = arg_update(s)
        if arg is not None and arg[0] in task_vars and arg[1] in task_vars and not {arg[0], arg[1]} & set(found):
            found[arg[0]], found[arg[1]] = arg[2], ARG_INDEX
            pairs[id(s)] = arg
    updates = {id(a) for s in walk(loop.body) if id(s) in pairs for a in s.then}
    for s in walk(loop.body):
        if isinstance(s, (k.AtomicRMW, k.Sync, k.Alloc)):
            return None
        if id(s) in updates:
            continue
        if isinstance(s, (k.Assign, k.Let)) and s.var in task_vars:
            combine = _accumulation(s) if isinstance(s, k.Assign) else None
            if combine is None or found.get(s.var, combine) != combine:
                return None
            found[s.var] = combine
    accumulators = set(found)
    for s in walk(loop.body):  # an accumulator must not be read except by its own fold
        reads = [e for x in exprs_of(s) for e in distinct_exprs(x)]
        own = {s.value.a} if isinstance(s, k.Assign) and s.var in accumulators and id(s) not in updates else set()
        if id(s) in pairs:  # the update compares the element with the best so far
            own = {pairs[id(s)][0]}
        # The online sum reads its maximum before it grows.
        if own and id(s) not in pairs and found[s.var] == ONLINE_ADD:
            own.add(s.value.b)
        if any(isinstance(e, k.Var) and e in accumulators and not any(e is o for o in own) for e in reads):
            return None
    online = [acc for acc, combine in found.items() if combine == ONLINE_ADD]
    if online and (len(online) > 1 or list(found.values()).count("reduce_maximum") != 1):
        return None
    return tuple(found.items())


def walks_unit_stride(loop: k.For) -> bool:
    """Whether the loop's index (or a value computed from it in the loop, as a reshape's index
    arithmetic is) addresses a unit-stride dimension of an array it reads or writes. For a nest the
    lanes walk flat (lane_nest), the index that neighbouring lanes differ in: the innermost loop's.
    Kept on the loop, which every task merged from its task holds."""
    return k.kept(loop, "_walks_unit_stride", _walks_unit_stride)


def _walks_unit_stride(loop: k.For) -> bool:
    derived = {(lane_nest(loop) or [loop])[-1].var}
    for s in walk(loop.body):
        if isinstance(s, (k.Let, k.Assign)) and _vars_of(s.value) & derived:
            derived.add(s.var)

    def unit_stride_index(param: k.ArrayParam, indices) -> bool:
        return any(param.static_stride(axis) == 1 and _vars_of(i) & derived for axis, i in enumerate(indices))
    for s in walk(loop.body):
        if isinstance(s, k.Store) and unit_stride_index(s.param, s.indices):
            return True
        for e in (e for x in exprs_of(s) for e in distinct_exprs(x)):
            if isinstance(e, k.Load) and unit_stride_index(e.param, e.indices):
                return True
    return False


@dataclass(frozen=True)
class RowCache:
    """A load that several lane loops repeat for the same element of a row: the first loop keeps
    each value in shared memory, the later ones read it back, so the row crosses DRAM once. Each
    lane reads back only the elements it stored itself, so no barrier is needed."""

    key: tuple  # (param name, indices with the loop index replaced by a marker)
    dtype: DType
    loops: tuple[int, ...]  # id() of the lane loops that read it, in program order
    position: int  # which top-level loop of the task is the first of them (its extent sizes the cache)
    # When the later loops read the load only inside one expression (softmax's exp(x - max)), the
    # loop `writer` replaces each element by that expression, and the loops after it read the value
    # instead of computing it again. `update` is the expression with the row index as a marker.
    update: k.Expr | None = None
    writer: int | None = None
    # The first loop stores the row (a tensor the task writes and then reads back, as
    # passes/fold_rows.py makes a residual add under a norm) and keeps each value it stores: the
    # later loops read the stored row from the cache instead of memory (see stored_rows).
    stored: bool = False

    def role(self, loop_id: int) -> str:
        """"store" (the loop stores the row and fills the cache), "load" (the loop reads the loaded
        element), "update" (it also stores the expression over it) or "value" (it reads the
        expression's value)."""
        if self.stored and loop_id == self.loops[0]:
            return "store"
        if self.writer is None or self.loops.index(loop_id) < self.loops.index(self.writer):
            return "load"
        return "update" if loop_id == self.writer else "value"


_ROW_INDEX = k.Var("__row_index")




def row_cache_key(load: k.Load, loop: k.For) -> tuple:
    return (load.param.name, tuple(k.substitute(i, loop.var, _ROW_INDEX) for i in load.indices))


# Operands evaluated only when another operand says so: a load there whose index is read from
# memory may be out of bounds otherwise (cross_entropy's picked class, read only for a target in
# range: cuda_online). A load whose index follows from loop and task indices alone is in bounds
# either way; under a condition that changes along the row (a masked softmax's scores under
# `where(mask, x * scale, -inf)`) it counts as made every iteration, so it may move 16 bytes at a
# time. Under a condition fixed for the row, it stays conditional: the row may skip it entirely.
_CONDITIONAL_OPERANDS = {"where": ("b", "c"), "logical_and": ("b",), "logical_or": ("b",)}


def _fixed_index_loads(e: k.Expr) -> Iterator[k.Load]:
    for load in sub_exprs(e):
        if isinstance(load, k.Load) and not any(isinstance(x, k.Load) for i in load.indices for x in sub_exprs(i)):
            yield load


def unconditional_loads(stmts: tuple[k.Stmt, ...], along: k.Var | None = None) -> Iterator[k.Load]:
    """The loads every iteration of a loop over `along` may perform: none under an `if`; under a
    `where` branch or a short circuit, only those with an index not read from memory, when the
    condition reads `along`."""
    # The values that change along the row: the loop index and what the loop defines from it (a
    # dropout mask's counter, `cse = int64(i * n + j)`, read by the condition through its variable).
    derived = {along} if along is not None else set()
    for s in stmts:
        if isinstance(s, k.Let) and _vars_of(s.value) & derived:
            derived.add(s.var)

    def visit(e: k.Expr) -> Iterator[k.Load]:
        if isinstance(e, k.Load):
            yield e
        skipped = _CONDITIONAL_OPERANDS.get(getattr(e, "op", None), ()) if isinstance(e, (k.Binary, k.Ternary)) else ()
        per_element = bool(skipped) and bool(_vars_of(e.a) & derived)
        for name in getattr(e, "__dataclass_fields__", {}):
            child = getattr(e, name)
            if name in skipped:
                if per_element:
                    yield from _fixed_index_loads(child)
                continue
            if isinstance(child, k.Expr):
                yield from visit(child)
            elif isinstance(child, tuple):
                for c in child:
                    if isinstance(c, k.Expr):
                        yield from visit(c)
    for s in stmts:
        if isinstance(s, (k.If, k.For, k.While)):
            continue
        for x in exprs_of(s):
            yield from visit(x)


@dataclass(frozen=True)
class StoredRow:
    """A row that a top-level loop of a task stores and later top-level loops over the same range
    load back, each element at the index of its own loop (see stored_rows)."""

    store: k.Store
    loops: tuple[k.For, ...]  # the storing loop, then the loops reading it


def _accesses(stmts: tuple[k.Stmt, ...]) -> Iterator:
    """Every load, store and atomic update in `stmts`, each statement's kept on it: the statements of
    a task recur in every task merged from it (engine._merged_row_tasks)."""
    for s in stmts:
        yield from k.kept(s, "_plan_accesses", _statement_accesses)


def _statement_accesses(stmt: k.Stmt) -> tuple:
    found = []
    for s in walk((stmt,)):
        if isinstance(s, (k.Store, k.AtomicRMW)):
            found.append(s)
        found += [e for x in exprs_of(s) for e in distinct_exprs(x) if isinstance(e, k.Load)]
    return tuple(found)


def stored_rows(task: k.Task) -> dict[tuple, StoredRow] | None:
    """The rows a task stores in one top-level loop and reads back in later ones (see _stored_rows),
    kept on the task: its lane plan, schedule and row caches each ask."""
    return k.kept(task, "_stored_rows", _stored_rows)


def _stored_rows(task: k.Task) -> dict[tuple, StoredRow] | None:
    """The rows a task stores in one top-level loop and reads back in later ones, by row cache key;
    None when an array the task writes is read back any other way.

    A row's lanes split each top-level loop over the same range the same way, provided the loops
    take the same path (16-byte or not, registers or not): a row cache of the stored row makes them
    (plan_row_caches), so each lane reads back only what it stored itself. A read back of any other
    form could read another lane's element, so such a task gets no lanes (plan_lanes)."""
    body = task.body
    written = {a.param.name for a in _accesses(body) if not isinstance(a, k.Load)}
    loaded = {a.param.name for a in _accesses(body) if isinstance(a, k.Load)}
    rows: dict[tuple, StoredRow] = {}
    for name in sorted(written & loaded):
        where = [(n, a) for n, s in enumerate(body) for a in _accesses((s,)) if a.param.name == name]
        stores = [(n, a) for n, a in where if not isinstance(a, k.Load)]
        if len(stores) != 1 or not isinstance(stores[0][1], k.Store):
            return None
        at, store = stores[0]
        first = body[at]
        if not isinstance(first, k.For) or store not in first.body or not _along_row(store, first):
            return None
        key, readers = row_cache_key(store, first), []
        for n, access in where:
            loop = body[n]
            if access is store:
                continue
            if n <= at or not isinstance(loop, k.For) or row_cache_key(access, loop) != key or \
                    (loop.begin, loop.end, loop.step) != (first.begin, first.end, first.step):
                return None
            readers += [loop] if loop not in readers else []
        rows[key] = StoredRow(store, (first, *readers))
    return rows


def _along_row(access, loop: k.For) -> bool:
    """The loop's index is one of the access's indices, alone and in no other, and another index
    differs per row."""
    index_vars = {v for i in access.indices for v in vars_of(i)}
    along = [i for i in access.indices if loop.var in vars_of(i)]
    return along == [loop.var] and bool(index_vars - {loop.var})


def plan_row_caches(task: k.Task, plan: LanePlan) -> tuple[RowCache, ...]:
    """The loads worth keeping in shared memory: read by two or more lane loops over the same range;
    and the rows a loop stores that later loops read back (stored_rows)."""
    loops = [s for s in task.body if isinstance(s, k.For) and id(s) in plan.loops]
    position = {id(s): n for n, s in enumerate(s for s in task.body if isinstance(s, k.For))}
    stored = [RowCache(key, row.store.param.dtype, tuple(map(id, row.loops)), position[id(row.loops[0])], stored=True)
              for key, row in (stored_rows(task) or {}).items()
              if row.loops[0].begin == k.Const(0, row.loops[0].begin.dtype)]  # (from 0: see below)
    seen: dict[tuple, list] = {}
    for loop in loops:
        for load in unconditional_loads(loop.body, loop.var):
            index_vars = {v for i in load.indices for v in sub_exprs(i) if isinstance(v, k.Var)}
            # Along the row, and different per row (a broadcast operand stays in L1 by itself).
            if loop.var in index_vars and index_vars - {loop.var}:
                entry = seen.setdefault(row_cache_key(load, loop), [load.param.dtype, []])
                if id(loop) not in entry[1]:
                    entry[1].append(id(loop))
    # Only loops from 0: the 16-byte and register paths index a cache by the column (cuda_rows). A
    # loop starting elsewhere is a part of a split one (braze/passes/split_loops.py).
    ranges = {id(loop): (loop.begin, loop.end) for loop in loops if loop.begin == k.Const(0, loop.begin.dtype)}
    caches = stored
    for key, (dtype, users) in seen.items():
        if key in {cache.key for cache in stored}:
            continue
        if len(users) >= 2 and all(u in ranges for u in users) and len({ranges[u] for u in users}) == 1:
            cache = RowCache(key, dtype, tuple(users), position[users[0]])
            caches.append(_with_update(cache, task, {id(loop): loop for loop in loops}))
    return tuple(caches)


# Per thread, the bytes of a row that the row caches may hold in registers when the whole block is
# the row, by element size. 4- and 8-byte elements: 32 registers, which with the loops' own ~30
# keeps a 256-thread block at <= 64 registers (4 blocks an SM; softmax [4096, 8192] f32 then reaches
# 96% of copy bandwidth on an H100). For 2-byte elements resident blocks count for more than
# covering long rows: for rms_norm [8192, 4096] bf16, 16 vectors of four a thread took 58 registers
# and 76% of copy, 8 took 40 and 85%, 4 took 32 and 88% (longer rows take the shared-memory path).
REGISTER_ROW_BYTES = {1: 16, 2: 32, 4: 128, 8: 128}
# The same for an inner-outer row task (codegen/cuda_inner_outer.py), compiled for 80 registers a thread
# (INNER_OUTER_THREADS_PER_SM): 64 bytes of 2-byte rows. rms_norm backward's 4096-long bfloat16 dy and
# x (16 elements a thread on 256 threads) then skip the shared-memory copy: 2.60 -> 2.89 TB/s on an
# H200. 4-byte rows keep the general 128 bytes: layer_norm backward's 4096 float32 x and dy a thread
# holds then fit (at 64 registers they spilled: 143 MB of local loads a call on an H100).
INNER_OUTER_REGISTER_ROW_BYTES = {**REGISTER_ROW_BYTES, 2: 64}
# Rows of 2-byte elements that a block of 256 holds in registers run on blocks of NARROW_BLOCK threads
# instead (cuda_launch.LaunchPlanner._row_block), each thread keeping twice the bytes: a row's setup
# and its reductions' barriers are then spread over twice the elements. layer_norm over [8192, 4096]
# bfloat16 (16 elements a thread on 256) was bound by instruction issue, not memory: 2.65 -> 3.35 TB/s
# on an H200 (benchmarks/results/narrow-rows-h200.md).
NARROW_BLOCK = 128
NARROW_REGISTER_ROW_BYTES = {**REGISTER_ROW_BYTES, 2: 64}
# Threads of an SM an inner-outer row task is compiled to keep resident (__launch_bounds__): 3 blocks of
# 256, 80 registers a thread. Its blocks walk their rows in a loop, a row at a time: more blocks an SM
# are more rows' loads in flight (2 blocks an SM left rms_norm backward's row task latency-bound, at
# 31% of DRAM bandwidth on an H200), but 4 blocks' 64 registers spill the rows a thread keeps. On an
# H100 (benchmarks/results/inner-outer-blocks-h100.md), layer_norm backward [8192, 4096] float32 ran at
# 2.14 TB/s with 4 blocks, 2.47 with 3, 2.25 with 2; rms_norm backward bfloat16 at 2.33-2.38, 2.41, 2.20.
INNER_OUTER_THREADS_PER_SM = 768
# Per lane, the bytes of a row held in registers when one warp is the row (a function of its own,
# whose registers the whole-block one does not pay for): 32 registers, as the whole-block path of
# 4-byte rows takes, in a power of two of vectors (rows are mostly powers of two long: a vector past
# the last one only holds registers such rows leave unused; NVRTC for sm_90 gives the masked
# softmax's warp function 74 registers at 4 vectors, 80 and spills at 5). That holds rows of 1024
# float32, 2048 bfloat16, or 1024 bfloat16 with a bool mask; every lane issues its loads of the row
# at once (64 bytes of a 1024-long bfloat16 row, where a whole block of 256 gave each thread 8 bytes
# and two barriers a reduction), and a block of 256 threads keeps 8 rows in flight.
WARP_ROW_BYTES = 128
# Rows of two or more 4-byte arrays (softmax backward's y and dy) take twice that, so rows of 1024
# float32 still take a warp: on an H200, softmax backward over [24576, 1024] float32 took 86.2 us on
# a block a row (8 warps' setup and barriers for 4 elements a lane), 73.4 on a warp (Inductor: 68.4).
# Rows of one array lost by it (more registers for the same rows: layer_norm [8192, 768] 17.6 ->
# 19.2 us, a bfloat16 softmax over 1024 100.6 -> 111.6), as did the masked softmax (40.0 -> 46.2).
WIDE_WARP_ROW_BYTES = 256
WARP = 32


# A register row's loop that stores a row the later loops read back (RowCache.stored) also issues its
# own loads for the whole row at once, before using any, where those and the caches take at most this
# many bytes a thread (the float32 budget of REGISTER_ROW_BYTES): a residual add under a bfloat16 norm
# holds x, the residual and h, 96 bytes at 4 vectors. Loaded an iteration at a time, a bfloat16 row
# has 16 bytes a thread in flight where the loops reach copy bandwidth with the whole row.
REGISTER_PRELOAD_BYTES = 128


def register_row_vectors(caches: tuple[RowCache, ...], vectors: dict[int, VectorAccesses], warp: bool,
                         budget: dict[int, int] = REGISTER_ROW_BYTES) -> int:
    """How many vectors of each row cache a thread keeps in registers when the whole block (or, with
    `warp`, one warp) is one row and the row is short enough (0: the task has no such path). Every
    loop of every cache must take the vector path, since iteration k of each loop touches vector k;
    they share one width. `budget`: bytes a thread by element size (REGISTER_ROW_BYTES)."""
    if not caches or any(id_ not in vectors for cache in caches for id_ in cache.loops):
        return 0
    width, row_bytes = vectors[caches[0].loops[0]].width, sum(cache.dtype.itemsize for cache in caches)
    if warp:
        held = WIDE_WARP_ROW_BYTES if row_bytes >= 8 and len(caches) >= 2 else WARP_ROW_BYTES
        return 1 << (max(1, held // (width * row_bytes)).bit_length() - 1)
    return max(1, budget[max(cache.dtype.itemsize for cache in caches)] // (width * row_bytes))


def normalized(e: k.Expr, loop: k.For) -> k.Expr:
    return k.substitute(e, loop.var, _ROW_INDEX)


def occurrences(loop: k.For, key: k.Expr) -> list[k.Expr]:
    """The expressions of the loop's statements equal to `key` once the loop index is marked."""
    return [e for s in walk(loop.body) for x in exprs_of(s) for e in sub_exprs(x) if normalized(e, loop) == key]


def _only_inside(loop: k.For, load_key: k.Expr, outer_key: k.Expr) -> bool:
    """Every read of the load in the loop is part of `outer_key`'s expression."""
    inside = sum(1 for outer in occurrences(loop, outer_key) for e in sub_exprs(outer)
                 if normalized(e, loop) == load_key)
    return inside == len(occurrences(loop, load_key))


def _with_update(cache: RowCache, task: k.Task, loops: dict[int, k.For]) -> RowCache:
    """The cache with an update (see RowCache) when one applies: the largest expression over the
    load that the last loop reads it through, also computed by an earlier loop, of the cache's
    type, over values defined before that loop."""
    last = loops[cache.loops[-1]]
    if any(isinstance(s, (k.If, k.For, k.While)) for s in walk(last.body)):
        return cache
    load_key = next(normalized(e, last) for e in unconditional_loads(last.body, last.var)
                    if row_cache_key(e, last) == cache.key)
    candidates = sorted({normalized(e, last): e for s in last.body for x in exprs_of(s) for e in sub_exprs(x)
                         if e.dtype == cache.dtype and load_key in {normalized(c, last) for c in sub_exprs(e)}
                         and normalized(e, last) != load_key}.items(), key=lambda item: -_size(item[0]))
    defined_before = _defined_before(task)
    for key, _ in candidates:
        for writer_index in range(len(cache.loops) - 1):
            writer = loops[cache.loops[writer_index]]
            later = [loops[i] for i in cache.loops[writer_index + 1:]]
            free = {v for v in sub_exprs(key) if isinstance(v, k.Var)} - {_ROW_INDEX}
            if (occurrences(writer, key) and free <= defined_before[id(writer)]
                    and not any(isinstance(s, (k.If, k.For, k.While)) for s in walk(writer.body))
                    and all(_only_inside(loop, load_key, key) for loop in later)):
                return dataclasses.replace(cache, update=key, writer=id(writer))
    return cache


def _size(e: k.Expr) -> int:
    return sum(1 for _ in sub_exprs(e))


def _defined_before(task: k.Task) -> dict[int, set[k.Var]]:
    """For each top-level statement: the task variables defined before it."""
    defined, before = set(), {}
    for s in task.body:
        before[id(s)] = set(defined)
        if isinstance(s, k.Let):
            defined.add(s.var)
    return before


def spans_grid(task: k.Task, plan: LanePlan) -> bool:
    """Whether a serial task (a reduction to one value) can spread its loop over the whole grid:
    one lane loop, and after it only values and stores. The blocks' partial results then meet in
    a workspace, and the last block to finish combines them in a fixed order."""
    loops = [s for s in task.body if isinstance(s, (k.For, k.While))]
    if task.kind != "serial" or len(loops) != 1 or id(loops[0]) not in plan.loops:
        return False
    after = task.body[task.body.index(loops[0]) + 1:]
    return all(isinstance(s, (k.Let, k.Store)) for s in after)


# --- how a task spreads over the grid ----------------------------------------------------------
@dataclass(frozen=True)
class TaskSchedule:
    """How a task maps onto blocks (each kind is written by cuda_grid, rows by cuda.TaskWriter):

    - "rows": the task index is a row, `lanes` threads a row (inner reductions, normalizations,
      pointwise); with `splittable` (a row that is one loop nest, or a variance that is one in a
      single pass: cuda.task_variants), the launch may instead give each row several blocks that
      walk the nest as one flat range and meet in the workspace;
    - "columns": an outer reduction. The task index walks a unit-stride axis and its loops do not,
      so a block owns a strip of `lanes` neighbouring task indices (coalesced) and its row groups
      share each loop; with `splittable`, the loop's range is also split across blocks, whose
      partial results meet in the workspace and are combined in split order by the last block;
    - "flat": a full reduction over a perfect loop nest, walked as one flat index space: each block
      folds a contiguous chunk (its threads on neighbouring elements), then the last block combines
      the blocks' results in block order;
    - "grid_rows": a reduction over rows of a row-wise computation (cross_entropy's mean): the
      single loop's iterations are rows as in "rows", their accumulators then meet as in "flat";
    - "grid": any other reduction to one value, its single loop grid-strided over threads;
    - "tiles": a pointwise task over tiles (lower/tiles.py), one block a tile (cuda_tiles.py);
    - "inner_outer" and "column_fold": a row task carrying the column task after it, and that
      column task folding the blocks' partial results (cuda_inner_outer).
    """

    kind: str = "rows"
    accumulators: tuple[tuple[k.Var, str], ...] = ()  # combined across blocks through the workspace
    splittable: bool = False  # "columns", "rows": the loop's range may be split across blocks
    row_levels: int = 0  # "grid_rows": the loops whose iterations together are the rows (row_nest)
    # "rows": the split path reads a row once where the row path reads it twice and keeps it on chip
    # between (a variance: cuda_variance), so rows too long to keep take the split path.
    split_reads_once: bool = False
    # "column_fold": the columns a thread folds at a time where their count allows (4: 16-byte loads of
    # float32 partial results, else 1), over as many blocks as fill the GPU; 0: one column a thread,
    # 32 a block (BRAZE_DISABLE=inner_outer_fold). codegen/cuda_inner_outer.py, write_column_fold.
    fold_width: int = 0


def substituted(e: k.Expr, values: dict[k.Var, k.Expr], inline: bool = False) -> k.Expr:
    """`e` with each variable of `values` replaced by its value (with `inline`, the values' own
    variables replaced in turn: definitions inlined). A sub-expression met twice is rewritten once."""
    done: dict[k.Expr, k.Expr] = {}

    def visit(x: k.Expr) -> k.Expr:
        if x not in done:
            if isinstance(x, k.Var) and x in values:
                done[x] = visit(values[x]) if inline else values[x]
            else:
                done[x] = map_children(x, visit)
        return done[x]
    return visit(e)


def _vars_of(e: k.Expr) -> set[k.Var]:
    return set(vars_of(e))


def perfect_nest(loop: k.For) -> list[k.For] | None:
    """The loops of a perfect nest from `loop` inwards (each body but the innermost is exactly one
    unit-step loop whose bounds read no enclosing loop's index), or None."""
    nest = [loop]
    while True:
        body = nest[-1].body
        if nest[-1].step != 1 or any(isinstance(s, (k.Break, k.Continue, k.While)) for s in walk(body)):
            return None
        if not any(isinstance(s, k.For) for s in body):
            return nest
        inner = body[0]
        if len(body) != 1 or {v for e in (inner.begin, inner.end) for v in _vars_of(e)} & {n.var for n in nest}:
            return None
        nest.append(inner)


def lane_nest(loop: k.For) -> list[k.For] | None:
    """The loops of a lane loop's perfect nest when the lanes walk it as one flat index space (see
    cuda_grid.GridWriter.walk_lane_nest): two loops or more, with bounds the host can evaluate (the
    launch sizes the lanes by the nest's trip count), or None."""
    nest = perfect_nest(loop)
    if nest is None or len(nest) < 2 or any(_vars_of(e) for level in nest for e in (level.begin, level.end)):
        return None
    return nest


def nest_of(task: k.Task) -> list[k.For]:
    """The loops of a task's single loop nest, outer first, following each body's one loop."""
    nest = [next(s for s in task.body if isinstance(s, k.For))]
    while len(inner := [s for s in nest[-1].body if isinstance(s, k.For)]) == 1:
        nest.append(inner[0])
    return nest


def row_nest(task: k.Task) -> list[k.For]:
    """A serial task's loops over rows: its single loop, and inside it each loop that is a whole
    body (batched rows: cross_entropy over [batch, tokens, classes]), outer first."""
    nest = [next(s for s in task.body if isinstance(s, k.For))]
    while len(nest[-1].body) == 1 and isinstance(inner := nest[-1].body[0], k.For) and inner.step == 1 \
            and not {v for e in (inner.begin, inner.end) for v in _vars_of(e)} & {n.var for n in nest}:
        nest.append(inner)
    return nest


def row_loop_task(task: k.Task) -> k.Task:
    """The body of a serial task's row loops (row_nest) as a task of its own: a row's statements."""
    inner = row_nest(task)[-1]
    return k.Task(task.name, "range_for", inner.body, inner.var, inner.begin, inner.end)


def _rows_add_once(task: k.Task, row: k.Task) -> bool:
    """Whether a row changes the task's own variables only by statements of its own top level (the
    accumulations each row adds once), none inside its loops or branches."""
    outer = {s.var for s in task.body if isinstance(s, k.Let)}
    nested = tuple(s for s in row.body if isinstance(s, (k.For, k.While, k.If)))
    return not any(isinstance(s, k.Assign) and s.var in outer for s in walk(nested))


def _initialized(task: k.Task, accumulators) -> bool:
    """Every accumulator starts from a value set before the task's first loop (its identity)."""
    first = next(n for n, s in enumerate(task.body) if isinstance(s, (k.For, k.While)))
    initial = {s.var for s in task.body[:first] if isinstance(s, k.Let)}
    return all(acc in initial for acc, _ in accumulators)


def _walks_columns(task: k.Task, plan: LanePlan) -> bool:
    """Whether, among the accesses of the task's lane loops that differ from one task index to the
    next, the task index (or an index decomposed from it) addresses a unit-stride axis and the
    loops' own indices address none. An access the same for every task index (layer_norm
    backward's mean and rstd per row, read while summing columns) stays in cache: it does not
    decide how the task's threads coalesce."""
    if task.kind != "range_for" or not plan.loops:
        return False
    derived = {task.var}
    for s in task.body:
        if isinstance(s, k.Let) and _vars_of(s.value) & derived:
            derived.add(s.var)
    accesses = [a for loop in task.body if isinstance(loop, k.For) for a in _stores_and_loads_in(loop)]
    per_task = [a for a in accesses if any(_vars_of(i) & derived for i in a.indices)]
    unit = [i for a in per_task for axis, i in enumerate(a.indices) if a.param.static_stride(axis) == 1]
    return any(_vars_of(i) & derived for i in unit) and not any(_vars_of(i) - derived for i in unit)


def _stores_and_loads_in(loop: k.For) -> tuple:
    """The stores and loads of a loop's body, kept on the loop (which every task merged from its task holds)."""
    def find(loop: k.For) -> tuple:
        stores = [s for s in walk(loop.body) if isinstance(s, k.Store)]
        return (*stores, *(e for s in walk(loop.body) for x in exprs_of(s) for e in distinct_exprs(x)
                           if isinstance(e, k.Load)))
    return k.kept(loop, "_stores_and_loads", find)


def _row_is_one_nest(task: k.Task, plan: LanePlan) -> bool:
    """Whether a row task's row is one lane loop over a perfect nest with bounds the host can
    evaluate, between definitions and stores: its rows may be split across blocks (few long rows,
    or a row reduced over axes apart, like batch_norm's statistics per channel)."""
    loops = [s for s in task.body if isinstance(s, (k.For, k.While))]
    if task.kind != "range_for" or len(loops) != 1 or id(loops[0]) not in plan.loops:
        return False
    nest = perfect_nest(loops[0])
    after = task.body[task.body.index(loops[0]) + 1:]
    return (nest is not None and all(isinstance(s, (k.Let, k.Store)) for s in after)
            and _initialized(task, plan.loops[id(loops[0])])
            and not any(_vars_of(e) for level in nest for e in (level.begin, level.end))
            and not any(isinstance(s, (k.Store, k.AtomicRMW, k.Sync, k.Alloc)) for s in walk(loops[0].body)))


def tile_loops(task: k.Task) -> tuple[k.For, k.For] | None:
    """A tile task's loops over its tile's rows and columns: the last statement of the task, and the
    last of the row loop's body, with nothing but values and stores inside (cuda_tiles.py runs the
    rows' statements and the columns' body per element of the tile). None for other tasks."""
    if not task.tile or task.kind != "range_for" or not task.body or not isinstance(task.body[-1], k.For):
        return None
    rows = task.body[-1]
    columns = rows.body[-1] if rows.body else None
    if not isinstance(columns, k.For) or rows.step != 1 or columns.step != 1:
        return None
    looped = (k.For, k.While, k.Break, k.Continue, k.Sync, k.Alloc, k.AtomicRMW)
    inside = tuple(walk(rows.body[:-1])) + tuple(walk(columns.body))
    if any(isinstance(s, looped) for s in (*inside, *task.body[:-1])):
        return None
    return rows, columns


def plan_schedule(task: k.Task, plan: LanePlan) -> TaskSchedule:
    """The task's schedule (see TaskSchedule)."""
    if tile_loops(task) is not None:
        return TaskSchedule("tiles")
    online = _has_online_sums(plan)
    if spans_grid(task, plan) and not online:
        schedule = _grid_schedule(task, plan)
        # An argmax's (value, index) pairs meet across blocks only where a nest splits over them
        # ("flat", split rows); the other grid schedules combine lone values.
        if schedule.kind == "flat" or not has_arg_pairs(plan):
            return schedule
    columns = _walks_columns(task, plan) and not stored_rows(task)  # row groups would split a stored row
    if columns and has_arg_pairs(plan):  # a column's lanes would split its pairs: the row path
        return TaskSchedule()
    if columns:
        loops = [s for s in task.body if isinstance(s, (k.For, k.While))]
        after = task.body[task.body.index(loops[-1]) + 1:]
        splittable = (len(loops) == 1 and all(isinstance(s, (k.Let, k.Store)) for s in after)
                      and _initialized(task, plan.loops[id(loops[0])]))
        return TaskSchedule("columns", plan.loops[id(loops[0])] if splittable else (), splittable)
    if _row_is_one_nest(task, plan) and not online:
        loop = next(s for s in task.body if isinstance(s, k.For))
        return TaskSchedule("rows", plan.loops[id(loop)], splittable=True)
    return TaskSchedule()


def _grid_schedule(task: k.Task, plan: LanePlan) -> TaskSchedule:
    """The schedule of a serial task whose loop spans the grid (spans_grid)."""
    loop = next(s for s in task.body if isinstance(s, k.For))
    accumulators = plan.loops[id(loop)]
    if not _initialized(task, accumulators):
        return TaskSchedule("grid", accumulators)
    if perfect_nest(loop) is not None:
        return TaskSchedule("flat", accumulators)
    row = row_loop_task(task)
    if plan_lanes(row).loops and _rows_add_once(task, row):
        return TaskSchedule("grid_rows", accumulators, row_levels=len(row_nest(task)))
    return TaskSchedule("grid", accumulators)


def task_schedule(task: k.Task) -> TaskSchedule:
    """The schedule the task takes alone: `plan_schedule` of its own lane plan, kept on the task
    beside that plan (the GPU's task merges ask it of each task for every neighbour it is tried with)."""
    plan = plan_lanes(task)
    kept = task.__dict__.get("_task_schedule")
    if kept is None or kept[0] is not plan:  # planned for another lane plan (see plan_lanes)
        kept = plan, plan_schedule(task, plan)
        object.__setattr__(task, "_task_schedule", kept)
    return kept[1]


def schedule_kind(task: k.Task) -> str:
    """The kind of schedule the task takes alone (see TaskSchedule)."""
    return task_schedule(task).kind


def schedule_bounds(task: k.Task, schedule: str, splittable_rows: bool = False) -> list[k.Expr]:
    """What the runtime evaluates to plan a launch: the task's begin and end, then the extents it
    sizes the launch by (the trip count of each top-level loop; of each loop of the nest of a
    "flat" task; for `splittable_rows`, of each loop of its first nest, which the split path walks,
    then the trip count of each top-level loop, for the row path; for "grid_rows", of each row loop
    and then of each loop of a row)."""
    def extent(loop: k.For) -> k.Expr:
        return k.Binary("sub", loop.end, loop.begin, loop.end.dtype)

    def trip_count(loop: k.For) -> k.Expr:  # of a top-level loop of a row: its whole nest's when walked flat
        count = extent(loop)
        for level in (lane_nest(loop) or [loop])[1:]:
            count = k.Binary("mul", count, extent(level), count.dtype)
        return count

    if schedule == "tiles":  # one block a tile: the range is the launch
        return [task.begin, task.end]
    if schedule == "flat":
        return [task.begin, task.end, *(extent(loop) for loop in nest_of(task))]
    if splittable_rows:  # the split path's nest, then the row path's loops
        loops = [s for s in task.body if isinstance(s, k.For)]
        return [task.begin, task.end, *(extent(loop) for loop in nest_of(task)), *map(trip_count, loops)]
    if schedule == "grid_rows":
        loops = row_nest(task) + [s for s in row_loop_task(task).body if isinstance(s, k.For)]
        return [task.begin, task.end, *(extent(loop) for loop in loops)]
    loops = [s for s in task.body if isinstance(s, k.For)]
    flat = schedule in ("rows", "inner_outer", "columns") and bool(plan_lanes(task).loops)
    return [task.begin, task.end, *((trip_count if flat else extent)(loop) for loop in loops)]


# Neighbouring elements moved as one access, by how many a lane takes at a time: four (16 bytes of
# float32; 8 of half types, two 16-byte halves of float64), or eight where every access of the loops
# is 2 bytes or less (16 bytes of half types: as many bytes an instruction as float32 moves). The
# types of the prelude, each aligned to its size up to 16 bytes; eight-wide ones name their
# elements `v[0]` to `v[7]`, four-wide ones `x`, `y`, `z`, `w`.
VECTOR_TYPES = {
    4: {"float32": "float4", "int32": "int4", "float64": "bz_double4", "float16": "bz_half4",
        "bfloat16": "bz_bfloat164", "bool": "bz_bool4"},
    8: {"float16": "bz_half8", "bfloat16": "bz_bfloat168", "bool": "bz_bool8"},
}


def vector_type(dtype: DType, width: int) -> str:
    """The prelude type of `width` neighbouring elements of `dtype`."""
    return VECTOR_TYPES[width][dtype.name]


def vector_alignment(dtype: DType, width: int) -> int:
    """The bytes a row start must be aligned to for `width`-element accesses of `dtype`."""
    return min(16, width * dtype.itemsize)


def vector_component(width: int, part: int) -> str:
    """Element `part` of a vector of `width` elements."""
    return "xyzw"[part] if width == 4 else f"v[{part}]"


def vector_width(accesses: list[VectorAccesses]) -> int:
    """Elements a lane moves at a time in loops making these accesses (one width for them all):
    eight where every access is 2 bytes or less (the types with an eight-wide vector), else four."""
    dtypes = {a.param.dtype.name for v in accesses for a in (*v.loads, *v.stores)}
    return 8 if dtypes <= set(VECTOR_TYPES[8]) else 4


@dataclass(frozen=True)
class VectorAccesses:
    """The accesses along the row of a lane loop that move `width` elements at a time."""

    loads: tuple[k.Load, ...]
    stores: tuple[k.Store, ...]
    width: int = 4


def unit_stride_position(access, var: k.Var, local: set[k.Var]) -> bool:
    """`var` indexes exactly one axis of the access, with unit stride, as `var` plus an offset fixed
    for the loop (a part of a loop split at a cat's edge reads `x[j - 64]`), and no index reads the
    `local` variables the loop defines."""
    uses = [axis for axis, i in enumerate(access.indices) if var in set(sub_exprs(i))]
    # Every index is read where the vector's accesses are made, before the loop's own statements run
    # (its alignment test, its loads): none may read a value the loop body defines.
    others_fixed = not any(_vars_of(i) & local for i in access.indices)
    return len(uses) == 1 and others_fixed and _steps_with(access.indices[uses[0]], var, local | {var}) \
        and access.param.static_stride(uses[0]) == 1


def _steps_with(index: k.Expr, var: k.Var, varying: set[k.Var]) -> bool:
    """`index` is `var`, or `var` plus or minus values that read none of `varying`."""
    if index == var:
        return True
    if not (isinstance(index, k.Binary) and index.op in ("add", "sub") and index.dtype == var.dtype):
        return False
    if index.op == "add" and not _vars_of(index.a) & varying:
        return _steps_with(index.b, var, varying)
    return not _vars_of(index.b) & varying and _steps_with(index.a, var, varying)


def replace_var_in_access(access, var: k.Var, new: k.Expr) -> tuple[k.Expr, ...]:
    return tuple(k.substitute(i, var, new) for i in access.indices)


def vector_accesses(loop: k.For) -> VectorAccesses | None:
    """The loads and stores of a lane loop that can move several elements at a time (four wide;
    vector_width may widen them), or None when the loop cannot take that path: it must hold no
    branches or inner loops, and touch memory along the row only as `a[..., j + o]` (o fixed for the
    loop) of a type with a vector type. It may start anywhere: the vectors start at its begin
    (cuda_rows.RowLoopWriter)."""
    if any(isinstance(s, (k.For, k.While, k.If, k.AtomicRMW, k.Alloc, k.Break, k.Continue)) for s in walk(loop.body)):
        return None
    loads = {e: None for x in (x for s in loop.body for x in exprs_of(s)) for e in sub_exprs(x)
             if isinstance(e, k.Load) and loop.var in {v for i in e.indices for v in sub_exprs(i)}}
    stores = [s for s in loop.body if isinstance(s, k.Store) and any(loop.var in set(sub_exprs(i)) for i in s.indices)]
    accesses = [*loads, *stores]
    local = {s.var for s in walk(loop.body) if isinstance(s, (k.Let, k.Assign))}
    if not accesses or any(a.param.dtype.name not in VECTOR_TYPES[4] or not unit_stride_position(a, loop.var, local)
                           for a in accesses):
        return None
    if not set(loads) <= set(unconditional_loads(loop.body, loop.var)):  # a load only some iterations make
        return None
    return VectorAccesses(tuple(loads), tuple(stores))


def thread_vectors(task: k.Task) -> tuple[k.For, VectorAccesses] | None:
    """For a task run one index a thread (cuda.TaskWriter.one_thread_per_row), its body as a loop
    over the task's range and that loop's vector accesses (widened as vector_width decides), when a
    thread may take `width` neighbouring indices at a time as a lane loop's vectors do
    (cuda_rows.RowLoopWriter.write_thread_vectors); else None. Every store must move along the
    index; no array may be both read and written, since a vector's loads are all issued before any
    of its indices' statements run; and no random words, which cuda_random draws per index here."""
    if task.kind != "range_for" or task.var is None:
        return None
    loop = k.For(task.var, task.begin, task.end, task.body)
    vector = vector_accesses(loop)
    if vector is None:
        return None
    stores = [s for s in walk(task.body) if isinstance(s, (k.Store, k.AtomicRMW))]
    written = [s.param.name for s in stores]
    reads = [e for s in walk(task.body) for x in exprs_of(s) for e in sub_exprs(x)]
    loaded = {e.param.name for e in reads if isinstance(e, k.Load)}
    if len(stores) != len(vector.stores) or len(set(written)) != len(written) or set(written) & loaded:
        return None
    if any(isinstance(e, k.Philox) for e in reads):
        return None
    return loop, dataclasses.replace(vector, width=vector_width([vector]))


def nest_vector_accesses(nest: list[k.For]) -> VectorAccesses | None:
    """The vector accesses of a perfect nest walked as one flat range (cuda_grid.walk_flat),
    `width` neighbouring elements of its innermost loop at a time (vector_width), or None. Besides
    what vector_accesses asks of the innermost loop, every index must be affine in the nest's
    indices: each run of the innermost loop then starts aligned when the first does and a step of
    each outer index moves a multiple of the alignment, which the kernel checks before taking the
    path."""
    vector = vector_accesses(nest[-1])
    if vector is None:
        return None
    indices = {level.var for level in nest}
    if not all(affine(i, indices) for access in (*vector.loads, *vector.stores) for i in access.indices):
        return None
    return dataclasses.replace(vector, width=vector_width([vector]))


def affine(e: k.Expr, variables: set[k.Var]) -> bool:
    """Whether `e` is an affine function of `variables` (integer index arithmetic)."""
    if not variables & vars_of(e) or isinstance(e, k.Var):
        return True
    if isinstance(e, k.Binary) and e.op in ("add", "sub"):
        return affine(e.a, variables) and affine(e.b, variables)
    if isinstance(e, k.Binary) and e.op == "mul":
        return any(not variables & vars_of(c) and affine(x, variables) for c, x in ((e.a, e.b), (e.b, e.a)))
    return isinstance(e, k.Cast) and e.dtype.is_integer and e.x.dtype.is_integer and affine(e.x, variables)


def plan_lanes(task: k.Task) -> LanePlan:
    """The task's lane loops (see LanePlan), kept on the task: its passes and schedules ask again
    and again, and the plan's loops are known by their identity in this task."""
    loops = tuple(id(s) for s in task.body)
    kept = task.__dict__.get("_lane_plan")
    if kept is None or kept[0] != loops:  # (a copy of the task has other loops)
        kept = loops, _plan_lanes(task)
        object.__setattr__(task, "_lane_plan", kept)
    return kept[1]


def _plan_lanes(task: k.Task) -> LanePlan:
    loops = [s for s in task.body if isinstance(s, k.For)]
    if loops and stored_rows(task) is None:  # a lane could read back what another stored
        return LanePlan()
    task_vars = {s.var for s in task.body if isinstance(s, k.Let)}
    plan = {}
    for loop in loops:
        accumulators = _loop_accumulators(loop, task_vars)
        if accumulators is None:
            return LanePlan()
        plan[id(loop)] = accumulators
    return LanePlan(plan, any(walks_unit_stride(loop) for loop in loops))
