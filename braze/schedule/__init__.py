"""Segmentation and scheduling: which tensors get a task of their own, and each task's loop order,
applied as transforms to a loop domain of its own (`loops.py`).

On the CPU, outer reductions and normalizations (those whose innermost axis is kept) take column
strips instead (`loops.schedule_strips`): a task owns a strip of the innermost axis and walks the
reduced (or normalized) axes with unit-stride loops over the strip inside. Pointwise tasks that read
a tensor transposed (`x + y.T`; `transpose.py` says which) take tiles (`loops.schedule_tiles`), on the
CPU and on a GPU.

The plan starts with one task per fusion output. The lowering reports a reduction that would
be recomputed per output element (`NeedsCut`); the engine then adds it to `cuts`, and the plan
gives it a task of its own whose result later tasks read: the fewest cuts, found greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

from braze import config
from braze.ir.fusion import AliasKind, FusionGraph
from braze.ir.tensor import TensorView
from braze.ops.table import lookup
from braze.schedule.loops import TILE, ScheduledLoops, schedule_loops, schedule_strips, schedule_tiles
from braze.schedule.rows import flat_pointwise, row_axes
from braze.schedule.transpose import ReadLayouts, transposed_reads

# Ops through which a dimension keeps its position (so a broadcast dimension can be traced).
_POSITIONAL = {"elementwise", "cast"}
# Reductions the CPU's column strips accumulate lane by lane (braze/lower/strips.py).
STRIP_REDUCTIONS = frozenset({"sum", "prod", "max", "min", "mean", "var", "any", "all", "argmax", "argmin"})
# A normalization over several axes takes a task a channel, computing the channel's statistics and then
# its output, where a channel holds at most this many elements (the signature says: engine.signature).
# Its second pass then reads the channel from L2, and 2048 channels of 32 x 7 x 7 (ResNet-50's last
# stage) launch one kernel, not three. Longer channels are too few to fill a GPU a block each: their
# statistics are tasks of their own, split across blocks, and the output a pointwise task. On an H200,
# batch_norm over [32, 2048, 7, 7]: 46.7 -> 29.3 us; [32, 1024, 14, 14]: 51.7 -> 46.2; but
# [32, 512, 28, 28] (25,088 a channel) 58.7 -> 71.5 and [32, 256, 56, 56] 101 -> 190.
CHANNEL_ROW_LIMIT = 8192
# A GPU's tiles (codegen/cuda_tiles.py): 32 x 32, or 64 x 64 when every tensor read transposed has
# elements of 2 bytes or less. A warp then reads 64 of them, a whole 128-byte line, along the tensor's
# contiguous axis (32 would move 64 bytes a request), and each of a 256-thread block's threads has 16
# loads of 2 bytes in flight a tensor (4 of 4 bytes for float32's 32 x 32): ~32 bytes, as 4-wide row
# loops keep (codegen/cuda_rows.py, BYTES_IN_FLIGHT).
GPU_TILE, GPU_NARROW_TILE = 32, 64


@dataclass(frozen=True)
class Heuristics:
    """The frozen decisions for one task: its scheduler and its loop order (outer to inner)."""

    scheduler: str  # pointwise, reduction or normalization; outer_reduction, outer_normalization (CPU); transpose; scan
    loop_order: tuple[int, ...]
    # Whether the innermost axis is a loop inside each task index (else every axis is merged into
    # the task's range): see `heuristics_for`.
    vectorize: bool = True
    serial: tuple[int, ...] = ()  # outer_normalization: the axes each task walks whole (a reduction's)
    tile: int = 0  # transpose: the rows and columns of a tile (of the two innermost axes of loop_order)
    row_axes: int = 1  # pointwise: the trailing axes of loop_order merged into each task index's row (rows.py)
    flat: bool = False  # pointwise on a GPU: every axis one range read at the flat index (rows.flat_pointwise)


@dataclass(frozen=True)
class Plan:
    writes: tuple[TensorView, ...]  # in dependency order: cut intermediates first, then outputs
    heuristics: tuple[Heuristics, ...]
    loops: tuple[ScheduledLoops, ...]  # each write's heuristics applied as transforms

    @property
    def scheduled(self) -> dict[int, ScheduledLoops]:
        """The scheduled loop domain of each write, by tensor id: what lowering reads."""
        return {id(tv): loops for tv, loops in zip(self.writes, self.loops)}

    def text(self) -> str:
        """One line per task: the tensor, its heuristics and its scheduled loop domain."""
        return "\n".join(f"{tv.name}: {h.scheduler} loop_order={h.loop_order} loops={loops.text()}"
                         for tv, h, loops in zip(self.writes, self.heuristics, self.loops))


def _cone(tv: TensorView, read: frozenset[int] = frozenset()) -> list[TensorView]:
    """`tv` and every tensor it is computed from, producers first; tensors in `read` (ids of tensors
    an earlier task writes, which this one reads from memory) are taken as they are."""
    seen: dict[int, TensorView] = {}

    def visit(t: TensorView) -> None:
        if id(t) in seen:
            return
        if t is tv or id(t) not in read:
            for inp in t.definition.inputs if t.definition else ():
                visit(inp)
        seen[id(t)] = t

    visit(tv)
    return list(seen.values())


def _is_reduction(tv: TensorView) -> bool:
    return tv.definition is not None and lookup(tv.definition.op).category == "reduction"


def _reduced_broadcast_dims(tv: TensorView) -> set[int]:
    """Dimensions of `tv` along which a reduction's result is broadcast back (softmax's row axis)."""
    dims: set[int] = set()
    for t in _cone(tv):
        expr = t.definition
        if expr is None or expr.op != "broadcast" or not any(_is_reduction(c) for c in _cone(expr.inputs[0])):
            continue
        if t.ndim == tv.ndim and _positional_path(t, tv):
            dims |= {i for i, new in enumerate(expr.attrs["is_new"]) if new}
    return dims


def _positional_path(source: TensorView, target: TensorView) -> bool:
    """Whether `target` reaches `source` only through ops that keep dimension positions."""
    if target is source:
        return True
    expr = target.definition
    if expr is None or lookup(expr.op).category not in _POSITIONAL and expr.op != "expand":
        return False
    return any(_positional_path(source, inp) for inp in expr.inputs if inp.ndim == target.ndim)


def heuristics_for(tv: TensorView, gpu: bool = False, cpu: bool = False, reads: ReadLayouts | None = None,
                   flat: bool = True, channel_rows: bool = False) -> Heuristics:
    """Loop order: a chosen layout first; else the dimensions a reduction is broadcast along go inside.

    On a GPU (`gpu`), a task computing reductions with no axis they are broadcast back along (a sum
    over the middle axis of a 3-D tensor) merges every axis of its output into the task's range: its
    neighbouring task indices then read neighbouring elements, which the CUDA backend's outer
    reduction schedule spreads over a block's threads with the reduced rows split across blocks.
    A loop over the innermost output axis inside each task index would leave only the outer
    axes to spread over the GPU.

    On the CPU (`cpu`), a reduction or normalization that keeps the innermost axis takes column
    strips: the innermost axis stays innermost (unit stride, vectorized) and the reduced axes are
    walked inside each task, instead of being the inner loop with a stride. On both, a pointwise
    task that reads a tensor transposed (`reads`: how the tensors it reads are laid out) takes tiles
    (`_tiles`).

    On a GPU, a task whose reductions are all among the tensors earlier tasks write (`reads.written`:
    group_norm's and batch_norm's normalization, reading statistics another task computed) is
    pointwise: its rows are the innermost axis, read 16 bytes at a time, whatever axes the statistics
    were broadcast along. A normalization over several axes (batch_norm's N, H and W) is one row a
    channel, its statistics computed in the task, where `channel_rows` (the signature's
    `channel_rows_fit`); else its statistics are cut into tasks of their own.

    On both, a pointwise task's rows may span several trailing axes (`rows.row_axes`: per-channel
    statistics broadcast along H and W give rows of H * W). On a GPU, with `flat`, one whose arrays
    all lie row-major with no broadcast is one flat range (`rows.flat_pointwise`)."""
    if tv.definition is not None and lookup(tv.definition.op).category == "scan":
        return _scan_heuristics(tv)
    read = reads.written if gpu and reads is not None else frozenset()
    cone = _cone(tv, read)
    if not any(_is_reduction(t) for t in cone if id(t) not in read):
        scheduler = "pointwise"
    else:
        scheduler = "reduction" if _is_reduction(tv) else "normalization"
    inner = _reduced_broadcast_dims(tv) if scheduler == "normalization" else set()
    vectorize = not (gpu and scheduler != "pointwise" and not inner)
    laid_out = tv.stride_order is not None
    order = tuple(sorted(range(tv.ndim), key=lambda i: -tv.stride_order[i])) if laid_out else None
    if (cpu or gpu) and scheduler == "pointwise" and tv.ndim >= 2 and (laid_out or tv.has_default_allocation):
        tiles = _tiles(tv, order or tuple(range(tv.ndim)), gpu, reads or ReadLayouts())
        if tiles is not None:
            return tiles
    if laid_out:
        return Heuristics(scheduler, order, vectorize)
    if cpu and _takes_strips(tv, scheduler, inner):
        serial = tuple(sorted(inner))
        rest = tuple(i for i in range(tv.ndim - 1) if i not in inner)
        return Heuristics(f"outer_{scheduler}", rest + serial + (tv.ndim - 1,), vectorize, serial)
    order = tuple(i for i in range(tv.ndim) if i not in inner) + tuple(sorted(inner))
    if flat and gpu and scheduler == "pointwise" and reads is not None and flat_pointwise(tv, reads, cone):
        return Heuristics(scheduler, order, vectorize=False, flat=True)
    rows = row_axes(tv, reads, cone) if (cpu or gpu) and scheduler == "pointwise" and reads is not None else 1
    if gpu and scheduler == "normalization" and len(inner) > 1 and channel_rows and not config.disabled("channel_rows"):
        rows = len(inner)  # a task a channel: its statistics, then its output (see CHANNEL_ROW_LIMIT)
    return Heuristics(scheduler, order, vectorize, row_axes=rows)


def _scan_heuristics(tv: TensorView) -> Heuristics:
    """A scan's task (lower/scans.py): every other axis in the task's range, the scanned axis walked
    serially inside each task index, innermost."""
    axis = tv.definition.attrs["axis"]
    return Heuristics("scan", tuple(a for a in range(tv.ndim) if a != axis) + (axis,), vectorize=False)


def _tiles(tv: TensorView, order: tuple[int, ...], gpu: bool, reads: ReadLayouts) -> Heuristics | None:
    """Tiles for a pointwise task written along `order` that reads a tensor transposed: the axis that
    tensor is contiguous along becomes the tiles' rows (second to last in the loop order; of several
    such axes, the one most bytes an element are read along), the output's innermost axis their
    columns. On a GPU, narrow elements take wider tiles (GPU_NARROW_TILE)."""
    transposed = transposed_reads(tv, order[-1], reads.unit_axis, reads.is_read)
    if not transposed:
        return None
    along: dict[int, int] = {}
    for t, axis in transposed:
        along[axis] = along.get(axis, 0) + t.dtype.itemsize
    row = max(along, key=along.get)
    tile = TILE
    if gpu:
        tile = GPU_NARROW_TILE if all(t.dtype.itemsize <= 2 for t, _ in transposed) else GPU_TILE
    loop_order = tuple(a for a in order[:-1] if a != row) + (row, order[-1])
    return Heuristics("transpose", loop_order, tile=tile)


def _takes_strips(tv: TensorView, scheduler: str, inner: set[int]) -> bool:
    """Whether the innermost axis of `tv` is kept by its reductions, so tasks may own strips of it."""
    if tv.ndim == 0 or tv.visible[-1].is_broadcast:
        return False
    if scheduler == "normalization" and not inner:  # reductions under pointwise ops (a cast of a column sum)
        return all(_keeps_innermost(t) for t in _cone(tv) if _is_reduction(t))
    if scheduler == "normalization":
        return tv.ndim - 1 not in inner
    if scheduler != "reduction" or tv.definition.op not in STRIP_REDUCTIONS:
        return False
    x = tv.definition.inputs[0]
    return x.ndim >= 2 and x.ndim - 1 not in tv.definition.attrs["axes"]


def _keeps_innermost(reduction: TensorView) -> bool:
    """A strip reduction that keeps its input's innermost axis (walks the rows of each column)."""
    x = reduction.definition.inputs[0]
    return (reduction.definition.op in STRIP_REDUCTIONS and x.ndim >= 2
            and x.ndim - 1 not in reduction.definition.attrs["axes"])


