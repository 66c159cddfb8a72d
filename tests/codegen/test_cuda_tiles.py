"""The CUDA of tile tasks (braze/codegen/cuda_tiles.py), no GPU needed: a transposed read takes the
tile path, which reads are staged through shared memory and which are preloaded into registers, the
budgets that bound both, the launch (a block a tile), and generated transposes (permutations of 2-D to
4-D tensors, several transposed tensors, inputs passed as transposed views, pads and wheres around
them, every dtype, int32 and int64 indices) compiled with NVRTC."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_launch import LaunchPlanner, task_launches
from braze.codegen.cuda_tiles import PRELOAD_BYTES, TILE_SHARED_BYTES, pad, plan_tiles
from braze.compile import nvrtc
from braze.runtime.inputs import bind_inputs

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
NUMPY = {bz.float32: np.float32, bz.float64: np.float64, bz.float16: np.float16, bz.bfloat16: ml_dtypes.bfloat16,
         bz.int32: np.int32, bz.int64: np.int64, bz.int8: np.int8, bz.bool_: np.bool_}


def transposed_add(dtype=bz.float32, name: str = "fusion") -> bz.Fusion:
    with bz.Fusion(name=name) as f:
        x, y = f.define_tensor((-1, -1), dtype=dtype), f.define_tensor((-1, -1), dtype=dtype)
        f.add_output(x + y.T)
    return f


def lowered(f: bz.Fusion, inputs: list, wide: bool = False):
    """The fusion's Kernel IR planned for a GPU at the signature of `inputs` (with int64 indices, as
    for arrays past int32's reach, when `wide`), and its CUDA."""
    key = engine.signature(f, bind_inputs(f, inputs))
    if wide:
        key = (key[0], "int64", *key[2:])
    _, kernel, _ = engine.plan_kernel(f, key, views_on_host=False, gpu=True)
    return kernel, cuda.generate(kernel, restrict=True)


def test_x_plus_y_transposed_stages_y_and_preloads_x():
    x, y = np.ones((67, 130), np.float32), np.ones((130, 67), np.float32)
    kernel, src = lowered(transposed_add(), [x, y])
    assert [s.kind for s in src.schedules] == ["tiles"]
    plan = plan_tiles(kernel.tasks[0], cuda.DEFAULT_BLOCK_SIZE)
    assert [load.param.name for load in plan.staged] == ["T1"]  # y, read along its rows into shared memory
    assert [load.param.name for load in plan.preloaded] == ["T0"]  # x, read along the columns into registers
    assert (plan.tile, plan.steps, plan.step_rows) == (32, 4, 8)
    body = src.body
    assert "__shared__ float bz_tile0[32][33];" in body and "float bz_pre0[4];" in body
    # Loads first, clamped and branch-free; one barrier; the elements; a barrier before the next tile.
    assert body.count("__syncthreads();") == 2
    assert "bz_tile0[tile_y + bz_n * 8][tile_x] = T1_[" in body
    assert "bz_add(bz_pre0[bz_n], bz_tile0[tile_x][tile_y + bz_n * 8])" in body
    assert "if (active" not in body


def test_two_byte_elements_take_64_by_64_tiles_with_rows_4_bytes_odd_apart():
    x = np.ones((67, 130), ml_dtypes.bfloat16)
    kernel, src = lowered(transposed_add(bz.bfloat16), [x, x.T.copy()])
    assert "__shared__ __nv_bfloat16 bz_tile0[64][66];" in src.body
    assert plan_tiles(kernel.tasks[0], 256).steps == 16
    assert [pad(size) for size in (1, 2, 4, 8)] == [4, 2, 1, 1]


def test_staged_tiles_and_preloaded_registers_stay_within_their_budgets():
    count = 9
    with bz.Fusion() as f:
        xs = [f.define_tensor((-1, -1)) for _ in range(2 * count)]
        out = xs[0]
        for t in xs[1:count]:
            out = out + t
        for t in xs[count:]:
            out = out * t.T
        f.add_output(out)
    a = np.ones((40, 50), np.float32)
    kernel, src = lowered(f, [a] * count + [a.T.copy()] * count)
    plan = plan_tiles(kernel.tasks[0], 256)
    staged = TILE_SHARED_BYTES // (32 * 33 * 4)
    assert len(plan.staged) == staged < count and len(plan.preloaded) == PRELOAD_BYTES // (4 * 4) < count
    assert src.body.count("__shared__") == staged


