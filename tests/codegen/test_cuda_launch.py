"""The CUDA launch planner (braze/codegen/cuda_launch.py) on its own, no GPU and no compiler: a
LaunchPlanner built from a kernel's generated tasks, a made-up SM count and occupancy, and a `wider`
callback that stands for the recompile of the kernel for a wider block."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

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


@functools.cache
def bfloat16_layer_norm_rows(dtype=bz.bfloat16) -> tuple:
    """The generated tasks of layer_norm over rows of 4096 (bfloat16 unless told), and extents of 64 rows."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.layer_norm(f.define_tensor((-1, -1), dtype=dtype)))
    bound = bind_inputs(f, [np.ones((64, 4096), dtype.numpy)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    generated = cuda.generate(kernel, restrict=True)
    return task_launches(kernel, generated, {name: name for name in generated.functions}), dict(bound.bindings)


def narrow_planner(sm_count: int, dtype=bz.bfloat16, block: int = 256) -> tuple[LaunchPlanner, list[int]]:
    """A planner of `bfloat16_layer_norm_rows`' tasks whose recompiles are recorded (the blocks asked)."""
    asked: list[int] = []

    def recompiled(block: int) -> LaunchPlanner:
        asked.append(block)
        return narrow_planner(sm_count, dtype, block)[0]

    tasks, _ = bfloat16_layer_norm_rows(dtype)
    return LaunchPlanner(tasks, block, sm_count, lambda name, block, shared: 1, recompiled), asked


def test_many_rows_of_two_byte_elements_take_blocks_of_128() -> None:
    """Rows of 4096 bfloat16 that 256 threads keep in registers (32 bytes a thread) run on blocks of
    128 threads of 64 bytes each, where there are at least 8 rows an SM: 64 rows on 8 SMs."""
    _, scalars = bfloat16_layer_norm_rows()
    planner, asked = narrow_planner(sm_count=8)
    (planned,) = planner.plan(scalars)
    assert asked == [128] and (planned.block, planned.scalars[0], planned.grid) == (128, 128, 64)
    assert planned.scalars[1] == 0  # the row stays in registers: no shared-memory row cache
    with bz.config.scope(disable="narrow_blocks"):
        planner, asked = narrow_planner(sm_count=8)
        (planned,) = planner.plan(scalars)
    assert asked == [] and (planned.block, planned.scalars[0]) == (0, 256)


@pytest.mark.parametrize("sm_count, dtype", [(9, bz.bfloat16), (8, bz.float32)])
def test_few_rows_or_four_byte_rows_keep_the_planners_block(sm_count, dtype) -> None:
    _, scalars = bfloat16_layer_norm_rows(dtype)
    planner, asked = narrow_planner(sm_count, dtype)
    (planned,) = planner.plan(scalars)
    assert asked == [] and (planned.block, planned.scalars[0]) == (0, 256)


def test_launch_params_dump_names_each_launch_with_its_block(capsys) -> None:
    _, scalars = log_softmax_rows()
    with bz.config.scope(dump={"launch_params"}):
        planner(wider=lambda block: planner(block)).plan(scalars)
    text = capsys.readouterr().err
    assert "rows range=[0, 64) grid=64 block=512" in text and "lanes=512" in text


def rope_launch(x_shape: tuple[int, ...], sm_count: int = 4):
    """The planned launch of RoPE (halves swapped by slices and cat, cos and sin broadcast over batch
    and heads) over bfloat16 `x_shape`, on a planner of `sm_count` SMs holding a block each."""
    d = x_shape[-1]
    with bz.Fusion() as f:
        x = bz.ops.cast(f.define_tensor((-1, -1, -1, d), dtype=bz.bfloat16), bz.float32)
        cos, sin = (bz.ops.cast(f.define_tensor((1, -1, 1, d), dtype=bz.bfloat16), bz.float32) for _ in "cs")
        rotated = bz.ops.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
        f.add_output(bz.ops.cast(x * cos + rotated * sin, bz.bfloat16))
    table = np.ones((1, x_shape[1], 1, d), ml_dtypes.bfloat16)
    bound = bind_inputs(f, [np.ones(x_shape, ml_dtypes.bfloat16), table, table])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    generated = cuda.generate(kernel, restrict=True)
    tasks = task_launches(kernel, generated, {name: name for name in generated.functions})
    (planned,) = LaunchPlanner(tasks, 256, sm_count, lambda name, block, shared: 1).plan(dict(bound.bindings))
    return planned


@pytest.mark.parametrize("d, rows_a_thread", [(128, 4), (2048, 4)])
def test_rows_that_set_up_divisors_take_several_rows_a_thread(d, rows_a_thread):
    """RoPE's rows split their index by two extents with fast divisors, set up once a thread: rows of
    128 on 8 lanes (16 elements a thread a row) take 4 rows a thread, so the setup is spread over 64
    elements, as rows of 2048 on 128 lanes do."""
    planned = rope_launch((2, 64, 4, d))
    assert planned.task.thread_divisors == 2
    rows_a_block = 256 // planned.scalars[0]
    assert planned.grid == -(-512 // (rows_a_block * rows_a_thread))
    with bz.config.scope(disable="divisor_rows"):
        assert rope_launch((2, 64, 4, d)).grid == -(-512 // rows_a_block)


def test_rows_a_thread_never_leave_the_gpu_less_than_full():
    """On 16 SMs, RoPE's 16 blocks of rows (512 rows of 128 on 8 lanes) stay 16, a row a thread,
    where 4 rows a thread would leave 12 SMs idle; on 8, 8 blocks of 2 rows a thread."""
    assert rope_launch((2, 64, 4, 128), sm_count=16).grid == 16
    assert rope_launch((2, 64, 4, 128), sm_count=8).grid == 8


def test_rows_without_divisors_take_a_row_a_thread():
    """A bias added along rows needs no division: a block for each group of rows, as many as there are."""
    with bz.Fusion() as f:
        f.add_output(bz.ops.tanh(f.define_tensor((-1, -1)) + f.define_tensor((-1,))))
    bound = bind_inputs(f, [np.ones((512, 128), np.float32), np.ones(128, np.float32)])
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, bound), views_on_host=False, gpu=True)
    generated = cuda.generate(kernel, restrict=True)
    tasks = task_launches(kernel, generated, {name: name for name in generated.functions})
    (planned,) = LaunchPlanner(tasks, 256, 4, lambda name, block, shared: 1).plan(dict(bound.bindings))
    assert planned.task.thread_divisors == 0 and planned.grid == -(-512 // (256 // planned.scalars[0]))
