"""Schedulers apply their heuristics as transforms (reorder, merge, parallelize) to a loop domain of
each written tensor's own, and lowering reads the loop nest back from it."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import engine, schedule
from braze.ir.domain import Merge, ParallelType, Reorder
from braze.kir import nodes as k
from braze.lower.fusion_kernel import lower
from braze.schedule.loops import schedule_loops


def _loops(kernel: k.Kernel) -> list[k.For]:
    return [s for task in kernel.tasks for s in task.body if isinstance(s, k.For)]


def _fusion(rank: int, op=lambda t: t * 2.0, **output):
    with bz.Fusion() as f:
        x = f.define_tensor((-1,) * rank)
        f.add_output(op(x), **output)
    return f


@pytest.mark.parametrize(("rank", "text"), [(0, "[]"), (1, "[i0{blockIdx.x}]"),
                                            (2, "[i0{blockIdx.x}, i1{vectorize}]"),
                                            (4, "[merge(merge(i0, i1), i2){blockIdx.x}, i3{vectorize}]")])
def test_pointwise_outer_axes_merge_into_the_parallel_dimension(rank, text):
    f = _fusion(rank)
    (loops,) = schedule.plan(f, set()).loops
    assert loops.text() == text
    assert loops.loop_order == tuple(range(rank))
    assert loops.vectorized == (rank >= 2)


def test_the_transforms_are_recorded_in_order():
    f = _fusion(3)
    (loops,) = schedule.plan(f, set()).loops
    reorder, merged = loops.transforms
    assert isinstance(reorder, Reorder) and reorder.old_to_new == (0, 1, 2)
    assert isinstance(merged, Merge) and merged.out is loops.domain[0]
    assert (merged.outer, merged.inner) == loops.roots[:2]
    assert loops.domain[0].definition is merged and loops.domain[1] is loops.roots[2]


def test_a_channels_last_output_puts_channels_innermost():
    f = _fusion(4, stride_order=(3, 0, 2, 1))  # NCHW laid out as NHWC
    (loops,) = schedule.plan(f, set()).loops
    assert loops.loop_order == (0, 2, 3, 1)
    assert loops.text() == "[merge(merge(i0, i2), i3){blockIdx.x}, i1{vectorize}]"


def test_softmax_over_the_first_axis_reduces_along_the_vectorized_loop():
    f = _fusion(2, lambda t: bz.ops.softmax(t, axis=0))
    plan = schedule.plan(f, set())
    (heuristics,), (loops,) = plan.heuristics, plan.loops
    assert heuristics.scheduler == "normalization"
    assert loops.text() == "[i1{blockIdx.x}, i0{vectorize}]"


def test_lowering_follows_the_scheduled_domain():
    f = _fusion(2)
    out = f.outputs[0].tv
    natural = lower(f, [out], {id(out): schedule_loops(out, (0, 1))}, {}, "natural")[0]
    swapped = lower(f, [out], {id(out): schedule_loops(out, (1, 0))}, {}, "swapped")[0]
    inner_extent = [str(s.end) for s in _loops(natural)], [str(s.end) for s in _loops(swapped)]
    assert inner_extent[0] != inner_extent[1]  # the vectorized loop runs over the other axis
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = f.execute([x])
    np.testing.assert_array_equal(y, x * 2)


def test_scheduling_leaves_the_users_tensor_alone():
    f = _fusion(3)
    out = f.outputs[0].tv
    before = list(out.loop)
    schedule.plan(f, set())
    f.execute([np.ones((2, 3, 4), np.float32)])
    assert out.loop == before and all(d.parallel is ParallelType.SERIAL for d in out.loop)


def test_the_scheduler_params_dump_shows_heuristics_and_loops(capsys):
    f = _fusion(2, lambda t: bz.ops.softmax(t, axis=-1))
    with bz.config.scope(dump={"scheduler_params"}):
        f.execute([np.ones((2, 3), np.float32)])
    err = capsys.readouterr().err
    assert "normalization loop_order=(0, 1) loops=[i0{blockIdx.x}, i1{vectorize}]" in err


@pytest.mark.parametrize("gpu, text, vectorized", [(False, "[i0{blockIdx.x}, i1{vectorize}]", True),
                                                   (True, "[merge(i0, i1){blockIdx.x}]", False)])
def test_a_middle_axis_sum_on_a_gpu_merges_every_output_axis(gpu, text, vectorized):
    # sum over axis 1 of [A, B, C]: on a GPU every output index is a task index (an outer
    # reduction's column), not C of them in a loop inside each of A tasks.
    f = _fusion(3, lambda t: bz.ops.sum(t, axes=[1]))
    plan = schedule.plan(f, set(), gpu=gpu)
    (heuristics,), (loops,) = plan.heuristics, plan.loops
    assert heuristics.vectorize == vectorized and loops.text() == text and loops.vectorized == vectorized
    (task,) = lower(f, plan.writes, plan.scheduled, {}, "middle")[0].tasks
    assert any(isinstance(s, k.For) for s in task.body)  # the reduced axis, inside each task index
    if gpu:  # both output indices decomposed from the task index, no loop over C
        assert not any(isinstance(s, k.For) and s.vectorize for s in task.body)


def test_softmax_keeps_its_vectorized_row_on_a_gpu():
    f = _fusion(2, lambda t: bz.ops.softmax(t, axis=-1))
    (loops,) = schedule.plan(f, set(), gpu=True).loops
    assert loops.vectorized


def test_a_task_reading_statistics_an_earlier_task_wrote_is_pointwise_on_a_gpu():
    # group_norm: the statistics of x reshaped to [N, G, -1] are tasks of their own; the
    # normalization reads them, so on a GPU it is pointwise (its rows are the innermost axis, read
    # 16 bytes at a time) instead of a normalization whose broadcast went through the reshape.
    with bz.Fusion() as f:
        x = f.define_tensor([-1, 8, -1, -1])
        grouped = bz.ops.reshape(x, [x.shape[0], 4, -1])
        f.add_output(bz.ops.reshape(bz.ops.layer_norm(grouped), x.shape))
    gpu = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [np.zeros((2, 8, 3, 4), np.float32)])),
                             views_on_host=False, gpu=True)[0]
    assert [h.scheduler for h in gpu.heuristics] == ["reduction", "reduction", "pointwise"]
    assert gpu.loops[-1].vectorized
    # Computing the statistics itself, it stays a normalization; the CPU keeps its schedules.
    assert schedule.heuristics_for(gpu.writes[-1], gpu=True).scheduler == "normalization"
    cpu = schedule.plan(f, {id(t) for t in gpu.writes[:-1]}, cpu=True)
    assert cpu.heuristics[-1].scheduler != "pointwise"
