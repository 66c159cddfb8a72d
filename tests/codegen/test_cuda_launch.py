"""The CUDA launch planner (braze/codegen/cuda_launch.py) on its own, no GPU and no compiler: a
LaunchPlanner built from a kernel's generated tasks, a made-up SM count and occupancy, and a `wider`
callback that stands for the recompile of the kernel for a wider block."""

from __future__ import annotations

import functools

import numpy as np

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_launch import LaunchPlanner, task_launches
from braze.runtime.inputs import bind_inputs


@functools.cache
def log_softmax_rows() -> tuple:
    """The generated tasks of log_softmax over float32 rows, and the extents of 64 rows of 12000."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.log_softmax(f.define_tensor((-1, -1)), -1))
    bound = bind_inputs(f, [np.ones((64, 12000), np.float32)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    generated = cuda.generate(kernel, restrict=True)
    return task_launches(kernel, generated, {name: name for name in generated.functions}), dict(bound.bindings)


def planner(block: int = 256, wider=None) -> LaunchPlanner:
    tasks, _ = log_softmax_rows()
    return LaunchPlanner(tasks, block, sm_count=4, resident_blocks=lambda name, block, shared: 1, wider=wider)


def test_a_wider_block_is_planned_by_the_planner_the_callback_returns() -> None:
    asked = []

    def wider(block: int) -> LaunchPlanner:
        asked.append(block)
        return planner(block)

    _, scalars = log_softmax_rows()
    # 256 threads hold 8192 float32 of a row in registers, 512 hold 16384: a row of 12000 takes 512.
    (planned,) = planner(wider=wider).plan(scalars)
    assert asked == [512] and (planned.block, planned.scalars[0], planned.grid) == (512, 512, 64)
    (own,) = planner(wider=None).plan(scalars)  # no recompile to ask for: the planner's own block
    assert (own.block, own.scalars[0]) == (0, 256)


def test_launch_params_dump_names_each_launch_with_its_block(capsys) -> None:
    _, scalars = log_softmax_rows()
    with bz.config.scope(dump={"launch_params"}):
        planner(wider=lambda block: planner(block)).plan(scalars)
    text = capsys.readouterr().err
    assert "rows range=[0, 64) grid=64 block=512" in text and "lanes=512" in text
