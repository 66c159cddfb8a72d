"""argmax and argmin, whose lanes keep pairs (a value and its index), over few long rows or a whole
tensor, through their generated CUDA run on
the CPU (tests/cuda_on_cpu.py) with fake GPUs small enough that such rows split across blocks (the
split path of "rows" and the "flat" schedule: the blocks' pairs meet in the workspace). Values are
drawn from a few integers, so ties are common, with NaN and infinities mixed in: the result must be
NumPy's first occurrence exactly, wherever the blocks' boundaries fall. A few examples a run
(BRAZE_FUZZ_SCALE, tests/fuzz_scale.py, draws more)."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, planned_launches, run_on_cpu
from fuzz_scale import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import braze as bz

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

DTYPES = {"float32": (bz.float32, np.float32), "float64": (bz.float64, np.float64), "int32": (bz.int32, np.int32),
          "bfloat16": (bz.bfloat16, bz.bfloat16.numpy), "uint8": (bz.uint8, np.uint8)}
# (rank, reduced axes); None: every axis
LAYOUTS = [(2, (1,)), (3, (1, 2)), (3, (2,)), (1, None), (2, None), (3, None), (2, (0,))]


def values(data, shape: tuple[int, ...], dtype) -> np.ndarray:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(0 if dtype == np.uint8 else -4, 5, size=shape).astype(dtype)  # ties everywhere
    if np.dtype(dtype).kind in "fV" and x.size:  # V: bfloat16
        special = data.draw(st.sampled_from(["none", "nan", "inf", "-inf", "all -inf"]))
        flat = x.reshape(-1)
        spots = rng.integers(0, flat.size, size=data.draw(st.integers(1, 3)))
        if special == "all -inf":
            flat[:] = -np.inf
        elif special != "none":
            flat[spots] = float(special)
    return x


def reference(op: str, x: np.ndarray, axes) -> np.ndarray:
    x = x.astype(np.float64)  # exact for every dtype drawn
    if axes is None:
        return np.asarray(getattr(np, op)(x.reshape(-1)))
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [-1])
    return getattr(np, op)(moved, axis=-1)


@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_argmax_and_argmin_over_rows_split_across_blocks(data):
    rank, axes = data.draw(st.sampled_from(LAYOUTS))
    name = data.draw(st.sampled_from(sorted(DTYPES)))
    bz_dtype, np_dtype = DTYPES[name]
    long_axes = range(rank) if axes is None else axes
    shape = tuple(data.draw(st.integers(1, 2500 // rank) if a in long_axes and (axes is None or len(axes) == 1)
                            else st.integers(6, 50) if a in long_axes else st.integers(1, 3)) for a in range(rank))
    op = data.draw(st.sampled_from(["argmax", "argmin"]))
    with_max = data.draw(st.booleans())  # a plain reduction of the same row beside the pair
    with bz.Fusion() as f:
        x = f.define_tensor([-1] * rank, dtype=bz_dtype)
        f.add_output(getattr(bz.ops, op)(x, axes))
        if with_max:
            f.add_output(bz.ops.sum(x, axes))
    x_np = values(data, shape, np_dtype)
    gpu = {"sm_count": data.draw(st.integers(1, 8)), "resident": data.draw(st.integers(1, 4)),
           "block_size": data.draw(st.sampled_from([32, 64, 256]))}  # narrow blocks split shorter rows
    launches = planned_launches(f, [x_np], **gpu)
    event("split" if any(p.task.schedule.kind == "flat" and p.grid > 1 or p.scalars[0] == 0 and p.scalars[1] > 1
                         for p in launches) else "one block a row")
    outs, _ = run_on_cpu(f, [x_np], **gpu)
    np.testing.assert_array_equal(outs[0], reference(op, x_np, axes))
    if with_max:
        wide = x_np.astype(np.float64)
        expected = reference("sum", wide, axes) if axes is not None else wide.sum()
        rtol = 2.0 ** -8 if name == "bfloat16" else 1e-6  # a bfloat16 sum is rounded to bfloat16
        np.testing.assert_allclose(outs[1].astype(np.float64), expected, rtol=rtol)


@pytest.mark.parametrize("shape, axes", [((2, 3000), (1,)), ((3000,), None), ((3, 40, 50), (1, 2))])
def test_a_few_long_argmax_rows_and_a_whole_argmax_split_across_blocks(shape, axes):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[-7] = 50.0  # the maximum in the last block
    x.reshape(-1)[3] = 50.0  # and a tie with an earlier one: the first wins
    with bz.Fusion() as f:
        f.add_output(bz.ops.argmax(f.define_tensor([-1] * len(shape)), axes))
    gpu = {"sm_count": 8, "resident": 2, "block_size": 32}
    [launch] = planned_launches(f, [x], **gpu)
    assert launch.grid > (shape[0] if axes else 1)  # the rows (the tensor) span several blocks
    outs, _ = run_on_cpu(f, [x], **gpu)
    np.testing.assert_array_equal(outs[0], reference("argmax", x, axes))




def test_rows_split_across_blocks_run_a_function_of_their_own():
    """The split path of a row task is a function of its own (its registers apart from the row
    function's); the row function leaves it out. `BRAZE_DISABLE=split_functions`: one function with
    both paths. Either way the same argmax and sum."""
    x = np.random.default_rng(2).standard_normal((2, 3000)).astype(np.float32)
    with bz.Fusion() as f:
        t = f.define_tensor([-1, -1])
        f.add_output(bz.ops.argmax(t, (1,)))
        f.add_output(bz.ops.sum(t, (1,)))
    gpu = {"sm_count": 8, "resident": 2, "block_size": 32}
    for disabled, suffix in (((), "_split"), (("split_functions",), "")):
        with bz.config.scope(disable=",".join(disabled)):
            [launch] = planned_launches(f, [x], **gpu)
            assert launch.scalars[0] == 0 and launch.grid > 2  # each row over several blocks
            assert launch.function_name == launch.task.name + suffix
            rows = bz.engine.cuda_source(f, [x]).body.split(f"\n{launch.task.name}(")[1].split("\n}\n")[0]
            assert ("if (lanes == 0) {" in rows) == bool(disabled)
            outs, _ = run_on_cpu(f, [x], **gpu)
        np.testing.assert_array_equal(outs[0], x.argmax(1))
        np.testing.assert_allclose(outs[1], x.astype(np.float64).sum(1), rtol=1e-5)
