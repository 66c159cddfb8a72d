"""argmax and argmin for the CPU: two folds (the extreme value, then the least index holding it),
each of which the LLVM backend vectorizes, with NumPy's first occurrence for ties and NaNs."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import engine
from braze.kir import nodes as k
from braze.lower import reductions


def _fusion(op, dtype=bz.float32, axis=-1) -> bz.Fusion:
    with bz.Fusion() as f:
        f.add_output(op(f.define_tensor([-1, -1], dtype=dtype), axis))
    return f


def _specials(rng: np.random.Generator, shape) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.integers(0, flat.size, (max(1, flat.size // 20), 4))
    flat[picks[:, 0]] = flat.max()
    flat[picks[:, 1]] = flat.min()
    flat[picks[: max(1, len(picks) // 3), 2]] = np.inf
    flat[picks[: max(1, len(picks) // 5), 3]] = np.nan
    x[0] = -np.inf  # a row of nothing but -inf: its first element
    return x


def _walk(stmts):
    for s in stmts:
        yield s
        for name in ("body", "then", "orelse"):
            yield from _walk(getattr(s, name, ()))


@pytest.mark.parametrize("axis", [0, 1])
def test_the_cpu_kernel_loops_over_elements_with_no_update_under_an_if(axis):
    # Over one axis, a row is folded in blocks: only a block whose extreme beats the best so far is read
    # again for its index, under an If around the block's loop, never inside a loop over elements.
    f = _fusion(bz.ops.argmax, axis=axis)
    x = np.ones((3, 5), np.float32)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x])))
    body = [s for t in kernel.tasks for s in t.body]
    element_loops = [s for s in _walk(body) if isinstance(s, k.For) and not any(isinstance(b, k.For) for b in s.body)]
    assert element_loops and not any(isinstance(s, k.If) for loop in element_loops for s in _walk(loop.body))


def test_a_row_is_read_again_only_in_blocks_that_beat_the_best_so_far():
    f = _fusion(bz.ops.argmax)
    x = np.ones((3, 5), np.float32)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x])))
    (task,) = kernel.tasks
    branches = [s for s in _walk(task.body) if isinstance(s, k.If)]
    assert len(branches) == 1 and any(isinstance(s, k.For) for s in branches[0].then)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_rows_over_several_blocks(name):
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, (6, 3 * reductions.ARG_BLOCK + 5)).astype(np.float32)  # ties across blocks
    x[1, reductions.ARG_BLOCK + 3] = np.nan
    x[2, -1] = np.inf if name == "argmax" else -np.inf  # the last block's last element
    x[3] = np.nan
    (got,) = _fusion(getattr(bz.ops, name)).execute([x])
    np.testing.assert_array_equal(got, getattr(np, name)(x, axis=-1))


@pytest.mark.parametrize("shape", [(4, 1), (3, 7), (5, 33), (2, 1000), (1, 4099)], ids=str)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_ties_infinities_and_nans_take_the_first_occurrence(shape, name):
    x = _specials(np.random.default_rng(sum(shape)), shape)
    for axis in (0, 1):
        (got,) = _fusion(getattr(bz.ops, name), axis=axis).execute([x])
        np.testing.assert_array_equal(got, getattr(np, name)(x, axis=axis))


@pytest.mark.parametrize("dtype", [bz.int32, bz.bool_, bz.float64])
def test_other_dtypes(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 3, (6, 50)).astype(dtype.numpy)
    for name in ("argmax", "argmin"):
        (got,) = _fusion(getattr(bz.ops, name), dtype).execute([x])
        np.testing.assert_array_equal(got, getattr(np, name)(x, axis=-1))
