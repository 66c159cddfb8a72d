"""Programs that place a reduction of a tensor with a pad, a cat or a slice_scatter, so that the
lowering asks for the reduction inside a branch and emits it at its row's scope (braze/lower/values.py,
`ValueEmitter.in_range`): shared by tests/lower/test_lifted_reductions.py (the CPU, NVRTC) and
tests/cuda/test_lifted_reductions_gpu.py."""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import braze as bz

OPS = {"sum": np.sum, "max": np.max, "mean": np.mean, "var": np.var, "argmax": np.argmax}


def poisoned(shape: tuple[int, ...], seed: int, dtype=np.float32) -> np.ndarray:
    """Normal values in a view of a buffer one leading row longer, that row NaN: a read past the
    view's end that reached an output would show."""
    buffer = np.full((shape[0] + 1, *shape[1:]), np.nan, dtype)
    buffer[: shape[0]] = np.random.default_rng(seed).standard_normal(shape)
    return buffer[: shape[0]]


def broadcast_back(reduced: bz.TensorView, axis: int) -> bz.TensorView:
    """A reduction over `axis` of a 2-D tensor, broadcast back along it."""
    return bz.ops.broadcast(reduced, [a == axis for a in range(2)])


# --- chosen programs ----------------------------------------------------------------------------------
def row_sum_padded() -> bz.Fusion:
    """Rows scaled by their sums, then one zero row below: the sum is computed for the zero row too."""
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1])
        f.add_output(bz.ops.pad(x * broadcast_back(bz.ops.sum(x, axes=[1]), 1), [(0, 1), (0, 0)]))
    return f


def row_sum_padded_expected(x: np.ndarray) -> np.ndarray:
    return np.pad(x * x.astype(np.float64).sum(1, keepdims=True), [(0, 1), (0, 0)])


def shifted_cross_entropy_backward(batch: int, seq: int, vocab: int) -> bz.Fusion:
    """The cross-entropy backward of `logits[:, :-1]` as the torch backend builds it: the gradient of the
    shifted rows (g - softmax * sum(g)), slice_scattered into the full sequence, the vocabulary padded."""
    rows = batch * (seq - 1)
    with bz.Fusion() as f:
        g = f.define_tensor([rows, vocab])
        logp = f.define_tensor([rows, vocab])
        d = g - bz.ops.exp(logp) * broadcast_back(bz.ops.sum(g, axes=[1]), 1)
        placed = bz.ops.pad(bz.ops.reshape(d, [batch, seq - 1, vocab]), [(0, 0), (0, 1), (0, 0)])
        inside = bz.ops.broadcast(bz.ops.arange(seq) < seq - 1, [True, False, True])
        scattered = bz.ops.where(inside, placed, bz.ops.zeros([batch, seq, vocab]))
        f.add_output(bz.ops.pad(bz.ops.reshape(scattered, [batch * seq, vocab]), [(0, 0), (0, 1)]))
    return f


def shifted_cross_entropy_backward_expected(g: np.ndarray, logp: np.ndarray, batch: int, seq: int) -> np.ndarray:
    d = g - np.exp(logp.astype(np.float64)) * g.astype(np.float64).sum(1, keepdims=True)
    full = np.zeros((batch, seq, g.shape[1]))
    full[:, :-1] = d.reshape(batch, seq - 1, g.shape[1])
    return np.pad(full.reshape(batch * seq, g.shape[1]), [(0, 0), (0, 1)])


