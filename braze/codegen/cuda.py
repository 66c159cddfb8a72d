"""CUDA C++ from Kernel IR: one `__global__` function per task, readable and named after it.

Every task runs as a grid-stride loop over *rows*: the task index space, `lanes` threads per row.
A task whose top-level loops walk a row (a normalization, an inner reduction, the innermost
dimension of a pointwise task) may spread those loops over the lanes of a row, and then combines
the partial reductions across lanes (warp shuffles, or shared memory when the whole block is one
row). The runtime picks `lanes` per launch from the row length; `lanes = 1` is always valid, so
one compiled kernel serves every shape of its signature. A task whose row caches can live in
registers has, for long rows on the whole block, a second copy of its loops that keeps the row in
registers (body_with_register_row); such a task runs one block per group of rows, no grid loop.
It also gets a second function, `<task>_warp`, for launches of one warp a row (32 lanes, rows
the warp holds): the same statements with the row in the registers of a warp and every reduction
a warp's shuffles, so it holds no block barrier and the rows of one block may take different
copies. Its other copy, for the rows of a launch that are misaligned or of a length the vector
width does not divide, is the plain loops over the row in shared memory: no vector loops, which
would double its compile time for rows that seldom come.

Every kernel takes the packed argument block of the CPU backend (`ArgLayout`: per array its data
pointer, extents and strides; per scalar one slot) by value, then `lanes`, `cached_row` (the row
length when the row caches fit in shared memory, else 0) and the workspace and finished-block
counter of a grid reduction. What runs where is decided in `cuda_plan`; this module writes text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from braze import config
from braze.codegen.cuda_column_vectors import ColumnVectorWriter, plan_column_vectors
from braze.codegen.cuda_grid import GridWriter
from braze.codegen.cuda_inner_outer import InnerOuter, InnerOuterWriter, fold_task, plan_inner_outer
from braze.codegen.cuda_invariants import InvariantWriter
from braze.codegen.cuda_narrow import always_narrow, narrow_locals, operand_is_narrow
from braze.codegen.cuda_online import fuse_online_softmax
from braze.codegen.cuda_peel import PeelWriter
from braze.codegen.cuda_plan import (
    INNER_OUTER_REGISTER_ROW_BYTES,
    LANE_COMBINES,
    NARROW_BLOCK,
    NARROW_REGISTER_ROW_BYTES,
    REGISTER_ROW_BYTES,
    WARP,
    LanePlan,
    RowCache,
    TaskSchedule,
    exprs_of,
    lane_nest,
    plan_lanes,
    plan_row_caches,
    plan_schedule,
    register_row_vectors,
    row_loop_task,
    split_pairs,
    sub_exprs,
    walk,
)
from braze.codegen.cuda_rows import (  # noqa: F401  (C_TYPE and vector_unroll re-exported)
    C_TYPE,
    RowLoopWriter,
    c_type,
    joins_lane_reductions,
    joint_lane_reduce,
    vector_unroll,
)
from braze.codegen.cuda_rules import RULES, CudaRule, index_division  # noqa: F401  (re-exported)
from braze.codegen.cuda_scan import ScanWriter, scan_lanes, scan_loop
from braze.codegen.cuda_tiles import TileWriter
from braze.codegen.cuda_variance import one_pass_task
from braze.dtypes import DType
from braze.errors import UnsupportedError
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.kir.signs import index_signs
from braze.passes.hoist import hoist_invariants, reciprocal_divisions
from braze.passes.one_hot import gather_one_hot_sums

PRELUDE = (Path(__file__).with_name("prelude.cuh")).read_text()
# The half-precision headers are large (most of a small kernel's compile time): only kernels that
# touch float16 or bfloat16 include them.
HALF_HEADERS = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
_HALF_MARKS = ("__half", "__nv_bfloat16", "bfloat16", "__ushort_as_")
DEFAULT_BLOCK_SIZE = 256



# --- expressions ------------------------------------------------------------------------------------
def _float_literal(value: float, dtype: DType) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)" if dtype.name == "float32" else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return f"({sign}__int_as_float(0x7f800000))" if dtype.name == "float32" else \
            f"({sign}__longlong_as_double(0x7ff0000000000000LL))"
    if dtype.name == "float32":
        return f"{float(np.float32(value)).hex()}f"
    return float(value).hex()


def const_text(value, dtype: DType) -> str:
    if dtype.is_bool:
        return "true" if value else "false"
    if dtype.name in ("float16", "bfloat16"):
        with np.errstate(over="ignore"):
            bits = int(np.asarray(value, dtype=dtype.numpy).view(np.uint16))
        return f"__ushort_as_{'half' if dtype.name == 'float16' else 'bfloat16'}((unsigned short){bits:#06x})"
    if dtype.is_floating:
        with np.errstate(over="ignore"):
            return _float_literal(float(dtype.numpy.type(value)), dtype)
    bits = dtype.itemsize * 8
    value = int(value) % (1 << bits) if dtype.is_unsigned else int(value)
    if dtype.name == "int64":
        return f"{value}LL" if value != -(2**63) else "(-9223372036854775807LL - 1)"
    if dtype.name == "int32":
        return str(value) if value != -(2**31) else "(-2147483647 - 1)"
    if dtype.name == "uint64":
        return f"{value}ULL"
    if dtype.name == "uint32":
        return f"{value}u"
    return f"(({c_type(dtype)}){value})"


class TaskWriter(RowLoopWriter, PeelWriter, GridWriter, ColumnVectorWriter, TileWriter, InnerOuterWriter,
                 InvariantWriter, ScanWriter):
    """Writes one task as one `__global__` function; with `warp`, its function for one warp a row
    (see the module docstring). With `inner_outer`, the task is a row task carrying a column task's
    partial results; with `fold_of`, it is that column task, folding them (cuda_inner_outer)."""

    def __init__(self, kernel: k.Kernel, task: k.Task, layout: ArgLayout, block_size: int, restrict: bool,
                 warp: bool = False, inner_outer: InnerOuter | None = None,
                 fold_of: InnerOuter | None = None, warp_vectors: int = 0, split: bool = False) -> None:
        self.inner_outer, self.fold_of = inner_outer, fold_of
        # `split`: the task's function for rows split across blocks only (split_function); the row
        # function leaves that path out where such a function is written (`split_apart`).
        self.split, self.split_apart = split, False
        # The task as written, its schedule, and the task its split path writes (see task_variants);
        # an inner-outer pair's tasks as they are (their schedule is the pair's).
        task, self.schedule, self.split_task = (task, plan_schedule(task, plan_lanes(task)), task) \
            if inner_outer or fold_of else task_variants(task)
        self.kernel, self.task, self.layout = kernel, task, layout
        self.block_size, self.restrict, self.warp = block_size, restrict, warp
        self.function = (f"{task.name}_warp{warp_vectors}" if warp_vectors else f"{task.name}_warp") if warp \
            else f"{task.name}_split" if split else task.name
        self.register_lanes = WARP if warp else block_size  # the threads of a row held in registers
        self.lines: list[str] = []
        self.depth = 1
        self.loop_depth = 0
        # The task whose body runs per row: the task itself, or a grid_rows task's single loop.
        self.row_task = row_loop_task(task) if self.schedule.kind == "grid_rows" else task
        self.lanes = plan_lanes(self.row_task) if self.schedule.kind == "grid_rows" else plan_lanes(task)
        rowwise = self.schedule.kind in ("rows", "grid_rows")
        self.caches = plan_row_caches(self.row_task, self.lanes) if self.lanes.loops and rowwise else ()
        self.loops_by_id: dict[int, k.For] = {}  # the row's lane loops (set by plan_vectors)
        self.vectors = self.plan_vectors() if rowwise else {}
        # Rows short enough run with their caches in registers (register_row_vectors vectors a
        # thread, in fixed, fully unrolled loops): see body_with_register_row. Not for grid_rows,
        # whose rows must all reach the blocks' combine.
        # `warp_vectors`: a narrow warp function's fewer (task_writers).
        self.register_vectors = register_row_vectors(self.caches, self.vectors, warp, self.register_budget()) \
            if self.schedule.kind == "rows" else 0
        if warp_vectors:
            self.register_vectors = min(self.register_vectors, warp_vectors)
        # A task one index a thread that moves vectors instead: its body as a loop (write_thread_vectors).
        self.thread_vector = self.plan_thread_vector()
        # A column task whose threads own several neighbouring columns, loaded as one vector a row.
        self.column_vectors = plan_column_vectors(task, self.schedule.kind, kernel.index_type) \
            if not (inner_outer or fold_of) else None
        # A scan's row runs over lanes (codegen/cuda_scan.py), its loop none of the plans above take.
        self.scan = scan_loop(task) if self.schedule.kind == "rows" and not warp else None
        if self.scan is not None:
            self.lanes = scan_lanes(self.scan)
        self.guarded: set[k.Var] = set()  # grid_rows: accumulators a row adds to once (emit_assign)
        self.register_index = ""  # in a register-row loop: its iteration counter
        self.in_registers = False  # writing the register-row copy of a row (body_with_register_row)
        self.row_values: tuple = ()  # in that copy: the values it keeps in registers (cuda_row_values)
        self.substitutions: dict[k.Load, str] = {}  # loads read from a row cache in the current loop
        self.vector_stores: dict[int, str] = {}  # id(Store) -> the vector component it fills
        self.cache_stores: dict[int, list[str]] = {}  # id(Store) -> the row cache slots it also fills
        self.preloaded: dict[k.Load, str] = {}  # in a register row's loop: loads issued before it (by array)
        # Whether the rows are cached, as the vector loops test it: "cached_row" at run time, or "true"
        # or "false" in each copy of a loop unswitched on it (no test per element then).
        self.cached = "cached_row"
        self.declared: set[k.Var] = set()  # locals declared so far, in scope where the writer is (emit_let)
        self.written = {s.param.name for s in walk(task.body) if isinstance(s, (k.Store, k.AtomicRMW))}
        # Index arithmetic (rows, loop indices, offsets) in the kernel's index type: int32 when every
        # index fits (the argument block keeps 8-byte slots; strides are narrowed once, at entry).
        self.index = c_type(kernel.index_type)
        self.narrow = kernel.index_type.itemsize < 8
        # Which of the task's integers are never negative: their divisions need no floor fix-ups.
        self.signs = index_signs(kernel, task)
        # Whether the expression being written is a float32 that only a 2-byte float keeps, and the
        # locals that are (cuda_narrow.py).
        self.narrow_math = False
        self.narrow_locals = narrow_locals(task) | kernel.meta.get("narrow_locals", frozenset())
        self.narrow_expressions = always_narrow(task, self.narrow_locals)
        # Row-invariant work done once a thread (cuda_invariants): divisors, the rows' alignment.
        self.declared_divisors: set[str] = set()
        self.divisors = self.plan_divisors()
        self.aligned_rows = self.plan_aligned_rows()

    def register_budget(self) -> dict[int, int]:
        """Bytes of a row a thread may keep in registers, by element size: an inner-outer row
        task's own where it is one (`BRAZE_DISABLE=inner_outer_registers`: every task's), a narrow
        block's where the kernel is compiled for one."""
        if self.inner_outer is not None and not config.disabled("inner_outer_registers"):
            return INNER_OUTER_REGISTER_ROW_BYTES
        return NARROW_REGISTER_ROW_BYTES if self.block_size == NARROW_BLOCK else REGISTER_ROW_BYTES

    # --- text --------------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def field(self, param: k.Param, what: str, axis: int = 0) -> str:
        offset = {"data": 0, "scalar": 0, "extent": 1 + axis, "stride": 1 + getattr(param, "ndim", 0) + axis}[what]
        return f"a.s[{self.layout.slots[param.name] + offset}]"

    def pointer(self, param: k.ArrayParam) -> str:
        return f"{param.name}_"

    def expr(self, e: k.Expr) -> str:
        if e in self.substitutions:
            return self.substitutions[e]
        return _EXPR[type(e)](self, e)

    def apply(self, op: str, args: list[k.Expr], out: DType, attrs: dict | None = None) -> str:
        rule = RULES.get(op)
        if rule is None:
            raise UnsupportedError(f"CUDA codegen: op {op!r} has no CUDA rule")
        attrs = dict(attrs or {})
        if self.narrow_math:
            attrs["narrow"] = True
        operands = [self.narrowed(operand_is_narrow(op, out, self.narrow_math, a), self.expr, a) for a in args]
        return rule(operands, [a.dtype for a in args], out, attrs)

    def narrowed(self, narrow: bool, write: Callable, item: object):
        """`write(item)` with the value written a narrow result or not (cuda_narrow.py)."""
        saved, self.narrow_math = self.narrow_math, narrow
        try:
            return write(item)
        finally:
            self.narrow_math = saved

    def binary(self, e: k.Binary) -> str:
        if e.op in ("floordiv", "remainder") and self.unsigned_division(e):
            divisor = e.b.value if isinstance(e.b, k.Const) else None
            return self.fast_division(e) or index_division(e.op, self.expr(e.a), self.expr(e.b), divisor, e.dtype)
        return self.apply(e.op, [e.a, e.b], e.dtype)

    def unsigned_division(self, e: k.Binary) -> bool:
        """Whether an integer `//` or `%` has operands never negative (and a constant divisor not 0),
        so that unsigned division gives Python's result."""
        if not (e.dtype.name in ("int32", "int64") and e.a.dtype == e.b.dtype == e.dtype):
            return False
        if isinstance(e.b, k.Const) and e.b.value <= 0:
            return False
        return self.signs.nonnegative(e.a) and self.signs.nonnegative(e.b)

    def index_literal(self, value: int) -> str:
        return f"{value}" if self.narrow else f"{value}LL"

    def stride(self, param: k.ArrayParam, axis: int) -> str:
        """A stride read at run time: narrowed once at entry (declare_params) in int32 kernels."""
        return f"{param.name}_st{axis}" if self.narrow else self.field(param, "stride", axis)

    def offset(self, param: k.ArrayParam, indices: tuple[k.Expr, ...]) -> str:
        terms = []
        for axis, index in enumerate(indices):
            stride = param.static_stride(axis)
            if stride == 0:
                continue
            wide = not self.narrow and index.dtype.itemsize != 8
            i = f"(long long)({self.expr(index)})" if wide else self.expr(index)
            step = stride if stride is not None else self.stride(param, axis)
            terms.append(i if stride == 1 else f"{i} * {step}")
        return " + ".join(terms) or "0"

    # --- the function ----------------------------------------------------------------------------
    @property
    def launch_schedule(self) -> TaskSchedule:
        """How the runtime launches the task: its schedule, or one of the inner-outer pair's."""
        carried = self.inner_outer or self.fold_of
        if carried is None:
            return self.schedule
        kind = "inner_outer" if self.inner_outer is not None else "column_fold"
        width = self.fold_width() if self.fold_of is not None else 0
        return TaskSchedule(kind, tuple((acc.array, acc.combine) for acc in carried.accumulators), fold_width=width)

    def write(self) -> str:
        t = self.task
        if self.inner_outer is not None or self.fold_of is not None:
            (self.write_inner_outer if self.inner_outer is not None else self.write_column_fold)()
            return "\n".join(self.lines)
        self.lines.append(f"extern \"C\" __global__ void __launch_bounds__({self.launch_bounds()})")
        self.lines.append(f"{self.function}(const BzArgs<{max(self.layout.size, 1)}> a, const long long lanes,")
        self.lines.append("    const long long cached_row, unsigned char* const bz_partials, "
                          "unsigned* const bz_finished) {")
        self.declare_params()
        writer = {"grid": self.write_grid_reduction, "flat": self.write_flat, "grid_rows": self.write_grid_rows,
                  "columns": self.write_columns, "tiles": self.write_tiles}.get(self.schedule.kind)
        if writer is not None:
            writer()
            return "\n".join(self.lines)
        ix = self.index
        begin = self.expr(t.begin) if t.kind == "range_for" else self.index_literal(0)
        end = self.expr(t.end) if t.kind == "range_for" else self.index_literal(1)
        self.line(f"const {ix} task_begin = {begin}, task_end = {end};")
        # Kind "rows": the launch may split each row across blocks (never with one warp a row).
        if self.schedule.splittable and not self.warp and not self.split_apart:
            self.write_split_rows()
            if self.split:
                self.lines.append("}")
                return "\n".join(self.lines)
        if self.one_thread_per_row():
            self.write_thread_rows()
            return "\n".join(self.lines)
        if self.warp:  # launched with lanes == 32 only
            self.line(f"const int lanes32 = {WARP}, lane = threadIdx.x & {WARP - 1};")
        else:
            self.line("const int lanes32 = (int)lanes, lane = threadIdx.x & (lanes32 - 1);")
        self.line("const int row_in_block = threadIdx.x / lanes32, rows_per_block = blockDim.x / lanes32;")
        if self.register_vectors:
            # One block per group of rows, no grid-stride loop: a loop around the two copies of
            # body_with_register_row lets the compiler hoist the general copy's row-invariant
            # addresses out of it, and those registers stay live across the register copy too
            # (104 registers for softmax instead of 54).
            self.line(f"{{ const {ix} row0 = task_begin + ({ix})blockIdx.x * rows_per_block;")
            self.line("  if (row0 >= task_end) return;")
        else:
            self.line(f"for ({ix} row0 = task_begin + ({ix})blockIdx.x * rows_per_block; row0 < task_end;")
            self.line(f"     row0 += ({ix})gridDim.x * rows_per_block) {{")
        self.depth += 1
        self.write_row()
        self.depth -= 1
        self.line("}")
        self.lines.append("}")
        if self.warp:  # rows of one block may take different copies: none may wait for the others
            self.check_barriers(self.lines, uniform=False)
        return "\n".join(self.lines)

    def write_row(self) -> None:
        """The row `row0 + row_in_block`: rows past the end still run (clamped to the last row) so
        every lane reaches the shuffles and barriers of a lane reduction; only their stores are
        skipped. Then its row caches and its statements."""
        t, ix = self.task, self.index
        self.line(f"const {ix} row = row0 + row_in_block;")
        self.line("const bool active = row < task_end;")
        if t.kind == "range_for":
            self.line(f"const {c_type(t.var.dtype)} {t.var.name} = active ? row : task_end - 1;")
        self.declare_row_caches()
        if self.register_vectors:
            self.body_with_register_row(t.body)
        else:
            self.block(t.body)

    def one_thread_per_row(self) -> bool:
        """A task with no lane loops (the runtime then runs one lane per row) and no barrier: a
        thread past the end has nothing to wait for, so it may simply stop."""
        return (self.task.kind == "range_for" and not self.lanes.loops
                and not any(isinstance(s, k.Sync) for s in walk(self.task.body)))

    def write_thread_rows(self) -> None:
        """A plain grid-stride loop, one row per thread: no clamped rows, no lane test per store.
        After a task's vectors (write_thread_vectors), the rows they left, counted from where they
        start so the index stays in range however far that is."""
        t, ix = self.task, self.index
        if self.thread_vector is None:
            self.line(f"for ({ix} row = task_begin + ({ix})blockIdx.x * blockDim.x + threadIdx.x; row < task_end;")
            self.line(f"     row += ({ix})gridDim.x * blockDim.x) {{")
        else:
            rest = self.write_thread_vectors()
            self.line(f"for ({ix} bz_row = ({ix})blockIdx.x * blockDim.x + threadIdx.x; bz_row < task_end - {rest};")
            self.line(f"     bz_row += ({ix})gridDim.x * blockDim.x) {{")
            self.line(f"  const {ix} row = {rest} + bz_row;")
        self.depth += 1
        self.line("const bool active = true;")
        self.line("const int lane = 0;")
        self.line(f"const {c_type(t.var.dtype)} {t.var.name} = row;")
        self.block(t.body)
        self.depth -= 1
        self.line("}")
        self.lines.append("}")

    def write_grid_reduction(self) -> None:
        """A serial reduction task over the whole grid: every thread folds a grid-strided share of
        the loop, each block's result goes to the workspace, and the last block to finish
        combines the blocks' results in block order (the same result every run) and stores."""
        t = self.task
        loop = next(s for s in t.body if isinstance(s, k.For))
        before, after = t.body[: t.body.index(loop)], t.body[t.body.index(loop) + 1:]
        accumulators = self.lanes.loops[id(loop)]
        initial = {s.var: s.value for s in before if isinstance(s, k.Let)}
        self.line("const int lane = threadIdx.x;")
        self.line("const bool active = true;")
        self.block(before)
        var, v = f"{c_type(loop.var.dtype)} {loop.var.name}", loop.var.name
        self.loop_depth += 1
        ix = self.index
        self.nested(f"for ({var} = {self.expr(loop.begin)} + ({ix})blockIdx.x * blockDim.x + threadIdx.x; "
                    f"{v} < {self.expr(loop.end)}; {v} += ({ix})gridDim.x * blockDim.x)", loop.body)
        self.loop_depth -= 1
        self.block_reduce(accumulators=accumulators)
        for n, (acc, _) in enumerate(accumulators):
            ty = c_type(acc.dtype)
            self.line(f"if (threadIdx.x == 0) (({ty}*)(bz_partials + {n} * 8 * gridDim.x))[blockIdx.x] = {acc.name};")
        self.line("if (!bz_last_block(bz_finished)) return;")
        for n, (acc, combine) in enumerate(accumulators):
            ty, functor = c_type(acc.dtype), LANE_COMBINES[combine]
            self.line(f"{acc.name} = {self.expr(initial[acc])};")
            self.line(f"for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {acc.name} = {functor}()"
                      f"({acc.name}, ((volatile {ty}*)(bz_partials + {n} * 8 * gridDim.x))[b]);")
        self.block_reduce(accumulators=accumulators)
        self.block(after)
        self.lines.append("}")

    def declare_params(self) -> None:
        used = self.used_params()
        for p in self.kernel.params:
            if p.name not in used:
                continue
            ty = c_type(p.dtype)
            if isinstance(p, k.ArrayParam):
                qualifiers = "const " if p.name not in self.written else ""
                # With no two arrays sharing memory, written arrays are restrict too: a store to one
                # then does not force reading the others again.
                restrict = " __restrict__" if self.restrict else ""
                data = self.field(p, "data")
                self.line(f"{qualifiers}{ty}*{restrict} const {self.pointer(p)} = ({qualifiers}{ty}*){data};")
            else:
                self.line(f"const {ty} {p.name} = {scalar_from_slot(self.field(p, 'scalar'), p.dtype)};")
        if self.narrow:
            for param, axis in self.runtime_strides():
                self.line(f"const int {self.stride(param, axis)} = (int){self.field(param, 'stride', axis)};")
        self.declare_invariants()

    def runtime_strides(self) -> list[tuple[k.ArrayParam, int]]:
        """(array, axis) of every stride the task's accesses read at run time, in first-use order."""
        accesses = [s for s in walk(self.task.body) if isinstance(s, (k.Store, k.AtomicRMW))]
        roots = [x for s in walk(self.task.body) for x in exprs_of(s)]
        accesses += [e for x in roots for e in sub_exprs(x) if isinstance(e, k.Load)]
        found = {(a.param.name, axis): (a.param, axis) for a in accesses for axis in range(len(a.indices))
                 if a.param.static_stride(axis) is None}
        return list(found.values())

    def used_params(self) -> set[str]:
        names = {s.param.name for s in walk(self.task.body) if isinstance(s, (k.Store, k.AtomicRMW))}
        roots = [x for s in walk(self.task.body) for x in exprs_of(s)] + [self.task.begin, self.task.end]
        for e in (e for x in roots for e in sub_exprs(x)):
            if isinstance(e, (k.Load, k.ArrayExtent, k.ArrayStride)):
                names.add(e.param.name)
            elif isinstance(e, k.ScalarRef):
                names.add(e.param.name)
        return names

    # --- statements ----------------------------------------------------------------------------
    def block(self, stmts: tuple[k.Stmt, ...]) -> None:
        for s in stmts:
            # A narrow local's value is written as a narrow result; anything else's is not.
            narrow = isinstance(s, (k.Let, k.Assign)) and s.var in self.narrow_locals
            self.narrowed(narrow, lambda s: _STMT[type(s)](self, s), s)

    def nested(self, header: str, body: tuple[k.Stmt, ...], loop: bool = False) -> None:
        self.line(header + " {")
        self.depth += 1
        self.loop_depth += loop
        self.block(body)
        self.loop_depth -= loop
        self.depth -= 1
        self.line("}")

    def emit_store(self, s: k.Store) -> None:
        if id(s) in self.vector_stores:  # one element of a 16-byte store, written after the four
            self.line(f"{self.vector_stores[id(s)]} = {self.expr(s.value)};")
            return
        value = self.expr(s.value)
        slots = self.cache_stores.get(id(s), ())
        if slots and not isinstance(s.value, (k.Var, k.Const)):
            self.line(f"const {c_type(s.param.dtype)} {s.param.name}_stored = {value};")
            value = f"{s.param.name}_stored"
        self.line(f"{self.store_guard()}{self.pointer(s.param)}[{self.offset(s.param, s.indices)}] = {value};")
        for slot in slots:  # a row the later loops read back (RowCache.stored)
            self.line(f"if (cached_row) {slot} = {value};")

    def emit_let(self, s: k.Let) -> None:
        self.line(f"{c_type(s.var.dtype)} {s.var.name} = {self.expr(s.value)};")
        self.declared.add(s.var)

    def store_guard(self) -> str:
        if self.schedule.kind == "tiles":  # inside the test of the element's bounds
            return ""
        # A store outside every loop writes a row's single result: one lane does it.
        return "if (active) " if self.loop_depth else "if (active && lane == 0) "

    def emit_for(self, s: k.For) -> None:
        if s is self.scan:
            self.emit_scan_loop(s)
            return
        var = f"{c_type(s.var.dtype)} {s.var.name}"
        begin, end = self.expr(s.begin), self.expr(s.end)
        accumulators = self.lanes.loops.get(id(s)) if self.loop_depth == 0 else None
        if accumulators is None:
            step = f"{s.var.name} += {s.step}" if s.step != 1 else f"++{s.var.name}"
            compare = "<" if s.step > 0 else ">"
            self.nested(f"for ({var} = {begin}; {s.var.name} {compare} {end}; {step})", s.body, loop=True)
            return
        vector = self.vectors.get(id(s))
        if self.in_registers and id(s) in self.cache_loops():
            self.cached = "registers"
            self.emit_vector_loop(s, vector)
            self.cached = "cached_row"
            self.lane_reduce(accumulators)
            return
        if self.warp and not self.in_registers:
            vector = None  # a warp function's rows outside its registers: the plain loops (module docstring)
        opened = self.open_vector_paths(s, vector, var, end) if vector is not None else 0
        nest = lane_nest(s) if vector is None and not any(id(s) in cache.loops for cache in self.caches) else None
        if nest is not None and self.schedule.kind in ("rows", "columns"):
            (self.walk_lane_nest if self.schedule.kind == "rows" else self.walk_column_nest)(nest)
            self.lane_reduce(accumulators)
            return
        if self.schedule.kind == "columns":
            begin, end = self.column_range(s)
        self.emit_lane_loop(s, var, begin, end)
        self.close_vector_paths(opened)
        self.lane_reduce(accumulators)

    def emit_lane_loop(self, s: k.For, var: str, begin: str, end: str) -> None:
        """The lanes of a row on `s`'s range [begin, end), an element at a time."""
        self.line("#pragma unroll 4")
        self.line(f"for ({var} = {begin} + lane; {s.var.name} < {end}; {s.var.name} += lanes32) {{")
        self.depth += 1
        self.loop_depth += 1
        self.emit_cached_loads(s)
        self.block(s.body)
        self.substitutions.clear()
        self.cache_stores.clear()
        self.loop_depth -= 1
        self.depth -= 1
        self.line("}")

    def takes_vector_tail(self, s: k.For) -> bool:
        """Whether a row loop's vector path takes rows of any length, its last elements (fewer than a
        vector) an element at a time after the vectors: a vocabulary of 50257 is no multiple of 8.
        Rows the width divides keep a path of their own without the tail (batch_norm's statistics ran
        7% slower through the tail's path on an H200). A loss's rows ("grid_rows": GPT-2's
        cross_entropy over its vocabulary, then the mean) take it too.
        Loops that share a row cache keep whole vectors: the cache's rows start at multiples of the
        row's length, aligned for vectors only where the width divides it. So do an inner-outer
        task's loops: each row group's partial columns start at a multiple of the row's length too
        (rows of 7 misaligned the float4 accesses of the second group's)."""
        whole = isinstance(s.begin, k.Const) and isinstance(s.end, k.Const) \
            and (s.end.value - s.begin.value) % self.vectors[id(s)].width == 0  # no tail to take (RoPE's halves)
        return (self.schedule.kind in ("rows", "grid_rows") and not whole and not config.disabled("vector_tails")
                and self.inner_outer is None and not any(id(s) in cache.loops for cache in self.caches))

    def vector_tail_start(self, s: k.For, width: int) -> str:
        """The first index past the row's whole vectors."""
        return f"{self.from_begin(s)}(({self.trip_count(s)}) / {width}) * {width}"

    def lane_reduce(self, accumulators) -> None:
        """Each accumulator combined over the lanes of its row; in a warp function over one warp,
        by shuffles alone (the `warp` helpers of the prelude)."""
        pairs, plain = split_pairs(accumulators)
        if not self.warp and self.schedule.kind != "columns" and joins_lane_reductions(plain):
            for line in joint_lane_reduce([(acc.name, LANE_COMBINES[c]) for acc, c in plain], "lanes32"):
                self.line(line)
            plain = []
        for first, second, functor in pairs:  # a warp's by shuffles alone
            reduce = "bz_pair_shuffle_reduce" if self.warp else "bz_pair_lane_reduce"
            lanes = "32" if self.warp else "lanes32"
            self.line(f"{reduce}({first.name}, {second.name}, {lanes}, {functor});")
        for acc, combine in plain:
            kind, lanes = ("warp", "") if self.warp else ("lane", ", lanes32")
            functor = LANE_COMBINES[combine]
            if self.schedule.kind == "columns":  # over the row groups of each column
                self.line(f"{acc.name} = bz_column_reduce<{self.block_size}>({acc.name}, cols32, {functor}());")
            else:
                self.line(f"{acc.name} = bz_{kind}_reduce({acc.name}{lanes}, {functor}());")


