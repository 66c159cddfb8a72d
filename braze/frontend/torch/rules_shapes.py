"""Rules for the ATen ops that move, reduce or create elements: views, reductions, creation and
braze's keyed random numbers (`rng.py`; the pointwise ops are in `rules.py`).

Reads and writes by index tensors are in `rules_indexing.py`. Target shapes come from the node's recorded
shape, translated into braze extents, rather than from the op's size arguments: the two agree, and the
recorded one needs no arithmetic on symbolic sizes.
"""

from __future__ import annotations

import torch
from torch import fx

from braze import dtypes as dt
from braze import ops as bz_ops
from braze.frontend.torch.region_builder import RegionBuilder, bind, braze_dtype, meta
from braze.frontend.torch.rng import philox_random
from braze.frontend.torch.rules import aten, finish, rule
from braze.frontend.torch.symbols import sign_range, size_expr
from braze.ir.tensor import TensorView

_BIG = 2**62  # a slice end at or past this is "to the end" (torch writes sys.maxsize)


def _dims(dims: object, rank: int) -> list[int]:
    listed = [dims] if isinstance(dims, int) else list(dims)
    return [d % rank if rank else 0 for d in listed]


def _align(x: TensorView, rank: int) -> TensorView:
    """x with leading broadcast dimensions up to `rank` (NumPy's and torch's broadcasting)."""
    return bz_ops.broadcast(x, [True] * (rank - x.ndim) + [False] * x.ndim) if x.ndim < rank else x


# --- views ----------------------------------------------------------------------------------------
@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _reshape(b: RegionBuilder, node: fx.Node) -> TensorView:
    return bz_ops.reshape(b.tensor(node.args[0]), b.shape_of(node))


