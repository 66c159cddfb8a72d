"""Reductions as loops over the reduced dimensions, accumulating in the op's accumulator type."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from braze import dtypes as dt
from braze.dtypes import DType
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower.exprs import cast, decompose_row, index_op, product, trailing_run, without_unread
from braze.ops.reductions import _accumulator

if TYPE_CHECKING:
    from braze.lower.values import ValueEmitter


def _extreme(dtype: DType, largest: bool) -> k.Const:
    if dtype.is_floating:
        return k.Const(float("inf") if largest else float("-inf"), dtype)
    if dtype.is_bool:
        return k.Const(largest, dtype)
    lo, hi = dt.int_bounds(dtype)
    return k.Const(hi if largest else lo, dtype)


# op: (initial value for an accumulator dtype, combine op name). The `reduce_*` combines may be
# reassociated by the code generators (as NumPy's pairwise sums are): that is what lets a
# reduction loop use vector lanes and several accumulators.
_FOLDS: dict[str, tuple[Callable[[DType], k.Const], str]] = {
    "sum": (lambda d: k.Const(0, d) if not d.is_bool else k.Const(False, d), "reduce_add"),
    "prod": (lambda d: k.Const(1, d), "reduce_mul"),
    "max": (lambda d: _extreme(d, largest=False), "reduce_maximum"),
    "min": (lambda d: _extreme(d, largest=True), "reduce_minimum"),
    "any": (lambda d: k.Const(False, dt.bool_), "logical_or"),
    "all": (lambda d: k.Const(True, dt.bool_), "logical_and"),
}


class ReductionLoops:
    """Loops over the reduced dimensions of `tv`'s input at output index `idx`."""

    def __init__(self, em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...]) -> None:
        self.em, self.tv, self.idx = em, tv, idx
        self.x = tv.definition.inputs[0]
        self.axes = tv.definition.attrs["axes"]
        self.extents = [em.extent(self.x.visible[a].extent) for a in self.axes]

    def count(self) -> k.Expr:
        n = self.em.one
        for e in self.extents:
            n = index_op("mul", n, e)
        return n

    def run(self, body: Callable[[k.Expr, k.Expr], list[k.Stmt] | None]) -> None:
        """Emits nested loops; `body(element, flat_index)` is called inside with the input's element.

        Reduced axes that end the input's axes (H and W of batch_norm's [N, C, H, W]) take one loop
        over their product where every tensor the body reads lies row-major along them: each reads at
        that loop's index (ValueEmitter.row_index), and no digit of theirs is walked or divided.
        Where some read needs their own indices, the loops are emitted again, one an axis."""
        run = trailing_run(self.axes, self.x.ndim)
        # Reductions over the same extents take the same loops, which the code generators walk as
        # one (cross_entropy's sum of losses and count of targets): the first one's choice holds.
        key = (tuple(self.extents), run)
        if run >= 2 and self.em.merged_loops.get(key, True):
            counts = dict(self.em.selects), dict(self.em.reductions), dict(self.em.elementwise)
            loops = self._loops(body, run)
            self.em.merged_loops[key] = loops is not None
            if loops is not None:
                self.em.scopes.current.stmts.extend(loops)
                return
            self.em.selects, self.em.reductions, self.em.elementwise = counts  # the attempt's are emitted again
        self.em.scopes.current.stmts.extend(self._loops(body, 0))

    def _loops(self, body, run: int) -> list[k.Stmt] | None:
        """The loop nest with the last `run` reduced axes as one loop (0: one loop an axis; no loop
        where no axis is reduced); None where a read in the merged loop's body still needs those
        axes' own indices."""
        em, scopes = self.em, self.em.scopes
        outer = len(self.axes) - run
        extents = self.extents[:outer] + ([product(self.extents[outer:])] if run else [])
        loop_vars = [scopes.fresh("r", em.index) for _ in extents]
        for var in loop_vars:
            scopes.push("reduction", {var})
        full: list[k.Expr | None] = [None] * self.x.ndim
        kept = iter(self.idx)
        for a in range(self.x.ndim):
            if a not in self.axes:
                full[a] = next(kept)
            elif self.axes.index(a) < outer:
                full[a] = loop_vars[self.axes.index(a)]
        saved_row = em.row
        if run:
            shape = em.shape(self.x)
            iterates = [not d.is_broadcast for d in self.x.visible]
            em.row = decompose_row(em, loop_vars[-1], list(self.axes[outer:]), shape, full, set(), iterates)
        ends = list(extents)
        if em.reduction_trips is not None and ends:  # 0 or 1 (ValueEmitter.in_range)
            ends[0] = index_op("mul", ends[0], em.reduction_trips)
        flat = em.zero
        for var, n in zip(loop_vars, extents):
            flat = index_op("add", index_op("mul", flat, n), var)
        try:
            body(em.value(self.x, tuple(full)), flat)
        finally:
            em.row = saved_row
        inner: list[k.Stmt] = []
        for depth, (var, n) in enumerate(reversed(list(zip(loop_vars, ends)))):
            stmts = scopes.pop().stmts
            if depth == 0 and run:
                positions = {full[a] for a in self.axes[outer:]}
                stmts = list(without_unread(stmts, positions))
                if any(isinstance(s, k.Let) and s.var in positions for s in stmts):
                    for _ in loop_vars[1:]:
                        scopes.pop()
                    return None
            inner = [k.For(var, em.zero, n, tuple(stmts + inner))]
        return inner