def task_variants(task: k.Task) -> tuple[k.Task, TaskSchedule, k.Task]:
    """The task to write, its schedule, and the task the split path of splittable rows writes.

    A task whose variances take two passes over memory (cuda_variance) takes them in one instead,
    except where its rows keep both passes on chip (a row cache: var_mean). Such rows keep their two
    passes on the row path, and may still split across blocks with the single pass (for rows too few
    to fill the GPU, or too long to keep: see TaskSchedule.split_reads_once)."""
    schedule = plan_schedule(task, plan_lanes(task))
    one_pass = one_pass_task(task)
    if one_pass is None:
        return task, schedule, task
    one_pass_schedule = plan_schedule(one_pass, plan_lanes(one_pass))
    if schedule.kind == "rows" and plan_row_caches(task, plan_lanes(task)):
        if one_pass_schedule.kind == "rows" and one_pass_schedule.splittable:
            return task, dataclasses.replace(one_pass_schedule, split_reads_once=True), one_pass
        return task, schedule, task
    return one_pass, one_pass_schedule, one_pass


def scalar_from_slot(slot: str, dtype: DType) -> str:
    """A scalar parameter's value from its 8-byte slot (floats travel as their bits)."""
    if dtype.is_integer and dtype.name != "int64":
        return f"({c_type(dtype)})({slot})"
    return {"bool": f"(({slot}) & 1) != 0",
            "int64": slot, "float32": f"__int_as_float((int)({slot}))", "float64": f"__longlong_as_double({slot})",
            "float16": f"__ushort_as_half((unsigned short)({slot}))",
            "bfloat16": f"__ushort_as_bfloat16((unsigned short)({slot}))"}[dtype.name]


