"""Column strips (the CPU's outer reductions and normalizations): a task owns a strip of columns
(the innermost axis) and walks the rows (the reduced axes) in order, each row a unit-stride,
vectorizable loop over the strip that folds into lane arrays, one partial per column: as NumPy's
add.reduce over axis 0 and nvFuser's outer reduction do, instead of one strided column per task.

A reduction whose value the strip's loops ask for at a column of the strip (and nothing else that
varies inside the task) is computed once per task, before the loops that read it, into a lane
array (`StripLanes.hoist`); softmax over axis 0 computes its max, then its sum (which reads the
max's lanes), then each output row.

Float sums keep their error small and their bits fixed: rows are summed in blocks of
SUM_BLOCK_ROWS, and the block partials are combined pairwise through a stack (a binary counter
over the blocks), as NumPy's pairwise sum does. The order depends on the extents alone, never on the
thread count: a column is summed whole by the task that owns its strip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from braze import dtypes as dt
from braze.dtypes import DType
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower.reductions import _FOLDS, _extreme
from braze.lower.scope import Scope, free_vars
from braze.lower.values import ValueEmitter, cast, index_op
from braze.ops.reductions import _accumulator

if TYPE_CHECKING:
    from braze.schedule.loops import ScheduledLoops

_ARGS = frozenset({"argmax", "argmin"})
_STRIP_OPS = frozenset(_FOLDS) | {"mean", "var"} | _ARGS
SUM_BLOCK_ROWS = 64  # rows a lane sums serially before its partial joins the pairwise stack
# One partial per level, shared by the task's sums (each runs whole before the next): 2**15 blocks of
# rows (2M rows) before the last level starts absorbing partials; 256 KiB for the widest strip.
STACK_LEVELS = 16
_LANE = k.Var("_lane", dt.int64)  # stands for a strip's column in the keys of hoisted reductions


def _accumulator_dtype(op: str, tv: TensorView) -> DType:
    if op in ("any", "all"):
        return dt.bool_
    return _accumulator(op, tv.dtype) or dt.compute_dtype(tv.definition.inputs[0].dtype)


class StripLanes:
    """The strip a task owns (`width` columns from its first) and the lane arrays of the reductions
    computed for it so far."""

    def __init__(self, width: k.Var, capacity: int) -> None:
        self.width, self.capacity = width, capacity
        self.lane_vars: set[k.Var] = set()
        self.arrays: dict[tuple, tuple[k.Var, Callable[[k.Expr], k.Expr]]] = {}  # key -> (lanes, finish)
        self.stacks: dict[DType, k.Var] = {}  # the pairwise stack of each accumulator type

    def lane_loop(self, em: ValueEmitter, body: Callable[[k.Var], None], lane: k.Var | None = None) -> None:
        """`for lane in range(width): body(lane)` into the current scope: the vectorized loop."""
        lane = lane or em.scopes.fresh("j", em.index)
        self.lane_vars.add(lane)
        em.scopes.push("element", {lane}).iteration.add(lane)
        body(lane)
        em.scopes.emit(k.For(lane, em.zero, self.width, tuple(em.scopes.pop().stmts), vectorize=True))

    def hoist(self, em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr | None:
        """The value of reduction `tv` at `idx` read from its lane array (computed at the task's scope
        on first use), when `idx` varies with one strip column and otherwise only with the task."""
        if tv.definition.op not in _STRIP_OPS:
            return None
        needed = set().union(*map(free_vars, idx)) if idx else set()
        lanes = needed & self.lane_vars
        if len(lanes) != 1 or not (needed - lanes) <= em.scopes.scopes[0].defines:
            return None
        (lane,) = lanes
        key = (id(tv), tuple(k.substitute(i, lane, _LANE) for i in idx))
        if key not in self.arrays:
            em.count_reduction(tv)
            # Computed for every column of the strip, also those a branch it was asked from (a pad's or
            # a cat's along the columns) leaves out: there `idx` is clamped (ValueEmitter.in_range).
            lifted = em.scopes.leaves_branch(em.scopes.home_of((lane,)))
            saved, trips = em.scopes.scopes, em.reduction_trips
            em.scopes.scopes, em.reduction_trips = saved[:1], None
            try:
                if lifted:
                    idx, em.reduction_trips = em.in_range(tv, idx)
                self.arrays[key] = self._reduce(em, tv, idx, lane)
            finally:
                em.scopes.scopes, em.reduction_trips = saved, trips
        array, finish = self.arrays[key]
        return finish(k.LoadLocal(array, lane, array.dtype))

    def _reduce(self, em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...], lane: k.Var):
        op = tv.definition.op
        fold = "sum" if op == "mean" else op
        acc_dtype = _accumulator_dtype(op, tv)
        column = em.scopes.fresh("j", em.index)
        idx = tuple(k.substitute(i, lane, column) for i in idx)
        if op == "var":
            return self._variance(em, tv, idx, column, acc_dtype)
        if op in _ARGS:
            return self._arg(em, tv, idx, column, largest=op == "argmax")
        if fold == "sum" and acc_dtype.is_floating:
            array = self._pairwise_sum(em, tv, idx, column, acc_dtype)
        else:
            array = self._fold(em, tv, idx, column, fold, acc_dtype)
        if op != "mean":
            return array, lambda v: cast(v, tv.dtype)
        count = cast(_count(em, tv), acc_dtype)
        return array, lambda v: cast(k.Binary("truediv", v, count, acc_dtype), tv.dtype)

    def _variance(self, em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...], column: k.Var, acc_dtype: DType):
        """Two passes, as braze.lower.reductions' var: the column means, then the squared deviations."""
        count = cast(_count(em, tv), acc_dtype)
        means = self._pairwise_sum(em, tv, idx, column, acc_dtype)
        self.lane_loop(em, lambda j: em.scopes.emit(
            k.StoreLocal(means, j, k.Binary("truediv", k.LoadLocal(means, j, acc_dtype), count, acc_dtype))))

        def square(value: k.Expr, j: k.Var) -> k.Expr:
            deviation = k.Binary("sub", value, k.LoadLocal(means, j, acc_dtype), acc_dtype)
            return k.Binary("mul", deviation, deviation, acc_dtype)

        again = em.scopes.fresh("j", em.index)
        squares = self._pairwise_sum(em, tv, tuple(k.substitute(i, column, again) for i in idx), again, acc_dtype,
                                     square)
        correction = k.Const(float(tv.definition.attrs.get("correction", 0)), acc_dtype)
        divisor = k.Binary("maximum", k.Binary("sub", count, correction, acc_dtype), k.Const(0.0, acc_dtype),
                           acc_dtype)
        return squares, lambda v: cast(k.Binary("truediv", v, divisor, acc_dtype), tv.dtype)

    def _arg(self, em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...], column: k.Var, largest: bool):
        """argmax / argmin in one pass over the rows: a lane takes a row's value and flat row index where
        the value beats its best so far, strictly (the first of equal values stays) or as the first NaN
        (NumPy's first occurrence), by selects that vectorize, where one strided column per task
        walked each column twice (the extreme, then its first index) at a stride of a row."""
        value_dtype = dt.compute_dtype(tv.definition.inputs[0].dtype)
        value_dtype = dt.int32 if value_dtype.is_bool else value_dtype
        best, at = self._alloc(em, value_dtype), self._alloc(em, em.index)
        self._fill(em, best, _extreme(value_dtype, largest=not largest))
        self._fill(em, at, em.zero)

        def consider(j: k.Var, value: Callable[[], k.Expr], row: k.Expr) -> None:
            v, old = cast(value(), value_dtype), k.LoadLocal(best, j, value_dtype)
            better = k.Binary("gt" if largest else "lt", v, old, dt.bool_)
            if value_dtype.is_floating:
                first_nan = k.Binary("logical_and", k.Unary("isnan", v, dt.bool_),
                                     k.Unary("logical_not", k.Unary("isnan", old, dt.bool_), dt.bool_), dt.bool_)
                better = k.Binary("logical_or", better, first_nan, dt.bool_)
            taken = em.scopes.fresh("better", dt.bool_)  # read before either store: the second must not see the first
            em.scopes.emit(k.Let(taken, better))
            em.scopes.emit(k.StoreLocal(best, j, k.Ternary("where", taken, v, old, value_dtype)))
            em.scopes.emit(k.StoreLocal(at, j, k.Ternary("where", taken, row, k.LoadLocal(at, j, em.index),
                                                         em.index)))

        _row_loops(em, tv, idx, lambda value, row: self.lane_loop(em, lambda j: consider(j, value, row), column))
        return at, lambda v: cast(v, tv.dtype)

    def _alloc(self, em: ValueEmitter, dtype: DType, levels: int = 1) -> k.Var:
        array = em.scopes.fresh("lanes", dtype)
        em.scopes.emit(k.Alloc(array, dtype, self.capacity * levels))
        return array

    def _fill(self, em: ValueEmitter, array: k.Var, value: k.Const) -> None:
        self.lane_loop(em, lambda j: em.scopes.emit(k.StoreLocal(array, j, value)))

    def _fold(self, em, tv, idx, column, op: str, acc_dtype: DType) -> k.Var:
        """Every row folded into the lanes in row order: exact for max, min, any, all and integers."""
        init, combine = _FOLDS[op]
        array = self._alloc(em, acc_dtype)
        self._fill(em, array, init(acc_dtype))

        def accumulate(j: k.Var, value: Callable[[], k.Expr]) -> None:
            update = k.Binary(combine, k.LoadLocal(array, j, acc_dtype), cast(value(), acc_dtype), acc_dtype)
            em.scopes.emit(k.StoreLocal(array, j, update))

        _row_loops(em, tv, idx, lambda value, _: self.lane_loop(em, lambda j: accumulate(j, value), column))
        return array

    def _pairwise_sum(self, em, tv, idx, column, acc_dtype: DType,
                      term: Callable[[k.Expr, k.Var], k.Expr] = lambda value, j: value) -> k.Var:
        """Rows summed in blocks (each element through `term`), the block partials combined pairwise
        through a stack of lanes; the last block's push folds the whole stack into the result."""
        partial = self._alloc(em, acc_dtype)
        if acc_dtype not in self.stacks:
            self.stacks[acc_dtype] = self._alloc(em, acc_dtype, STACK_LEVELS)
        stack = self.stacks[acc_dtype]
        top, blocks = em.scopes.fresh("top", em.index), em.scopes.fresh("blocks", em.index)
        em.scopes.emit(k.Let(top, em.zero))
        em.scopes.emit(k.Let(blocks, em.zero))
        last = index_op("sub", _block_count(em, tv), em.one)

        def accumulate(j: k.Var, value: Callable[[], k.Expr]) -> None:
            element = term(cast(value(), acc_dtype), j)
            update = k.Binary("add", k.LoadLocal(partial, j, acc_dtype), element, acc_dtype)
            em.scopes.emit(k.StoreLocal(partial, j, update))

        self._fill(em, partial, k.Const(0.0, acc_dtype))  # each push leaves it zero for the next block
        _row_loops(em, tv, idx, lambda value, _: self.lane_loop(em, lambda j: accumulate(j, value), column),
                   (lambda: None, lambda: self._push(em, partial, stack, (top, blocks), last)))
        return partial

    def _add_level(self, em: ValueEmitter, partial: k.Var, stack: k.Var, level: k.Expr) -> None:
        """partial += stack[level], lane by lane (the older partial first, as the tree orders them)."""
        dtype = partial.dtype
        base = index_op("mul", level, self.width)

        def add(j: k.Var) -> None:
            older = k.LoadLocal(stack, index_op("add", base, j), dtype)
            em.scopes.emit(k.StoreLocal(partial, j, k.Binary("add", older, k.LoadLocal(partial, j, dtype), dtype)))
        self.lane_loop(em, add)

    def _push(self, em: ValueEmitter, partial: k.Var, stack: k.Var, counters: tuple[k.Var, k.Var],
              last: k.Expr) -> None:
        """Pushes a block's partial: while the block count's low bit is set, the partial absorbs the
        top of the stack (two subtrees of equal size become one), and while the stack is full; then
        it becomes the top. The last block's partial absorbs the whole stack and stays the result."""
        top, blocks = counters
        carry = em.scopes.fresh("carry", em.index)
        em.scopes.emit(k.Let(carry, blocks))
        is_last = em.scopes.fresh("last", dt.bool_)
        em.scopes.emit(k.Let(is_last, k.Binary("eq", blocks, last, dt.bool_)))
        em.scopes.push("branch")
        em.scopes.emit(k.Assign(top, index_op("sub", top, em.one)))
        self._add_level(em, partial, stack, top)
        em.scopes.emit(k.Assign(carry, k.Binary("right_shift", carry, em.one, em.index)))
        merge = tuple(em.scopes.pop().stmts)
        low_bit = k.Binary("ne", k.Binary("bitwise_and", carry, em.one, em.index), em.zero, dt.bool_)
        full = k.Binary("ge", top, em.const(STACK_LEVELS - 1), dt.bool_)
        merges = k.Binary("logical_or", k.Binary("logical_or", low_bit, full, dt.bool_), is_last, dt.bool_)
        # Once a full stack has absorbed a partial, the block count no longer tells the levels: never
        # pop below the bottom.
        em.scopes.emit(k.While(k.Binary("logical_and", k.Binary("gt", top, em.zero, dt.bool_), merges, dt.bool_),
                               merge))
        base = index_op("mul", top, self.width)

        def store(j: k.Var) -> None:
            em.scopes.emit(k.StoreLocal(stack, index_op("add", base, j), k.LoadLocal(partial, j, partial.dtype)))
            em.scopes.emit(k.StoreLocal(partial, j, k.Const(0.0, partial.dtype)))
        em.scopes.push("branch")
        self.lane_loop(em, store)
        em.scopes.emit(k.Assign(top, index_op("add", top, em.one)))
        em.scopes.emit(k.If(k.Unary("logical_not", is_last, dt.bool_), tuple(em.scopes.pop().stmts)))
        em.scopes.emit(k.Assign(blocks, index_op("add", blocks, em.one)))


