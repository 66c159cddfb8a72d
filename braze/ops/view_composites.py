"""Views that model code writes, each built from the primitive views of `braze/ops/views.py` (slice,
cat, broadcast, expand, reshape) and `where`, so the pointwise scheduler fuses them with their
neighbours: split, chunk, unbind, stack, repeat, tile, repeat_interleave, roll, tril, triu, narrow,
flatten, unflatten, masked_fill, take_along_axis (and torch's gather) and the matrix transpose
(`x.mT`). Their torch-style method spellings are
installed by `braze/ops/torch_methods.py`.

Pieces (split, chunk, unbind) are slices. Their number is fixed when the fusion is defined, so a
split into pieces of a given size, and unbind, need the extent known then; chunk over a symbolic
extent gives `chunks` pieces and checks at run time that torch gives as many.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import numpy as np

from braze import dtypes as dt
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir.fusion import defining
from braze.ir.scalar import Scalar, as_scalar, ceildiv, concrete_value, smax, smin
from braze.ir.tensor import TensorView, normalize_axis
from braze.ops import reductions as red
from braze.ops.broadcast import broadcast, expand
from braze.ops.creation import arange
from braze.ops.elementwise import cast, elementwise, not_a_tensor
from braze.ops.reductions import keyword_aliases
from braze.ops.views import cat, flip, permute, reshape, slice_tensor, transpose, unsqueeze


def tensor_arg(op: str, x: object) -> TensorView:
    """x, checked to be a TensorView of the fusion being defined (an argument of `op`)."""
    if not isinstance(x, TensorView):
        raise not_a_tensor(op, x)
    return x


def _count(op: str, what: str, value: object, minimum: int = 0) -> int:
    """An int argument of at least `minimum` (a size, a count, a repeat): an extent (`x.shape[1] // 2`) is
    its number where it has one, as in a @bz.jit trace, which then serves that size alone."""
    if isinstance(value, Scalar):
        value = _number(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise FusionDefinitionError(f"{op}: {what}: expected an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise FusionDefinitionError(f"{op}: {what}: expected {kind} int, got {value}")
    return value


def _axis(op: str, x: TensorView, axis: int) -> int:
    if x.ndim == 0:
        raise FusionDefinitionError(f"{op}: expected a tensor of rank >= 1, got {x.describe()} of rank 0")
    return normalize_axis(axis, x.ndim, f"{op} axis")


def _number(extent: Scalar) -> int | Scalar:
    value = concrete_value(extent)  # a static extent, or one whose size a @bz.jit trace specializes on
    return extent if value is None else value


def _static_extent(op: str, x: TensorView, axis: int, why: str) -> int:
    extent = _number(x.shape[axis])
    if isinstance(extent, Scalar):
        raise FusionDefinitionError(
            f"{op}: dimension {axis} of {x.describe()}: expected an extent known when the fusion is defined "
            f"({why}), got the symbolic extent {extent}; define that dimension with a static extent")
    return extent


def _along(x: TensorView, axis: int, start: int | Scalar, stop: int | Scalar | None) -> TensorView:
    return slice_tensor(x, [slice(None)] * axis + [slice(start, stop)])


def _pieces(x: TensorView, axis: int, sizes: Sequence[int | Scalar]) -> tuple[TensorView, ...]:
    """Consecutive slices of the given sizes along `axis`."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(_along(x, axis, start, start + size))
        start = start + size
    return tuple(pieces)