def _emit_atomic(w: TaskWriter, s: k.AtomicRMW) -> None:
    call = f"bz_atomic_{s.op}(&{w.pointer(s.param)}[{w.offset(s.param, s.indices)}], {w.expr(s.value)})"
    if s.result is not None:
        w.line(f"{c_type(s.result.dtype)} {s.result.name} = {call};")
    else:
        w.line(f"{call};")


def _emit_if(w: TaskWriter, s: k.If) -> None:
    w.nested(f"if ({w.expr(s.cond)})", s.then)
    if s.orelse:
        w.nested("else", s.orelse)


def _arithmetic(e: k.Expr) -> bool:
    """A float32 add, subtract or multiply: one instruction, whose NaN results carry no payload on the
    GPU (cuda_rules, "cast"; a division or a function may pass an operand's NaN through). Not by a
    constant 0 or 1 (or -1): the compiler may fold that into the other operand or its negation."""
    return isinstance(e, k.Binary) and e.op in ("add", "sub", "mul") and e.dtype.name == "float32" \
        and not any(isinstance(x, k.Const) and abs(x.value) in (0, 1) for x in (e.a, e.b))


_EXPR: dict[type, Callable[[TaskWriter, k.Expr], str]] = {
    k.Const: lambda w, e: const_text(e.value, e.dtype),
    k.Var: lambda w, e: e.name,
    k.ScalarRef: lambda w, e: e.param.name,
    k.ArrayExtent: lambda w, e: w.field(e.param, "extent", e.axis),
    k.ArrayStride: lambda w, e: w.field(e.param, "stride", e.axis),
    k.Load: lambda w, e: f"{w.pointer(e.param)}[{w.offset(e.param, e.indices)}]",
    k.LoadLocal: lambda w, e: f"{e.array.name}[{w.expr(e.index)}]",
    k.Unary: lambda w, e: w.apply(e.op, [e.x], e.dtype, dict(e.attrs)),
    k.Binary: lambda w, e: w.binary(e),
    k.Ternary: lambda w, e: w.apply(e.op, [e.a, e.b, e.c], e.dtype),
    k.Cast: lambda w, e: w.apply("cast", [e.x], e.dtype, {"arithmetic": _arithmetic(e.x)}),
    k.Philox: lambda w, e: f"bz_philox({', '.join(w.expr(x) for x in (e.seed, e.offset, e.group, e.word))})",
}

