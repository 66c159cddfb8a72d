"""Lowering a fusion to one Kernel: a task per written tensor, in dependency order.

Each written tensor (an output, or an intermediate the segmenter materialized) gets a loop nest
over its dimensions in the scheduler's loop order: a parallel task over the outer dimensions and
a serial, vectorizable loop over the innermost one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from braze.dtypes import DType
from braze.host.shapes import infer_layout
from braze.ir.fusion import FusionGraph
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.kir.params import KernelParams, equal_extents
from braze.lower import random as _random  # noqa: F401  (registers rand/randn)
from braze.lower.exprs import RowAxes, decompose, decompose_row, without_unread
from braze.lower.scans import is_scan, scan_task
from braze.lower.scope import ScopeStack
from braze.lower.strips import strip_task
from braze.lower.tiles import tile_task
from braze.lower.values import INDEX, ValueEmitter, cast, index_op

if TYPE_CHECKING:
    from braze.schedule.loops import ScheduledLoops


def array_param(tv: TensorView, static_strides: tuple[int | None, ...] | None = None) -> k.ArrayParam:
    return k.ArrayParam(tv.name, tv.dtype, tv.ndim, static_strides or (None,) * tv.ndim)


def written_strides(tv: TensorView) -> tuple[int | None, ...]:
    """Strides known when braze allocates a tensor: those its allocation domain makes 1.

    The runtime allocates from the same inferred layout, so the kernel and the buffer agree.
    """
    return tuple(1 if stride.same_as(1) else None for stride in infer_layout(tv).strides)


def _task_for(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, loops: ScheduledLoops, name: str) -> k.Task:
    """The task writing `tv`: a range over its scheduled parallel dimension (the outer axes merged,
    decomposed back into indices), with the innermost axis as a vectorized loop inside when the
    scheduler made it one."""
    if is_scan(tv):
        return scan_task(em, tv, param, name)
    if loops.strip is not None:
        return strip_task(em, tv, param, loops, name)
    if loops.tile:
        return tile_task(em, tv, param, loops, name)
    scopes = em.scopes
    extents = em.shape(tv)
    order = loops.loop_order
    if not order:
        scopes.push("task")
        scopes.emit(k.Store(param, (), cast(em.value(tv, ()), tv.dtype)))
        return k.Task(name, "serial", tuple(scopes.pop().stmts))
    # Without a vectorized loop the task's range covers every axis: that axis itself when it is the
    # only one, else all of them merged (decomposed below, with no loop inside).
    if len(loops.row_axes) > 1:
        return _row_task(em, tv, param, loops, name)
    if loops.flat:
        return _flat_task(em, tv, param, name)
    merged = not loops.vectorized and len(order) > 1
    outer, inner = (list(loops.parallel_axes) if loops.vectorized or merged else []), order[-1]
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    iterates = [not d.is_broadcast for d in tv.visible]  # a size-1 dimension never repeats work
    idx: list[k.Expr | None] = [None] * tv.ndim
    decompose(em, task_var, outer, extents, idx, task_scope.iteration, iterates)
    if merged:
        if outer == list(range(tv.ndim)):  # a reshape flattening these indices again gets the task index
            em.flat_of[(tuple(idx), tuple(extents))] = task_var
        scopes.emit(k.Store(param, tuple(idx), cast(em.value(tv, tuple(idx)), tv.dtype)))
        end = em.one
        for axis in outer:
            end = index_op("mul", end, extents[axis])
    elif not outer:
        idx[inner] = task_var
        task_scope.iteration |= {task_var} if iterates[inner] else set()
        scopes.emit(k.Store(param, tuple(idx), cast(em.value(tv, tuple(idx)), tv.dtype)))
        end = extents[inner]
    else:
        j = scopes.fresh("j", em.index)
        scopes.push("element", {j}).iteration |= {j} if iterates[inner] else set()
        idx[inner] = j
        scopes.emit(k.Store(param, tuple(idx), cast(em.value(tv, tuple(idx)), tv.dtype)))
        scopes.emit(k.For(j, em.zero, extents[inner], tuple(scopes.pop().stmts), vectorize=loops.vectorized))
        end = em.one
        for axis in outer:
            end = index_op("mul", end, extents[axis])
    return k.Task(name, "range_for", tuple(scopes.pop().stmts), task_var, em.zero, end)


def _row_task(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, loops: ScheduledLoops, name: str) -> k.Task:
    """A task whose row loop spans several trailing axes (schedule/rows.py): its index decomposed into
    the outer axes, a loop `j` over the product of the row's extents, and each row axis's index
    decomposed from `j`. A row-major tensor indexed by exactly those indices is read (and the output
    written) at `j` itself (ValueEmitter.row_index), so those divisions are left unused; where the row
    spans axes that are not the tensor's last (a task a channel: n, h, w), at the position of the
    trailing ones (exprs.decompose_row)."""
    scopes, extents, rows = em.scopes, em.shape(tv), loops.row_axes
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    iterates = [not d.is_broadcast for d in tv.visible]  # a size-1 dimension never repeats work
    idx: list[k.Expr | None] = [None] * tv.ndim
    decompose(em, task_var, list(loops.parallel_axes), extents, idx, task_scope.iteration, iterates)
    j = scopes.fresh("j", em.index)
    row_scope = scopes.push("element", {j})
    row_scope.iteration |= {j} if any(iterates[a] for a in rows) else set()
    em.row = decompose_row(em, j, list(rows), extents, idx, row_scope.iteration, iterates)
    written = em.row_index(tv, tuple(idx), row_major=tv.has_default_allocation)
    scopes.emit(k.Store(param, written, cast(em.value(tv, tuple(idx)), tv.dtype)))
    row_end, end = em.one, em.one
    for axis in rows:
        row_end = index_op("mul", row_end, extents[axis])
    for axis in loops.parallel_axes:
        end = index_op("mul", end, extents[axis])
    body = without_unread(scopes.pop().stmts, {idx[a] for a in rows})
    scopes.emit(k.For(j, em.zero, row_end, body, vectorize=True))
    em.row = None
    return k.Task(name, "range_for", tuple(scopes.pop().stmts), task_var, em.zero, end)


def _flat_task(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, name: str) -> k.Task:
    """A pointwise task over every axis as one range (schedule/rows.flat_pointwise): its index is the
    flat index, decomposed into the axes for whatever reads them; every array laid out row-major is
    read and written at the flat index itself (ValueEmitter.row_index), so the divisions go unused."""
    scopes, extents = em.scopes, em.shape(tv)
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    iterates = [not d.is_broadcast for d in tv.visible]
    idx: list[k.Expr | None] = [None] * tv.ndim
    decompose(em, task_var, list(range(tv.ndim)), extents, idx, task_scope.iteration, iterates)
    em.row = RowAxes(tuple(idx), task_var, tuple(extents))
    written = em.row_index(tv, tuple(idx), row_major=True)
    scopes.emit(k.Store(param, written, cast(em.value(tv, tuple(idx)), tv.dtype)))
    end = em.one
    for extent in extents:
        end = index_op("mul", end, extent)
    body = without_unread(scopes.pop().stmts, set(em.row.positions))
    em.row = None
    return k.Task(name, "range_for", body, task_var, em.zero, end)


def lower(fusion: FusionGraph, writes: Sequence[TensorView], scheduled: dict[int, ScheduledLoops],
          input_strides: dict[int, tuple[int | None, ...]], name: str, index: DType = INDEX,
          dense: frozenset[int] = frozenset(), cpu: bool = False) -> tuple[k.Kernel, KernelParams]:
    """One kernel writing each of `writes` (in order) with its own task, its index arithmetic in `index`
    (int32 only when every index of every call fits: see engine.index_type); `dense`: the inputs (ids)
    whose elements lie in row-major order with no gaps at this signature; `cpu`: for the CPU's code
    generator."""
    symbols = [d.extent.name for tv in fusion.inputs for d in tv.visible if d.extent.is_symbol]
    params = KernelParams(index=index, dense=dense, same_as=equal_extents(fusion.extent_checks, symbols))
    for tv in fusion.inputs:
        if tv.scalar is not None:
            params.scalars[id(tv)] = k.ScalarParam(tv.name, tv.dtype)
        else:
            params.arrays[id(tv)] = array_param(tv, input_strides.get(id(tv)))
    for tv in writes:
        # An input that is also an output (a copy, or written in place) gets a parameter of its own.
        param_name = f"{tv.name}_out" if id(tv) in params.arrays or tv.scalar is not None else tv.name
        params.writes[id(tv)] = k.ArrayParam(param_name, tv.dtype, tv.ndim, written_strides(tv))
    tasks = []
    for position, tv in enumerate(writes):
        em = ValueEmitter(ScopeStack(), params, cpu)
        tasks.append(_task_for(em, tv, params.writes[id(tv)], scheduled[id(tv)], f"{name}_t{position}_{tv.name}"))
        params.written.add(id(tv))
    extents = frozenset(p.name for p in params.symbols.values())
    return k.Kernel(name, params.ordered(), tuple(tasks), source=name, index_type=index, extents=extents), params