@rule(aten.permute.default)
def _permute(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(node.args[0])
    return bz_ops.permute(x, _dims(node.args[1], x.ndim))


@rule(aten.t.default, aten.transpose.int)
def _transpose(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(node.args[0])
    if x.ndim < 2:
        return x
    dim0, dim1 = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
    return bz_ops.transpose(x, dim0, dim1)


@rule(aten.expand.default)
def _expand(b: RegionBuilder, node: fx.Node) -> TensorView:
    shape = b.shape_of(node)
    return bz_ops.expand(_align(b.tensor(node.args[0]), len(shape)), shape)


@rule(torch.ops.prims.broadcast_in_dim.default)
def _broadcast_in_dim(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(node.args[0])
    return bz_ops.broadcast_in_dim(x, b.shape_of(node), list(node.args[2]))


@rule(aten.unsqueeze.default)
def _unsqueeze(b: RegionBuilder, node: fx.Node) -> TensorView:
    return bz_ops.unsqueeze(b.tensor(node.args[0]), node.args[1])


@rule(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(node.args[0])
    sizes = [size_expr(s) for s in meta(node.args[0]).shape]
    dims = range(x.ndim) if len(node.args) < 2 else _dims(node.args[1], x.ndim)
    return bz_ops.squeeze(x, [d for d in dims if sizes[d] == 1])  # torch leaves other sizes alone


def _bounds_from_the_start(node: fx.Node) -> str | None:
    """braze's slice reads a symbolic bound as a position from the start; a negative one counts from the
    end in torch (`x[:, :n]` with n = -1), which the guards may not settle."""
    args = bind(node)
    for name in ("start", "end"):
        bound = meta(args[name])
        if isinstance(bound, torch.SymInt) and not sign_range(bound)[0]:
            return f"a symbolic {name} that may be negative (counted from the end)"
    return None


@rule(aten.slice.Tensor, accepts=_bounds_from_the_start)
def _slice(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x = b.tensor(args["self"])
    dim = _dims(args["dim"], x.ndim)[0]
    bounds = [None if v is None or (isinstance(v, int) and v >= _BIG) else b.extent(v)
              for v in (args["start"], args["end"])]
    slices = [slice(None)] * x.ndim
    slices[dim] = slice(bounds[0], bounds[1], args["step"])
    return bz_ops.slice(x, slices)


@rule(aten.select.int)
def _select(b: RegionBuilder, node: fx.Node) -> TensorView:
    x, dim, index = b.tensor(node.args[0]), node.args[1], b.extent(node.args[2])
    dim = _dims(dim, x.ndim)[0]
    slices = [slice(None)] * x.ndim
    slices[dim] = slice(index, None if index == -1 else index + 1)
    return bz_ops.squeeze(bz_ops.slice(x, slices), [dim])


def _slice_starts_and_steps(node: fx.Node) -> list[tuple[int, int]] | str:
    """as_strided's view as a strided slice of its input, a (start, step) per dimension; or why it is none.
    Functionalization replays `chunk` and `split` (an LSTM's four gates, a GLU's halves) as as_strided,
    its offset counted from the storage's start: less the input's own offset, read as a position in
    the input's strides, largest first."""
    args = bind(node)
    x, sizes, strides = meta(args["self"]), list(args["size"]), list(args["stride"])
    offset = args.get("storage_offset") or 0
    numbers = [*sizes, *strides, offset, *x.shape, *x.stride(), x.storage_offset()]
    if not all(isinstance(v, int) for v in numbers):
        return "symbolic sizes, strides or offset"
    if len(sizes) != x.dim():
        return "a view of another rank than its input"
    rest, starts = offset - x.storage_offset(), [0] * x.dim()
    for d in sorted(range(x.dim()), key=lambda d: -x.stride(d)):
        if x.shape[d] > 1 and x.stride(d) > 0:
            starts[d], rest = divmod(rest, x.stride(d)) if rest >= 0 else (0, rest)
    steps = [1 if size == 1 else stride // x.stride(d) if x.stride(d) > 0 and stride % x.stride(d) == 0 else 0
             for d, (size, stride) in enumerate(zip(sizes, strides))]
    if rest != 0 or 0 in steps or any(size and start + (size - 1) * step >= extent
                                      for start, step, size, extent in zip(starts, steps, sizes, x.shape)):
        return "strides that are no slice of its input"
    return list(zip(starts, steps))


def _a_slice_of_its_input(node: fx.Node) -> str | None:
    why = _slice_starts_and_steps(node)
    return why if isinstance(why, str) else None


@rule(aten.as_strided.default, accepts=_a_slice_of_its_input)
def _as_strided(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(bind(node)["self"])
    sizes = meta(node).shape
    return bz_ops.slice(x, [slice(start, start + (size - 1) * step + 1, step)
                            for (start, step), size in zip(_slice_starts_and_steps(node), sizes)])


@rule(aten.cat.default)
def _cat(b: RegionBuilder, node: fx.Node) -> TensorView:
    dtype = braze_dtype(meta(node).dtype)
    rank = len(meta(node).shape)
    # torch skips 1-D empty tensors in a cat of higher rank (a legacy rule); so does this.
    parts = [bz_ops.cast(b.tensor(t), dtype) for t in node.args[0] if len(meta(t).shape) == rank]
    return bz_ops.cat(parts, _dims(node.args[1] if len(node.args) > 1 else 0, rank)[0])


def _static_padding(node: fx.Node) -> str | None:
    return None if all(isinstance(p, int) for p in node.args[1]) else "symbolic padding widths"


@rule(aten.constant_pad_nd.default, accepts=_static_padding)
def _pad(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x, pads = b.tensor(args["self"]), list(args["pad"])
    widths = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):  # torch lists the last dimension first
        widths[x.ndim - 1 - i] = (pads[2 * i], pads[2 * i + 1])
    crops = [slice(max(-lo, 0), None if hi >= 0 else hi) for lo, hi in widths]  # negative widths crop
    x = bz_ops.slice(x, crops) if any(lo < 0 or hi < 0 for lo, hi in widths) else x
    value = args["value"] if args["value"] is not None else 0
    return bz_ops.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in widths], value)


@rule(aten.flip.default)
def _flip(b: RegionBuilder, node: fx.Node) -> TensorView:
    x = b.tensor(node.args[0])
    return bz_ops.flip(x, _dims(node.args[1], x.ndim))


def _static_scatter(node: fx.Node) -> str | None:
    args = bind(node)
    if args["step"] != 1:
        return f"step {args['step']}"
    dim = args["dim"] % len(meta(node).shape)
    sizes = [size_expr(meta(node).shape[dim]), *[_bound(v) for v in (args["start"], args["end"])]]
    if not all(v is None or isinstance(v, int) for v in sizes):
        return "symbolic bounds"
    return None


def _bound(value: object) -> object:
    """A slice bound (None, an int, or a SymInt node: its recorded value) as None, an int or a sympy expression."""
    return None if value is None else size_expr(meta(value))


@rule(aten.slice_scatter.default, accepts=_static_scatter)
def _slice_scatter(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`base` with `src` written over base[start:end] along `dim`: src padded to base's extent, then
    chosen where the index lies in the slice."""
    args = bind(node)
    base, src = b.tensor(args["self"]), b.tensor(args["src"])
    dim = args["dim"] % base.ndim
    n = size_expr(meta(node).shape[dim])
    start, end, _ = slice(*[_bound(v) for v in (args["start"], args["end"])]).indices(n)
    end = max(end, start)
    widths = [(0, 0)] * base.ndim
    widths[dim] = (start, n - end)
    placed = bz_ops.pad(bz_ops.cast(src, base.dtype), widths, 0)
    index = bz_ops.arange(n)
    inside = bz_ops.logical_and(index >= start, index < end)
    inside = bz_ops.broadcast(inside, [d != dim for d in range(base.ndim)])
    return finish(node, bz_ops.where(inside, placed, base))


def _static_matrix(node: fx.Node) -> str | None:
    args = bind(node)
    shape = meta(args["self"]).shape
    dims = _dims([args["dim1"], args["dim2"]], len(shape))
    return None if all(isinstance(size_expr(shape[d]), int) for d in dims) else "a diagonal of symbolic extent"


def _diagonal_layout(node: fx.Node) -> tuple[list[int], int, int, int, int]:
    """How `diagonal` and `diagonal_scatter` find a diagonal: the permutation that moves dim1 and dim2
    last, the matrix's rows and columns, and where in the matrix flattened the diagonal starts and how
    long it is. Flattened, element k of the diagonal is at start + k * (columns + 1)."""
    args = bind(node)
    shape = meta(args["self"]).shape
    dim1, dim2 = _dims([args["dim1"], args["dim2"]], len(shape))
    rows, cols = size_expr(shape[dim1]), size_expr(shape[dim2])
    offset = args["offset"]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    order = [d for d in range(len(shape)) if d not in (dim1, dim2)] + [dim1, dim2]
    return order, rows, cols, (offset if offset >= 0 else -offset * cols) if length else 0, length


@rule(aten.diagonal.default, accepts=_static_matrix)
def _diagonal(b: RegionBuilder, node: fx.Node) -> TensorView:
    """The elements (i, i + offset) of dim1 and dim2 as a last dimension: every (columns + 1)-th element
    of the matrix flattened (the Laplacian of a Hessian, the diagonal of a covariance)."""
    order, rows, cols, start, length = _diagonal_layout(node)
    batch = b.shape_of(node)[:-1]
    flat = bz_ops.reshape(bz_ops.permute(b.tensor(node.args[0]), order), [*batch, rows * cols])
    stop = start + (length - 1) * (cols + 1) + 1 if length else start
    return bz_ops.slice(flat, [slice(None)] * len(batch) + [slice(start, stop, cols + 1)])


@rule(aten.diagonal_scatter.default, accepts=_static_matrix)
def _diagonal_scatter(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`self` with `src` written over its diagonal (diagonal's backward): src's elements each followed
    by `columns` zeros, flattened and shifted to the diagonal's start, are the matrix's diagonal."""
    order, rows, cols, start, length = _diagonal_layout(node)
    base = bz_ops.permute(b.tensor(node.args[0]), order)
    batch = base.ndim - 2
    if length == 0:
        return bz_ops.permute(base, _inverse(order))
    src = bz_ops.cast(b.tensor(node.args[1]), base.dtype)
    spread = bz_ops.pad(bz_ops.unsqueeze(src, -1), [(0, 0)] * (batch + 1) + [(0, cols)], 0)
    spread = bz_ops.reshape(spread, [*b.shape_of(node.args[1])[:-1], length * (cols + 1)])
    after = rows * cols - start - length * (cols + 1)  # negative: the last element's zeros run past the end
    if after < 0:
        spread = bz_ops.slice(spread, [slice(None)] * batch + [slice(0, after)])
    spread = bz_ops.pad(spread, [(0, 0)] * batch + [(start, max(after, 0))], 0)
    placed = bz_ops.reshape(spread, [*base.shape[:-2], rows, cols])
    row, col = bz_ops.arange(rows), bz_ops.arange(cols)
    on_diagonal = bz_ops.eq(bz_ops.broadcast(col, [True, False]) - bz_ops.broadcast(row, [False, True]),
                            bind(node)["offset"])
    chosen = bz_ops.where(_align(on_diagonal, base.ndim), placed, base)
    return finish(node, bz_ops.permute(chosen, _inverse(order)))


def _inverse(order: list[int]) -> list[int]:
    return sorted(range(len(order)), key=order.__getitem__)


# --- reductions -----------------------------------------------------------------------------------
REDUCTIONS = {  # ATen op -> braze reduction
    "sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min", "prod": "prod",
    "any": "any", "all": "all", "argmax": "argmax", "argmin": "argmin", "var": "var",
}
_REDUCTION_OVERLOADS = ("default", "dim_IntList", "dim", "dims", "dim_int", "correction")


def _whole_tensor_reduction(node: fx.Node) -> str | None:
    # max.dim and min.dim give values and indices: two outputs, which the partitioner cannot hand over.
    return "values and indices" if node.target._overloadname == "dim" and node.target._schema.name in (
        "aten::max", "aten::min") else None


def _reduce(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    x = b.tensor(args["self"])
    if args.get("dtype") is not None:
        x = bz_ops.cast(x, braze_dtype(args["dtype"]))
    dims = args.get("dim")
    axes = None if dims is None or dims == [] else _dims(dims, x.ndim)
    op = REDUCTIONS[node.target._schema.name.split("::")[1]]
    extra = {}
    if op == "var":
        correction = args.get("correction")
        extra["correction"] = 1 if correction is None else correction
    keepdim = bool(args.get("keepdim") or False)
    if x.ndim == 0:  # a reduction of a 0-d tensor is that tensor (its argmax is 0)
        return finish(node, bz_ops.full([], 0, braze_dtype(meta(node).dtype)) if op.startswith("arg") else x)
    return finish(node, getattr(bz_ops, op)(x, axes, keepdim=keepdim, **extra))


for _name in REDUCTIONS:
    _packet = getattr(aten, _name)
    rule(*[getattr(_packet, o) for o in _REDUCTION_OVERLOADS if o in _packet.overloads()],
         accepts=_whole_tensor_reduction)(_reduce)


@rule(aten.linalg_vector_norm.default)
def _vector_norm(b: RegionBuilder, node: fx.Node) -> TensorView:
    """The vector `ord`-norm over `dim` (F.normalize, cosine_similarity and pairwise_distance call it);
    half types in float32, as eager's kernel computes it."""
    args = bind(node)
    x = b.tensor(args["self"])
    if args.get("dtype") is not None:
        x = bz_ops.cast(x, braze_dtype(args["dtype"]))
    elif x.dtype.is_floating and x.dtype.itemsize == 2:
        x = bz_ops.cast(x, dt.float32)
    dims = args.get("dim")
    axes = None if dims is None or dims == [] else _dims(dims, x.ndim)
    return finish(node, x.norm(args.get("ord", 2), axes, bool(args.get("keepdim") or False)))


def _prims_reduce(op: str):
    def convert(b: RegionBuilder, node: fx.Node) -> TensorView:
        x, dims = b.tensor(node.args[0]), node.args[1]
        extra = {"correction": node.args[2]} if op == "var" else {}
        axes = None if dims is None else _dims(dims, x.ndim)
        return finish(node, getattr(bz_ops, op)(x, axes, **extra) if x.ndim else x)

    return convert


rule(torch.ops.prims.sum.default)(_prims_reduce("sum"))
rule(torch.ops.prims.var.default)(_prims_reduce("var"))
rule(torch.ops.prims.amax.default)(_prims_reduce("max"))
rule(torch.ops.prims.amin.default)(_prims_reduce("min"))


# Eager PyTorch's CPU scan kernels keep the running value in `acc_type<scalar_t, /*is_cuda=*/false>`:
# float64 for a float32 scan, so a running sum over thousands of elements stays within an ulp or two of
# the exact one (a float32 running value drifts ten times further). Its CUDA kernels keep float32's.
# Per device type, the dtypes a scan's running value widens to (braze's scans keep float32's).
SCAN_ACCUMULATORS: dict[str, dict[dt.DType, dt.DType]] = {"cpu": {dt.float32: dt.float64}}


@rule(aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default)
def _scan(b: RegionBuilder, node: fx.Node) -> TensorView:
    """`cumsum` / `cumprod` / `logcumsumexp` along `dim`, in `dtype` when one is given (else int64 for
    integers and bools, as braze's scans give; logcumsumexp takes floats only, as torch's), the running
    value as wide as eager's kernel on the node's device keeps it (`SCAN_ACCUMULATORS`)."""
    args = bind(node)
    x = b.tensor(args["self"])
    if args.get("dtype") is not None:
        x = bz_ops.cast(x, braze_dtype(args["dtype"]))
    accumulator = SCAN_ACCUMULATORS.get(meta(node).device.type, {}).get(x.dtype)
    if accumulator is not None:
        x = bz_ops.cast(x, accumulator)
    return finish(node, getattr(bz_ops, node.target._schema.name.split("::")[1])(x, args["dim"]))


# --- creation and random ------------------------------------------------------------------------
@rule(aten.full.default, aten.full_like.default, aten.scalar_tensor.default, aten.zeros.default,
      aten.ones.default, aten.zeros_like.default, aten.ones_like.default)
def _full(b: RegionBuilder, node: fx.Node) -> TensorView:
    name = node.target._schema.name.split("::")[1]
    fills = {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1}
    args = bind(node)
    value = fills[name] if name in fills else b.operand(args.get("fill_value", args.get("s")))
    dtype = braze_dtype(meta(node).dtype)
    return bz_ops.full(b.shape_of(node), _fill_as_eager_reads_it(value, dtype), dtype)


def _fill_as_eager_reads_it(value: object, dtype: dt.DType) -> object:
    """A fill value as eager PyTorch converts it: c10's overflow check lets a negative int down to -max
    through to an unsigned dtype, wrapped (`torch.full((2,), -1, dtype=torch.uint8)` and
    `torch.where(mask, uint8_image, -1)` give 255), where braze's `full` refuses it."""
    if dtype.is_unsigned and type(value) is int and -dt.int_bounds(dtype)[1] <= value < 0:
        return dt.wrap_int(value, dtype)
    return value


def _integer_range(node: fx.Node) -> str | None:
    args = bind(node)
    bounds = [args.get("start", 0), args.get("end"), args.get("step", 1)]
    if any(isinstance(v, float) for v in bounds) and all(isinstance(v, (int, float)) for v in bounds):
        # a float range has its length fixed by the trace (the node's shape)
        return None if meta(node).dtype.is_floating_point else "a range with float bounds of integer dtype"
    if not all(isinstance(v, int) or (isinstance(v, fx.Node) and isinstance(meta(v), torch.SymInt))
               for v in bounds if v is not None):
        return "a range with symbolic float bounds"
    return None if isinstance(bounds[2], int) else "a symbolic step"


@rule(aten.arange.start_step, aten.arange.default, aten.arange.start, accepts=_integer_range)
def _arange(b: RegionBuilder, node: fx.Node) -> TensorView:
    args = bind(node)
    start, step = args.get("start") or 0, args.get("step") or 1
    if isinstance(start, float) or isinstance(step, float) or isinstance(args["end"], float):
        return finish(node, _float_range(b.shape_of(node)[0], start, step))
    if isinstance(start, int):
        return finish(node, bz_ops.arange(start, b.extent(args["end"]), step))
    # braze's arange starts at an int: count from 0 and shift by the start, a number the region reads
    # (its bounds are numbers to torch, which it may not have as a size: carriers.py)
    steps = bz_ops.arange(0, b.shape_of(node)[0])
    return finish(node, (steps * step if step != 1 else steps) + b.operand(start))


def _float_range(length: int, start: float, step: float) -> TensorView:
    """`torch.arange(0, 1, 0.25)`, a diffusion model's frequencies over a float range: start + i * step in
    float64, rounded once to the output's dtype by `finish`. (Eager's vectorized CPU kernel adds the
    step to a base rounded per vector, so its values may differ from these in the last place.)"""
    steps = bz_ops.cast(bz_ops.arange(0, length), dt.float64)
    return steps * float(step) + float(start)


@rule(philox_random)
def _philox_random(b: RegionBuilder, node: fx.Node) -> TensorView:
    """Random numbers keyed by a seed the region reads and the op's offset (rng.py): the same
    numbers in the forward and in the backward that replays them."""
    seed, offset, _, _, _, normal = node.args
    draw = bz_ops.randn if normal else bz_ops.rand
    return draw(b.shape_of(node), braze_dtype(meta(node).dtype), seed=b.seed(seed), offset=offset)
