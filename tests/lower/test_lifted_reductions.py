"""Reductions asked for inside a branch of a pad, a cat or a slice_scatter and emitted at their row's
scope (braze/lower/values.py, `ValueEmitter._reduction_in_range`): they run for every row, also for the
rows the branch leaves out, and there must read only what exists.

Each program runs on the llvm and reference backends against NumPy in float64, with its inputs views of
buffers whose next elements are NaN, and its CPU kernel's reads are checked against its inputs' memory
(tests/kir_bounds.py), since a read past the end whose value no output uses changes no result. Their
CUDA kernels compile with NVRTC; tests/cuda/test_lifted_reductions_gpu.py runs them on a GPU."""

from __future__ import annotations

import sys
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.runtime import nvrtc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kir_bounds import out_of_bounds_reads  # noqa: E402

OPS = {"sum": np.sum, "max": np.max, "mean": np.mean, "var": np.var, "argmax": np.argmax}


def poisoned(shape: tuple[int, ...], seed: int, dtype=np.float32) -> np.ndarray:
    """Normal values in a view of a buffer one leading row longer, that row NaN: a read past the
    view's end that reached an output would show."""
    buffer = np.full((shape[0] + 1, *shape[1:]), np.nan, dtype)
    buffer[: shape[0]] = np.random.default_rng(seed).standard_normal(shape)
    return buffer[: shape[0]]


def _broadcast_back(reduced: bz.TensorView, axis: int) -> bz.TensorView:
    return bz.ops.broadcast(reduced, [a == axis for a in range(2)])


# --- chosen programs ----------------------------------------------------------------------------------
def _row_sum_padded() -> bz.Fusion:
    """Rows scaled by their sums, then one zero row below: the sum is computed for the zero row too."""
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1])
        f.add_output(bz.ops.pad(x * _broadcast_back(bz.ops.sum(x, axes=[1]), 1), [(0, 1), (0, 0)]))
    return f


def test_a_row_sum_padded_below_reads_no_row_past_its_input():
    x = poisoned((4, 7), 1)
    f = _row_sum_padded()
    assert out_of_bounds_reads(f, [x]) == []
    (got,) = f.execute([x])
    expected = np.pad(x * x.astype(np.float64).sum(1, keepdims=True), [(0, 1), (0, 0)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_an_empty_input_padded_runs_no_reduction():
    x = np.zeros((0, 5), np.float32)
    f = _row_sum_padded()
    assert out_of_bounds_reads(f, [x]) == []
    (got,) = f.execute([x])
    np.testing.assert_array_equal(got, np.zeros((1, 5), np.float32))


def _shifted_cross_entropy_backward(batch: int, seq: int, vocab: int) -> bz.Fusion:
    """The cross-entropy backward of `logits[:, :-1]` as the torch backend builds it: the gradient of the
    shifted rows (g - softmax * sum(g)), slice_scattered into the full sequence, the vocabulary padded."""
    rows = batch * (seq - 1)
    with bz.Fusion() as f:
        g = f.define_tensor([rows, vocab])
        logp = f.define_tensor([rows, vocab])
        d = g - bz.ops.exp(logp) * _broadcast_back(bz.ops.sum(g, axes=[1]), 1)
        placed = bz.ops.pad(bz.ops.reshape(d, [batch, seq - 1, vocab]), [(0, 0), (0, 1), (0, 0)])
        inside = bz.ops.broadcast(bz.ops.arange(seq) < seq - 1, [True, False, True])
        scattered = bz.ops.where(inside, placed, bz.ops.zeros([batch, seq, vocab]))
        f.add_output(bz.ops.pad(bz.ops.reshape(scattered, [batch * seq, vocab]), [(0, 0), (0, 1)]))
    return f


def test_the_shifted_cross_entropy_backward_reads_no_row_past_its_inputs():
    batch, seq, vocab = 2, 5, 11
    g, logp = poisoned((batch * (seq - 1), vocab), 2), poisoned((batch * (seq - 1), vocab), 3)
    f = _shifted_cross_entropy_backward(batch, seq, vocab)
    assert out_of_bounds_reads(f, [g, logp]) == []
    d = g - np.exp(logp.astype(np.float64)) * g.astype(np.float64).sum(1, keepdims=True)
    full = np.zeros((batch, seq, vocab))
    full[:, :-1] = d.reshape(batch, seq - 1, vocab)
    expected = np.pad(full.reshape(batch * seq, vocab), [(0, 0), (0, 1)])
    for backend in ("llvm", "reference"):
        (got,) = f.execute([g, logp], backend=backend)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=backend)


def test_a_reduction_under_a_cat_of_columns_is_not_clamped():
    """The cat's condition is on the column, which a row's sum does not read: the row's loops stay as
    they were, with no clamped index (softmax's, cross-entropy's, here beside another tensor)."""
    with bz.Fusion() as f:
        x, y = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        f.add_output(bz.ops.cat([x / _broadcast_back(bz.ops.sum(x, axes=[1]), 1), y], axis=1))
    x, y = poisoned((3, 4), 4), poisoned((3, 2), 5)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x, y])))
    assert not any(_clamps(i) for load in _loads(kernel) for i in load.indices), kernel_text(kernel)
    assert out_of_bounds_reads(f, [x, y]) == []


def test_a_reduction_under_a_pad_of_rows_reads_at_a_clamped_row():
    x = poisoned((3, 4), 6)
    f = _row_sum_padded()
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x])))
    assert any(_clamps(load.indices[0]) for load in _loads(kernel)), kernel_text(kernel)


def _children(node) -> list:
    values = [getattr(node, name) for name in getattr(node, "__dataclass_fields__", {})]
    return [c for v in values for c in (v if isinstance(v, tuple) else (v,)) if isinstance(c, (k.Expr, k.Stmt))]


def _loads(kernel: k.Kernel) -> list[k.Load]:
    found, stack = [], [s for task in kernel.tasks for s in task.body]
    while stack:
        node = stack.pop()
        found += [node] if isinstance(node, k.Load) else []
        stack += _children(node)
    return found


def _clamps(e: k.Expr) -> bool:
    return isinstance(e, k.Binary) and e.op == "minimum" or any(_clamps(c) for c in _children(e))


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
        return x - _broadcast_back(value, self.axis)

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


@st.composite
def programs(draw) -> Program:
    op = draw(st.sampled_from(sorted(OPS)))
    axis = draw(st.integers(0, 1))
    smallest = 0 if op in ("sum", "mean", "var") else 1  # max and argmax of nothing raise
    extents = [draw(st.integers(smallest if a == axis else 0, 5)) for a in range(2)]
    return Program(*extents, op, axis, draw(st.sampled_from(["pad", "cat", "scatter"])), draw(st.integers(0, 1)),
                   draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.booleans()))


SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_generated_placements_of_reductions_read_in_bounds_and_match_numpy(program: Program):
    arrays, f = program.arrays(), program.fusion()
    assert out_of_bounds_reads(f, arrays) == [], program
    expected = program.expected(arrays)
    for backend in ("llvm", "reference"):
        (got,) = f.execute(arrays, backend=backend)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{backend}: {program}")


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@settings(SETTINGS, max_examples=2)
@given(st.lists(programs(), min_size=10, max_size=10))
def test_generated_placements_of_reductions_compile_with_nvrtc(batch: list[Program]):
    bodies = [engine.cuda_source(p.fusion(f"case{n}"), p.arrays()).body for n, p in enumerate(batch)]
    assert nvrtc.compile_ptx(cuda.with_prelude("\n".join(bodies)), "generated", "sm_90", ("-G",))
