"""Reductions asked for inside a branch of a pad, a cat or a slice_scatter and emitted at their row's
scope (braze/lower/values.py, `ValueEmitter.in_range`): they run for every row, also for the rows the
branch leaves out, and there must read only what exists.

Each program (tests/lifted_reductions.py) runs on the llvm and reference backends against NumPy in
float64, its inputs views of buffers whose next row is NaN, and its CPU kernel's reads are checked
against its inputs' memory (tests/kir_bounds.py): a read past the end whose value no output uses changes
no result. Their CUDA kernels compile with NVRTC; tests/cuda/test_lifted_reductions_gpu.py runs them on
a GPU."""

from __future__ import annotations

import lifted_reductions as lifted
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kir_bounds import out_of_bounds_reads
from lifted_reductions import MIXED, Program, broadcast_back, poisoned, programs, row_sum_padded

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.compile import nvrtc
from braze.kir import kernel_text
from braze.kir import nodes as k


def test_a_row_sum_padded_below_reads_no_row_past_its_input():
    x = poisoned((4, 7), 1)
    f = row_sum_padded()
    assert out_of_bounds_reads(f, [x]) == []
    (got,) = f.execute([x])
    np.testing.assert_allclose(got, lifted.row_sum_padded_expected(x), rtol=1e-5, atol=1e-5)


def test_an_empty_input_padded_runs_no_reduction():
    x = np.zeros((0, 5), np.float32)
    f = row_sum_padded()
    assert out_of_bounds_reads(f, [x]) == []
    (got,) = f.execute([x])
    np.testing.assert_array_equal(got, np.zeros((1, 5), np.float32))


def test_the_shifted_cross_entropy_backward_reads_no_row_past_its_inputs():
    batch, seq, vocab = 2, 5, 11
    g, logp = poisoned((batch * (seq - 1), vocab), 2), poisoned((batch * (seq - 1), vocab), 3)
    f = lifted.shifted_cross_entropy_backward(batch, seq, vocab)
    assert out_of_bounds_reads(f, [g, logp]) == []
    expected = lifted.shifted_cross_entropy_backward_expected(g, logp, batch, seq)
    for backend in ("llvm", "reference"):
        (got,) = f.execute([g, logp], backend=backend)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=backend)


def test_a_reduction_under_a_cat_of_columns_is_not_clamped():
    """The cat's condition is on the column, which a row's sum does not read: the row's loops stay as
    they were, with no clamped index (softmax's, cross-entropy's, here beside another tensor)."""
    with bz.Fusion() as f:
        x, y = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        f.add_output(bz.ops.cat([x / broadcast_back(bz.ops.sum(x, axes=[1]), 1), y], axis=1))
    x, y = poisoned((3, 4), 4), poisoned((3, 2), 5)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x, y])))
    assert not any(_clamps(i) for load in _loads(kernel) for i in load.indices), kernel_text(kernel)
    assert out_of_bounds_reads(f, [x, y]) == []


def test_a_reduction_under_a_pad_of_rows_reads_at_a_clamped_row():
    x = poisoned((3, 4), 6)
    f = row_sum_padded()
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
@given(st.lists(programs(MIXED), min_size=10, max_size=10))
def test_generated_placements_of_reductions_compile_with_nvrtc(batch: list[Program]):
    bodies = [engine.cuda_source(p.fusion(f"case{n}"), p.arrays()).body for n, p in enumerate(batch)]
    assert nvrtc.compile_ptx(cuda.with_prelude("\n".join(bodies)), "generated", "sm_90", ("-G",))
