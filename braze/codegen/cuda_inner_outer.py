"""The inner-outer schedule (nvFuser's "inner-outer persistent" scheduler): a row task that reduces
along its rows (layer_norm or rms_norm backward's dx) and a column task that sums the same
[rows, columns] space down its columns (their dweight and dbias) run as one pass over memory.

Each block takes a grid-strided share of the rows and runs the row task on them as usual; the
column task's loop body runs inside the row task's first lane loop over the columns, adding each
row's element to this block's partial result of that column, kept in shared memory (or, where the
columns are too many, in the workspace). dy and x then cross memory once instead of twice. Each
block writes its partial results once, as one row of a [blocks, columns] workspace; a second
launch, the column task's own function, folds the blocks' rows column by column in block order
(four columns a thread, 16-byte loads, where their count allows; enough blocks to fill the GPU, each
block's row groups walking a share of the rows, then combined in a fixed tree) and stores what the
column task stores. The order is fixed, so results are bit-identical from run to run; no float
atomics.

The row task holds its rows twice, under one branch the whole launch takes the same way: partial
results in shared memory (every access to them a shared-memory one), or in the workspace. It is
compiled for 4 blocks of 256 an SM (64 registers) and launched with as many as fit: its blocks walk
their rows one at a time, so more blocks are more loads in flight. Each of these changes is a
feature (FEATURES) that `BRAZE_DISABLE` turns off, to compare the code with and without it.

The partial results wait between the two launches in the workspace of their stream, which every
braze kernel launched on that stream shares (runtime/cuda_resources.py): nothing may use it in
between. That holds while one host thread at a time launches braze work on a stream; two threads
launching on one stream at once could interleave another kernel there. A fold in the same launch
would avoid that, but only the last block to finish knows every block's row is written, and one
block folding them all would take longer than the second launch.

`plan_inner_outer` decides from the Kernel IR which pairs of tasks take it; `InnerOuterWriter`
(a mixin of `cuda.TaskWriter`) writes both functions; the launch planner sizes the launches
(codegen/cuda_launch.py, `LaunchPlanner._plan_inner_outer`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from braze import config
from braze.codegen.cuda_plan import (
    INNER_OUTER_THREADS_PER_SM,
    LANE_COMBINES,
    VECTOR_TYPES,
    distinct_exprs,
    perfect_nest,
    plan_lanes,
    plan_schedule,
    vars_of,
    walk,
)
from braze.codegen.cuda_rows import c_type
from braze.kir import nodes as k
from braze.passes.simplify import map_children, simplify_expr

# The features (BRAZE_DISABLE) that change the code this schedule writes or how it is launched.
FEATURES = ("inner_outer_split", "inner_outer_registers", "inner_outer_occupancy", "inner_outer_fold")


# Statements a row task may hold for its rows to take the schedule: a row that jumps, waits or keeps
# arrays of its own is left alone.
_ROW_TASK_EXCLUDES = (k.Break, k.Continue, k.While, k.AtomicRMW, k.Sync, k.Alloc, k.StoreLocal)


@dataclass(frozen=True)
class ColumnAccumulator:
    """One accumulator of the column task, kept per column: `array` is this row group's partial
    results (a pointer the writer declares), folded with `combine` from `initial`."""

    source: k.Var  # the column task's accumulator
    array: k.Var
    initial: k.Const
    combine: str  # a LANE_COMBINES op


@dataclass(frozen=True)
class InnerOuter:
    """A row task (position `row` of the kernel) carrying the column task right after it."""

    row: int
    task: k.Task  # the row task, its first lane loop over the columns also adding to the accumulators
    column: k.Task  # the column task: its function folds the blocks' partial results
    accumulators: tuple[ColumnAccumulator, ...]

    @property
    def slot_bytes(self) -> int:
        """Bytes of a workspace slot: every accumulator's partial results are an array of them."""
        return max(acc.array.dtype.itemsize for acc in self.accumulators)


