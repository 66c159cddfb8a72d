"""Tiles (transposes): a pointwise task that reads a tensor transposed walks its output in tiles of
`loops.tile` rows and columns, one per task index (the outer axes, then the band of rows, then the
tile along the band, so a thread's consecutive indices walk a band left to right); in each tile, the
rows, and each row's columns as the vectorized loop. Row by row, `x + y.T` would read y down a whole
column per output row, a cache line per element; within a tile the lines it reads stay in L1 for
the tile's other rows. The CUDA backend runs each tile on one block, staging such reads through
shared memory (braze/codegen/cuda_tiles.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.lower.strips import decompose_task_index
from braze.lower.values import ValueEmitter, cast, index_op

if TYPE_CHECKING:
    from braze.schedule.loops import ScheduledLoops


def _ceildiv(em: ValueEmitter, a: k.Expr, b: k.Expr) -> k.Expr:
    return index_op("floordiv", index_op("sub", index_op("add", a, b), em.one), b)


def _span(em: ValueEmitter, first: k.Var, size: k.Expr, extent: k.Expr) -> k.Expr:
    """The end of the tile starting at `first`: `size` on, or the extent, whichever is first."""
    return k.Binary("minimum", index_op("add", first, size), extent, em.index)


def tile_task(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, loops: ScheduledLoops, name: str) -> k.Task:
    """The task writing `tv` by tiles of `loops.tile` rows and columns of its two innermost loop axes,
    one tile per task index (so a matrix of few rows still spreads over the threads)."""
    scopes, extents = em.scopes, em.shape(tv)
    *outer, row_axis, column_axis = loops.loop_order
    tile = em.const(loops.tile)
    bands, tiles = _ceildiv(em, extents[row_axis], tile), _ceildiv(em, extents[column_axis], tile)
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    idx: list[k.Expr | None] = [None] * tv.ndim
    first_row, first_column = scopes.fresh("r", em.index), scopes.fresh("c", em.index)
    scopes.emit(k.Let(first_column, index_op("mul", index_op("remainder", task_var, tiles), tile)))
    band = index_op("floordiv", task_var, tiles)
    # Without outer axes the band is below `bands` already: no division (per block, on a GPU).
    scopes.emit(k.Let(first_row, index_op("mul", index_op("remainder", band, bands) if outer else band, tile)))
    decompose_task_index(em, tv, task_scope, index_op("floordiv", band, bands), outer, idx)
    row, column = scopes.fresh("i", em.index), scopes.fresh("j", em.index)
    scopes.push("element", {row}).iteration |= set() if tv.visible[row_axis].is_broadcast else {row}
    scopes.push("element", {column}).iteration |= set() if tv.visible[column_axis].is_broadcast else {column}
    idx[row_axis], idx[column_axis] = row, column
    scopes.emit(k.Store(param, tuple(idx), cast(em.value(tv, tuple(idx)), tv.dtype)))
    columns = k.For(column, first_column, _span(em, first_column, tile, extents[column_axis]),
                    tuple(scopes.pop().stmts), vectorize=True)
    scopes.emit(columns)
    scopes.emit(k.For(row, first_row, _span(em, first_row, tile, extents[row_axis]), tuple(scopes.pop().stmts)))
    end = index_op("mul", bands, tiles)
    for axis in outer:
        end = index_op("mul", end, extents[axis])
    return k.Task(name, "range_for", tuple(scopes.pop().stmts), task_var, em.zero, end,
                  work=index_op("mul", tile, tile), tile=loops.tile)