def test_conditional_and_gathered_reads_are_read_in_place():
    """A pad's read happens only inside the padded region, and a gather's index is known only as
    its element runs: neither is staged or preloaded."""
    with bz.Fusion() as f:
        x, ids = f.define_tensor((-1, -1)), f.define_tensor((-1, -1), dtype=bz.int32)
        f.add_output(bz.ops.pad(x.T, [(1, 1), (2, 0)], 0.0))
        f.add_output(bz.ops.where(bz.ops.cast(ids.T, bz.bool_), x.T, 1.0))
    kernel, src = lowered(f, [np.ones((9, 7), np.float32), np.ones((9, 7), np.int32)])
    padded, chosen = (plan_tiles(t, 256) for t in kernel.tasks)
    assert not padded.staged and not padded.preloaded
    assert [load.param.name for load in chosen.staged] == ["T1", "T0"]  # where's operands: both in bounds
    assert [s.kind for s in src.schedules] == ["tiles", "tiles"]


def test_a_block_a_tile():
    x, y = np.ones((67, 130), np.float32), np.ones((130, 67), np.float32)
    kernel, src = lowered(transposed_add(), [x, y])
    tasks = task_launches(kernel, src, {name: None for name in src.functions})
    planner = LaunchPlanner(tasks, 256, sm_count=1, resident_blocks=lambda name, block, shared: 1)
    (planned,) = planner.plan({"T0_s0": 67, "T0_s1": 130})
    assert planned.task.schedule.kind == "tiles"
    assert (planned.begin, planned.end, planned.grid, planned.shared) == (0, 3 * 5, 3 * 5, 0)
    assert planner.plan({"T0_s0": 0, "T0_s1": 130}) == []  # no rows: no launch


def test_straight_fusions_keep_the_pointwise_path():
    a = np.ones((64, 64), np.float32)
    with bz.Fusion() as f:
        x, y, z = (f.define_tensor((-1, -1)) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    _, src = lowered(f, [a, a, a])
    assert [s.kind for s in src.schedules] == ["rows"] and "__shared__" not in src.body


@needs_nvrtc
def test_the_tile_kernel_compiles_optimized():
    x, y = np.ones((8192, 4096), np.float32), np.ones((4096, 8192), np.float32)
    _, src = lowered(transposed_add(), [x, y])
    assert nvrtc.compile_cubin(src.text, "add_transpose", "sm_90")[:4] == b"\x7fELF"


# --- generated transposes, compiled with NVRTC ----------------------------------------------------------
DTYPES = [bz.float32, bz.float64, bz.float16, bz.bfloat16, bz.int32, bz.int64, bz.int8, bz.bool_]


@st.composite
def transposes(draw, name: str) -> tuple[bz.Fusion, list[np.ndarray]]:
    """A fusion of a few transposed reads (permutes moving the innermost axis, or inputs that are
    permuted views), a straight one, maybe a pad or a where around them, with its inputs."""
    rank = draw(st.integers(2, 4))
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.sampled_from([3, 33, 70]), min_size=rank, max_size=rank)))
    perms = draw(st.lists(st.permutations(range(rank)).filter(lambda p: p[-1] != rank - 1), min_size=1, max_size=3))
    as_views = draw(st.lists(st.booleans(), min_size=len(perms), max_size=len(perms)))
    wrap = draw(st.sampled_from(["none", "pad", "where"]))
    inputs, out = [], None
    with bz.Fusion(name=name) as f:
        for perm, view in zip(perms, as_views):
            t = f.define_tensor((-1,) * rank, dtype=dtype)
            source = np.zeros([shape[perm.index(a)] for a in range(rank)], NUMPY[dtype])
            if view:  # a view of the permuted shape over the source's memory: its strides transpose it
                inputs.append(np.transpose(source, perm))
            else:
                inputs.append(source)
                t = bz.ops.permute(t, perm)
            out = t if out is None else out + t
        straight = f.define_tensor((-1,) * rank, dtype=dtype)
        inputs.append(np.zeros(shape, NUMPY[dtype]))
        out = out + straight
        if wrap == "pad":
            out = bz.ops.pad(out, [(1, 0)] + [(0, 2)] * (rank - 1), 0)
        elif wrap == "where":
            out = bz.ops.where(bz.ops.cast(straight, bz.bool_), out, straight)
        f.add_output(out)
    return f, inputs


@needs_nvrtc
@settings(max_examples=10, deadline=None)
@given(st.data())
def test_generated_transposes_take_tiles_and_compile(data):
    """Eight programs a translation unit (NVRTC parses the prelude once), unoptimized (-G): the front
    end and code generation, quickly."""
    bodies = []
    for n in range(8):
        f, inputs = data.draw(transposes(f"tiles{n}"))
        _, src = lowered(f, inputs, wide=data.draw(st.booleans(), label="int64 indices"))
        assert [s.kind for s in src.schedules] == ["tiles"], src.body
        bodies.append(src.body)
    source = cuda.with_prelude("\n".join(bodies))
    assert re.search(r"bz_tile\d+\[", source)
    nvrtc.compile_ptx(source, "tiles", "sm_90", ("-G",))