def _fold(em: ValueEmitter, tv: TensorView, idx, op: str, acc_dtype: DType) -> k.Var:
    init, combine = _FOLDS[op]
    acc = em.scopes.fresh("acc", acc_dtype)
    em.scopes.emit(k.Let(acc, init(acc_dtype)))
    loops = ReductionLoops(em, tv, idx)
    loops.run(lambda v, flat: em.scopes.emit(k.Assign(acc, k.Binary(combine, acc, cast(v, acc_dtype), acc_dtype))))
    return acc


def _value_dtype(tv: TensorView) -> DType:
    return dt.compute_dtype(tv.definition.inputs[0].dtype)


def _simple(op: str) -> Callable:
    def emit(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
        acc_dtype = _accumulator(op, tv.dtype) or (dt.bool_ if op in ("any", "all") else _value_dtype(tv))
        return cast(_fold(em, tv, idx, op, acc_dtype), tv.dtype)
    return emit


def _mean(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
    acc_dtype = _accumulator("mean", tv.dtype)
    total = _fold(em, tv, idx, "sum", acc_dtype)
    count = cast(ReductionLoops(em, tv, idx).count(), acc_dtype)
    return cast(k.Binary("truediv", total, count, acc_dtype), tv.dtype)


def _var(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
    """Two passes (mean, then squared deviations): as accurate as NumPy's."""
    acc_dtype = _accumulator("var", tv.dtype)
    loops = ReductionLoops(em, tv, idx)
    count = cast(loops.count(), acc_dtype)
    mean = em.scopes.fresh("mean", acc_dtype)
    em.scopes.emit(k.Let(mean, k.Binary("truediv", _fold(em, tv, idx, "sum", acc_dtype), count, acc_dtype)))
    squares = em.scopes.fresh("acc", acc_dtype)
    em.scopes.emit(k.Let(squares, k.Const(0.0, acc_dtype)))

    def accumulate(v: k.Expr, flat: k.Expr) -> None:
        deviation = k.Binary("sub", cast(v, acc_dtype), mean, acc_dtype)
        square = k.Binary("mul", deviation, deviation, acc_dtype)
        em.scopes.emit(k.Assign(squares, k.Binary("reduce_add", squares, square, acc_dtype)))

    loops.run(accumulate)
    correction = k.Const(float(tv.definition.attrs.get("correction", 0)), acc_dtype)
    divisor = k.Binary("maximum", k.Binary("sub", count, correction, acc_dtype), k.Const(0.0, acc_dtype), acc_dtype)
    return cast(k.Binary("truediv", squares, divisor, acc_dtype), tv.dtype)


def _arg(largest: bool) -> Callable:
    def emit(em: ValueEmitter, tv: TensorView, idx) -> k.Expr:
        value_dtype = dt.compute_dtype(tv.definition.inputs[0].dtype)
        value_dtype = dt.int32 if value_dtype.is_bool else value_dtype
        if em.cpu:
            one_axis = len(tv.definition.attrs["axes"]) == 1
            return (_arg_by_blocks if one_axis else _arg_by_folds)(em, tv, idx, largest, value_dtype)
        best = em.scopes.fresh("best", value_dtype)
        where = em.scopes.fresh("at", em.index)
        em.scopes.emit(k.Let(best, _extreme(value_dtype, largest=not largest)))
        em.scopes.emit(k.Let(where, em.zero))

        def consider(v: k.Expr, flat: k.Expr) -> None:
            v = cast(v, value_dtype)
            better = k.Binary("gt" if largest else "lt", v, best, dt.bool_)
            if value_dtype.is_floating:  # the first NaN wins, as in NumPy
                first_nan = k.Binary("logical_and", k.Unary("isnan", v, dt.bool_),
                                     k.Unary("logical_not", k.Unary("isnan", best, dt.bool_), dt.bool_), dt.bool_)
                better = k.Binary("logical_or", better, first_nan, dt.bool_)
            em.scopes.emit(k.If(better, (k.Assign(best, v), k.Assign(where, flat))))

        ReductionLoops(em, tv, idx).run(consider)
        return cast(where, tv.dtype)
    return emit


ARG_BLOCK = 512  # elements of a row whose extreme one fold finds before the row's best so far takes it


def _row_loop(em: ValueEmitter, tv: TensorView, idx, begin: k.Expr, end: k.Expr,
              body: Callable[[k.Expr, k.Var], None]) -> None:
    """`for r in range(begin, end): body(element, r)` over the one reduced axis of `tv`'s input."""
    x, (axis,) = tv.definition.inputs[0], tv.definition.attrs["axes"]
    var = em.scopes.fresh("r", em.index)
    em.scopes.push("reduction", {var})
    kept = iter(idx)
    body(em.value(x, tuple(var if a == axis else next(kept) for a in range(x.ndim))), var)
    em.scopes.emit(k.For(var, begin, end, tuple(em.scopes.pop().stmts)))


def _arg_by_blocks(em: ValueEmitter, tv: TensorView, idx, largest: bool, value_dtype: DType) -> k.Expr:
    """argmax / argmin over one axis in blocks of ARG_BLOCK: a fold finds each block's extreme, and
    only a block whose extreme beats the best so far (strictly, or as the first NaN: NumPy's first
    occurrence) is read again, from the cache, for the first index holding it. Both folds vectorize,
    and the row crosses memory once, where two folds over the whole row read it twice."""
    x, (axis,) = tv.definition.inputs[0], tv.definition.attrs["axes"]
    n = em.extent(x.visible[axis].extent)
    if em.reduction_trips is not None:  # 0 or 1 (ValueEmitter.in_range)
        n = index_op("mul", n, em.reduction_trips)
    fold = "reduce_maximum" if largest else "reduce_minimum"
    best, at = em.scopes.fresh("best", value_dtype), em.scopes.fresh("at", em.index)
    em.scopes.emit(k.Let(best, _extreme(value_dtype, largest=not largest)))
    em.scopes.emit(k.Let(at, em.zero))
    block = em.scopes.fresh("rb", em.index)
    em.scopes.push("reduction", {block})
    lo, hi = em.scopes.fresh("lo", em.index), em.scopes.fresh("hi", em.index)
    extreme = em.scopes.fresh("m", value_dtype)
    em.scopes.emit(k.Let(lo, index_op("mul", block, em.const(ARG_BLOCK))))
    em.scopes.emit(k.Let(hi, k.Binary("minimum", index_op("add", lo, em.const(ARG_BLOCK)), n, em.index)))
    em.scopes.emit(k.Let(extreme, _extreme(value_dtype, largest=not largest)))
    _row_loop(em, tv, idx, lo, hi, lambda v, r: em.scopes.emit(
        k.Assign(extreme, k.Binary(fold, extreme, cast(v, value_dtype), value_dtype))))
    better = _beats(extreme, best, largest, value_dtype)
    em.scopes.push("branch")
    first = em.scopes.fresh("first", em.index)
    em.scopes.emit(k.Let(first, hi))

    def find(v: k.Expr, r: k.Var) -> None:
        hit = _holds(cast(v, value_dtype), extreme, value_dtype)
        em.scopes.emit(k.Assign(first, k.Binary("reduce_minimum", first, k.Ternary("where", hit, r, hi, em.index),
                                                 em.index)))

    _row_loop(em, tv, idx, lo, hi, find)
    em.scopes.emit(k.Assign(best, extreme))
    em.scopes.emit(k.Assign(at, first))
    em.scopes.emit(k.If(better, tuple(em.scopes.pop().stmts)))
    blocks = index_op("floordiv", index_op("add", n, em.const(ARG_BLOCK - 1)), em.const(ARG_BLOCK))
    em.scopes.emit(k.For(block, em.zero, blocks, tuple(em.scopes.pop().stmts)))
    return cast(at, tv.dtype)


def _beats(v: k.Expr, best: k.Expr, largest: bool, dtype: DType) -> k.Expr:
    better = k.Binary("gt" if largest else "lt", v, best, dt.bool_)
    if not dtype.is_floating:
        return better
    first_nan = k.Binary("logical_and", k.Unary("isnan", v, dt.bool_),
                         k.Unary("logical_not", k.Unary("isnan", best, dt.bool_), dt.bool_), dt.bool_)
    return k.Binary("logical_or", better, first_nan, dt.bool_)


def _holds(v: k.Expr, extreme: k.Expr, dtype: DType) -> k.Expr:
    """Whether `v` is `extreme` (a NaN where it is one)."""
    hit = k.Binary("eq", v, extreme, dt.bool_)
    if not dtype.is_floating:
        return hit
    both_nan = k.Binary("logical_and", k.Unary("isnan", v, dt.bool_), k.Unary("isnan", extreme, dt.bool_), dt.bool_)
    return k.Binary("logical_or", hit, both_nan, dt.bool_)


def _arg_by_folds(em: ValueEmitter, tv: TensorView, idx, largest: bool, value_dtype: DType) -> k.Expr:
    """argmax / argmin as two folds, each of which vectorizes: the extreme value (a NaN if any, as
    `maximum` propagates NaNs), then the least index holding it (or holding a NaN when it is one):
    NumPy's first occurrence."""
    loops = ReductionLoops(em, tv, idx)
    best = em.scopes.fresh("best", value_dtype)
    em.scopes.emit(k.Let(best, _extreme(value_dtype, largest=not largest)))
    fold = "reduce_maximum" if largest else "reduce_minimum"
    loops.run(lambda v, flat: em.scopes.emit(k.Assign(best, k.Binary(fold, best, cast(v, value_dtype), value_dtype))))
    count = loops.count()
    where = em.scopes.fresh("at", em.index)
    em.scopes.emit(k.Let(where, count))

    def first(v: k.Expr, flat: k.Expr) -> None:
        v = cast(v, value_dtype)
        hit = k.Binary("eq", v, best, dt.bool_)
        if value_dtype.is_floating:
            both_nan = k.Binary("logical_and", k.Unary("isnan", v, dt.bool_), k.Unary("isnan", best, dt.bool_),
                                dt.bool_)
            hit = k.Binary("logical_or", hit, both_nan, dt.bool_)
        index = k.Ternary("where", hit, flat, count, em.index)
        em.scopes.emit(k.Assign(where, k.Binary("reduce_minimum", where, index, em.index)))

    ReductionLoops(em, tv, idx).run(first)
    found = k.Ternary("where", k.Binary("lt", where, count, dt.bool_), where, em.zero, em.index)
    return cast(found, tv.dtype)


_EMIT = {**{op: _simple(op) for op in _FOLDS}, "mean": _mean, "var": _var, "argmax": _arg(True),
         "argmin": _arg(False)}


def emit_reduction(em: ValueEmitter, tv: TensorView, idx: tuple[k.Expr, ...]) -> k.Expr:
    return _EMIT[tv.definition.op](em, tv, idx)