def _block_count(em: ValueEmitter, tv: TensorView) -> k.Expr:
    """The blocks of rows a pairwise sum over `tv`'s reduced axes pushes (the innermost one blocked)."""
    x, axes = tv.definition.inputs[0], tuple(tv.definition.attrs["axes"])
    n = em.one
    for axis in axes[:-1]:
        n = index_op("mul", n, em.extent(x.visible[axis].extent))
    inner = em.extent(x.visible[axes[-1]].extent) if axes else em.one
    blocks = index_op("floordiv", index_op("add", inner, em.const(SUM_BLOCK_ROWS - 1)), em.const(SUM_BLOCK_ROWS))
    return index_op("mul", n, blocks)


def _count(em: ValueEmitter, tv: TensorView) -> k.Expr:
    x = tv.definition.inputs[0]
    n = em.one
    for axis in tv.definition.attrs["axes"]:
        n = index_op("mul", n, em.extent(x.visible[axis].extent))
    return n


def _row_loops(em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...], row: Callable[[Callable], None],
               blocks: tuple[Callable[[], None], Callable[[], None]] | None = None) -> None:
    """Loops over the reduced axes of `tv`'s input (in axis order) with `row(value, flat)` inside, where
    value() is the input's element at the row and the output index `idx`, and `flat` the row's index
    over the reduced axes, row-major. With `blocks` (start, end),
    the innermost reduced axis runs in blocks of SUM_BLOCK_ROWS, start() before and end() after each.

    One row at a time: summing four rows per step (a quarter of the lane traffic) was 3x slower
    once the input outgrew the caches, its four streams defeating the prefetchers."""
    scopes, x, axes = em.scopes, tv.definition.inputs[0], tv.definition.attrs["axes"]
    variables = [scopes.fresh("r", em.index) for _ in axes]
    kept = iter(idx)
    full = tuple(variables[axes.index(a)] if a in axes else next(kept) for a in range(x.ndim))

    def nest(level: int) -> None:
        if level == len(axes):
            flat = em.zero
            for var, axis in zip(variables, axes):
                flat = index_op("add", index_op("mul", flat, em.extent(x.visible[axis].extent)), var)
            row(lambda: em.value(x, full), flat)
            return
        var, extent = variables[level], em.extent(x.visible[axes[level]].extent)
        if level == 0 and em.reduction_trips is not None:  # 0 or 1 (ValueEmitter.in_range)
            extent = index_op("mul", extent, em.reduction_trips)
        if blocks is None or level < len(axes) - 1:
            scopes.push("reduction", {var})
            nest(level + 1)
            scopes.emit(k.For(var, em.zero, extent, tuple(scopes.pop().stmts)))
            return
        block = scopes.fresh("rb", em.index)
        scopes.push("reduction", {block})
        blocks[0]()
        first = scopes.fresh("r0", em.index)
        scopes.emit(k.Let(first, index_op("mul", block, em.const(SUM_BLOCK_ROWS))))
        end = k.Binary("minimum", index_op("add", first, em.const(SUM_BLOCK_ROWS)), extent, em.index)
        scopes.push("reduction", {var})
        nest(level + 1)
        scopes.emit(k.For(var, first, end, tuple(scopes.pop().stmts)))
        blocks[1]()
        count = index_op("floordiv", index_op("add", extent, em.const(SUM_BLOCK_ROWS - 1)), em.const(SUM_BLOCK_ROWS))
        scopes.emit(k.For(block, em.zero, count, tuple(scopes.pop().stmts)))

    nest(0)


