"""Tasks over one range brought together before task fusion (passes/fuse_tasks.py, grouped_by_range):
moved only past tasks they share no array with; and a gradient region whose column sums
of two widths interleave becomes one launch a width on a GPU, with the reference's results."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import dtypes as dt
from braze import engine
from braze.kir import nodes as k
from braze.passes.fuse_tasks import grouped_by_range

I32, F32 = dt.int32, dt.float32
ZERO = k.Const(0, I32)


def _array(name: str) -> k.ArrayParam:
    return k.ArrayParam(name, F32, 1, (1,))


def _copy(name: str, extent: int, source: str, target: str) -> k.Task:
    """out[p] = in[p] + 1 over [0, extent)."""
    p = k.Var("p", I32)
    value = k.Binary("add", k.Load(_array(source), (p,)), k.Const(1.0, F32), F32)
    return k.Task(name, "range_for", (k.Store(_array(target), (p,), value),), p, ZERO, k.Const(extent, I32))


def _kernel(*tasks: k.Task) -> k.Kernel:
    names = sorted({n.param.name for t in tasks for s in t.body for n in (s, s.value.a)})
    return k.Kernel("grouped", tuple(_array(n) for n in names), tasks)


def _order(kernel: k.Kernel) -> list[str]:
    return [t.name for t in kernel.tasks]


def test_a_task_moves_up_to_the_last_task_over_its_range():
    kernel = _kernel(_copy("a8", 8, "x", "a"), _copy("b16", 16, "y", "b"), _copy("c8", 8, "z", "c"))
    assert _order(grouped_by_range(kernel)) == ["a8", "c8", "b16"]


def test_a_task_reading_what_a_task_between_wrote_stays_after_it():
    kernel = _kernel(_copy("a8", 8, "x", "a"), _copy("b16", 16, "y", "b"), _copy("c8", 8, "b", "c"))
    assert _order(grouped_by_range(kernel)) == ["a8", "b16", "c8"]


def test_a_task_writing_what_a_task_between_reads_stays_after_it():
    kernel = _kernel(_copy("a8", 8, "x", "a"), _copy("b16", 16, "y", "b"), _copy("c8", 8, "z", "y"))
    assert _order(grouped_by_range(kernel)) == ["a8", "b16", "c8"]


def test_a_task_reading_what_a_task_between_reads_stays_after_it():  # the two may be paired later
    kernel = _kernel(_copy("a8", 8, "x", "a"), _copy("b16", 16, "y", "b"), _copy("c8", 8, "y", "c"))
    assert _order(grouped_by_range(kernel)) == ["a8", "b16", "c8"]


def test_tasks_of_another_kind_are_not_grouped():
    kernel = _kernel(_copy("a8", 8, "x", "a"), _copy("b16", 16, "y", "b"), _copy("c8", 8, "z", "c"))
    kinds = {"a8": "rows", "b16": "rows", "c8": "columns"}
    assert _order(grouped_by_range(kernel, lambda t: kinds[t.name])) == ["a8", "b16", "c8"]


WIDTHS = (8, 24, 8, 24, 8)  # bias gradients of layers of two widths, in layer order


def test_interleaved_column_sums_of_two_widths_are_one_task_a_width_on_a_gpu():
    with bz.Fusion(name="gradients") as f:
        for width in WIDTHS:  # rows of one static extent, as a model's tokens are
            f.add_output(f.define_tensor([300, width], dtype=bz.float32).sum(0))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((300, width)).astype(np.float32) for width in WIDTHS]
    key = engine.signature(f, engine.bind_inputs(f, arrays))
    _, kernel, _ = engine.plan_kernel(f, key, views_on_host=False, gpu=True)
    assert len(kernel.tasks) == 2
    bound = engine.bind_inputs(f, arrays)
    results = engine.compile_fusion(f, key, engine.lower_fusion(f, key, 0)).run(bound)
    for result, a in zip(results, arrays):
        np.testing.assert_allclose(np.asarray(result), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
