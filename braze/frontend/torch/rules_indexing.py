"""Rules for the ATen ops that read or write elements where index tensors point: gather, scatter of a few
indices a row, index_select (torch.roll), advanced indexing (F.interpolate, reflect padding), embedding
lookups and `unfold`. Each read is a one-hot sum over the indexed row, which both backends turn into a
read of the one element (passes/one_hot.py); an index out of range gives `take`'s fill where eager raises.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import fx

from braze import dtypes as dt
from braze import ops as bz_ops
from braze.frontend.torch.region_builder import RegionBuilder, bind, meta
from braze.frontend.torch.rules import aten, finish, rule
from braze.frontend.torch.rules_shapes import _align, _dims
from braze.ir.tensor import TensorView
from braze.ops import view_composites


def _few_indices_a_row(node: fx.Node) -> str | None:
    """scatter of a value at a few indices a row along `dim` (the input's extents elsewhere): a
    cross-entropy gradient's one-hot, banned tokens set to -inf before sampling."""
    args = bind(node)
    source, index = meta(args["self"]), meta(args["index"])
    dim = args["dim"] % max(source.dim(), 1)
    if source.dim() == 0 or index.dim() != source.dim():
        return "an index of another rank"
    if not isinstance(index.shape[dim], int) or index.shape[dim] > MAX_SCATTERED_A_ROW:
        return f"more than {MAX_SCATTERED_A_ROW} indices a row"
    if any(str(index.shape[d]) != str(source.shape[d]) for d in range(source.dim()) if d != dim):
        return "an index narrower than the input"
    return None


# Each index a row costs a comparison at every element of the row.
MAX_SCATTERED_A_ROW = 16


def _is_index(b: RegionBuilder, node: fx.Node) -> TensorView:
    """Where the element's position along `dim` is one of its row's indices."""
    args = bind(node)
    source, index = b.tensor(args["self"]), b.tensor(args["index"])
    dim = args["dim"] % source.ndim
    if index.shape[dim].is_const and index.shape[dim].value == 1:  # the one-hot passes/one_hot.py reads
        return bz_ops.eq(_positions(source, index, dim), index)
    return bz_ops.any(_hits(source, index, dim), axes=[-1])


def _positions(source: TensorView, index: TensorView, dim: int) -> TensorView:
    """Each element's position along `dim`, in the index's dtype."""
    position = bz_ops.arange(source.shape[dim])  # braze's extent: a symbolic size stays symbolic
    return bz_ops.broadcast(bz_ops.cast(position, index.dtype), [d != dim for d in range(source.ndim)])


def _along_a_new_last_axis(x: TensorView, dim: int) -> TensorView:
    """x's `dim` moved to a new last axis, a 1 left in its place."""
    return bz_ops.unsqueeze(bz_ops.permute(x, [d for d in range(x.ndim) if d != dim] + [dim]), dim)


def _hits(source: TensorView, index: TensorView, dim: int) -> TensorView:
    """Each element's position against each of its row's indices, which lie along a new last axis."""
    return bz_ops.eq(bz_ops.unsqueeze(_positions(source, index, dim), -1), _along_a_new_last_axis(index, dim))


def _index_of_the_same_rank(node: fx.Node) -> str | None:
    args = bind(node)
    source, index = meta(args["self"]), meta(args["index"])
    return None if source.dim() > 0 and index.dim() == source.dim() else "an index of another rank"


@rule(aten.gather.default, accepts=_index_of_the_same_rank)
def _gather(b: RegionBuilder, node: fx.Node) -> TensorView:
    """x[..., index, ...] along `dim`, any number of indices a row: each a one-hot sum over its row,
    which the code generators turn into a read of that element (passes/one_hot.py)."""
    args = bind(node)
    return finish(node, view_composites.gather(b.tensor(args["self"]), args["dim"], b.tensor(args["index"])))


def _a_tensor_to_select_from(node: fx.Node) -> str | None:
    return None if meta(bind(node)["self"]).dim() > 0 else "a 0-d input"


@rule(aten.index_select.default, accepts=_a_tensor_to_select_from)
def _index_select(b: RegionBuilder, node: fx.Node) -> TensorView:
    """The slices of `dim` a 1-d (or 0-d) index names, in its order: what `torch.roll` (Swin's shifted
    windows) decomposes into, with the index computed beside it. Picked as gather picks (a one-hot
    sum each backend reads as one element); an index out of range gives gather's fill where eager raises."""
    args = bind(node)
    x, index = b.tensor(args["self"]), b.tensor(args["index"])
    return finish(node, view_composites.take(x, bz_ops.reshape(index, [-1]), _dims(args["dim"], x.ndim)[0]))


def _integer_indices_of_static_dims(node: fx.Node) -> str | None:
    args = bind(node)
    source, indices = meta(args["self"]), list(args["indices"])
    picked = [d for d, index in enumerate(indices) if index is not None]
    if not picked:
        return "no index tensor"
    for d in picked:
        if meta(indices[d]).dtype in (torch.bool, torch.uint8):
            return "a boolean mask (its result's size depends on the values)"
        if not isinstance(source.shape[d], int):
            return "an indexed dimension of symbolic extent"
    return None


@rule(aten.index.Tensor, aten._unsafe_index.Tensor, accepts=_integer_indices_of_static_dims)
def _index(b: RegionBuilder, node: fx.Node) -> TensorView:
    """x[..., i, j, ...] with integer index tensors (NumPy's advanced indexing), what F.interpolate, reflect
    and replicate padding and `x[torch.arange(n), last]` (CLIP's end-of-text token) decompose into: the
    indexed dimensions merged into one, read at the linear position of each broadcast index tuple by
    `take` (one element per output, as gather reads it). The broadcast indices replace the indexed
    dimensions where these are adjacent, else lead, as in NumPy; an index out of range gives take's fill
    where eager raises."""
    args = bind(node)
    x, indices = b.tensor(args["self"]), list(args["indices"])
    picked = [d for d, index in enumerate(indices) if index is not None]
    others = [d for d in range(x.ndim) if d not in picked]
    extents = [meta(args["self"]).shape[d] for d in picked]
    rank = max(len(meta(indices[d]).shape) for d in picked)
    linear = None
    for d, extent in zip(picked, extents):
        index = _align(bz_ops.cast(b.tensor(indices[d]), dt.int64), rank)
        index = bz_ops.where(index < 0, index + extent, index)
        linear = index if linear is None else linear * extent + index
    rows = bz_ops.reshape(bz_ops.permute(x, picked + others), [int(np.prod(extents)), *[x.shape[d] for d in others]])
    taken = view_composites.take(rows, linear, 0)  # the broadcast index dims, then `others`
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    if not adjacent or picked[0] == 0:
        return finish(node, taken)
    before = picked[0]  # dims of x ahead of the indexed ones go back in front
    order = [*range(rank, rank + before), *range(rank), *range(rank + before, taken.ndim)]
    return finish(node, bz_ops.permute(taken, order))


def _rows_of_static_count(node: fx.Node) -> str | None:
    return None if isinstance(meta(node.args[0]).shape[0], int) else "a table of a symbolic number of rows"


@rule(aten.embedding.default, accepts=_rows_of_static_count)
def _embedding(b: RegionBuilder, node: fx.Node) -> TensorView:
    """The table's rows at the indices (`padding_idx` matters to the backward only), read by `take`, so
    BERT's word, position and type embeddings and their LayerNorm make one region."""
    return finish(node, view_composites.take(b.tensor(node.args[0]), b.tensor(node.args[1]), 0))


def _static_windows(node: fx.Node) -> str | None:
    source, (dim, size, step) = meta(node.args[0]), node.args[1:4]
    if source.dim() == 0 or not all(isinstance(v, int) for v in (source.shape[dim], size, step)):
        return "a 0-d input or symbolic windows"
    return None


@rule(aten.unfold.default, accepts=_static_windows)
def _unfold(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`x.unfold(dim, size, step)`, windows of `size` every `step` along `dim` in a new last dimension (a
    ViT's patches, an audio model's frames): element k of window i is x[i * step + k], read by `take`."""
    x, (dim, size, step) = b.tensor(node.args[0]), node.args[1:4]
    dim = _dims(dim, x.ndim)[0]
    windows = meta(node).shape[dim]
    starts = bz_ops.unsqueeze(bz_ops.arange(0, windows * step, step), 1)
    taken = view_composites.take(x, starts + bz_ops.unsqueeze(bz_ops.arange(0, size), 0), dim)
    return finish(node, bz_ops.permute(taken, [d for d in range(taken.ndim) if d != dim + 1] + [dim + 1]))


@rule(aten.scatter.value, accepts=_few_indices_a_row)
def _scatter_value(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`self` with `value` written at each row's index along `dim`."""
    args = bind(node)
    source = b.tensor(args["self"])
    return finish(node, bz_ops.where(_is_index(b, node), args["value"], source))


def _few_sources_a_row(node: fx.Node) -> str | None:
    """scatter of `src` at a few indices a row (a MoE router's gates at its top-k experts)."""
    why = _few_indices_a_row(node)
    if why is None and meta(bind(node)["src"]).dim() != meta(bind(node)["index"]).dim():
        return "a source of another rank than the index"
    return why


@rule(aten.scatter.src, accepts=_few_sources_a_row)
def _scatter_src(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`self` with `src[..., j, ...]` written where each row's index j points along `dim`: each element
    compares its position with its row's indices; where two point at one element, the larger source
    wins (torch leaves the choice open)."""
    args = bind(node)
    source, index = b.tensor(args["self"]), b.tensor(args["index"])
    dim = args["dim"] % source.ndim
    src = bz_ops.slice_tensor(b.tensor(args["src"]), [slice(0, e) for e in index.shape])  # torch reads its corner
    hits, candidates = _hits(source, index, dim), _along_a_new_last_axis(src, dim)
    if src.dtype == dt.bool_:
        written = bz_ops.any(bz_ops.where(hits, candidates, False), axes=[-1])
    else:
        lowest = -float("inf") if src.dtype.is_floating else int(np.iinfo(src.dtype.numpy).min)
        written = bz_ops.max(bz_ops.where(hits, candidates, lowest), axes=[-1])
    return finish(node, bz_ops.where(bz_ops.any(hits, axes=[-1]), bz_ops.cast(written, source.dtype), source))
