"""Column tasks ("columns": cuda_grid.GridWriter.write_columns) whose loads run along the columns, the
innermost and contiguous axis: each thread owns `width` neighbouring columns (16 bytes: four of a
4-byte type, eight of a 2-byte one), loads them as one vector a row and keeps a copy of the task's
locals (its accumulators among them) for each of its columns. One 4-byte load a row a thread kept too
few bytes in flight: a column sum over [8192, 768] float32 on an H200 issued 3.2M warp instructions and
reached 37% of DRAM bandwidth, where 16-byte loads a row issue a quarter of the loads.

The plan (plan_column_vectors) is decided from the Kernel IR; the writer (ColumnVectorWriter, a mixin of
cuda.TaskWriter) writes the path in front of the one-column-a-thread path. The kernel takes it where the
width divides the column count, which the launch planner (cuda_launch.LaunchPlanner._plan_columns)
also reads to count the columns of a strip in vectors; where an array is not aligned to the vectors, the
path's threads keep their columns but load them an element at a time. `BRAZE_DISABLE=column_vectors`:
one column a thread, always.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from braze import config
from braze.codegen.cuda_grid import SLOT_BATCH, fold_groups, folds_together
from braze.codegen.cuda_plan import (
    LANE_COMBINES,
    VECTOR_TYPES,
    VectorAccesses,
    affine,
    exprs_of,
    lane_nest,
    sub_exprs,
    substituted,
    unconditional_loads,
    unit_stride_position,
    vars_of,
    vector_alignment,
    vector_component,
    vector_type,
    vector_width,
    walk,
)
from braze.codegen.cuda_rows import c_type
from braze.kir import nodes as k

# The bytes of partial results a thread of a strip's last block loads at a time, all its columns together:
# eight splits of four float32 columns. A variance's eight bfloat16 columns of float64 sums took 206
# registers a thread with eight splits of each.
FOLD_SLOT_BYTES = 128
# What a column task's body may hold outside its loops, and inside their innermost bodies.
_OUTSIDE_LOOPS = (k.Let, k.Assign, k.Store, k.For)
_INSIDE_LOOPS = (k.Let, k.Assign)


@dataclass(frozen=True)
class ColumnVectors:
    """A column task's vector path: `width` neighbouring columns a thread, and the loads of each top-level
    loop (by id) that move along the columns as one vector a row."""

    width: int
    loads: dict[int, tuple[k.Load, ...]]


def loop_levels(loop: k.For) -> list[k.For]:
    """The loops a column task's row groups walk for one of its top-level loops: its nest walked flat
    (cuda_grid.GridWriter.walk_column_nest), or the loop alone."""
    return lane_nest(loop) or [loop]


def plan_column_vectors(task: k.Task, kind: str, index_type) -> ColumnVectors | None:
    """The vector path of a "columns" task, or None. Its loops' innermost bodies may only define and
    fold values (the statements run once per column a thread owns, with the loads shared), their bounds
    may read no local nor the task index, no array may be both read and written, and at least one load
    must be unconditional (cuda_plan.unconditional_loads), of a type with a vector, and address the
    columns with unit stride by the task index plus values fixed for the task, affinely in the loops'
    indices (the kernel then checks alignment at the first row and one step of each loop). Other loads
    along the columns are read an element at a time."""
    if kind != "columns" or task.kind != "range_for" or task.var.dtype != index_type \
            or config.disabled("column_vectors"):
        return None
    if any(not isinstance(s, _OUTSIDE_LOOPS) for s in task.body):
        return None
    locals_ = {s.var for s in walk(task.body) if isinstance(s, (k.Let, k.Assign))}
    loads: dict[int, tuple[k.Load, ...]] = {}
    for loop in (s for s in task.body if isinstance(s, k.For)):
        levels = loop_levels(loop)
        if any(not isinstance(s, _INSIDE_LOOPS) for s in levels[-1].body):
            return None
        if any(vars_of(e) & (locals_ | {task.var}) for level in levels for e in (level.begin, level.end)):
            return None
        indices = {level.var for level in levels} | {task.var}
        found = dict.fromkeys(load for load in unconditional_loads(levels[-1].body, task.var)
                              if task.var in vars_of(load) and load.param.dtype.name in VECTOR_TYPES[4]
                              and unit_stride_position(load, task.var, locals_)
                              and all(affine(i, indices) for i in load.indices))
        loads[id(loop)] = tuple(found)
    reads = [e for s in walk(task.body) for x in exprs_of(s) for e in sub_exprs(x)]
    written = {s.param.name for s in walk(task.body) if isinstance(s, k.Store)}
    if written & {e.param.name for e in reads if isinstance(e, k.Load)} or any(isinstance(e, k.Philox) for e in reads):
        return None
    every = [load for found in loads.values() for load in found]
    if not every:
        return None
    return ColumnVectors(vector_width([VectorAccesses(tuple(every), ())]), loads)


def renamed(s: k.Stmt, names: dict[k.Var, k.Var]) -> k.Stmt:
    """`s` with each variable of `names` renamed, where it is read and where it is defined."""
    changes = {}
    for field in dataclasses.fields(s):
        value = getattr(s, field.name)
        if isinstance(value, k.Var):
            changes[field.name] = names.get(value, value)
        elif isinstance(value, k.Expr):
            changes[field.name] = substituted(value, names)
        elif isinstance(value, tuple):
            changes[field.name] = tuple(substituted(x, names) if isinstance(x, k.Expr) else
                                        renamed(x, names) if isinstance(x, k.Stmt) else x for x in value)
    return dataclasses.replace(s, **changes)


class ColumnVectorWriter:
    """The vector path of a "columns" task's writer (see the module docstring)."""

    def write_column_vectors(self) -> None:
        """Where the width divides the column count: the strip's threads on neighbouring vectors of
        columns, every statement once per column a thread owns (copy j of each local named `_c{j}`),
        a loop's loads along the columns one vector a row where every such array is aligned."""
        plan, t, ix = self.column_vectors, self.task, self.index
        width, ty, declared = plan.width, c_type(t.var.dtype), set(self.declared)
        self.line(f"if ((task_end - task_begin) % {width} == 0) {{")
        self.depth += 1
        self.line("const int cols32 = (int)lanes, lane = threadIdx.x / cols32, lanes32 = blockDim.x / cols32;")
        self.line(f"const {ix} strips = ((task_end - task_begin) / {width} + cols32 - 1) / cols32;")
        self.line(f"const {ix} strip = ({ix})blockIdx.x % strips, split = ({ix})blockIdx.x / strips;")
        self.line(f"const {ix} row = task_begin + {width} * (strip * cols32 + (threadIdx.x & (cols32 - 1)));")
        self.line("const bool active = row < task_end;")
        base = k.Var(f"{t.var.name}_v", t.var.dtype)
        self.line(f"const {ty} {base.name} = active ? row : task_end - {width};")
        copies = self.column_copies(width)
        self.line(f"const {ty} " + ", ".join(f"{names[t.var].name} = {base.name} + {j}"
                                              for j, names in enumerate(copies)) + ";")
        self.line(f"const bool bz_aligned = {self.column_alignment(base)};")
        loops = [s for s in t.body if isinstance(s, k.For)]
        for s in t.body:
            if isinstance(s, k.For):
                self.column_vector_loop(s, base, copies)
            else:
                for names in copies:
                    self.block((renamed(s, names),))
            if self.schedule.splittable and s is loops[0]:
                self.combine_column_splits(f"{base.name} - task_begin", copies)
        self.line("return;")
        self.depth -= 1
        self.line("}")
        self.declared = declared

    def column_copies(self, width: int) -> list[dict[k.Var, k.Var]]:
        """For each column a thread owns, the names of the task index and of the task's own locals
        (those its loops define stay in a scope of each column's); a copy of a narrow local stays narrow."""
        t = self.task
        own = [t.var] + [s.var for s in t.body if isinstance(s, (k.Let, k.Assign))]
        copies = [{v: k.Var(f"{v.name}_c{j}", v.dtype) for v in own} for j in range(width)]
        self.narrow_locals = self.narrow_locals | {names[v] for names in copies for v in own if v in self.narrow_locals}
        return copies

    def column_alignment(self, base: k.Var) -> str:
        """Every vector load aligned to its vector at the first column, at its loop's first row and one
        step of each of its loops on: its indices being affine, every row's vectors then start aligned
        (the columns' count being a multiple of the width)."""
        terms = []
        for loop in (s for s in self.task.body if isinstance(s, k.For)):
            levels = loop_levels(loop)
            starts = {level.var: level.begin for level in levels}
            points = [starts] + [{**starts, level.var: k.Binary("add", level.begin, k.Const(1, level.begin.dtype),
                                                                   level.begin.dtype)} for level in levels]
            for load in self.column_vectors.loads[id(loop)]:
                mask = vector_alignment(load.param.dtype, self.column_vectors.width) - 1
                for point in points:
                    at = {**point, self.task.var: base}
                    offset = self.offset(load.param, tuple(substituted(i, at) for i in load.indices))
                    terms.append(f"((reinterpret_cast<unsigned long long>(&{self.pointer(load.param)}[{offset}]) "
                                 f"& {mask}) == 0)")
        return " && ".join(dict.fromkeys(terms)) or "true"

    def column_vector_loop(self, loop: k.For, base: k.Var, copies: list[dict[k.Var, k.Var]]) -> None:
        """A top-level loop's rows, in two copies: vector loads where the arrays are aligned, loads of
        an element at a time otherwise; then each column's accumulators combined over the row groups."""
        levels = loop_levels(loop)
        for header, vectors in (("if (bz_aligned) {", True), ("} else {", False)):
            self.line(header)
            self.depth += 1
            self.walk_column_rows(loop, levels, partial(self.column_vector_step, loop, levels[-1], base, copies,
                                                        vectors))
            self.depth -= 1
        self.line("}")
        self.reduce_column_copies(self.lanes.loops[id(loop)], copies)

    def reduce_column_copies(self, accumulators, copies: list[dict[k.Var, k.Var]]) -> None:
        """Each column's accumulators combined over the row groups (lane_reduce); four float32 columns of
        one accumulator as one float4 through one tree (BzEach4 of the prelude): its barriers once for the
        four, not once each."""
        joint = [(acc, combine) for acc, combine in accumulators
                 if acc.dtype.name == "float32" and len(copies) == 4 and combine in LANE_COMBINES]
        for acc, combine in joint:
            names = [names[acc].name for names in copies]
            functor = f"BzEach4<{LANE_COMBINES[combine]}>()"
            self.line(f"{{ float4 bz_q = make_float4({', '.join(names)});")
            self.line(f"  bz_q = bz_column_reduce<{self.block_size}>(bz_q, cols32, {functor});")
            parts = " ".join(f"{name} = bz_q.{vector_component(4, c)};" for c, name in enumerate(names))
            self.line(f"  {parts} }}")
        for names in copies:
            self.lane_reduce([(names[acc], combine) for acc, combine in accumulators if (acc, combine) not in joint])

    def walk_column_rows(self, loop: k.For, levels: list[k.For], step: Callable[[], None]) -> None:
        """`step()` at each row of the loop's range (its block's part) the thread's row group walks."""
        if len(levels) > 1:
            self.walk_column_nest(levels, step)
            return
        begin, end = self.column_range(loop)
        v = loop.var
        self.line("#pragma unroll 4")
        self.line(f"for ({c_type(v.dtype)} {v.name} = {begin} + lane; {v.name} < {end}; {v.name} += lanes32) {{")
        self.depth += 1
        step()
        self.depth -= 1
        self.line("}")

    def column_vector_step(self, loop: k.For, inner: k.For, base: k.Var, copies: list[dict[k.Var, k.Var]],
                           vectors: bool) -> None:
        """One row: with `vectors`, one vector load of each of the loop's vector loads; then the
        innermost body once per column the thread owns, in a scope of its own."""
        width, names = self.column_vectors.width, {}
        if vectors:
            for n, load in enumerate(self.column_vectors.loads[id(loop)]):
                names[load] = f"v{n}_{base.name}"
                vty = vector_type(load.param.dtype, width)
                offset = self.offset(load.param, tuple(substituted(i, {self.task.var: base}) for i in load.indices))
                self.line(f"const {vty} {names[load]} = *reinterpret_cast<const {vty}*>("
                          f"&{self.pointer(load.param)}[{offset}]);")
        self.loop_depth += 1
        for j, copy in enumerate(copies):
            self.substitutions.update({substituted(load, copy): f"{name}.{vector_component(width, j)}"
                                       for load, name in names.items()})
            self.line("{")
            self.depth += 1
            self.block(tuple(renamed(s, copy) for s in inner.body))
            self.depth -= 1
            self.line("}")
        self.substitutions.clear()
        self.loop_depth -= 1

    def combine_column_splits(self, column: str, copies: list[dict[k.Var, k.Var]]) -> None:
        """The splits of the strip meeting in the workspace: each block's results of the thread's columns
        to their slots (column `column` + j), then, in the strip's last block, row group g folds the
        splits g, g + lanes32, ... (fold_split_columns) and the row groups combine in a fixed tree.
        One row group folding every split took a round trip to L2 for each SLOT_BATCH splits of each
        column, one after another."""
        ix, region = self.index, "cached_row * columns"
        accumulators = self.schedule.accumulators
        self.line("if (cached_row > 1) {")
        self.depth += 1
        self.line(f"const {ix} columns = task_end - task_begin;")
        for j, names in enumerate(copies):
            for n, (acc, _) in enumerate(accumulators):
                slot = self.partial_slot(n, acc, region, f"split * columns + {column} + {j}")
                self.line(f"if (lane == 0 && active) {slot} = {names[acc].name};")
        self.line("if (!bz_last_of(bz_finished + strip, cached_row)) return;")
        per_round = max(1, FOLD_SLOT_BYTES // (len(copies) * max(acc.dtype.itemsize for acc, _ in accumulators)))
        if folds_together(len(accumulators), per_round):
            self.fold_splits_together(column, copies, per_round)
        else:
            for n, (acc, combine) in enumerate(accumulators):
                self.fold_split_columns(n, acc, combine, column, [names[acc].name for names in copies])
        self.reduce_column_copies(accumulators, copies)
        self.depth -= 1
        self.line("}")

    def fold_splits_together(self, column: str, copies: list[dict[k.Var, k.Var]], per_round: int) -> None:
        """Every accumulator's copies folded from their identity over the splits of this row group in
        one loop, the thread's columns of `per_round` accumulators loaded before any is folded
        (cuda_grid.folds_together): where the accumulators are many, as few round trips as a loop
        each, and a tenth of the code."""
        accumulators = list(enumerate(self.schedule.accumulators))
        for _, (acc, _) in accumulators:
            for names in copies:
                self.line(f"{names[acc].name} = {self.expr(self.initial[acc])};")
        self.line(f"for ({self.index} b = lane; b < cached_row; b += lanes32) {{")
        for group in fold_groups(accumulators, per_round):
            for n, (acc, _) in group:
                ty = c_type(acc.dtype)
                slots = f"((volatile {ty}*)(bz_partials + {n} * 8 * (cached_row * columns)))"
                for c, names in enumerate(copies):
                    self.line(f"  const {ty} bz_slot_{names[acc].name} = {slots}[b * columns + {column} + {c}];")
            for _, (acc, combine) in group:
                for names in copies:
                    name = names[acc].name
                    self.line(f"  {name} = {LANE_COMBINES[combine]}()({name}, bz_slot_{name});")
        self.line("}")

    def fold_split_columns(self, n: int, acc: k.Var, combine: str, column: str, names: list[str]) -> None:
        """Accumulator `n`'s copies (`names`, the thread's columns) folded from their identity over the
        splits of this row group, a batch of splits of every column loaded before any is folded (up to
        SLOT_BATCH, as many as FOLD_SLOT_BYTES hold)."""
        ty, functor = c_type(acc.dtype), LANE_COMBINES[combine]
        slots = f"((volatile {ty}*)(bz_partials + {n} * 8 * (cached_row * columns)))"
        for name in names:
            self.line(f"{name} = {self.expr(self.initial[acc])};")
        batch = max(1, min(SLOT_BATCH, FOLD_SLOT_BYTES // (len(names) * acc.dtype.itemsize)))
        within = "if (b + j * lanes32 < cached_row)"
        self.line(f"for ({self.index} b = lane; b < cached_row; b += {batch} * lanes32) {{")
        self.line(f"  {ty} bz_slots[{batch}][{len(names)}];")
        self.line("  #pragma unroll")
        self.line(f"  for (int j = 0; j < {batch}; ++j) {within} {{")
        for c in range(len(names)):
            self.line(f"    bz_slots[j][{c}] = {slots}[(b + j * lanes32) * columns + {column} + {c}];")
        self.line("  }")
        self.line("  #pragma unroll")
        self.line(f"  for (int j = 0; j < {batch}; ++j) {within} {{")
        for c, name in enumerate(names):
            self.line(f"    {name} = {functor}()({name}, bz_slots[j][{c}]);")
        self.line("  }")
        self.line("}")
