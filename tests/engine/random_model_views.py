"""The views of braze/ops/view_composites.py as steps of a random fusion (tests/engine/random_fusions.py
draws them among its views): split, chunk, unbind, stack, repeat, tile, repeat_interleave, roll, tril,
triu and narrow, each with the concrete shape the node will have at run time."""

from __future__ import annotations

from fuzz_values import MAX_RANK, Node
from hypothesis import strategies as st

import braze as bz

MODEL_VIEWS = ("split", "chunk", "unbind", "stack", "repeat", "tile", "repeat_interleave", "roll", "tril", "narrow")


def torch_pieces(n: int, size: int) -> list[tuple[int, int]]:
    """torch's split of an extent n into pieces of `size`: (start, length) of each."""
    return [(s, min(size, n - s)) for s in range(0, n, size)] or [(0, 0)]


def model_view(rf, name: str, x: Node) -> Node | None:
    """A view `name` of node x drawn by the RandomFusion `rf`, or None where it does not apply."""
    rank, shape = x.tv.ndim, list(x.shape)
    axis = rf.draw(st.integers(-rank, rank - 1))
    n, static = shape[axis], x.tv.shape[axis].is_const
    if name in ("split", "chunk", "unbind", "narrow"):
        return _piece(rf, name, x, axis, n, static)
    if name == "stack" and rank < MAX_RANK:
        other = rf.pick(lambda m: m.shape == x.shape) or x
        at = rf.draw(st.integers(-rank - 1, rank))
        new = list(shape)
        new.insert(at % (rank + 1), 2)
        return rf.same(x, bz.ops.stack([x.tv, other.tv], at), new, f"bz.ops.stack([{x.name}, {other.name}], {at})",
                       bound=max(x.bound, other.bound), err=max(x.err, other.err))
    if name in ("repeat", "tile"):
        extra = rf.draw(st.integers(0, 1 if rank < MAX_RANK else 0))
        reps = [rf.choice((1, 2, 3, 0)) for _ in range(rank + extra - (name == "tile" and rf.coin()))]
        d = max(rank, len(reps))  # NumPy's tile: the shorter of reps and shape gets leading 1s
        new = [r * m for r, m in zip([1] * (d - len(reps)) + reps, [1] * (d - rank) + shape)]
        tv = x.tv.repeat(*reps) if name == "repeat" else bz.ops.tile(x.tv, reps)
        return rf.same(x, tv, new, f"{x.name}.{name}({reps})")
    if name == "repeat_interleave":
        r = rf.choice((2, 3, 1, 0))
        new = shape[:axis % rank] + [n * r] + shape[axis % rank + 1:]
        return rf.same(x, x.tv.repeat_interleave(r, dim=axis), new, f"{x.name}.repeat_interleave({r}, dim={axis})")
    if name == "roll":
        shift = rf.draw(st.integers(-7, 7))
        return rf.same(x, bz.ops.roll(x.tv, shift, axis), shape, f"bz.ops.roll({x.name}, {shift}, {axis})")
    if name == "tril" and rank >= 2:
        diagonal, kind = rf.draw(st.integers(-2, 2)), rf.choice(("tril", "triu"))
        return rf.same(x, getattr(x.tv, kind)(diagonal), shape, f"{x.name}.{kind}({diagonal})")
    return None


def _piece(rf, name: str, x: Node, axis: int, n: int, static: bool) -> Node | None:
    """One piece of a split, chunk or unbind, or a narrow: pieces of a fixed size need a static extent."""
    if name == "narrow":
        start = rf.draw(st.integers(0, n))
        length = rf.draw(st.integers(0, n - start))
        start -= n if start and rf.coin() else 0  # the same start, counted from the end
        tv, text, length_at = x.tv.narrow(axis, start, length), f"{x.name}.narrow({axis}, {start}, {length})", length
    elif name == "unbind" and static and 0 < n <= 4:
        i = rf.draw(st.integers(0, n - 1))
        text = f"bz.ops.unbind({x.name}, {axis})[{i}]"
        return rf.same(x, bz.ops.unbind(x.tv, axis)[i], _without(x.shape, axis), text)
    elif name == "chunk" and (static or n > 0):
        chunks = rf.draw(st.integers(1, 3))
        pieces = torch_pieces(n, -(-n // chunks)) if n else [(0, 0)] * chunks
        if not static and len(pieces) != chunks:
            return None  # refused at run time (tests/ops/test_view_composites.py)
        i = rf.draw(st.integers(0, len(pieces) - 1))
        tv, length_at = x.tv.chunk(chunks, dim=axis)[i], pieces[i][1]
        text = f"{x.name}.chunk({chunks}, dim={axis})[{i}]"
    elif static and rf.coin():
        size = rf.draw(st.integers(1, max(n, 1)))
        pieces = torch_pieces(n, size)
        i = rf.draw(st.integers(0, len(pieces) - 1))
        tv, length_at = bz.ops.split(x.tv, size, axis)[i], pieces[i][1]
        text = f"bz.ops.split({x.name}, {size}, {axis})[{i}]"
    else:
        cut = rf.draw(st.integers(0, n))
        sizes = [cut, n - cut]
        i = rf.choice((0, 1))
        tv, text, length_at = x.tv.split(sizes, dim=axis)[i], f"{x.name}.split({sizes}, dim={axis})[{i}]", sizes[i]
    new = list(x.shape)
    new[axis] = length_at
    return rf.same(x, tv, new, text)


def _without(shape: tuple[int, ...], axis: int) -> list[int]:
    new = list(shape)
    del new[axis]
    return new