def decompose_task_index(em: ValueEmitter, tv: TensorView, task_scope: Scope, rest: k.Expr, axes: list[int],
                         idx: list) -> None:
    """Lets of the indices of `axes` (outer first) that the task index's part `rest` enumerates, into
    `idx`: the innermost axis varies fastest."""
    extents = em.shape(tv)
    for n, axis in enumerate(reversed(axes)):
        position = em.scopes.fresh("i", em.index)
        em.scopes.emit(k.Let(position, rest if n == len(axes) - 1 else index_op("remainder", rest, extents[axis])))
        task_scope.iteration |= set() if tv.visible[axis].is_broadcast else {position}
        idx[axis] = position
        rest = index_op("floordiv", rest, extents[axis])


def strip_task(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, loops: ScheduledLoops, name: str) -> k.Task:
    """The task writing `tv` by column strips: task index = (parallel axes, strip); inside, the serial
    axes (a normalization's reduced ones) as loops, and the strip's columns as the vectorized loop."""
    scopes, extents = em.scopes, em.shape(tv)
    lane_axis = loops.loop_order[-1]
    outer = [a for a in loops.parallel_axes if a != lane_axis]
    widest, columns = em.extent(loops.strip.factor), extents[lane_axis]
    strips = index_op("floordiv", index_op("sub", index_op("add", columns, widest), em.one), widest)
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    idx: list[k.Expr | None] = [None] * tv.ndim
    rest = index_op("floordiv", task_var, strips)
    decompose_task_index(em, tv, task_scope, rest, outer, idx)
    widest_var = scopes.fresh("strip", em.index)
    scopes.emit(k.Let(widest_var, widest))
    first, width = scopes.fresh("c", em.index), scopes.fresh("w", em.index)
    scopes.emit(k.Let(first, index_op("mul", index_op("remainder", task_var, strips), widest_var)))
    scopes.emit(k.Let(width, k.Binary("minimum", widest_var, index_op("sub", columns, first), em.index)))
    task_scope.iteration.add(first)
    em.strips = StripLanes(width, loops.strip_capacity)
    try:
        _serial_loops(em, tv, param, idx, list(loops.serial_axes), lane_axis, first)
    finally:
        em.strips = None
    end = strips
    for axis in outer:
        end = index_op("mul", end, extents[axis])
    return k.Task(name, "range_for", tuple(scopes.pop().stmts), task_var, em.zero, end,
                  work=index_op("mul", widest, _rows(em, tv, loops)))