# --- generated programs -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Program:
    """x (rows, cols) combined with its reduction over `axis`, placed by `how` along `along` with
    `before` and `after` elements around it, then (`twice`) placed again along the other axis."""

    rows: int
    cols: int
    op: str
    axis: int
    how: str  # "pad", "cat" or "scatter" (a slice_scatter: pad, then where over a base)
    along: int
    before: int
    after: int
    twice: bool

    def reduced(self, x):
        value = getattr(bz.ops, self.op)(x, axes=[self.axis]) if self.op != "argmax" else \
            bz.ops.cast(bz.ops.argmax(x, self.axis), bz.float32)
        return x - broadcast_back(value, self.axis)

    def fusion(self, name: str = "fusion") -> bz.Fusion:
        with bz.Fusion(name=name) as f:
            x = f.define_tensor([-1, -1])
            others = [f.define_tensor([-1, -1]) for _ in range(self.inputs - 1)]
            placed = self._place(self.reduced(x), self.along, others[: self.others])
            if self.twice:
                placed = self._place(placed, 1 - self.along, others[self.others:])
            f.add_output(placed)
        return f

    def _place(self, y, along: int, others):
        widths = [(self.before, self.after) if a == along else (0, 0) for a in range(2)]
        if self.how == "pad":
            return bz.ops.pad(y, widths, -2.0)
        if self.how == "cat":
            return bz.ops.cat([others[0], y, others[1]], axis=along)
        n = y.shape[along] + self.before + self.after
        index = bz.ops.arange(n)
        inside = bz.ops.logical_and(index >= self.before, index < n - self.after)
        return bz.ops.where(bz.ops.broadcast(inside, [a != along for a in range(2)]), bz.ops.pad(y, widths), others[0])

    @property
    def others(self) -> int:
        """The tensors one placement takes besides the one it places."""
        return {"pad": 0, "cat": 2, "scatter": 1}[self.how]

    @property
    def inputs(self) -> int:
        return 1 + self.others * (2 if self.twice else 1)

    def arrays(self) -> list[np.ndarray]:
        seed = zlib.crc32(repr(self).encode())
        shapes = [(self.rows, self.cols)] + self._other_shapes((self.rows, self.cols), self.along)
        if self.twice:
            shape = list((self.rows, self.cols))
            shape[self.along] += self.before + self.after
            shapes += self._other_shapes(tuple(shape), 1 - self.along)
        return [poisoned(s, seed + n) for n, s in enumerate(shapes)]

    def _other_shapes(self, shape: tuple[int, int], along: int) -> list[tuple[int, int]]:
        def sized(n: int) -> tuple[int, int]:
            return tuple(n if a == along else e for a, e in enumerate(shape))

        full = sized(shape[along] + self.before + self.after)
        return {"pad": [], "cat": [sized(self.before), sized(self.after)], "scatter": [full]}[self.how]

    def expected(self, arrays: list[np.ndarray]) -> np.ndarray:
        x, *others = [a.astype(np.float64) for a in arrays]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the mean and variance of nothing are NaN
            value = OPS[self.op](x, axis=self.axis, keepdims=True)
        placed = self._place_numpy(x - value, self.along, others[: self.others])
        return self._place_numpy(placed, 1 - self.along, others[self.others:]) if self.twice else placed

    def _place_numpy(self, y: np.ndarray, along: int, others: list[np.ndarray]) -> np.ndarray:
        widths = [(self.before, self.after) if a == along else (0, 0) for a in range(2)]
        if self.how == "pad":
            return np.pad(y, widths, constant_values=-2.0)
        if self.how == "cat":
            return np.concatenate([others[0], y, others[1]], axis=along)
        out = others[0].copy()
        window = [slice(None)] * 2
        window[along] = slice(self.before, self.before + y.shape[along])
        out[tuple(window)] = y
        return out


SMALL = (0, 1, 2, 3, 4, 5)  # for the CPU, whose kernels' reads tests/kir_bounds.py walks one by one
MIXED = (0, 1, 3, 5, 33, 130, 1027)  # for the GPU's schedules: rows of a warp, of a block, split


@st.composite
def programs(draw, extents: tuple[int, ...] = SMALL) -> Program:
    """Programs whose inputs' extents are drawn from `extents`."""
    op = draw(st.sampled_from(sorted(OPS)))
    axis = draw(st.integers(0, 1))
    smallest = 0 if op in ("sum", "mean", "var") else 1  # max and argmax of nothing raise
    extents = [draw(st.sampled_from([e for e in extents if e >= smallest or a != axis])) for a in range(2)]
    return Program(*extents, op, axis, draw(st.sampled_from(["pad", "cat", "scatter"])), draw(st.integers(0, 1)),
                   draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.booleans()))