# --- split, chunk, unbind -----------------------------------------------------------------------
@keyword_aliases(axis=("dim",))
def split(x: TensorView, split_size_or_sections: int | Sequence[int], axis: int = 0) -> tuple[TensorView, ...]:
    """torch's `split`: an int is the size of each piece (the last may be smaller), a list the size of
    every piece (they must add up to the extent). Pieces of a fixed size need a static extent."""
    x = tensor_arg("split", x)
    axis = _axis("split", x, axis)
    extent = x.shape[axis]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [_count("split", f"split_size_or_sections[{i}]", s) for i, s in enumerate(split_size_or_sections)]
        total = sum(sizes)
        if extent.is_const and total != extent.value:
            raise FusionDefinitionError(
                f"split: split_size_or_sections: expected sizes that add up to the extent {extent.value} of "
                f"dimension {axis} of {x.describe()}, got {list(sizes)} (sum {total})")
        x.fusion.require_equal(extent, as_scalar(total), f"split: sizes {list(sizes)} of dimension {axis} of "
                                                         f"{x.describe()} must add up to its extent")
        return _pieces(x, axis, sizes)
    size = _count("split", "split_size_or_sections", split_size_or_sections, minimum=1)
    n = _static_extent("split", x, axis, "the number of pieces of a fixed size depends on it; a list of sizes "
                                         "works on a symbolic extent")
    count = max(-(-n // size), 1)  # torch gives one (empty) piece of an empty dimension
    return _pieces(x, axis, [size] * count)


@keyword_aliases(axis=("dim",))
def chunk(x: TensorView, chunks: int, axis: int = 0) -> tuple[TensorView, ...]:
    """torch's `chunk`: pieces of ceil(extent / chunks), the last smaller (so there may be fewer than
    `chunks`). Over a symbolic extent there are `chunks` pieces, and a run whose extent would give
    torch fewer is refused."""
    x = tensor_arg("chunk", x)
    chunks = _count("chunk", "chunks", chunks, minimum=1)
    axis = _axis("chunk", x, axis)
    n = x.shape[axis]
    if n.is_const:
        if n.value == 0:
            return tuple(_along(x, axis, 0, 0) for _ in range(chunks))
        return split(x, -(-n.value // chunks), axis)
    size = ceildiv(n, chunks)
    last_start = size * (chunks - 1)
    # torch gives `chunks` pieces when the last one starts inside the dimension (or it is empty).
    x.fusion.require_equal(smin(last_start + 1, smax(n, 1)), last_start + 1,
                           f"chunk: dimension {axis} of {x.describe()} into {chunks} pieces of ceil(extent / "
                           f"{chunks}) elements: the last piece must not be empty (start + 1 <= extent)")
    return tuple(_along(x, axis, size * i, size * (i + 1) if i + 1 < chunks else None) for i in range(chunks))


@keyword_aliases(axis=("dim",))
def unbind(x: TensorView, axis: int = 0) -> tuple[TensorView, ...]:
    """The slices of x along `axis`, that axis removed (torch's `unbind`); needs a static extent."""
    x = tensor_arg("unbind", x)
    axis = _axis("unbind", x, axis)
    n = _static_extent("unbind", x, axis, "it is the number of slices")
    return tuple(x[(slice(None),) * axis + (i,)] for i in range(n))


# --- stack, repeat, tile, repeat_interleave ------------------------------------------------------
@keyword_aliases(axis=("dim",))
def stack(tensors: Sequence[TensorView], axis: int = 0) -> TensorView:
    """Joins tensors of one shape along a new axis (NumPy's and torch's `stack`); the dtype is their
    promoted type."""
    if isinstance(tensors, TensorView) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise FusionDefinitionError(f"stack: tensors: expected a non-empty list of TensorViews, got {tensors!r}")
    tensors = [tensor_arg("stack", t) for t in tensors]
    ranks = [t.ndim for t in tensors]
    if len(set(ranks)) != 1:
        raise FusionDefinitionError(f"stack: tensors: expected tensors of one rank, got ranks {ranks}")
    axis = normalize_axis(axis, ranks[0] + 1, "stack axis")
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        for d in range(first.ndim):
            why = f"stack: dimension {d} of tensors[0] {first.describe()} and tensors[{i}] {t.describe()} must match"
            first.fusion.require_equal(first.shape[d], t.shape[d], why)
    return cat([unsqueeze(t, axis) for t in tensors], axis)


def _sizes_arg(op: str, sizes: Sequence[int]) -> list[int]:
    if isinstance(sizes, int) and not isinstance(sizes, bool):
        sizes = [sizes]
    if not isinstance(sizes, (list, tuple)):
        raise FusionDefinitionError(f"{op}: sizes: expected a sequence of ints, got {sizes!r}")
    return [_count(op, f"sizes[{i}]", s) for i, s in enumerate(sizes)]


def repeat(x: TensorView, sizes: Sequence[int]) -> TensorView:
    """torch's `x.repeat(*sizes)`: the whole tensor repeated `sizes[i]` times along axis i; more sizes
    than dimensions add leading ones. One broadcast, expand and reshape."""
    x = tensor_arg("repeat", x)
    sizes = _sizes_arg("repeat", sizes)
    if len(sizes) < x.ndim:
        raise FusionDefinitionError(f"repeat: sizes: expected at least {x.ndim} sizes for {x.describe()} of rank "
                                    f"{x.ndim}, got {len(sizes)}")
    x = broadcast(x, [True] * (len(sizes) - x.ndim) + [False] * x.ndim)
    if all(r == 1 for r in sizes):
        return x
    # (r0, n0, r1, n1, ...) read row-major is each axis's copies one after another.
    interleaved = broadcast(x, [i % 2 == 0 for i in range(2 * x.ndim)])
    grown = expand(interleaved, [r if i % 2 == 0 else -1 for i, r in enumerate(_pairs(sizes))])
    return reshape(grown, [r * n for r, n in zip(sizes, x.shape)])


def _pairs(sizes: Sequence[int]) -> list[int]:
    return [v for r in sizes for v in (r, -1)]


def tile(x: TensorView, reps: int | Sequence[int]) -> TensorView:
    """NumPy's `tile` (and torch's): as `repeat`, with fewer reps than dimensions padded by leading 1s."""
    x = tensor_arg("tile", x)
    reps = _sizes_arg("tile", reps)
    return repeat(x, [1] * (x.ndim - len(reps)) + reps)


@keyword_aliases(axis=("dim",))
def repeat_interleave(x: TensorView, repeats: int, axis: int | None = None) -> TensorView:
    """Each element repeated `repeats` times in place along `axis` (torch's `repeat_interleave` with an
    int; no axis flattens x first)."""
    x = tensor_arg("repeat_interleave", x)
    repeats = _count("repeat_interleave", "repeats", repeats)
    if axis is None:
        x, axis = reshape(x, (-1,)) if x.ndim != 1 else x, 0
    axis = _axis("repeat_interleave", x, axis)
    if repeats == 1:
        return x
    pairs = broadcast(x, [i == axis + 1 for i in range(x.ndim + 1)])
    grown = expand(pairs, [repeats if i == axis + 1 else -1 for i in range(x.ndim + 1)])
    return reshape(grown, [*x.shape[:axis], x.shape[axis] * repeats, *x.shape[axis + 1:]])


# --- roll, narrow, flatten, unflatten ---------------------------------------------------------
def _roll_axis(x: TensorView, shift: int, axis: int) -> TensorView:
    n = x.shape[axis]
    if n.is_const:
        if n.value == 0 or shift % n.value == 0:
            return x
        cut: int | Scalar = -shift % n.value
    else:  # Python's % of a symbolic extent: the dividends stay non-negative, the divisor positive
        m = smax(n, 1)
        cut = (m - shift % m) % m if shift >= 0 else as_scalar(-shift) % m
    return cat([_along(x, axis, cut, None), _along(x, axis, 0, cut)], axis)


@keyword_aliases(axis=("dims", "dim"))
def roll(x: TensorView, shifts: int | Sequence[int], axis: int | Sequence[int] | None = None) -> TensorView:
    """Elements shifted by `shifts` along `axis`, wrapping around (torch's `roll`, NumPy's `roll`);
    no axis rolls the flattened tensor."""
    x = tensor_arg("roll", x)
    shift_list = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    # A shift read from a NumPy table of directions (lattice Boltzmann's cx[i]) is a NumPy integer.
    shift_list = [int(s) if isinstance(s, np.integer) else s for s in shift_list]
    for i, s in enumerate(shift_list):
        if not isinstance(s, int) or isinstance(s, bool):
            raise FusionDefinitionError(f"roll: shifts[{i}]: expected an int, got {type(s).__name__} {s!r}")
    if axis is None:
        if len(shift_list) != 1:
            raise FusionDefinitionError(f"roll: shifts: expected one shift when no axis is given, got {shifts!r}")
        return reshape(_roll_axis(reshape(x, (-1,)), shift_list[0], 0), x.shape) if x.ndim else x
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(axes) != len(shift_list):
        raise FusionDefinitionError(f"roll: expected as many shifts as axes, got shifts {shifts!r} and axes {axis!r}")
    for s, a in zip(shift_list, axes):
        x = _roll_axis(x, s, _axis("roll", x, a))
    return x


@keyword_aliases(axis=("dim",))
def narrow(x: TensorView, axis: int, start: int, length: int) -> TensorView:
    """torch's `narrow`: `length` elements of `axis` from `start` (negative counts from the end); the
    range must lie inside the dimension (checked at run time for a symbolic extent)."""
    x = tensor_arg("narrow", x)
    axis = _axis("narrow", x, axis)
    start = _number(start) if isinstance(start, Scalar) else start
    if not isinstance(start, int) or isinstance(start, bool):
        raise FusionDefinitionError(f"narrow: start: expected an int, got {type(start).__name__} {start!r}")
    length = _count("narrow", "length", length)
    n = x.shape[axis]
    first = n + start if start < 0 else as_scalar(start)
    if n.is_const and not (0 <= first.value and first.value + length <= n.value):
        raise FusionDefinitionError(f"narrow: start, length: expected a range inside dimension {axis} of "
                                    f"{x.describe()} (extent {n.value}), got start {start} and length {length}")
    why = f"narrow: start {start}, length {length} of dimension {axis} of {x.describe()} must lie inside it"
    x.fusion.require_equal(smax(first, 0), first, why)
    x.fusion.require_equal(smin(first + length, n), first + length, why)
    return _along(x, axis, first, first + length)


def flatten(x: TensorView, start_dim: int = 0, end_dim: int = -1) -> TensorView:
    """torch's `flatten`: dimensions `start_dim` to `end_dim` (both included) become one."""
    x = tensor_arg("flatten", x)
    if x.ndim == 0:
        return reshape(x, (1,))
    start = normalize_axis(start_dim, x.ndim, "flatten start_dim")
    end = normalize_axis(end_dim, x.ndim, "flatten end_dim")
    if start > end:
        raise FusionDefinitionError(f"flatten: expected start_dim <= end_dim, got {start_dim} and {end_dim}")
    merged = functools.reduce(operator.mul, x.shape[start : end + 1], 1)
    return reshape(x, (*x.shape[:start], merged, *x.shape[end + 1 :]))


def unflatten(x: TensorView, dim: int, sizes: Sequence[int | Scalar]) -> TensorView:
    """torch's `unflatten`: dimension `dim` becomes the dimensions `sizes` (one of them may be -1, the
    rest of the extent), as in `x.unflatten(-1, (-1, 2))` for interleaved pairs."""
    x = tensor_arg("unflatten", x)
    axis = normalize_axis(dim, x.ndim, "unflatten dim")
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise FusionDefinitionError(f"unflatten: sizes: expected a non-empty list or tuple of sizes, got {sizes!r}")
    return reshape(x, (*x.shape[:axis], *sizes, *x.shape[axis + 1 :]))


# --- triangles ---------------------------------------------------------------------------------
def _triangle(op: str, x: TensorView, diagonal: int, keep: str) -> TensorView:
    x = tensor_arg(op, x)
    if x.ndim < 2:
        raise FusionDefinitionError(f"{op}: expected a tensor of rank >= 2, got {x.describe()} of rank {x.ndim}")
    if not isinstance(diagonal, int) or isinstance(diagonal, bool):
        raise FusionDefinitionError(f"{op}: diagonal: expected an int, got {type(diagonal).__name__} {diagonal!r}")
    with defining(x.fusion):
        rows, cols = arange(x.shape[-2]), arange(x.shape[-1])
    offset = elementwise("sub", unsqueeze(cols, 0), unsqueeze(rows, 1))  # column - row of each element
    zero = False if x.dtype == dt.bool_ else 0
    return cast(elementwise("where", elementwise(keep, offset, diagonal), x, zero), x.dtype)


def tril(x: TensorView, diagonal: int = 0) -> TensorView:
    """The lower triangle of the last two axes (elements with column - row <= diagonal); zeros above."""
    return _triangle("tril", x, diagonal, "le")


def triu(x: TensorView, diagonal: int = 0) -> TensorView:
    """The upper triangle of the last two axes (elements with column - row >= diagonal); zeros below."""
    return _triangle("triu", x, diagonal, "ge")


def matrix_transpose(x: TensorView) -> TensorView:
    """The last two axes swapped (torch's `x.mT`, NumPy's `matrix_transpose`)."""
    x = tensor_arg("mT", x)
    if x.ndim < 2:
        raise FusionDefinitionError(f"mT: expected a tensor of rank >= 2, got {x.describe()} of rank {x.ndim}")
    return transpose(x, -2, -1)


@keyword_aliases(axis=("dim",))
def select(x: TensorView, axis: int, index: int) -> TensorView:
    """torch's `x.select(dim, index)`: the slice at `index` along `axis` with that axis removed
    (`x[:, index]` for axis 1); a negative index counts from the end. An index outside a symbolic
    extent is an error at run time, as is a negative index given as a scalar input (nvFuser's select), whose
    value the symbolic extent `index` stands for."""
    axis = _axis("select", tensor_arg("select", x), axis)
    if not isinstance(index, (int, Scalar)) or isinstance(index, bool):
        raise FusionDefinitionError(f"select: index: expected an int, got {type(index).__name__} {index!r}")
    return x[(slice(None),) * axis + (index,)]


@keyword_aliases(axis=("dim",))
def diff(x: TensorView, n: int = 1, axis: int = -1, prepend: TensorView | None = None,
         append: TensorView | None = None) -> TensorView:
    """torch's and NumPy's `diff`: x[i + 1] - x[i] along `axis`, taken `n` times, after `prepend` and
    `append` are joined to x along that axis. Bools give whether neighbours differ (their xor), as in
    torch; an axis shorter than `n` + 1 gives an empty result."""
    axis = _axis("diff", tensor_arg("diff", x), axis)
    n = _count("diff", "n", n)
    joined = [tensor_arg("diff", p) for p in (prepend, x, append) if p is not None]
    x = cat(joined, axis) if len(joined) > 1 else x
    for _ in range(n):
        later, earlier = _along(x, axis, 1, None), _along(x, axis, 0, -1)
        x = elementwise("logical_xor" if x.dtype.is_bool else "sub", later, earlier)
    return x


def take_along_axis(x: TensorView, indices: TensorView, axis: int) -> TensorView:
    """NumPy's `np.take_along_axis`: `out[..., j, ...] = x[..., indices[..., j, ...], ...]` along `axis`,
    the other axes broadcast. An index may be negative (from the end); one out of range gives NaN for
    floats, the most negative value for signed integers, the largest for unsigned ones and True for
    bools (JAX's fill mode), where NumPy raises.

    Each element is picked as a one-hot sum over its row (as `cross_entropy` picks the target's
    log-probability), which fuses with the ops around it; the compiled backends read the one element
    the index points at instead of the row (passes/one_hot.py), where the sum is a loop of its own."""
    x, indices = tensor_arg("take_along_axis", x), tensor_arg("take_along_axis", indices)
    if not indices.dtype.is_integer:
        raise FusionDefinitionError(f"take_along_axis: indices: expected an integer tensor, got {indices.describe()}")
    if indices.ndim != x.ndim:
        raise FusionDefinitionError(f"take_along_axis: indices: expected rank {x.ndim} (x's), got "
                                    f"{indices.describe()} of rank {indices.ndim}")
    axis = _axis("take_along_axis", x, axis)
    for a in range(x.ndim):
        sizes = concrete_value(x.shape[a]), concrete_value(indices.shape[a])
        if a != axis and None not in sizes and 1 not in sizes and sizes[0] != sizes[1]:
            raise FusionDefinitionError(f"take_along_axis: dimension {a} of x {x.describe()} and of indices "
                                        f"{indices.describe()} must match or be 1: got extents {sizes[0]} and "
                                        f"{sizes[1]}")
    last = [a for a in range(x.ndim) if a != axis] + [axis]
    rows, wanted = permute(x, last), cast(permute(indices, last), dt.int64)
    length = x.shape[axis]
    with defining(x.fusion):
        positions = arange(length, dtype=dt.int64)
    wanted = elementwise("where", elementwise("lt", wanted, 0), elementwise("add", wanted, length), wanted)
    hits = elementwise("eq", unsqueeze(wanted, -1), positions)  # (..., picks, length)
    rows = unsqueeze(rows, -2)
    # A sum over the row of zeros and the one element hit: both backends read that element alone
    # (passes/one_hot.py). The sum turns -0.0 into +0.0; the sign, picked the same way, restores it.
    picked = red.sum(elementwise("where", hits, rows, 0), -1)
    if x.dtype.is_floating:
        sign = red.sum(elementwise("where", hits, elementwise("copysign", 1.0, rows), 0), -1)
        picked = elementwise("copysign", picked, sign)
    inside = elementwise("logical_and", elementwise("ge", wanted, 0), elementwise("lt", wanted, length))
    picked = elementwise("where", inside, cast(picked, x.dtype), _out_of_range_fill(x.dtype))
    return permute(picked, [int(a) for a in np.argsort(last)])


def take(x: TensorView, indices: TensorView, axis: int | None = None) -> TensorView:
    """NumPy's `np.take` (and `x[indices]` along one axis): `out[..., i..., ...] = x[..., indices[i...], ...]`,
    the index's axes in place of `axis`; with `axis=None`, from the flattened x. An index may be
    negative; one out of range gives what `take_along_axis` gives (JAX's fill), where NumPy raises."""
    x, indices = tensor_arg("take", x), tensor_arg("take", indices)
    if not indices.dtype.is_integer:
        raise FusionDefinitionError(f"take: indices: expected an integer tensor, got {indices.describe()} of type "
                                    f"{indices.type_text()}")
    if axis is None:
        x, axis = reshape(x, [-1]), 0
    axis = _axis("take", x, axis)
    picks = reshape(indices, [1] * axis + [-1] + [1] * (x.ndim - axis - 1))
    picked = take_along_axis(x, picks, axis)
    return reshape(picked, [*x.shape[:axis], *indices.shape, *x.shape[axis + 1:]])


def gather(x: TensorView, axis: int, index: TensorView) -> TensorView:
    """torch's `x.gather(dim, index)`: `take_along_axis` of x cut to index's extents on the other axes
    (torch's index may be smaller than x there; it never broadcasts)."""
    x, index = tensor_arg("gather", x), tensor_arg("gather", index)
    axis = _axis("gather", x, axis)
    if index.ndim != x.ndim:
        raise FusionDefinitionError(f"gather: index: expected rank {x.ndim} (x's), got {index.describe()} of rank "
                                    f"{index.ndim}")
    cut = slice_tensor(x, [slice(None) if a == axis else slice(0, index.shape[a]) for a in range(x.ndim)])
    return take_along_axis(cut, index, axis)


def _out_of_range_fill(dtype: dt.DType) -> object:
    """What an index out of range picks: NaN, or the integer type's extreme (JAX's fill mode)."""
    if dtype.is_floating:
        return np.nan
    if dtype == dt.bool_:
        return True
    info = np.iinfo(dtype.numpy)
    return int(info.max) if info.min == 0 else int(info.min)


def masked_fill(x: TensorView, mask: TensorView, value: object) -> TensorView:
    """`value` where `mask` holds, else `x`, in x's dtype (as torch keeps it)."""
    return cast(elementwise("where", mask, value, tensor_arg("masked_fill", x)), x.dtype)


# --- x[index] = value: a new value for x ----------------------------------------------------------
def assign(x: TensorView, index: object, value: object) -> None:
    """`x[1:-1, 1:-1] = v`, `x[0] = 0.0`, `x[mask] = 0.0` as NumPy code writes arrays in place: `x` takes a
    new value (the region replaced by `value`, cast to x's dtype, through slices and `cat`; a mask through
    `where`); what used `x` before keeps the old one (FusionGraph.rebind). A fusion's inputs are the
    caller's arrays, which it does not write, so writing one is refused; and a view taken of `x` before
    the write would not see it, as NumPy's does, so such a view is refused from then on."""
    _check_assignable(x)
    if isinstance(index, TensorView) and index.dtype.is_bool:
        if isinstance(value, TensorView) and value.ndim:  # NumPy's takes its elements in turn, one a True place
            raise UnsupportedError(f"{x.describe()}[mask] = {value.describe()}: an array written through a mask "
                                   "takes its elements in turn in NumPy; write bz.ops.where(mask, value, x) for a "
                                   "value per element")
        new = cast(elementwise("where", index, value, x), x.dtype)
    else:
        bounds, kept = _assigned_region(x, index)
        region = x
        for axis, (start, stop) in enumerate(bounds):
            region = region if start is None else _along(region, axis, start, stop)
            if axis not in kept:  # an int index must write exactly one element, as NumPy's raises otherwise
                x.fusion.require_equal(region.shape[axis], as_scalar(1),
                                       f"{x.describe()}[...] = ...: index {start} of dimension {axis} must lie "
                                       "within its extent")
        if isinstance(value, TensorView) and value.ndim > len(kept):
            raise FusionDefinitionError(f"{x.describe()}[...] = {value.describe()}: a value of {value.ndim} "
                                        f"dimensions for a region of {len(kept)}")
        filled = elementwise("where", True, value, region if len(kept) == x.ndim else _squeezed(region, kept))
        filled = cast(filled, x.dtype)
        for axis in range(x.ndim):
            if axis not in kept:  # an int index: the value has no dimension there
                filled = unsqueeze(filled, axis)
        new = _size_one_kept(x, _replaced(x, bounds, filled, 0))
    for view in _views_of(x):  # NumPy's would show the write; theirs is the old value: refuse their use
        view.overwritten = f"{view.describe()} is a view of {x.describe()} taken before {x.describe()}[...] = ..."
    x.fusion.rebind(x, new)


def _size_one_kept(x: TensorView, new: TensorView) -> TensorView:
    """`new` with x's size-1 dimensions size 1 again: rebuilt from slices and a cat, a written array's
    dimension of one element was an extent of 1 that no longer broadcast against longer ones, as NumPy's
    does (`y[0:1] = 0.5` of a (1, n) array, then y + an (m, n) one)."""
    for axis, (before, after) in enumerate(zip(x.visible, new.visible, strict=True)):
        if before.is_broadcast and not after.is_broadcast:
            squeezed = reshape(new, [e for a, e in enumerate(new.shape) if a != axis])
            new = broadcast(squeezed, [a == axis for a in range(new.ndim)])
    return new


def _views_of(x: TensorView) -> list[TensorView]:
    """The tensors made from `x` by views alone (`x[1:]`, `x.T`, a view of such a view)."""
    found, seen = [], {id(x)}
    for expr in x.fusion.exprs:  # in definition order: a view of a view comes after it
        if expr.op in _VIEW_OPS and id(expr.inputs[0]) in seen:
            found += expr.outputs
            seen.update(id(t) for t in expr.outputs)
    return found


def _check_assignable(x: TensorView) -> None:
    if any(t is x for t in x.fusion.inputs):
        raise UnsupportedError(
            f"{x.describe()}[...] = ...: {x.describe()} is an input, the caller's array, which a fusion does not "
            "write; copy it first (x = x.copy(), or x.clone()) and write the copy")
    if any(o.tv is x for o in x.fusion.outputs):
        raise UnsupportedError(f"{x.describe()}[...] = ...: {x.describe()} is already an output")


_VIEW_OPS = frozenset({"slice", "permute", "reshape", "broadcast", "expand", "squeeze", "flip"})


def _assigned_region(x: TensorView, index: object) -> tuple[list[tuple[object, object]], list[int]]:
    """Per axis of x, the (start, stop) written (None, None where all of it), and the axes a value keeps
    (an int index writes one element of its axis, which the value does not have)."""
    items = list(index) if isinstance(index, tuple) else [index]
    items = [int(i) if isinstance(i, np.integer) else i for i in items]
    if sum(i is Ellipsis for i in items) > 1 or any(i is None for i in items):
        raise UnsupportedError(f"{x.describe()}[{index!r}] = ...: expected ints, slices and one '...'")
    if any(i is Ellipsis for i in items):
        at = next(n for n, i in enumerate(items) if i is Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - len(items) + 1)
    if len(items) > x.ndim:
        raise FusionDefinitionError(f"{x.describe()}[...] = ...: {len(items)} indices for {x.ndim} dimensions")
    items += [slice(None)] * (x.ndim - len(items))
    bounds, kept = [], []
    for axis, item in enumerate(items):
        if isinstance(item, slice) and item.step not in (None, 1):
            raise UnsupportedError(f"{x.describe()}[...] = ...: a step of {item.step} in dimension {axis}; write "
                                   "the result with bz.ops.where and a mask instead")
        if isinstance(item, slice):
            bounds.append((None, None) if item.start is None and item.stop is None else
                          (0 if item.start is None else item.start, item.stop))
            kept.append(axis)
        elif isinstance(item, (int, Scalar)) and not isinstance(item, bool):
            bounds.append((item, None if isinstance(item, int) and item == -1 else item + 1))
        else:
            raise UnsupportedError(f"{x.describe()}[{index!r}] = ...: expected ints, slices and one '...', got "
                                   f"{type(item).__name__} in dimension {axis}")
    return bounds, kept


def _squeezed(region: TensorView, kept: list[int]) -> TensorView:
    return reshape(region, [region.shape[a] for a in kept])


def _replaced(x: TensorView, bounds: list[tuple[object, object]], filled: TensorView, axis: int) -> TensorView:
    """x with its region of `bounds` (from dimension `axis` on) replaced by `filled`: the region's slab
    along the first bounded dimension, rebuilt inside, joined to what lies before and after it."""
    while axis < x.ndim and bounds[axis][0] is None:
        axis += 1
    if axis == x.ndim:
        return filled
    start, stop = bounds[axis]
    region = _along(x, axis, start, stop)
    slab = _replaced(region, bounds, filled, axis + 1)
    pieces = [_along(x, axis, 0, start), slab] if not (isinstance(start, int) and start == 0) else [slab]
    if stop is not None:  # what follows the region: from its end, which an empty one (x[3:1]) has at its start
        pieces.append(_along(_along(x, axis, start, None), axis, region.shape[axis], None))
    if len(pieces) == 1:
        return slab
    joined = cat(pieces, axis)
    # The pieces tile x's axis, so the sum of their clamped extents is x's extent: say so, or each write
    # nests the extent of the one before, and Jacobi sweeps in a Python loop grow it exponentially.
    joined.visible[axis].extent = x.shape[axis]
    return joined


# np.pad's modes other than "constant", as slices of x next to it: (before, after) for widths (lo, hi).
_PAD_PIECES = {
    "edge": lambda x, a, lo, hi: ([_along(x, a, 0, 1)] * lo, [_along(x, a, -1, None)] * hi),
    "wrap": lambda x, a, lo, hi: ([_along(x, a, -lo, None)] if lo else [], [_along(x, a, 0, hi)] if hi else []),
    "reflect": lambda x, a, lo, hi: ([flip(_along(x, a, 1, lo + 1), a)] if lo else [],
                                     [flip(_along(x, a, -hi - 1, -1), a)] if hi else []),
    "symmetric": lambda x, a, lo, hi: ([flip(_along(x, a, 0, lo), a)] if lo else [],
                                       [flip(_along(x, a, -hi, None), a)] if hi else []),
}
PAD_MODES = tuple(_PAD_PIECES)


def pad_from_slices(x: TensorView, widths: Sequence[tuple[int, int]], mode: str) -> TensorView:
    """NumPy's `np.pad(x, widths, mode)` for the modes of `PAD_MODES`, axis by axis. A width NumPy would
    fill by wrapping or reflecting more than once (wider than the axis allows) is an error at run time."""
    for axis, (lo, hi) in enumerate(widths):
        before, after = _PAD_PIECES[mode](x, axis, lo, hi)
        for piece, width in [*((p, 1 if mode == "edge" else lo) for p in before),
                             *((p, 1 if mode == "edge" else hi) for p in after)]:
            x.fusion.require_equal(piece.shape[axis], as_scalar(width),
                                   f"np.pad: mode={mode!r}: a width of {width} needs that many elements in "
                                   f"dimension {axis} of {x.describe()}")
        x = cat([*before, x, *after], axis) if before or after else x
    return x
