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
    return tuple(1 if stride == 1 else None for stride in infer_layout(tv).strides)


def _task_for(em: ValueEmitter, tv: TensorView, param: k.ArrayParam, loops: ScheduledLoops, name: str) -> k.Task:
    """The task writing `tv`: a range over its scheduled parallel dimension (the outer axes merged,
    decomposed back into indices), with the innermost axis as a vectorized loop inside when the
    scheduler made it one."""
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
    merged = not loops.vectorized and len(order) > 1
    outer, inner = (list(loops.parallel_axes) if loops.vectorized or merged else []), order[-1]
    task_var = scopes.fresh("p", em.index)
    task_scope = scopes.push("task", {task_var})
    iterates = [not d.is_broadcast for d in tv.visible]  # a size-1 dimension never repeats work
    idx: list[k.Expr | None] = [None] * tv.ndim
    rest = task_var
    for n, axis in enumerate(reversed(outer)):  # decompose the flat task index, innermost first
        position = scopes.fresh("i", em.index)
        outermost = n == len(outer) - 1
        scopes.emit(k.Let(position, rest if outermost else index_op("remainder", rest, extents[axis])))
        task_scope.iteration |= {position} if iterates[axis] else set()
        idx[axis] = position
        rest = index_op("floordiv", rest, extents[axis])
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
    return k.Kernel(name, params.ordered(), tuple(tasks), source=name, index_type=index), params
