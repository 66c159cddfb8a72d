"""What planning keeps on Kernel IR instead of asking again (kir.kept, fuse_tasks' _kept and
remembered_walks) must be what asking again would give: a merged task's accesses, size and names
come from its parts, a merge's sibling loops from its first task's, and no kept answer carries a
knob from one plan to the next."""

import dataclasses
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from test_fuzz_tasks import inputs, load, programs, render

import braze as bz
from braze import config, engine
from braze.dtypes import float32, int32
from braze.kir import nodes as k
from braze.passes import fuse_tasks as ft

X = k.ArrayParam("x", float32, 2)
OUT = k.ArrayParam("out", float32, 1)
COLUMN, ROW = k.Var("i", int32), k.Var("r", int32)
ZERO = k.Const(0, int32)
ROWS = k.ArrayExtent(X, 0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_a_merged_task_keeps_what_a_walk_of_it_finds(program):
    arrays, columns, _, tasks = program
    kernel = bz.kernel(load(render(arrays, columns, tasks, atomics=True)))
    merged = []
    keep_parts = ft._keep_parts

    def kept_and_noted(task, a, b, second):
        keep_parts(task, a, b, second)
        merged.append(task)

    with mock.patch.object(ft, "_keep_parts", kept_and_noted):
        kernel.cuda_source(*inputs(arrays, columns, False, 0))
    event(f"{len(merged)} merges")
    for task in merged:
        fresh = dataclasses.replace(task)  # the same task with nothing kept on it
        kept = task.__dict__
        assert kept["_fuse_accesses"] == ft._accesses_or_reject(fresh)
        assert kept.get("_fuse_reject_detail") == fresh.__dict__.get("_fuse_reject_detail")
        assert kept["_fuse_size"] == ft.body_size(fresh.body)
        assert kept["_fuse_var_names"] == ft._var_names(fresh)


def _column_sums(name: str, count: int) -> k.Task:
    """`count` sums over the rows of column i (each a loop of its own, which fuse_sibling_loops joins)."""
    body = []
    for n in range(count):
        acc = k.Var(f"{name}{n}", float32)
        fold = k.Assign(acc, k.Binary("reduce_add", acc, k.Load(X, (ROW, COLUMN)), float32))
        body += [k.Let(acc, k.Const(0.0, float32)), k.For(ROW, ZERO, ROWS, (fold,)),
                 k.Store(OUT, (COLUMN,), acc)]
    return k.Task(name, "range_for", tuple(body), COLUMN, ZERO, k.ArrayExtent(X, 1))


def test_sibling_loops_of_a_merge_go_on_from_its_first_tasks():
    """Under remembered_walks() the loops of a merge of merges are joined from the first task's
    answer; the task made must be the one a search of the whole body makes."""
    a, b, c = _column_sums("a", 3), _column_sums("b", 2), _column_sums("c", 1)
    with ft.remembered_walks():
        ab = ft.merged_task(a, b)
        ft.fuse_sibling_loops(ab)  # kept, and then what the next merge starts from
        abc = ft.merged_task(ab, c)
        incremental = ft.fuse_sibling_loops(abc)
        assert ft.merged_task(ab, c) is abc  # one merge, however often asked
    whole = ft.fuse_sibling_loops(dataclasses.replace(abc))
    assert incremental == whole
    assert sum(isinstance(s, k.For) for s in whole.body) == 1


def _grads() -> bz.Fusion:
    """Two column sums and two pointwise outputs: a GPU plan merges each pair (engine._merged_row_tasks)."""
    with bz.Fusion(name="grads") as f:
        x, y = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
        f.add_output(bz.ops.sum(x, axes=[0]))
        f.add_output(bz.ops.sum(x * y, axes=[0]))
        f.add_output(x * 2.0)
        f.add_output(y + 1.0)
    return f


def _unmerged_gpu_kernel() -> k.Kernel:
    """The GPU plan's Kernel IR of `_grads` as the task merges get it."""
    seen = []
    merged_row_tasks = engine._merged_row_tasks
    with mock.patch.object(engine, "_merged_row_tasks", lambda kernel: seen.append(kernel) or merged_row_tasks(kernel)):
        engine.cuda_source(_grads(), [np.ones((64, 32), np.float32)] * 2)
    return seen[0]


def test_kept_answers_carry_no_knob_from_one_plan_to_the_next():
    """The same tasks merged under other knobs: what was kept on them (accesses, sizes, schedules)
    holds whatever the knobs, and the decisions that depend on the knobs are made again."""
    kernel = _unmerged_gpu_kernel()
    names = lambda kernel: [t.name for t in kernel.tasks]  # noqa: E731
    merged = names(engine._merged_row_tasks(kernel))
    assert len(merged) == 2
    with config.scope(fuse_tasks_budget=1):
        assert names(engine._merged_row_tasks(kernel)) == names(kernel)
    with config.scope(fuse_tasks=False):
        assert names(engine._merged_row_tasks(kernel)) == names(kernel)
    assert names(engine._merged_row_tasks(kernel)) == merged


def test_a_fusion_planned_under_a_knob_and_then_without_gets_each_plan():
    f, arrays = _grads(), [np.ones((64, 32), np.float32)] * 2
    merged = engine.cuda_source(f, arrays)
    with config.scope(fuse_tasks_budget=1):
        apart = engine.cuda_source(f, arrays)
        assert apart == engine.cuda_source(_grads(), arrays)
    assert apart.count("__global__") > merged.count("__global__")
    assert engine.cuda_source(f, arrays) == merged