def plan_inner_outer(kernel: k.Kernel) -> dict[int, InnerOuter]:
    """The row tasks that carry the column task right after them, by position in the kernel (none
    under `BRAZE_DISABLE=inner_outer`)."""
    found = {}
    if config.disabled("inner_outer"):
        return found
    for n in range(len(kernel.tasks) - 1):
        if n - 1 in found:  # that row task carries this one
            continue
        carried = carry_columns(kernel.tasks[n], kernel.tasks[n + 1], n)
        if carried is not None:
            found[n] = carried
    return found


def column_tasks_after_rows(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with each column task that comes right before a row task able to carry it moved
    after it (a fusion's outputs may list dweight first): tasks that touch nothing the other
    writes may run in either order."""
    tasks = list(kernel.tasks)
    n = 0
    while n < len(tasks) - 1:
        if carry_columns(tasks[n + 1], tasks[n]) is not None and (
                n + 2 >= len(tasks) or carry_columns(tasks[n + 1], tasks[n + 2]) is None):
            tasks[n], tasks[n + 1] = tasks[n + 1], tasks[n]
            n += 1
        n += 1
    return dataclasses.replace(kernel, tasks=tuple(tasks))


def carry_columns(row: k.Task, column: k.Task, position: int = 0) -> InnerOuter | None:
    """`row` with `column`'s loop body in its first lane loop over the columns, or None when the
    pair does not take the schedule. That takes: a row task reducing along its rows (a lane loop
    with accumulators), and a column task that is one loop (or a perfect nest: the rows of a
    [batch, tokens, hidden] norm) over the same rows folding into accumulators (cuda_plan's
    splittable "columns" schedule) over the range of that lane loop; neither reading what the
    other writes."""
    if row.kind != "range_for" or column.kind != "range_for" or not _row_reduces(row):
        return None
    nest = _column_nest(column)
    lane_loop = _lane_loop_over(row, column)
    if nest is None or lane_loop is None or column.var.dtype != lane_loop.var.dtype or not _independent(row, column):
        return None
    rows = _row_indices(row, lane_loop, nest)
    accumulators = _accumulators(column, nest[0], position)
    if rows is None or accumulators is None:
        return None
    statements = _column_statements(row, column, nest, rows, lane_loop, accumulators)
    if statements is None:
        return None
    carried_loop = dataclasses.replace(lane_loop, body=lane_loop.body + statements)
    carrier = dataclasses.replace(row, body=tuple(carried_loop if s is lane_loop else s for s in row.body))
    lanes = plan_lanes(carrier)  # each column still added once a row, by the lane that walks it
    if id(carried_loop) not in lanes.loops or plan_schedule(carrier, lanes).kind != "rows":
        return None
    return InnerOuter(position, carrier, column, tuple(accumulators.values()))


def _row_reduces(row: k.Task) -> bool:
    """A "rows" task with a lane loop that folds accumulators (a normalization or an inner
    reduction), no argmax pairs, and nothing a row could skip or wait for."""
    lanes = plan_lanes(row)
    if plan_schedule(row, lanes).kind != "rows" or not any(lanes.loops.values()):
        return False
    if any(combine not in LANE_COMBINES for accumulators in lanes.loops.values() for _, combine in accumulators):
        return False
    return not any(isinstance(s, _ROW_TASK_EXCLUDES) for s in walk(row.body))


def _column_nest(column: k.Task) -> list[k.For] | None:
    """The column task's loops over the rows, outer first, when its schedule is a splittable
    "columns" one (one loop of folds between definitions and stores) and the loops are a perfect
    nest from 0 (the reduced axes of a sum over all but the last)."""
    schedule = plan_schedule(column, plan_lanes(column))
    if schedule.kind != "columns" or not schedule.splittable:
        return None
    loop = next(s for s in column.body if isinstance(s, k.For))
    nest = perfect_nest(loop)
    if nest is None or any(level.begin != k.Const(0, level.begin.dtype) for level in nest):
        return None
    if not all(isinstance(s, (k.Let, k.Assign)) for s in nest[-1].body):
        return None
    before = column.body[: column.body.index(loop)]
    return nest if all(isinstance(s, k.Let) for s in before) else None


def _lane_loop_over(row: k.Task, column: k.Task) -> k.For | None:
    """The row task's first top-level lane loop over the column task's range, starting at 0 and
    with no loop inside (its index is then the column the accumulators are kept at)."""
    if column.begin != k.Const(0, column.begin.dtype):
        return None
    lanes = plan_lanes(row)
    for s in row.body:
        if (isinstance(s, k.For) and id(s) in lanes.loops and s.step == 1
                and (s.begin, s.end) == (column.begin, column.end)
                and not any(isinstance(x, (k.For, k.While)) for x in walk(s.body))):
            return s
    return None


def _arrays(task: k.Task, writes: bool) -> set[str]:
    """The names of the arrays a task writes (`writes`) or touches at all."""
    names = {s.param.name for s in walk(task.body) if isinstance(s, (k.Store, k.AtomicRMW))}
    if writes:
        return names
    return names | {e.param.name for s in walk(task.body) for x in _exprs(s) for e in distinct_exprs(x)
                    if isinstance(e, (k.Load, k.ArrayExtent, k.ArrayStride))}


def _exprs(s: k.Stmt):
    for name in ("value", "cond", "begin", "end", "index"):
        e = getattr(s, name, None)
        if isinstance(e, k.Expr):
            yield e
    yield from getattr(s, "indices", ())


def _independent(row: k.Task, column: k.Task) -> bool:
    """Neither task touches an array the other writes: they may then run in one launch in any
    interleaving."""
    return not (_arrays(row, True) & _arrays(column, False) or _arrays(column, True) & _arrays(row, False))


def _accumulators(column: k.Task, loop: k.For, position: int) -> dict[k.Var, ColumnAccumulator] | None:
    """The column loop's accumulators, each with a constant start and a combine the blocks' partial
    results can meet by; None when one has neither."""
    initial = {s.var: s.value for s in column.body if isinstance(s, k.Let)}
    found = {}
    for n, (acc, combine) in enumerate(plan_lanes(column).loops[id(loop)]):
        start = initial.get(acc)
        if combine not in LANE_COMBINES or not isinstance(start, k.Const):
            return None
        found[acc] = ColumnAccumulator(acc, k.Var(f"bz_col{position}_{n}", acc.dtype), start, combine)
    return found or None


def _column_statements(row: k.Task, column: k.Task, nest: list[k.For], rows: dict[k.Expr, k.Expr],
                       lane_loop: k.For, accumulators: dict[k.Var, ColumnAccumulator]) -> tuple[k.Stmt, ...] | None:
    """The column loop's body at row `row`'s index (`rows`: each loop index of the nest as the row
    task reads it) and column `lane_loop`'s index: its definitions (renamed away from the row
    task's names), and each fold `acc = op(acc, x)` as one into the accumulator's array at that
    column. None when the body assigns anything else."""
    before = column.body[: column.body.index(nest[0])]
    mapping: dict[k.Expr, k.Expr] = {column.var: lane_loop.var, **rows}
    for s in before:  # definitions before the loop (a hoisted weight[column]): inlined, in order
        if s.var not in accumulators:
            mapping[s.var] = _substituted(s.value, mapping)
    taken = {row.var.name} | {v.name for s in walk(row.body) for x in (*_exprs(s), getattr(s, "var", None))
                              if x is not None for v in vars_of(x)}
    statements: list[k.Stmt] = []
    for s in nest[-1].body:
        if isinstance(s, k.Let):
            renamed = k.Var(_fresh(s.var.name, taken), s.var.dtype)
            statements.append(k.Let(renamed, _substituted(s.value, mapping)))
            mapping[s.var] = renamed
            continue
        acc = accumulators.get(s.var)
        if acc is None or any(v in accumulators for v in vars_of(s.value.b)):
            return None
        column_index = lane_loop.var
        partial = k.LoadLocal(acc.array, column_index, acc.array.dtype)
        value = k.Binary(s.value.op, partial, _substituted(s.value.b, mapping), acc.array.dtype)
        statements.append(k.StoreLocal(acc.array, column_index, value))
    return tuple(statements)


def _row_indices(row: k.Task, lane_loop: k.For, nest: list[k.For]) -> dict[k.Expr, k.Expr] | None:
    """Each loop index of the column nest at the row task's index, when the nest walks as many rows
    as the task (its extents' product is the task's range): the row index's digits, innermost
    first, as the lowering takes a merged range apart (lower/fusion_kernel.py); each as a name the
    row task gives it before the lane loop (`i = p % n`) where it does, so equal loads stay equal
    (and are made once). Any order of the digits would sum the same rows; this one shares loads."""
    extents = [level.end for level in nest]
    count = extents[0]
    for extent in extents[1:]:
        count = k.Binary("mul", count, extent, count.dtype)
    if row.begin != k.Const(0, row.begin.dtype) or simplify_expr(count) != simplify_expr(row.end):
        return None
    if any(level.var.dtype != row.var.dtype for level in nest):
        return None
    assigned = {s.var for s in walk(row.body) if isinstance(s, k.Assign)}
    named = {simplify_expr(s.value): s.var for s in reversed(row.body[: row.body.index(lane_loop)])
             if isinstance(s, k.Let) and s.var not in assigned}
    indices: dict[k.Expr, k.Expr] = {}
    rest: k.Expr = row.var
    for n in range(len(nest) - 1, -1, -1):
        digit = rest if n == 0 else simplify_expr(k.Binary("remainder", rest, extents[n], rest.dtype))
        indices[nest[n].var] = named.get(digit, digit)
        rest = simplify_expr(k.Binary("floordiv", rest, extents[n], rest.dtype))
    return indices


def _fresh(name: str, taken: set[str]) -> str:
    suffix = 1
    while f"{name}_c{suffix}" in taken:
        suffix += 1
    taken.add(f"{name}_c{suffix}")
    return f"{name}_c{suffix}"


def _substituted(e: k.Expr, mapping: dict[k.Expr, k.Expr]) -> k.Expr:
    """`e` with every variable in `mapping` replaced at once (a replacement is not replaced again)."""
    memo: dict[k.Expr, k.Expr] = {}

    def visit(x: k.Expr) -> k.Expr:
        if x in mapping:
            return mapping[x]
        if x not in memo:
            memo[x] = map_children(x, visit)
        return memo[x]

    return visit(e)


def _around_loop(column: k.Task) -> tuple[tuple[k.Stmt, ...], tuple[k.Stmt, ...]]:
    """The column task's statements before its loop (definitions, the accumulators' starts) and
    after it (the stores)."""
    at = next(n for n, s in enumerate(column.body) if isinstance(s, k.For))
    return column.body[:at], column.body[at + 1:]


def fold_task(carried: InnerOuter) -> k.Task:
    """The column task as its fold writes it: its definitions and stores, its loop left out."""
    before, after = _around_loop(carried.column)
    return dataclasses.replace(carried.column, body=before + after)


class InnerOuterWriter:
    """The two functions of the inner-outer schedule, for a task writer (see the module docstring):
    the row task carrying the column partial results (`inner_outer` set), and the column task's
    fold of them (`fold_of` set)."""

    inner_outer: InnerOuter | None = None
    fold_of: InnerOuter | None = None

    @property
    def column_arrays(self) -> frozenset[k.Var]:
        carried = self.inner_outer
        return frozenset(acc.array for acc in carried.accumulators) if carried is not None else frozenset()

    def header(self, last_parameter: str, threads_per_sm: int = 0) -> None:
        """The function's signature: the argument block and the four launch scalars (the last one
        named for what this function reads in its slot); compiled to keep `threads_per_sm` resident
        where given."""
        blocks = f", {max(1, threads_per_sm // self.block_size)}" if threads_per_sm else ""
        self.lines.append(f"extern \"C\" __global__ void __launch_bounds__({self.block_size}{blocks})")
        self.lines.append(f"{self.task.name}(const BzArgs<{max(self.layout.size, 1)}> a, const long long lanes,")
        self.lines.append(f"    const long long cached_row, unsigned char* const bz_partials, {last_parameter}) {{")

    def partials(self, n: int, acc: ColumnAccumulator, carried: InnerOuter) -> str:
        """Accumulator `n`'s region of the workspace: `bz_partial_rows` rows of `bz_columns` slots."""
        return (f"(({c_type(acc.array.dtype)}*)(bz_partials + {n}LL * {carried.slot_bytes} * bz_partial_rows "
                "* bz_columns))")

    # --- the row task, adding each row to its block's partial results ---------------------------
    def write_inner_outer(self) -> None:
        """A grid-strided loop over this block's rows (no one-block-per-row launch: each block's
        partial results must cover many rows), the row task's body in it, then the block's partial
        results to its row of the workspace. `lanes` and `cached_row` are a row task's; the last
        scalar says the partial results live in the workspace (too many columns for shared memory).

        The rows are written twice, under one branch on that scalar that the whole launch takes the
        same way: with the partial results in shared memory, every access to them is a shared-memory
        one (LDS/STS, not the generic LD/ST a pointer to either compiles to). The workspace copy has
        no register-row path: columns too many for shared memory are rows too long for registers.
        `BRAZE_DISABLE=inner_outer_split`: one copy, the pointer chosen at run time."""
        t, ix = self.task, self.index
        occupancy = not config.disabled("inner_outer_occupancy")
        self.header("const long long bz_columns_in_memory", INNER_OUTER_THREADS_PER_SM if occupancy else 0)
        self.declare_params()
        self.line(f"const {ix} task_begin = {self.expr(t.begin)}, task_end = {self.expr(t.end)};")
        self.line("const int lanes32 = (int)lanes, bz_lane = threadIdx.x & (lanes32 - 1);")
        self.line("const int row_in_block = threadIdx.x / lanes32, rows_per_block = blockDim.x / lanes32;")
        self.line(f"const {ix} bz_columns = bz_maximum(({ix})({self.expr(self.inner_outer.column.end)}), ({ix})0);")
        if config.disabled("inner_outer_split"):
            self.write_carrying_rows("either")
        else:
            declared, register_vectors = set(self.declared), self.register_vectors
            self.line("if (bz_columns_in_memory) {")
            self.register_vectors = 0
            self.nested_rows("workspace")
            self.register_vectors, self.declared = register_vectors, declared
            self.line("} else {")
            self.nested_rows("shared")
            self.line("}")
        self.lines.append("}")

    def nested_rows(self, memory: str) -> None:
        self.depth += 1
        self.write_carrying_rows(memory)
        self.depth -= 1

    def write_carrying_rows(self, memory: str) -> None:
        """The block's rows with their partial results in `memory`: "shared", "workspace", or
        "either" (chosen at run time by `bz_columns_in_memory`)."""
        ix = self.index
        self.declare_column_partials(memory)
        self.line(f"for ({ix} row0 = task_begin + ({ix})blockIdx.x * rows_per_block; row0 < task_end;")
        self.line(f"     row0 += ({ix})gridDim.x * rows_per_block) {{")
        self.depth += 1
        # Each row derives its addresses anew: kept across rows (with the weights they load), they
        # took 128 registers and spilled.
        self.line("const int lane = bz_opaque(bz_lane);")
        self.write_row()  # a clamped row past the end also adds nothing to the partial results
        # The next row may take the other path (16-byte or one element a lane), on which a lane adds
        # to other columns: every lane's additions for this row land first.
        self.line("__syncthreads();")
        self.depth -= 1
        self.line("}")
        if memory != "workspace":
            self.write_block_partials(memory)

    def declare_column_partials(self, memory: str) -> None:
        """Each accumulator's partial results for this row group, set to its start: in dynamic
        shared memory after the row caches, or in the workspace (a row for every row group of
        every block, `bz_partial_rows` in all, which the fold then reads)."""
        carried, ix = self.inner_outer, self.index
        rows = {"shared": "(long long)gridDim.x", "workspace": "(long long)gridDim.x * rows_per_block",
                "either": "bz_columns_in_memory ? (long long)gridDim.x * rows_per_block : (long long)gridDim.x"}
        self.line(f"const long long bz_partial_rows = {rows[memory]};")
        if memory != "workspace":
            self.line("extern __shared__ __align__(16) unsigned char bz_shared_columns[];")
            self.line("unsigned char* bz_column_region = bz_shared_columns;")
            for cache in self.caches:  # as declare_row_caches lays them out
                size = f"sizeof({c_type(cache.dtype)})"
                self.line(f"bz_column_region += (rows_per_block * cached_row * {size} + 15) & ~15LL;")
        for n, acc in enumerate(carried.accumulators):
            ty, name = c_type(acc.array.dtype), acc.array.name
            in_memory = f"{self.partials(n, acc, carried)} + (long long)blockIdx.x * rows_per_block * bz_columns"
            block = {"shared": f"({ty}*)bz_column_region", "workspace": in_memory,
                     "either": f"bz_columns_in_memory ? {in_memory} : ({ty}*)bz_column_region"}
            self.line(f"{ty}* const {name}_block = {block[memory]};")
            if memory != "workspace":
                self.line(f"bz_column_region += ((long long)rows_per_block * bz_columns * sizeof({ty}) + 15) & ~15LL;")
            self.line(f"{ty}* const {name} = {name}_block + (long long)row_in_block * bz_columns;")
            self.line(f"for ({ix} c = bz_lane; c < bz_columns; c += lanes32) {name}[c] = {self.expr(acc.initial)};")
        self.line("__syncthreads();")

    def write_block_partials(self, memory: str) -> None:
        """In shared memory: the row groups' partial results combined in group order, into the
        block's row of the workspace (the loop's last barrier made every addition visible)."""
        carried, ix = self.inner_outer, self.index
        if memory == "either":
            self.line("if (!bz_columns_in_memory) {")
            self.depth += 1
        self.line(f"for ({ix} c = threadIdx.x; c < bz_columns; c += ({ix})blockDim.x) {{")
        for n, acc in enumerate(carried.accumulators):
            ty, functor, block = c_type(acc.array.dtype), LANE_COMBINES[acc.combine], f"{acc.array.name}_block"
            self.line(f"  {ty} bz_s{n} = {block}[c];")
            self.line(f"  for (int g = 1; g < rows_per_block; ++g) "
                      f"bz_s{n} = {functor}()(bz_s{n}, {block}[(long long)g * bz_columns + c]);")
            self.line(f"  {self.partials(n, acc, carried)}[(long long)blockIdx.x * bz_columns + c] = bz_s{n};")
        self.line("}")
        if memory == "either":
            self.depth -= 1
            self.line("}")

    def emit_store_local(self, s: k.StoreLocal) -> None:
        """A store to a local array; to a column's partial result, for active rows only (one
        component of a 16-byte update in a 16-byte loop)."""
        if id(s) in self.vector_stores:
            self.line(f"{self.vector_stores[id(s)]} = {self.expr(s.value)};")
            return
        guard = "if (active) " if s.array in self.column_arrays else ""
        self.line(f"{guard}{s.array.name}[{self.expr(s.index)}] = {self.expr(s.value)};")

    def vector_column_partials(self, loop: k.For, base: k.Var, width: int) -> dict[k.Var, str]:
        """In a 16-byte loop: the column partial results it adds to, read as vectors of four at the
        loop's columns before the components (one vector for four columns, two for eight: the
        loop's conditions make them aligned, the columns a multiple of the width and every region
        starting at 16 bytes). Vectors, not one column at a time: a lane's eight neighbouring
        floats would meet seven other lanes' on a shared-memory bank."""
        found = {}
        for s in loop.body:
            if (isinstance(s, k.StoreLocal) and s.array in self.column_arrays and s.index == loop.var
                    and s.array.dtype.name in VECTOR_TYPES[4] and s.array not in found):
                found[s.array] = name = f"{s.array.name}_{loop.var.name}"
                ty = VECTOR_TYPES[4][s.array.dtype.name]
                if width > 4:
                    self.line(f"{ty} {name}[{width // 4}];")
                for quarter in range(width // 4):
                    vector = _column_vector(name, quarter, width)
                    self.line(f"{'' if width > 4 else ty + ' '}{vector} = "
                              f"*reinterpret_cast<const {ty}*>(&{s.array.name}[{_plus(base.name, 4 * quarter)}]);")
        return found

    def vector_column_component(self, loop: k.For, vectors: dict[k.Var, str], part: int, width: int) -> None:
        """Column `part` of the loop's vectors as what the loop's column statements read and write."""
        component = {array: f"{_column_vector(name, part // 4, width)}.{'xyzw'[part % 4]}"
                     for array, name in vectors.items()}
        for array in vectors:
            self.substitutions[k.LoadLocal(array, loop.var, array.dtype)] = component[array]
        self.vector_stores.update({id(s): component[s.array] for s in loop.body
                                   if isinstance(s, k.StoreLocal) and s.array in vectors})

    def store_vector_columns(self, vectors: dict[k.Var, str], base: k.Var, width: int) -> None:
        for array, name in vectors.items():
            ty = VECTOR_TYPES[4][array.dtype.name]
            for quarter in range(width // 4):
                self.line(f"if (active) *reinterpret_cast<{ty}*>(&{array.name}[{_plus(base.name, 4 * quarter)}]) = "
                          f"{_column_vector(name, quarter, width)};")

    # --- the column task: the blocks' partial results folded ------------------------------------
    def fold_width(self) -> int:
        """The columns a thread of the fold takes at a time where their count allows (TaskSchedule.
        fold_width): 4 where every partial result is a float32, else 1; 0 for the fold of one column
        a thread (`BRAZE_DISABLE=inner_outer_fold`)."""
        if config.disabled("inner_outer_fold"):
            return 0
        return 4 if all(acc.array.dtype.name == "float32" for acc in self.fold_of.accumulators) else 1

    def write_column_fold(self) -> None:
        """Neighbouring threads on neighbouring columns, `lanes` of them a block, and its row groups
        folding the workspace's rows b = group, group + groups, ... in order, then combined over
        the groups in a fixed tree (bz_column_reduce); then the column task's stores. `cached_row`
        is the number of rows of partial results; the last scalar the columns a thread takes (4:
        16-byte vectors, where the runtime finds their count a multiple of 4; see fold_width)."""
        t, ix = self.task, self.index
        width = self.fold_width()
        self.header("const long long bz_width" if width else "unsigned* const bz_finished")
        self.declare_params()
        self.line(f"const {ix} task_begin = {self.expr(t.begin)}, task_end = {self.expr(t.end)};")
        self.line("const int cols32 = (int)lanes, lane = threadIdx.x / cols32, lanes32 = blockDim.x / cols32;")
        self.line(f"const {ix} bz_columns = task_end - task_begin;")
        self.line("const long long bz_partial_rows = cached_row;")
        if width == 4:
            self.line("if (bz_width == 4) {")
            self.depth += 1
            self.write_vector_fold()
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.write_scalar_fold(unroll=8)
            self.depth -= 1
            self.line("}")
        else:
            self.write_scalar_fold(unroll=8 if width else 4)
        self.lines.append("}")

    def write_scalar_fold(self, unroll: int) -> None:
        """One column a thread: `unroll` loads of it in flight."""
        carried, t, ix = self.fold_of, self.task, self.index
        declared = set(self.declared)
        self.line(f"const {ix} row = task_begin + ({ix})blockIdx.x * cols32 + (threadIdx.x & (cols32 - 1));")
        self.line("const bool active = row < task_end;")
        self.line(f"const {c_type(t.var.dtype)} {t.var.name} = active ? row : task_end - 1;")
        before, after = _around_loop(carried.column)
        self.block(before)
        self.line(f"#pragma unroll {unroll}")
        self.line("for (long long b = lane; b < bz_partial_rows; b += lanes32) {")
        column = f"({t.var.name} - task_begin)"
        for n, acc in enumerate(carried.accumulators):
            functor = LANE_COMBINES[acc.combine]
            self.line(f"  {acc.source.name} = {functor}()({acc.source.name}, "
                      f"{self.partials(n, acc, carried)}[b * bz_columns + {column}]);")
        self.line("}")
        for acc in carried.accumulators:
            self.line(f"{acc.source.name} = bz_column_reduce<{self.block_size}>({acc.source.name}, cols32, "
                      f"{LANE_COMBINES[acc.combine]}());")
        self.block(after)
        self.declared = declared

    def write_vector_fold(self) -> None:
        """Four neighbouring columns a thread, read as one float4 a row of partial results (the
        columns a multiple of 4 and every region 16-byte aligned: the workspace's start is, and each
        region spans rows of them), each row's four folded in the same order as one column a thread
        folds them; threads past the last column read the last four and store nothing. Then each
        column's stores, the accumulator its folded value."""
        carried, t, ix = self.fold_of, self.task, self.index
        self.line(f"const {ix} bz_first = task_begin + 4 * (({ix})blockIdx.x * cols32 + (threadIdx.x & (cols32 - 1)));")
        self.line("const bool bz_any = bz_first < task_end;")
        self.line(f"const {ix} bz_column = (bz_any ? bz_first : task_end - 4) - task_begin;")
        for n, acc in enumerate(carried.accumulators):
            start = self.expr(acc.initial)
            self.line(f"float4 bz_f{n} = make_float4({start}, {start}, {start}, {start});")
        self.line("#pragma unroll 8")
        self.line("for (long long b = lane; b < bz_partial_rows; b += lanes32) {")
        for n, acc in enumerate(carried.accumulators):
            functor = LANE_COMBINES[acc.combine]
            self.line(f"  const float4 bz_v{n} = *reinterpret_cast<const float4*>("
                      f"&{self.partials(n, acc, carried)}[b * bz_columns + bz_column]);")
            for part in "xyzw":
                self.line(f"  bz_f{n}.{part} = {functor}()(bz_f{n}.{part}, bz_v{n}.{part});")
        self.line("}")
        for n, acc in enumerate(carried.accumulators):
            self.line(f"bz_f{n} = bz_column_reduce<{self.block_size}>(bz_f{n}, cols32, "
                      f"BzEach4<{LANE_COMBINES[acc.combine]}>());")
        before, after = _around_loop(carried.column)
        for q, part in enumerate("xyzw"):
            declared = set(self.declared)
            self.line("{")
            self.depth += 1
            self.line(f"const bool active = bz_any && bz_first + {q} < task_end;")
            self.line(f"const {c_type(t.var.dtype)} {t.var.name} = task_begin + bz_column + {q};")
            self.block(before)
            for n, acc in enumerate(carried.accumulators):
                self.line(f"{acc.source.name} = bz_f{n}.{part};")
            self.block(after)
            self.depth -= 1
            self.line("}")
            self.declared = declared


def _column_vector(name: str, quarter: int, width: int) -> str:
    """The vector of four holding columns `4 * quarter` on of a loop moving `width` at a time."""
    return f"{name}[{quarter}]" if width > 4 else name


def _plus(base: str, offset: int) -> str:
    return f"{base} + {offset}" if offset else base