def _loops_for(tv: TensorView, h: Heuristics) -> ScheduledLoops:
    if h.scheduler.startswith("outer_"):
        return schedule_strips(tv, h.loop_order, len(h.serial))
    if h.scheduler == "transpose":
        return schedule_tiles(tv, h.loop_order, h.tile)
    return schedule_loops(tv, h.loop_order, h.vectorize, h.row_axes, h.flat)


def outputs_needing_kernels(fusion: FusionGraph, views_on_host: bool = True) -> list[TensorView]:
    """Outputs computed by a task: all but views of inputs (`evaluate`) when the host can make
    those, each tensor once."""
    writes: dict[int, TensorView] = {}
    for out in fusion.outputs:
        if out.alias is not AliasKind.EVALUATE or not views_on_host:
            writes.setdefault(id(out.tv), out.tv)
    return list(writes.values())


def plan(fusion: FusionGraph, cuts: set[int], views_on_host: bool = True, gpu: bool = False, cpu: bool = False,
         unit_axes: dict[int, int | None] | None = None, dense: frozenset[int] = frozenset(),
         channel_rows: bool = False) -> Plan:
    """Tasks for the cut intermediates (in definition order) and then for the outputs: scheduled for
    a GPU with `gpu`; with `cpu`, outer reductions and normalizations take the CPU's column strips.
    `unit_axes`: the unit-stride axis of each input (by id) at this signature, `dense`: the inputs (ids)
    whose elements sit at their flat index (see ReadLayouts); `channel_rows`: see heuristics_for."""
    outputs = outputs_needing_kernels(fusion, views_on_host)
    output_ids = {id(t) for t in outputs}
    cut_tensors = [out for e in fusion.exprs for out in e.outputs if id(out) in cuts and id(out) not in output_ids]
    position = {id(out): n for n, e in enumerate(fusion.exprs) for out in e.outputs}
    # Producers first, so a later task reads what an earlier one wrote instead of recomputing it.
    writes = tuple(sorted(cut_tensors + outputs, key=lambda t: position.get(id(t), -1)))
    layouts = [ReadLayouts(unit_axes or {}, frozenset(map(id, writes[:n])), dense) for n in range(len(writes))]
    heuristics = tuple(heuristics_for(tv, gpu, cpu, reads, channel_rows=channel_rows)
                       for tv, reads in zip(writes, layouts))
    if any(h.flat for h in heuristics) and (config.disabled("flat_pointwise") or not all(h.flat for h in heuristics)):
        # Flat tasks only where every task is one: a row task beside them (a norm of the sum they
        # write) takes their rows in instead (passes/fold_rows.py, engine._merged_row_tasks).
        heuristics = tuple(heuristics_for(tv, gpu, cpu, reads, flat=False, channel_rows=channel_rows)
                           for tv, reads in zip(writes, layouts))
    return Plan(writes, heuristics, tuple(_loops_for(tv, h) for tv, h in zip(writes, heuristics)))