def _serial_loops(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, idx: list, serial: list[int],
                  lane_axis: int, first: k.Var) -> None:
    if serial:
        var = em.scopes.fresh("s", em.index)
        em.scopes.push("element", {var}).iteration |= set() if tv.visible[serial[0]].is_broadcast else {var}
        idx[serial[0]] = var
        _serial_loops(em, tv, param, idx, serial[1:], lane_axis, first)
        em.scopes.emit(k.For(var, em.zero, em.shape(tv)[serial[0]], tuple(em.scopes.pop().stmts)))
        return

    def store(j: k.Var) -> None:
        idx[lane_axis] = index_op("add", first, j)
        at = tuple(idx)
        em.scopes.emit(k.Store(param, at, cast(em.value(tv, at), tv.dtype)))
    em.strips.lane_loop(em, store)


def _reductions_under(tv: TensorView) -> list[TensorView]:
    """`tv` if it is a reduction, else the reductions its pointwise ops read, nearest first."""
    found, stack, seen = [], [tv], set()
    while stack:
        t = stack.pop(0)
        if id(t) in seen or t.definition is None:
            continue
        seen.add(id(t))
        if "axes" in t.definition.attrs and t.definition.op in _STRIP_OPS:
            found.append(t)
            continue
        stack.extend(t.definition.inputs)
    return found


def _rows(em: ValueEmitter, tv: TensorView, loops: ScheduledLoops) -> k.Expr:
    """Rows one task walks (for the runtime's split across threads): the reduced extents of a
    reduction, three passes over the serial axes of a normalization."""
    if not loops.serial_axes:  # a reduction, or pointwise ops over reductions (a cast of a column sum)
        reductions = _reductions_under(tv)
        return _count(em, reductions[0]) if reductions else em.one
    rows = em.const(3)
    for axis in loops.serial_axes:
        rows = index_op("mul", rows, em.shape(tv)[axis])
    return rows