_STMT: dict[type, Callable[[TaskWriter, k.Stmt], None]] = {
    k.Let: lambda w, s: w.emit_let(s),
    k.Assign: lambda w, s: w.emit_assign(s),
    k.Store: lambda w, s: w.emit_store(s),
    k.StoreLocal: lambda w, s: w.emit_store_local(s),
    k.AtomicRMW: _emit_atomic,
    k.If: _emit_if,
    k.For: TaskWriter.emit_for,
    k.While: lambda w, s: w.nested(f"while ({w.expr(s.cond)})", s.body, loop=True),
    k.Break: lambda w, s: w.line("break;"),
    k.Continue: lambda w, s: w.line("continue;"),
    k.Alloc: lambda w, s: w.line(f"{'__shared__ ' if s.memory == 'shared' else ''}{c_type(s.dtype)} "
                                 f"{s.var.name}[{s.size}];"),
    k.Sync: lambda w, s: w.line("__syncthreads();"),
    k.Assert: lambda w, s: w.line(f"/* assert {s.message!r}: checked by the CPU backend's debug mode */"),
}


@dataclass(frozen=True)
class CudaSource:
    """The generated translation unit: the prelude, then one `__global__` per task (`functions[i]`
    is task i's), then the tasks' functions for one warp a row (named in `warp_functions`)."""

    body: str
    functions: tuple[str, ...]
    lane_plans: tuple[LanePlan, ...]
    row_caches: tuple[tuple[RowCache, ...], ...]  # per task
    grid_reductions: tuple[int, ...]  # per task: how many accumulators meet across blocks (0: none)
    # Per task: the longest row it keeps in registers when the whole block is the row (0: none).
    register_rows: tuple[int, ...] = ()
    schedules: tuple[TaskSchedule, ...] = ()  # per task: how it maps onto blocks
    # Per task: its function for launches of one warp a row ("" where it has none), and the longest
    # row that function keeps in registers.
    warp_functions: tuple[str, ...] = ()
    warp_register_rows: tuple[int, ...] = ()
    # Per task: the most elements a lane moves at once in its row's loops (0: no vectorized loop),
    # so a short row gets only the lanes its vectors keep busy (codegen/cuda_launch.py, lanes_for).
    lane_widths: tuple[int, ...] = ()
    # Per task: the indices a thread moves at a time (cuda_rows.write_thread_vectors; 1: one).
    thread_vector_widths: tuple[int, ...] = ()
    # Per task: the fast divisors its threads each set up once (cuda_invariants.plan_divisors).
    thread_divisors: tuple[int, ...] = ()
    # The text of each function, in the order of `functions` (the body is the header, then these).
    sections: tuple[str, ...] = ()
    # Per task: the neighbouring columns a thread of a column task owns where the width divides their
    # count (cuda_column_vectors; 1: one column a thread).
    column_widths: tuple[int, ...] = ()
    # Per task: its narrow warp function ("" where it has none: see task_writers) and the longest row
    # that one keeps in registers.
    narrow_warp_functions: tuple[str, ...] = ()
    narrow_warp_register_rows: tuple[int, ...] = ()
    # Per task: its function for rows split across blocks ("" where it has none: split_function).
    split_functions: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return with_prelude(self.body)

    def programs(self, most_chars: int) -> tuple[CudaProgram, ...]:
        """The source as translation units of about `most_chars` of functions each (the prelude
        aside), a task's functions in one, the tasks in order: NVRTC compiles them side by side
        where one unit would compile on one core (a kernel of every layer's gradients, 124 tasks,
        takes 14 s). A source within `most_chars` is one program, its text `text`."""
        total = sum(len(section) for section in self.sections)
        count = max(1, -(-total // max(most_chars, 1)))
        if count == 1:
            return (CudaProgram(self.text, self.functions),)
        groups: list[list[int]] = [[]]
        filled = 0
        for task, size in enumerate(self._task_sizes()):
            if groups[-1] and filled + size / 2 > total * len(groups) / count:
                groups.append([])
            groups[-1].append(task)
            filled += size
        return tuple(self._program(group, n, len(groups)) for n, group in enumerate(groups))

    def _task_functions(self, task: int) -> list[int]:
        """Positions in `functions` of task `task`'s function and of its warp and split functions, if any."""
        warps = [names[task] for names in (self.warp_functions, self.narrow_warp_functions, self.split_functions)
                 if names]
        return [task] + [self.functions.index(warp) for warp in warps if warp]

    def _task_sizes(self) -> list[int]:
        return [sum(len(self.sections[n]) for n in self._task_functions(task)) for task in range(len(self.lane_plans))]

    def _program(self, tasks: list[int], n: int, count: int) -> CudaProgram:
        positions = [position for task in tasks for position in self._task_functions(task)]
        kernel_line = self.body.partition("\n")[0]
        header = f"{kernel_line} (program {n + 1} of {count}: tasks {tasks[0]}..{tasks[-1]})"
        body = "\n\n".join([header, *(self.sections[p] for p in positions)]) + "\n"
        return CudaProgram(with_prelude(body), tuple(self.functions[p] for p in positions))


@dataclass(frozen=True)
class CudaProgram:
    """One translation unit of a kernel's source (CudaSource.programs): its text, prelude included,
    and the `__global__` functions it defines."""

    text: str
    functions: tuple[str, ...]


def with_prelude(body: str) -> str:
    headers = HALF_HEADERS if any(mark in body for mark in _HALF_MARKS) else ""
    return headers + PRELUDE + "\n" + body


def register_row(writer: TaskWriter | None) -> int:
    """The longest row `writer`'s function keeps in registers (0: none, or no writer)."""
    if writer is None or not writer.register_vectors:
        return 0
    width = writer.vectors[writer.cache_loops()[0]].width
    return width * writer.register_vectors * writer.register_lanes


def lane_width(writer: TaskWriter) -> int:
    """The widest vector `writer`'s row loops move a lane at a time (0: none moves vectors)."""
    return max((vector.width for vector in writer.vectors.values()), default=0)


def thread_vector_width(writer: TaskWriter) -> int:
    """The indices a thread of `writer`'s task moves at a time where its arrays are aligned."""
    return writer.vectors[id(writer.thread_vector)].width if writer.thread_vector is not None else 1


def prepared(kernel: k.Kernel) -> k.Kernel:
    """The kernel as the tasks are written from it: row-invariant values hoisted, divisions by them
    as reciprocals (fewer instructions per element of a row), cross_entropy's picked class read
    directly and a row's maximum and sum of exponentials in one pass."""
    # Narrow locals as the fusion wrote them: the rewrites keep values (a reciprocal's scaling tests
    # the sum's magnitude only to land on the same quotient), so a local narrow before stays so.
    narrow = frozenset(v for task in kernel.tasks for v in narrow_locals(task))
    kernel = fuse_online_softmax(gather_one_hot_sums(reciprocal_divisions(hoist_invariants(kernel))))
    return dataclasses.replace(kernel, meta={**kernel.meta, "narrow_locals": narrow})


def task_writers(kernel: k.Kernel, block_size: int = DEFAULT_BLOCK_SIZE, restrict: bool = False
                 ) -> list[tuple[TaskWriter, TaskWriter | None, TaskWriter | None, TaskWriter | None]]:
    """Per task of `kernel`, prepared as generate writes it: its writer (an inner-outer pair's
    where the task is one), the writer of its function for one warp a row (None where it has
    none: only tasks that hold rows in registers get one, only where a warp is less than the
    block, and never an inner-outer pair, whose blocks meet in the column task), of its narrow
    warp function and of its function for rows split across blocks (None where it has none)."""
    kernel = prepared(kernel)
    layout = ArgLayout.of(kernel.params)
    carriers = plan_inner_outer(kernel)
    folds = {carried.row + 1: carried for carried in carriers.values()}
    writers = []
    for n, task in enumerate(kernel.tasks):
        if n in carriers:
            writers.append(TaskWriter(kernel, carriers[n].task, layout, block_size, restrict, inner_outer=carriers[n]))
        elif n in folds:
            writers.append(TaskWriter(kernel, fold_task(folds[n]), layout, block_size, restrict, fold_of=folds[n]))
        else:
            writers.append(TaskWriter(kernel, task, layout, block_size, restrict))
    warps = [TaskWriter(kernel, w.task, layout, block_size, restrict, warp=True)
             if w.register_vectors and block_size > WARP and n not in carriers and n not in folds else None
             for n, w in enumerate(writers)]
    splits = [split_function(kernel, task, w, layout, block_size, restrict) for task, w in zip(kernel.tasks, writers)]
    for w, split in zip(writers, splits):
        w.split_apart = split is not None  # the row function then leaves the split path out
    return [(w, warp, narrow_warp(kernel, warp, layout, block_size, restrict), split)
            for w, warp, split in zip(writers, warps, splits)]


def split_function(kernel: k.Kernel, task: k.Task, writer: TaskWriter, layout: ArgLayout, block_size: int,
                   restrict: bool) -> TaskWriter | None:
    """The writer of a function for the task's rows split across blocks alone, where its row function
    (`writer`'s) would hold that path as a branch (None elsewhere). A function's registers are the
    most any of its paths needs: argmax over 512 rows of 128256 float32 took 46 registers a thread on
    blocks of 512 with the split path beside its row loop, 31 without it, and ran at 3.1 TB/s on an
    H200 where it had run at 3.8."""
    if writer.inner_outer is not None or writer.fold_of is not None or writer.schedule.kind != "rows" \
            or not writer.schedule.splittable or config.disabled("split_functions"):
        return None
    return TaskWriter(kernel, task, layout, block_size, restrict, split=True)


def narrow_warp(kernel: k.Kernel, warp: TaskWriter | None, layout: ArgLayout, block_size: int,
                restrict: bool) -> TaskWriter | None:
    """A second warp function keeping half the warp function's vectors of the row in registers, for
    rows that fit it (None where the warp function keeps one vector, or has none). The room a warp
    function keeps is fixed when it compiles, and what it does not use still holds registers: on an
    H200 rows of 768 bfloat16 in a function holding 2048 ran at 2 blocks fewer an SM; with room for
    1024, dropout + residual + layer_norm over [8192, 768] went from 1.83 to 2.48 TB/s and the causal
    softmax over 512 from 2.52 to 2.76."""
    if warp is None or warp.register_vectors < 2 or config.disabled("narrow_warps"):
        return None
    return TaskWriter(kernel, warp.task, layout, block_size, restrict, warp=True,
                      warp_vectors=warp.register_vectors // 2)


def generate(kernel: k.Kernel, block_size: int = DEFAULT_BLOCK_SIZE, restrict: bool = False) -> CudaSource:
    """CUDA C++ for `kernel`. `restrict`: no two of its arrays share memory where one is written
    (true of fusions on a GPU: outputs and temporaries are fresh buffers, and an output that reuses
    an input's buffer is copied into it after the launch)."""
    quadruples = task_writers(kernel, block_size, restrict)
    writers, warps, narrows, splits = ([each[n] for each in quadruples] for n in range(4))
    functions = writers + [w for extra in (warps, narrows, splits) for w in extra if w is not None]
    header = f"// {kernel.name}: {len(kernel.tasks)} task(s), from {kernel.source or 'Kernel IR'}"
    sections = tuple(w.write() for w in functions)
    body = "\n\n".join([header, *sections]) + "\n"
    return CudaSource(body, tuple(w.function for w in functions), tuple(w.lanes for w in writers),
                      tuple(w.caches for w in writers), tuple(len(w.schedule.accumulators) for w in writers),
                      tuple(register_row(w) for w in writers), tuple(w.launch_schedule for w in writers),
                      tuple(w.function if w is not None else "" for w in warps),
                      tuple(register_row(w) for w in warps), tuple(lane_width(w) for w in writers),
                      tuple(thread_vector_width(w) for w in writers), tuple(len(w.divisors) for w in writers), sections,
                      tuple(w.column_vectors.width if w.column_vectors is not None else 1 for w in writers),
                      tuple(w.function if w is not None else "" for w in narrows),
                      tuple(register_row(w) for w in narrows),
                      tuple(w.function if w is not None else "" for w in splits))


def inner_outer_pairs(kernel: k.Kernel) -> list[tuple[str, str]]:
    """(row task, column task) of each pair of tasks taking the inner-outer schedule."""
    kernel = prepared(kernel)
    return [(carried.task.name, carried.column.name) for carried in plan_inner_outer(kernel).values()]