def channel_row_sizes(fusion: FusionGraph) -> list:
    """The elements a row holds, as extents of the inputs, for each reduction over several axes
    (batch_norm's statistics of a channel over N, H and W; a norm over the last two axes), whose
    normalization takes a task a row only where the row is short (CHANNEL_ROW_LIMIT)."""
    sizes = []
    for expr in fusion.exprs:
        if lookup(expr.op).category != "reduction" or not expr.inputs:
            continue
        x, axes = expr.inputs[0], sorted(expr.attrs.get("axes") or ())
        if len(axes) < 2:
            continue
        size = x.shape[axes[0]]
        for a in axes[1:]:
            size = size * x.shape[a]
        sizes.append(size)
    return sizes


def kernel_tensors(writes: tuple[TensorView, ...]) -> dict[int, TensorView]:
    """Every tensor a kernel writing `writes` computes or reads (the writes' cones), producers first."""
    return {id(t): t for tv in writes for t in _cone(tv)}


def _same_index_path(source: TensorView, target: TensorView, kernel: dict[int, TensorView]) -> bool:
    """Whether every tensor of the kernel computed from `source` is `target` or leads only to it,
    through elementwise ops and casts of one rank: element i of `target` then reads element i of
    `source` and nothing else does, so `target` may overwrite `source` as it goes."""
    derived = {id(source)}
    for tv in kernel.values():  # producers first, so a tensor's inputs are classified before it
        expr = tv.definition
        if expr is None or not any(id(i) in derived for i in expr.inputs):
            continue
        if lookup(expr.op).category not in _POSITIONAL or tv.ndim != source.ndim:
            return False
        derived.add(id(tv))
    return id(target) in derived


def in_place_outputs(fusion: FusionGraph, plan: Plan) -> frozenset[int]:
    """The `reuse_buffer` outputs (ids of their tensors) the kernel may write straight into their
    input instead of into a buffer copied back afterwards.

    That takes a pointwise task whose output reads its input only at the element it writes, and no
    other task that reads the input (it would see the new values). Reductions are left out: their
    tasks store row caches into the output (passes/output_cache.py) before reading the input.
    """
    kernel = kernel_tensors(plan.writes)
    scheduler = {id(tv): h.scheduler for tv, h in zip(plan.writes, plan.heuristics)}
    found = set()
    for out in fusion.outputs:
        tv, source = out.tv, out.aliased_input
        if out.alias is not AliasKind.REUSE_BUFFER or scheduler.get(id(tv)) != "pointwise":
            continue
        if tv.definition is None or tv.dtype != source.dtype or not tv.has_default_allocation:
            continue
        if sum(o.tv is tv for o in fusion.outputs) > 1:  # also returned as a new buffer of its own
            continue
        readers = [w for w in plan.writes if w is not tv and any(t is source for t in _cone(w))]
        if not readers and _same_index_path(source, tv, kernel):
            found.add(id(tv))
    return frozenset(found)
